// Dispatcher: the parked AcquireTrial long polls of workers, and handing
// them trials as trials become PENDING. Answers go to the outbox, never
// straight to the caller. Not thread-safe: the core's lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dial/v1/service.pb.h"
#include "scheduler/outbox.h"
#include "scheduler/reply.h"

namespace dial::scheduler {

// A trial handed to a worker.
struct Assignment {
  v1::Trial trial;
  v1::TrialTemplate run;
  std::string restore_checkpoint;  // empty: start from scratch
  int64_t start_step = 0;
  int32_t attempt = 0;
};

using AcquireCallback = std::function<void(Reply<std::optional<Assignment>>)>;

class Dispatcher {
 public:
  struct Waiter {
    std::string worker_id;
    int32_t free_gpus = 0;
    absl::Time deadline;
    std::function<bool()> alive;
    AcquireCallback done;
    std::string principal;  // who parked it, for the per-principal bound
  };
  // Finds and starts a trial for a worker with `free_gpus`; nullopt if none.
  using AssignFn = std::function<absl::StatusOr<std::optional<Assignment>>(
      const std::string& worker_id, int32_t free_gpus)>;

  // Queues `result` as the answer to `done`.
  static void Answer(Outbox& out, AcquireCallback done,
                     absl::StatusOr<std::optional<Assignment>> result);

  void Park(Waiter waiter) { waiters_.push_back(std::move(waiter)); }
  // How many calls `principal` has parked.
  int ParkedBy(const std::string& principal) const {
    int n = 0;
    for (const Waiter& w : waiters_) n += w.principal == principal;
    return n;
  }
  // Hands trials to parked calls, oldest first; ends those whose client
  // went away.
  void Dispatch(const AssignFn& assign, Outbox& out);
  // Ends (empty) the calls whose wait is over or whose client went away.
  void Expire(absl::Time now, Outbox& out);
  // Ends a lost worker's calls with NOT_FOUND.
  void DropWorker(const std::string& worker_id, Outbox& out);
  // Ends every call (empty); for shutdown.
  void EndAll(Outbox& out);

 private:
  std::list<Waiter> waiters_;
};

}  // namespace dial::scheduler
