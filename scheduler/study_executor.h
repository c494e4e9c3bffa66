// StudyExecutor: work queued per study (searcher fits, trial creation,
// top-ups) on a small pool of threads, without the core's lock, so that a
// slow model fit never blocks reports, RPC threads or leases, and one
// study's fits never hold up another study's asks. A study's tasks run one
// at a time, in the order queued (its searcher is never used by two
// threads, and replay stays deterministic). Studies take turns: a free
// thread takes the study at the head of the line, runs one of its tasks,
// and puts the study at the back of the line if it has more. Thread-safe
// (one mutex of its own, never held while a task runs).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace dial::scheduler {

class StudyExecutor {
 public:
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;  // instead of run, at shutdown (optional)
  };

  // `threads` (at least 1) start at once, at `nice` above the process's
  // priority (model fits yield the CPU to the threads that answer calls).
  explicit StudyExecutor(int threads, int nice = 0);
  ~StudyExecutor();  // Stop()

  // Queues `task` behind `study`'s earlier tasks. After Stop it is dropped
  // (false; the core refuses work that must be answered once it shuts
  // down).
  bool Enqueue(const std::string& study, Task task);
  // Takes `study`'s turn for the caller when it has nothing queued or
  // running (and the executor runs): true, and the caller must then call
  // RunClaimed(study, ...) exactly once. Work queued for the study
  // meanwhile waits for it.
  bool Claim(const std::string& study);
  // Runs `run` on the calling thread in the turn Claim took, then gives the
  // turn back (to the pool, if work was queued meanwhile).
  void RunClaimed(const std::string& study, const std::function<void()>& run);
  // Blocks until nothing is queued or running. Not from a task.
  void WaitIdle();
  bool Idle();
  // Cancels what is queued (calling each `cancel`, on a pool thread), lets
  // running tasks finish, and joins the threads. Idempotent.
  void Stop();
  // Tasks waiting (not the running ones), for /metrics.
  size_t size();

 private:
  void Run();
  // Ends `study`'s running task (under mu_): the study goes to the back
  // of the line if more is queued.
  void Finished(const std::string& study) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_ == 0 && running_.empty();
  }

  absl::Mutex mu_;
  // Studies with tasks queued or one running.
  std::map<std::string, std::deque<Task>> queues_ ABSL_GUARDED_BY(mu_);
  // Studies with tasks queued and none running: the line, in turn order.
  std::deque<std::string> line_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> running_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dial::scheduler
