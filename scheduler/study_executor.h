// SuggestionQueue: the core's one suggestion thread and its queue of tasks
// (searcher fits, trial creation, top-ups, checkpoint deletion). Tasks run
// one at a time, in order, without the core's lock: a slow model fit never
// blocks reports, RPC threads or leases. Thread-safe (one mutex of its own,
// never held while a task runs).
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace dial::scheduler {

class SuggestionQueue {
 public:
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;  // instead of run, at shutdown (optional)
  };

  SuggestionQueue();
  ~SuggestionQueue();  // Stop()

  // Queues `task`. After Stop it is dropped (the core refuses work that
  // must be answered once it shuts down).
  void Enqueue(Task task);
  // Blocks until nothing is queued or running. Not from a task.
  void WaitIdle();
  // Cancels what is queued (calling each `cancel`, on the suggestion
  // thread), lets a running task finish, and joins the thread. Idempotent.
  void Stop();
  // Tasks waiting (not the running one), for /metrics.
  size_t size();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool executing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dial::scheduler
