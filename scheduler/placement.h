// Placement: which study's pending trial a worker with a free slot starts
// (docs/scheduling.md). A pure function of the pending work, what runs, the
// owners' recent usage and the quotas, so it is tested on its own:
//   1. only studies whose selector the worker's labels match, whose trial
//      fits its free GPUs, and whose owner stays within max_slots and
//      max_gpus with it;
//   2. the highest priority first;
//   3. among equal priorities, the owner with the smallest standing:
//      (trials running now + recent average trials running) / weight;
//   4. then that owner's study with the fewest trials running;
//   5. then the oldest pending trial.
// Not thread-safe by itself; it holds no state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/quotas.h"

namespace dial::scheduler::placement {

// Label key -> allowed values; every key must match.
using Selector = std::map<std::string, std::vector<std::string>>;
using Labels = std::map<std::string, std::string>;

// The first key of `selector` that `labels` does not satisfy; nullopt when
// every key matches.
std::optional<std::string> Mismatch(const Selector& selector,
                                    const Labels& labels);
// "gpu.model in [A100, H100]".
std::string Describe(const Selector& selector, const std::string& key);

struct Worker {
  std::string id;
  int32_t gpus = 0;       // GPUs it registered
  int32_t free_gpus = 0;  // GPUs free now (for the worker asking)
  Labels labels;
  int32_t count = 1;  // workers alike (WhyWaiting's list of kinds)
  // A Unix user per attempt (WorkerIsolation.isolated).
  bool isolated = false;
  // Its --allow-command globs, when it said and does not run any command
  // (nullopt: not known, or any command).
  std::optional<std::vector<std::string>> commands;
};

// A study with a trial ready to start.
struct Pending {
  std::string study;
  std::string owner;
  int32_t priority = 0;
  int32_t gpus = 0;  // per trial
  Selector selector;
  int64_t oldest_ms = 0;  // create time of its oldest startable trial
  // trial.resources.require_isolation.
  bool require_isolation = false;
  // argv[0] of a command trial; empty for the built-in trainer.
  std::string command;
  // Workers that refused its trials by their own policy: id -> reason.
  std::map<std::string, std::string> refused_by;
};

// Why `worker` would refuse `study`'s trials whatever its free slots:
// it refused them before, it cannot isolate a study that requires it, or
// its --allow-command globs do not match the command. nullopt when it
// would take them.
std::optional<std::string> Unsuitable(const Worker& worker,
                                      const Pending& study);

// What runs now, by owner and by study.
struct Running {
  struct Held {
    int32_t slots = 0;
    int32_t gpus = 0;
  };
  std::map<std::string, Held> by_owner;
  std::map<std::string, int32_t> slots_by_study;
  // Owner -> recent average of trials running (decayed; see UsageMeter).
  std::map<std::string, double> recent;
};

// The index in `pending` of the study `worker` should start a trial of;
// nullopt when none may run there.
std::optional<size_t> Choose(const Worker& worker,
                             const std::vector<Pending>& pending,
                             const Running& running, const QuotaTable& quotas);

// Why `study`'s trials wait although it has some ready, when it is not
// only that every matching worker is busy: no worker at all, none whose
// labels match, none with enough GPUs, or its owner at a quota. Empty
// otherwise. `workers` may list each kind of worker once, with its count.
std::string WhyWaiting(const Pending& study, const std::vector<Worker>& workers,
                       const Running& running, const QuotaTable& quotas);

// A study whose ready trials no free worker takes.
struct Need {
  Pending study;
  int32_t ready = 0;       // trials ready to start
  int32_t preempting = 0;  // trials already being preempted for it
};
// A running trial that could give up its slot.
struct Candidate {
  std::string study;
  int64_t trial = 0;
  std::string owner;
  int32_t priority = 0;
  int32_t gpus = 0;
  Labels worker_labels;  // of the worker it runs on
  Worker worker;         // the worker it runs on (isolation, commands, id)
  absl::Duration ran;    // since its attempt started
};
// Which running trials to preempt, as (index in `running`, index in
// `needs`). For each need, highest priority first, at most `ready -
// preempting` trials, each of a strictly lower priority, that ran at least
// `min_run`, on a worker the need's selector matches and that would take
// its trials (see Unsuitable), holding at least the GPUs it needs; lowest
// priority first, then the one that ran least (the least work lost). A need
// whose owner is at a quota preempts nothing.
//
// With `fair_share`, a trial of the same priority may go too, when it is
// another owner's whose standing (see Choose) would still be at or above
// the need's owner's after the slot moved: the owner furthest above first.
// The move cannot be undone by the same rule, so equal priorities never
// preempt each other back and forth. Without it, equal priorities never
// preempt each other at all.
std::vector<std::pair<size_t, size_t>> ChoosePreemptions(
    const std::vector<Need>& needs, const std::vector<Candidate>& running,
    const Running& held, const QuotaTable& quotas, absl::Duration min_run,
    bool fair_share = false);

// Owners' recent usage: trials running, averaged with an exponential decay
// of half-life `half_life` (as Slurm's PriorityDecayHalfLife). Fed with the
// count of each owner's running trials whenever dispatch looks; the count
// is taken as constant in between.
class UsageMeter {
 public:
  explicit UsageMeter(absl::Duration half_life) : half_life_(half_life) {}
  // Advances to `now` with `running` trials per owner (owners not named
  // run none), and returns each owner's recent average.
  const std::map<std::string, double>& Advance(
      absl::Time now, const std::map<std::string, int32_t>& running);
  // Adds an attempt of `owner` that ran over [start, end], as seen at `now`
  // (rebuilding the averages from usage records after a restart).
  void AddPast(const std::string& owner, absl::Time start, absl::Time end,
               absl::Time now);

 private:
  absl::Duration half_life_;
  absl::Time last_ = absl::InfinitePast();
  std::map<std::string, int32_t> running_;  // since last_
  std::map<std::string, double> average_;
};

}  // namespace dial::scheduler::placement
