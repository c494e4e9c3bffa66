#include "worker/checkpoint_uploader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dial::worker {

CheckpointUploader::CheckpointUploader(const CheckpointUploaderOptions& options)
    : options_(options), thread_([this] { Loop(); }) {}

CheckpointUploader::~CheckpointUploader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::string CheckpointUploader::Key(const v1::TrialLease& lease) {
  return absl::StrCat(lease.study(), "/", lease.trial(), "#", lease.attempt(),
                      "@", lease.worker_id());
}

void CheckpointUploader::Begin(const v1::TrialLease& lease,
                               std::vector<std::string> bases) {
  absl::MutexLock lock(&mu_);
  Attempt& a = attempts_[Key(lease)];
  a.bases = std::move(bases);
}

void CheckpointUploader::Enqueue(const v1::TrialLease& lease, int64_t step,
                                 const std::string& id) {
  absl::MutexLock lock(&mu_);
  const std::string key = Key(lease);
  Attempt& a = attempts_[key];
  if (a.cancelled || stopping_) return;
  ++a.busy;
  queue_.push_back({lease, key, step, id});
}

void CheckpointUploader::AddBase(const v1::TrialLease& lease,
                                 const std::string& id) {
  absl::MutexLock lock(&mu_);
  Attempt& a = attempts_[Key(lease)];
  if (std::find(a.bases.begin(), a.bases.end(), id) == a.bases.end()) {
    a.bases.push_back(id);
  }
}

bool CheckpointUploader::Finish(const v1::TrialLease& lease,
                                absl::Duration timeout) {
  const std::string key = Key(lease);
  Unpin(key);
  absl::MutexLock lock(&mu_);
  auto idle = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = attempts_.find(key);
    return stopping_ || it == attempts_.end() || it->second.busy == 0;
  };
  const bool done = mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  auto it = attempts_.find(key);
  const bool all = done && (it == attempts_.end() || it->second.busy == 0);
  if (it != attempts_.end()) {
    if (it->second.busy == 0) {
      attempts_.erase(it);
    } else {
      it->second.cancelled = true;  // the thread forgets it when idle
    }
  }
  return all;
}

void CheckpointUploader::Pin(const v1::TrialLease& lease,
                             const std::string& id) {
  absl::MutexLock lock(&drop_mu_);
  pins_[Key(lease)].insert(id);
}

void CheckpointUploader::Unpin(const std::string& key) {
  absl::MutexLock lock(&drop_mu_);
  pins_.erase(key);
}

void CheckpointUploader::Cancel(const v1::TrialLease& lease) {
  Unpin(Key(lease));
  absl::MutexLock lock(&mu_);
  auto it = attempts_.find(Key(lease));
  if (it == attempts_.end()) return;
  it->second.cancelled = true;
  if (it->second.busy == 0) attempts_.erase(it);
}

CheckpointUploader::Stats CheckpointUploader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CheckpointUploader::Loop() {
  while (true) {
    Item item;
    std::vector<std::string> bases;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      Attempt& a = attempts_[item.key];
      const bool newer_waiting =
          std::any_of(queue_.begin(), queue_.end(),
                      [&](const Item& i) { return i.key == item.key; });
      if (a.cancelled || newer_waiting) {
        if (newer_waiting) ++stats_.superseded;
        if (--a.busy == 0 && a.cancelled) attempts_.erase(item.key);
        continue;
      }
      bases = a.bases;
    }
    const absl::Time started = absl::Now();
    auto result = options_.transfer->Upload(item.lease, item.step,
                                            options_.root, item.id, bases);
    if (result.ok() && options_.upload_seconds) {
      options_.upload_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - started));
    }
    if (result.ok() && options_.upload_bytes) {
      options_.upload_bytes->Add(static_cast<double>(result->bytes_sent));
    }
    absl::MutexLock lock(&mu_);
    Attempt& a = attempts_[item.key];
    if (result.ok()) {
      ++stats_.uploaded;
      stats_.bytes_total += result->bytes_total;
      stats_.bytes_sent += result->bytes_sent;
      spdlog::info("uploaded checkpoint {}: {} of {} bytes sent{}", item.id,
                   result->bytes_sent, result->bytes_total,
                   result->restore_point ? "" : " (not the restore point)");
      // The newest upload is the best base for the next one.
      a.bases.erase(std::remove(a.bases.begin(), a.bases.end(), item.id),
                    a.bases.end());
      a.bases.insert(a.bases.begin(), item.id);
      if (a.bases.size() > 4) a.bases.resize(4);
      mu_.Unlock();
      DropOlder(item.id);
      mu_.Lock();
    } else {
      ++stats_.failed;
      spdlog::warn("checkpoint {} not uploaded: {}", item.id,
                   result.status().ToString());
    }
    Attempt& after = attempts_[item.key];
    if (--after.busy == 0 && after.cancelled) attempts_.erase(item.key);
  }
}

void CheckpointUploader::DropOlder(const std::string& id) {
  if (options_.cache == nullptr) return;
  auto parsed = storage::CheckpointStore::ParseId(id);
  if (!parsed.ok() || parsed->is_copy()) return;
  absl::MutexLock lock(&drop_mu_);
  auto steps = options_.cache->ListSteps(parsed->study, parsed->trial);
  if (!steps.ok()) return;
  for (int64_t step : *steps) {
    if (step >= parsed->step) break;
    const std::string older =
        storage::CheckpointStore::MakeId(parsed->study, parsed->trial, step);
    const bool pinned =
        std::any_of(pins_.begin(), pins_.end(),
                    [&older](const auto& p) { return p.second.count(older); });
    if (!pinned) (void)options_.cache->Delete(older);
  }
}

}  // namespace dial::worker
