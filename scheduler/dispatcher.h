// Dispatcher: the parked AcquireTrial long polls of workers, and handing
// them trials as trials become PENDING. Answers go to the outbox, never
// straight to the caller. Not thread-safe: the core's lock guards it.
//
// Parked calls are indexed (by age, shape, worker, principal and
// deadline), so that a dispatch pass costs what it hands out plus one try
// per shape, not one try per parked call: calls whose workers have the
// same shape (labels and GPUs, see Placer::ShapeOf) are offered the same
// trials, so once one of them gets none, the others of that shape would
// get none either.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

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
    // Calls of one shape are offered the same trials (see above).
    std::string shape;
  };
  // Finds and starts a trial for a worker with `free_gpus`; nullopt if none.
  using AssignFn = std::function<absl::StatusOr<std::optional<Assignment>>(
      const std::string& worker_id, int32_t free_gpus)>;

  // Queues `result` as the answer to `done`.
  static void Answer(Outbox& out, AcquireCallback done,
                     absl::StatusOr<std::optional<Assignment>> result);

  void Park(Waiter waiter);
  // How many calls `principal` has parked.
  int ParkedBy(const std::string& principal) const {
    auto it = by_principal_.find(principal);
    return it == by_principal_.end() ? 0 : it->second;
  }
  int size() const { return static_cast<int>(waiters_.size()); }
  // Hands trials to parked calls, oldest first; ends those whose client
  // went away. With `by_shape`, a call whose shape already got nothing in
  // this pass is not asked; without it (when a study selects workers by
  // something the shape leaves out, their host) every call is asked.
  void Dispatch(const AssignFn& assign, Outbox& out, bool by_shape = true);
  // Ends (empty) the calls whose wait is over or whose client went away.
  void Expire(absl::Time now, Outbox& out);
  // Ends a lost worker's calls with NOT_FOUND.
  void DropWorker(const std::string& worker_id, Outbox& out);
  // Ends every call (empty); for shutdown.
  void EndAll(Outbox& out);

 private:
  using Seq = uint64_t;  // order of parking: smaller is older
  // Answers the call `seq` and forgets it.
  void End(Seq seq, absl::StatusOr<std::optional<Assignment>> result,
           Outbox& out);
  // Tries the call `seq`: whether it got an answer (a trial, an error, or
  // nothing because its client left) rather than no trial.
  bool Try(Seq seq, const AssignFn& assign, Outbox& out);

  Seq next_ = 0;
  std::map<Seq, Waiter> waiters_;
  std::map<std::string, std::set<Seq>> by_shape_;
  std::multimap<std::string, Seq> by_worker_;
  std::set<std::pair<absl::Time, Seq>> by_deadline_;
  std::map<std::string, int> by_principal_;
};

}  // namespace dial::scheduler
