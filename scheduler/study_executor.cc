#include "scheduler/suggestion_queue.h"

#include <utility>

namespace dial::scheduler {

SuggestionQueue::SuggestionQueue() : thread_([this] { Run(); }) {}

SuggestionQueue::~SuggestionQueue() { Stop(); }

void SuggestionQueue::Enqueue(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  tasks_.push_back(std::move(task));
}

void SuggestionQueue::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (tasks_.empty() && !executing_) || stopping_;
  };
  mu_.Await(absl::Condition(&idle));
}

void SuggestionQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SuggestionQueue::Run() {
  while (true) {
    Task task;
    std::deque<Task> cancelled;
    {
      absl::MutexLock lock(&mu_);
      executing_ = false;
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !tasks_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&has_work));
      if (stopping_) {
        cancelled.swap(tasks_);
      } else {
        task = std::move(tasks_.front());
        tasks_.pop_front();
        executing_ = true;
      }
    }
    if (!task.run) {
      for (auto& t : cancelled) {
        if (t.cancel) t.cancel();
      }
      return;
    }
    task.run();
  }
}

size_t SuggestionQueue::size() {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

}  // namespace dial::scheduler
