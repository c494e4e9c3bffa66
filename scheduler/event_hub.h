// EventHub: the watchers of studies and the ordered delivery of their
// events. Events are published under the core's lock, in the order of the
// changes they describe, into one queue; Deliver, called after that lock is
// released, hands them to the watchers in that order. Only one thread
// delivers at a time; a thread that finds another delivering leaves its
// events to it, so a slow watcher holds up the thread that is delivering
// and other watchers' events, never the core. Thread-safe (one mutex of its
// own, never held while a watcher runs).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "dial/v1/service.pb.h"

namespace dial::scheduler {

// What an event carries of its study: everything but the spec, and of the
// spec only the objective and the budget (what progress displays show).
// Finding: four WatchStudy streams that never read, on a study with a 1 MB
// spec, took the scheduler from 25 MB to 596 MB in 150 reports: every
// queued event held the whole spec. Copies the spec's two small parts, not
// the spec. Fields added to v1::Study must be added here.
v1::Study EventStudy(const v1::Study& study);

// Makes `event` what a watcher may be sent: its study as EventStudy has it,
// its trials without metric history or lease token. Publish and Add apply
// it to every event; idempotent.
void StripForWatchers(v1::StudyEvent& event);

class EventHub {
 public:
  using Callback = std::function<void(const v1::StudyEvent&)>;

  // Registers a watcher of `study` and queues `first` (its snapshot) for it
  // alone, ahead of every event published after this call. Returns its id.
  // Events are stripped (StripForWatchers) before they are queued.
  int64_t Add(const std::string& study, Callback callback,
              v1::StudyEvent first);
  // Removes a watcher. Once it returns, the callback is not running and
  // will not run again (unless Remove is called from the callback itself).
  void Remove(int64_t id);
  // Whether anyone watches `study` (to skip building unwanted events).
  bool Watched(const std::string& study) const;
  // Queues `event` for every current watcher of `study`.
  void Publish(const std::string& study, v1::StudyEvent event);
  // Hands queued events to their watchers, in order. Call without the
  // core's lock.
  void Deliver();
  // Watchers now, and events queued for them (for /metrics).
  size_t watchers() const;
  size_t queued() const;

 private:
  struct Watcher {
    std::string study;
    std::shared_ptr<const Callback> callback;
  };
  struct Queued {
    int64_t watcher;
    std::shared_ptr<const v1::StudyEvent> event;
  };

  mutable absl::Mutex mu_;
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id deliverer_ ABSL_GUARDED_BY(mu_);
  int64_t calling_ ABSL_GUARDED_BY(mu_) = 0;  // the watcher being called
};

}  // namespace dial::scheduler
