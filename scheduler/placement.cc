#include "scheduler/placement.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dial::scheduler::placement {
namespace {

const Running::Held kNone;

const Running::Held& HeldBy(const Running& running, const std::string& owner) {
  auto it = running.by_owner.find(owner);
  return it == running.by_owner.end() ? kNone : it->second;
}

// The quota `owner` would exceed by one more trial of `gpus` GPUs, as a
// phrase; empty when it fits.
std::string OverQuota(const Running& running, const std::string& owner,
                      int32_t gpus, const Quota& quota) {
  const Running::Held& held = HeldBy(running, owner);
  if (quota.max_slots > 0 && held.slots + 1 > quota.max_slots) {
    return absl::StrCat("runs ", held.slots, " trials, its quota's max_slots");
  }
  if (quota.max_gpus > 0 && held.gpus + gpus > quota.max_gpus) {
    return absl::StrCat("holds ", held.gpus, " GPUs and needs ", gpus,
                        " more, over its quota's max_gpus ", quota.max_gpus);
  }
  return "";
}

double Standing(const Running& running, const std::string& owner,
                const Quota& quota) {
  auto recent = running.recent.find(owner);
  return (HeldBy(running, owner).slots +
          (recent == running.recent.end() ? 0.0 : recent->second)) /
         quota.weight;
}

}  // namespace

std::optional<std::string> Mismatch(const Selector& selector,
                                    const Labels& labels) {
  for (const auto& [key, allowed] : selector) {
    auto it = labels.find(key);
    if (it == labels.end() || std::find(allowed.begin(), allowed.end(),
                                        it->second) == allowed.end()) {
      return key;
    }
  }
  return std::nullopt;
}

std::optional<std::string> Unsuitable(const Worker& worker,
                                      const Pending& study) {
  if (auto it = study.refused_by.find(worker.id);
      it != study.refused_by.end()) {
    return absl::StrCat("worker ", worker.id, " refused: ", it->second);
  }
  if (study.require_isolation && !worker.isolated) {
    return "it cannot isolate trials (trial.resources.require_isolation)";
  }
  if (!study.command.empty() && worker.commands) {
    const bool allowed =
        std::any_of(worker.commands->begin(), worker.commands->end(),
                    [&](const std::string& glob) {
                      return fnmatch(glob.c_str(), study.command.c_str(),
                                     FNM_PATHNAME) == 0;
                    });
    if (!allowed) {
      return absl::StrCat("its --allow-command does not match ", study.command);
    }
  }
  return std::nullopt;
}

std::string Describe(const Selector& selector, const std::string& key) {
  auto it = selector.find(key);
  return absl::StrCat(
      key, " in [", it == selector.end() ? "" : absl::StrJoin(it->second, ", "),
      "]");
}

std::optional<size_t> Choose(const Worker& worker,
                             const std::vector<Pending>& pending,
                             const Running& running, const QuotaTable& quotas) {
  std::optional<size_t> best;
  // Smaller is better: (-priority, owner standing, study's running trials,
  // oldest pending, name).
  using Key = std::tuple<int32_t, double, int32_t, int64_t, std::string>;
  Key best_key;
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    const Quota& quota = quotas.For(p.owner);
    if (p.gpus > worker.free_gpus || Mismatch(p.selector, worker.labels) ||
        Unsuitable(worker, p) ||
        !OverQuota(running, p.owner, p.gpus, quota).empty()) {
      continue;
    }
    auto study_slots = running.slots_by_study.find(p.study);
    Key key{
        -p.priority, Standing(running, p.owner, quota),
        study_slots == running.slots_by_study.end() ? 0 : study_slots->second,
        p.oldest_ms, p.study};
    if (!best || key < best_key) {
      best = i;
      best_key = std::move(key);
    }
  }
  return best;
}

