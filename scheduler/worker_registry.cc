#include "scheduler/worker_registry.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace dial::scheduler {

v1::Worker WorkerRegistry::Make(const std::string& host,
                                const v1::WorkerResources& resources) const {
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof(suffix), "%08x", rd());
  v1::Worker worker;
  worker.set_id(absl::StrCat(host, "-", suffix));
  worker.set_host(host);
  *worker.mutable_resources() = resources;
  *worker.mutable_last_seen() =
      google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
          absl::ToUnixMillis(clock_->Now()));
  return worker;
}

void WorkerRegistry::Count(const v1::Worker& worker, int delta) {
  if (worker.principal().empty()) return;
  int& n = principals_[worker.principal()];
  n += delta;
  if (n == 0) principals_.erase(worker.principal());
}

void WorkerRegistry::Add(const v1::Worker& worker) {
  auto [it, added] = workers_.try_emplace(worker.id());
  if (!added) Count(it->second.worker, -1);
  it->second = {worker, clock_->Now()};
  Count(worker, 1);
  ++generation_;
}

std::vector<v1::Worker> WorkerRegistry::List() const {
  std::vector<v1::Worker> out;
  out.reserve(workers_.size());
  for (const auto& [id, entry] : workers_) {
    out.push_back(entry.worker);
    *out.back().mutable_last_seen() =
        google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
            absl::ToUnixMillis(entry.last_seen));
  }
  return out;
}

absl::Status WorkerRegistry::Touch(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker '", worker_id,
                     "' is not registered (or its lease expired); "
                     "register again"));
  }
  it->second.last_seen = clock_->Now();
  return absl::OkStatus();
}

std::vector<std::string> WorkerRegistry::Expired() const {
  const absl::Time now = clock_->Now();
  std::vector<std::string> expired;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > lease_) expired.push_back(id);
  }
  return expired;
}

void WorkerRegistry::Forget(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  Count(it->second.worker, -1);
  workers_.erase(it);
  ++generation_;
}

absl::Status WorkerRegistry::CheckOwner(const std::string& worker_id,
                                        const std::string& principal,
                                        bool admin) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return Touch(worker_id);
  v1::Worker& worker = it->second.worker;
  if (worker.principal().empty()) {
    worker.set_principal(principal);
    Count(worker, 1);
  }
  if (admin || worker.principal() == principal) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("worker '", worker_id, "' was registered by '",
                   worker.principal(), "', not by '", principal, "'"));
}

void WorkerRegistry::Adopt(const std::string& worker_id,
                           const TrialKey& trial) {
  auto [it, added] = workers_.try_emplace(worker_id);
  Entry& w = it->second;
  w.worker.set_id(worker_id);
  if (added) ++generation_;
  // Time to notice the restart and reconnect: at least 30 s (a gRPC
  // channel can take ~10 s to reconnect), or two leases.
  w.last_seen = clock_->Now() + std::max(lease_, absl::Seconds(30) - lease_);
  Dispatched(worker_id, trial);
}

void WorkerRegistry::Dispatched(const std::string& worker_id,
                                const TrialKey& trial) {
  Undispatched(trial);
  dispatched_[worker_id][trial] = clock_->Now();
  dispatched_to_[trial] = worker_id;
}

void WorkerRegistry::Undispatched(const TrialKey& trial) {
  auto to = dispatched_to_.find(trial);
  if (to == dispatched_to_.end()) return;
  auto of = dispatched_.find(to->second);
  of->second.erase(trial);
  if (of->second.empty()) dispatched_.erase(of);
  dispatched_to_.erase(to);
}

std::vector<WorkerRegistry::TrialKey> WorkerRegistry::Unacknowledged(
    const std::string& worker_id, const std::set<TrialKey>& running) const {
  const absl::Time now = clock_->Now();
  std::vector<TrialKey> out;
  auto of = dispatched_.find(worker_id);
  if (of == dispatched_.end()) return out;
  for (const auto& [key, when] : of->second) {
    if (running.count(key) || now - when < lease_) continue;
    out.push_back(key);
  }
  return out;
}

}  // namespace dial::scheduler
