#include "scheduler/study_executor.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace dial::scheduler {

StudyExecutor::StudyExecutor(int threads, int nice) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, nice] {
      // This thread only (Linux: a thread's id is a process id for
      // setpriority); failure leaves the process's priority.
      if (nice > 0) setpriority(PRIO_PROCESS, gettid(), nice);
      Run();
    });
  }
}

StudyExecutor::~StudyExecutor() { Stop(); }

bool StudyExecutor::Enqueue(const std::string& study, Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  std::deque<Task>& queue = queues_[study];
  queue.push_back(std::move(task));
  ++queued_;
  if (queue.size() == 1 && !running_.count(study)) line_.push_back(study);
  return true;
}

bool StudyExecutor::Claim(const std::string& study) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queues_.count(study)) return false;
  queues_[study];  // empty: running, nothing queued
  running_.insert(study);
  return true;
}

void StudyExecutor::RunClaimed(const std::string& study,
                               const std::function<void()>& run) {
  run();
  // Once stopping, the pool may be gone: what was queued meanwhile is
  // cancelled here.
  std::deque<Task> orphans;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      orphans.swap(queues_[study]);
      queued_ -= orphans.size();
    }
    Finished(study);
  }
  for (Task& task : orphans) {
    if (task.cancel) task.cancel();
  }
}

void StudyExecutor::Finished(const std::string& study) {
  running_.erase(study);
  auto it = queues_.find(study);
  if (it->second.empty()) {
    queues_.erase(it);
  } else {
    line_.push_back(study);
  }
}

void StudyExecutor::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return IdleLocked() || stopping_;
  };
  mu_.Await(absl::Condition(&idle));
}

bool StudyExecutor::Idle() {
  absl::MutexLock lock(&mu_);
  return IdleLocked();
}

void StudyExecutor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void StudyExecutor::Run() {
  while (true) {
    Task task;
    std::string study;
    bool cancelled = false;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !line_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&has_work));
      if (line_.empty()) return;  // stopping, and nothing left to cancel
      study = std::move(line_.front());
      line_.pop_front();
      std::deque<Task>& queue = queues_[study];
      task = std::move(queue.front());
      queue.pop_front();
      --queued_;
      running_.insert(study);
      cancelled = stopping_;
    }
    if (!cancelled) {
      task.run();
    } else if (task.cancel) {
      task.cancel();
    }
    absl::MutexLock lock(&mu_);
    Finished(study);
  }
}

size_t StudyExecutor::size() {
  absl::MutexLock lock(&mu_);
  return queued_;
}

}  // namespace dial::scheduler