std::vector<std::pair<size_t, size_t>> ChoosePreemptions(
    const std::vector<Need>& needs, const std::vector<Candidate>& running,
    const Running& held, const QuotaTable& quotas, absl::Duration min_run,
    bool fair_share) {
  std::vector<size_t> order(needs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return needs[a].study.priority > needs[b].study.priority;
  });
  // What runs once the moves chosen so far are made.
  Running after = held;
  auto move = [&](const std::string& owner, int32_t slots, int32_t gpus) {
    Running::Held& h = after.by_owner[owner];
    h.slots += slots;
    h.gpus += gpus;
  };
  std::vector<bool> taken(running.size(), false);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t n : order) {
    const Need& need = needs[n];
    const Pending& p = need.study;
    for (int32_t k = need.preempting; k < need.ready; ++k) {
      const Quota& quota = quotas.For(p.owner);
      if (!OverQuota(after, p.owner, p.gpus, quota).empty()) break;
      // The need's owner's standing with one more slot.
      move(p.owner, 1, p.gpus);
      const double gainer = Standing(after, p.owner, quota);
      move(p.owner, -1, -p.gpus);
      // Smaller is better: (priority, minus the owner's standing after
      // the move at equal priority, time run).
      using Key = std::tuple<int32_t, double, absl::Duration>;
      std::optional<size_t> victim;
      Key best;
      for (size_t i = 0; i < running.size(); ++i) {
        const Candidate& c = running[i];
        if (taken[i] || c.priority > p.priority || c.ran < min_run ||
            c.gpus < p.gpus || Mismatch(p.selector, c.worker_labels) ||
            Unsuitable(c.worker, p)) {
          continue;
        }
        double loser = 0;
        if (c.priority == p.priority) {
          if (!fair_share || c.owner == p.owner) continue;
          move(c.owner, -1, -c.gpus);
          loser = Standing(after, c.owner, quotas.For(c.owner));
          move(c.owner, 1, c.gpus);
          if (loser < gainer) continue;
        }
        Key key{c.priority, -loser, c.ran};
        if (!victim || key < best) {
          victim = i;
          best = key;
        }
      }
      if (!victim) break;
      taken[*victim] = true;
      out.push_back({*victim, n});
      move(running[*victim].owner, -1, -running[*victim].gpus);
      move(p.owner, 1, p.gpus);
    }
  }
  return out;
}

std::string WhyWaiting(const Pending& study, const std::vector<Worker>& workers,
                       const Running& running, const QuotaTable& quotas) {
  if (workers.empty()) return "waiting: no worker is registered";
  // The key most workers fail, for a useful message.
  std::map<std::string, int> failed;
  std::map<std::string, int> unsuitable;  // why, how many workers
  bool matched = false, suitable = false, big_enough = false;
  for (const Worker& w : workers) {
    auto key = Mismatch(study.selector, w.labels);
    if (key) {
      failed[*key] += w.count;
      continue;
    }
    matched = true;
    if (auto why = Unsuitable(w, study)) {
      unsuitable[*why] += w.count;
      continue;
    }
    suitable = true;
    big_enough = big_enough || w.gpus >= study.gpus;
  }
  auto most = [](const std::map<std::string, int>& counts) {
    return std::max_element(
               counts.begin(), counts.end(),
               [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  };
  if (matched && !suitable) {
    return absl::StrCat("waiting: no matching worker will run it (",
                        most(unsuitable), ")");
  }
  if (!matched) {
    return absl::StrCat("waiting: no worker matches ",
                        Describe(study.selector, most(failed)));
  }
  if (!big_enough) {
    return absl::StrCat("waiting: no matching worker has ", study.gpus,
                        " GPUs");
  }
  std::string over =
      OverQuota(running, study.owner, study.gpus, quotas.For(study.owner));
  if (!over.empty()) {
    return absl::StrCat(
        "waiting: ",
        study.owner.empty() ? "its owner" : "owner '" + study.owner + "'", " ",
        over);
  }
  return "";
}

void UsageMeter::AddPast(const std::string& owner, absl::Time start,
                         absl::Time end, absl::Time now) {
  if (end < start) return;
  // One trial running over [start, end] adds 2^-(now-end)/H - 2^-(now-start)/H
  // to the decayed average at `now`.
  auto decay = [&](absl::Time t) {
    return std::exp2(-absl::FDivDuration(
        std::max(now - t, absl::ZeroDuration()), half_life_));
  };
  average_[owner] += decay(end) - decay(start);
  if (now > last_) last_ = now;
}

const std::map<std::string, double>& UsageMeter::Advance(
    absl::Time now, const std::map<std::string, int32_t>& running) {
  if (last_ != absl::InfinitePast() && now > last_) {
    // Over [last_, now] each owner ran running_[owner] trials: the average
    // decays toward that count.
    const double keep = std::exp2(-absl::FDivDuration(now - last_, half_life_));
    for (auto& [owner, average] : average_) average *= keep;
    for (const auto& [owner, count] : running_) {
      average_[owner] += count * (1 - keep);
    }
    for (auto it = average_.begin(); it != average_.end();) {
      // Forget owners whose usage has decayed to nothing.
      it = it->second < 1e-6 && !running.count(it->first) ? average_.erase(it)
                                                          : std::next(it);
    }
  }
  if (now > last_) last_ = now;
  running_ = running;
  return average_;
}

}  // namespace dial::scheduler::placement
