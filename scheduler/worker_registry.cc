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

void WorkerRegistry::Add(const v1::Worker& worker) {
  workers_[worker.id()] = {worker, clock_->Now()};
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
  workers_.erase(worker_id);
}

absl::Status WorkerRegistry::CheckOwner(const std::string& worker_id,
                                        const std::string& principal,
                                        bool admin) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return Touch(worker_id);
  v1::Worker& worker = it->second.worker;
  if (worker.principal().empty()) worker.set_principal(principal);
  if (admin || worker.principal() == principal) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("worker '", worker_id, "' was registered by '",
                   worker.principal(), "', not by '", principal, "'"));
}

int WorkerRegistry::CountOf(const std::string& principal) const {
  int n = 0;
  for (const auto& [id, entry] : workers_) {
    n += entry.worker.principal() == principal;
  }
  return n;
}

void WorkerRegistry::Adopt(const std::string& worker_id,
                           const TrialKey& trial) {
  Entry& w = workers_[worker_id];
  w.worker.set_id(worker_id);
  // Time to notice the restart and reconnect: at least 30 s (a gRPC
  // channel can take ~10 s to reconnect), or two leases.
  w.last_seen = clock_->Now() + std::max(lease_, absl::Seconds(30) - lease_);
  dispatched_[trial] = clock_->Now();
}

void WorkerRegistry::Dispatched(const TrialKey& trial) {
  dispatched_[trial] = clock_->Now();
}

void WorkerRegistry::Undispatched(const TrialKey& trial) {
  dispatched_.erase(trial);
}

std::vector<WorkerRegistry::TrialKey> WorkerRegistry::Unacknowledged(
    const std::set<TrialKey>& running) const {
  const absl::Time now = clock_->Now();
  std::vector<TrialKey> out;
  for (const auto& [key, when] : dispatched_) {
    if (running.count(key) || now - when < lease_) continue;
    out.push_back(key);
  }
  return out;
}

}  // namespace dial::scheduler
