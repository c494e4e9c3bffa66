// WorkerRegistry: the registered workers and their leases, and which
// worker trials were handed out when (so that a trial whose hand-over a
// worker never saw goes back to the queue). Time comes from the injected
// clock. Not thread-safe: the core's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "dial/v1/service.pb.h"

namespace dial::scheduler {

class WorkerRegistry {
 public:
  using TrialKey = std::pair<std::string, int64_t>;  // (study, number)

  WorkerRegistry(const Clock* clock, absl::Duration lease)
      : clock_(clock), lease_(lease) {}

  absl::Duration lease() const { return lease_; }
  // A new worker record with a fresh id (host plus a random suffix), not
  // yet registered: the caller saves it, then calls Add.
  v1::Worker Make(const std::string& host,
                  const v1::WorkerResources& resources) const;
  // Registers `worker` with a fresh lease.
  void Add(const v1::Worker& worker);
  // Renews a lease. NOT_FOUND for an unknown or expired worker.
  absl::Status Touch(const std::string& worker_id);
  // PERMISSION_DENIED unless `principal` registered `worker_id` (or
  // `admin`). A worker adopted after a restart belongs to the first
  // principal that speaks for it. NOT_FOUND for an unknown worker.
  absl::Status CheckOwner(const std::string& worker_id,
                          const std::string& principal, bool admin);
  // How many registered workers `principal` has.
  int CountOf(const std::string& principal) const {
    auto it = principals_.find(principal);
    return it == principals_.end() ? 0 : it->second;
  }
  // Workers whose lease has run out.
  std::vector<std::string> Expired() const;
  // Registered workers (not yet lost).
  int size() const { return static_cast<int>(workers_.size()); }
  // Registered workers by id, last_seen set to their last sign of life.
  std::vector<v1::Worker> List() const;
  // A registered worker's record; null if unknown.
  const v1::Worker* Find(const std::string& worker_id) const {
    auto it = workers_.find(worker_id);
    return it == workers_.end() ? nullptr : &it->second.worker;
  }
  // Calls `fn` with every registered worker's record (last_seen as
  // registered), without copying them.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, entry] : workers_) fn(entry.worker);
  }
  // Changes whenever a worker is added or forgotten.
  uint64_t generation() const { return generation_; }
  void Forget(const std::string& worker_id);
  // After a restart: `worker_id` runs `trial` as recorded, and gets time to
  // come back (at least 30 s, or two leases) before it is lost.
  void Adopt(const std::string& worker_id, const TrialKey& trial);

  // `trial` was handed to `worker_id` now (no longer to whom it was before).
  void Dispatched(const std::string& worker_id, const TrialKey& trial);
  void Undispatched(const TrialKey& trial);
  void ClearDispatched() {
    dispatched_.clear();
    dispatched_to_.clear();
  }
  // Trials handed to `worker_id` a lease or more ago that are not in
  // `running` (what it says it runs).
  std::vector<TrialKey> Unacknowledged(const std::string& worker_id,
                                       const std::set<TrialKey>& running) const;

 private:
  struct Entry {
    v1::Worker worker;
    absl::Time last_seen;
  };
  const Clock* clock_;
  const absl::Duration lease_;
  // A worker's principal counts once set (at registration, or when an
  // adopted worker is first spoken for).
  void Count(const v1::Worker& worker, int delta);

  std::map<std::string, Entry> workers_;
  std::map<std::string, int> principals_;  // principal -> workers
  uint64_t generation_ = 0;
  // Hand-overs not yet acknowledged, by worker, and each one's worker.
  std::map<std::string, std::map<TrialKey, absl::Time>> dispatched_;
  std::map<TrialKey, std::string> dispatched_to_;
};

}  // namespace dial::scheduler
