// Placer: dispatch's view of the shared fleet. It reads the studies'
// startable trials and what runs (under the core's lock), keeps the
// owners' recent usage, and asks placement (a pure policy) which trial a
// worker starts and why a study waits. Not thread-safe: the core's lock
// guards it and everything it is given.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "scheduler/placement.h"
#include "scheduler/quotas.h"
#include "scheduler/study_registry.h"
#include "scheduler/worker_registry.h"

namespace dial::scheduler {

// Trials asked to give up their slot to a higher-priority study, and when
// each running attempt started (for --preempt-min-run-s). Not thread-safe:
// the core's lock guards it.
class Preemptions {
 public:
  using Key = std::pair<std::string, int64_t>;  // (study, trial)
  struct Mark {
    std::string by_study;
    int32_t attempt = 0;
    absl::Time deadline;  // then it is fenced and requeued
  };
  void Started(const Key& key, absl::Time now) { started_[key] = now; }
  // When the running attempt of `key` started; an attempt from before a
  // restart counts from when it was first seen here.
  absl::Time StartedAt(const Key& key, absl::Time now) {
    return started_.emplace(key, now).first->second;
  }
  void Add(const Key& key, Mark mark) { marks_[key] = std::move(mark); }
  // The mark of `key`'s attempt `attempt`; null if it is not being
  // preempted.
  const Mark* Find(const Key& key, int32_t attempt) const {
    auto it = marks_.find(key);
    return it == marks_.end() || it->second.attempt != attempt ? nullptr
                                                               : &it->second;
  }
  // The attempt ended (however): forget it.
  void Ended(const Key& key) {
    marks_.erase(key);
    started_.erase(key);
  }
  const std::map<Key, Mark>& marks() const { return marks_; }
  // Whether `study` has had ready trials no worker took since at least
  // `wait` ago (noted now if not yet); Placed forgets it.
  bool Unplaced(const std::string& study, absl::Time now, absl::Duration wait) {
    return now - unplaced_.emplace(study, now).first->second >= wait;
  }
  void Placed(const std::string& study) { unplaced_.erase(study); }

 private:
  std::map<Key, Mark> marks_;
  std::map<Key, absl::Time> started_;
  std::map<std::string, absl::Time> unplaced_;
};

class Placer {
 public:
  struct Parts {
    const StudyRegistry* studies = nullptr;
    const WorkerRegistry* workers = nullptr;
    const Quotas* quotas = nullptr;  // null: everyone gets the default
    const Clock* clock = nullptr;
    absl::Duration half_life = absl::Hours(24 * 7);
    Preemptions* preemptions = nullptr;  // required
    absl::Duration preempt_grace = absl::Seconds(30);
    absl::Duration preempt_min_run = absl::Seconds(60);
    bool fair_share_preempt = false;  // see placement::ChoosePreemptions
  };
  explicit Placer(const Parts& parts) : p_(parts), usage_(parts.half_life) {}

  // The study and the PENDING trial that `worker_id`, with `free_gpus`
  // free, should start; {nullptr, nullptr} if none.
  std::pair<StudyEntry*, const v1::Trial*> Choose(const std::string& worker_id,
                                                  int32_t free_gpus);
  // Why `entry`'s trials wait (placement::WhyWaiting), for GetStudy; empty
  // when nothing but busy workers holds them back, or it has none ready.
  std::string WhyWaiting(const StudyEntry& entry) const;

  // What Choose sees of a worker, as a string: its free GPUs, labels (all
  // but its host), isolation and commands. Workers of one shape are
  // offered the same trials.
  std::string ShapeOf(const std::string& worker_id, int32_t free_gpus) const;
  // Whether shapes decide alone: false while a study with trials ready
  // selects workers by host, or was refused by some worker, which shapes
  // leave out.
  bool ShapesDecide() const;

  // Marks running trials to give up their slots to higher-priority studies
  // whose ready trials no free worker has taken for a second (their next
  // report answers PAUSE); returns how many were marked.
  int MarkPreemptions();
  // Marked trials whose grace is over and that still run.
  std::vector<Preemptions::Key> Overdue() const;

  // Rebuilds the owners' recent usage from usage records (at start-up and
  // at a reload), replacing what it held.
  void RestoreUsage(const std::vector<v1::UsageRecord>& records);
  // Each owner's recent average of trials running, as last seen.
  const std::map<std::string, double>& recent() const { return recent_; }

  // A study's selector, from its spec.
  static placement::Selector SelectorOf(const v1::StudySpec& spec);

 private:
  // Its oldest PENDING trial whose checkpoint is not still uploading.
  static const v1::Trial* Startable(const StudyEntry& entry);
  static placement::Pending PendingOf(const StudyEntry& entry,
                                      const v1::Trial& oldest);
  placement::Running RunningNow() const;
  placement::Worker WorkerOf(const v1::Worker& worker) const;
  // The registered workers for WhyWaiting: one entry per kind (labels but
  // the host, and GPUs) with its count, kept until a worker comes or goes;
  // every worker on its own when `with_host`.
  const std::vector<placement::Worker>& Kinds(bool with_host) const;

  Parts p_;
  placement::UsageMeter usage_;
  std::map<std::string, double> recent_;  // the meter's last reading
  mutable std::vector<placement::Worker> kinds_, each_;
  mutable uint64_t kinds_of_ = ~uint64_t{0};  // the registry's generation
};

}  // namespace dial::scheduler
