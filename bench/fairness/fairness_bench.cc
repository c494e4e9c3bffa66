// Fairness on a shared fleet (issue 34): a simulated fleet of 64 one-slot
// workers under a real SchedulerCore (memory store, simulated clock), three
// owners with weights 2:1:1 whose studies arrive at different times, and a
// priority-10 study that preempts. Trials last 2-10 simulated minutes,
// report every 10 s and checkpoint every 60 s. Prints each owner's share
// over time against its target, Jain's fairness index, how soon shares
// settle after each arrival, the preemption latency and the work lost to
// preemption, and appends a JSON line to --out.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/memory_study_store.h"

ABSL_FLAG(int, workers, 64, "One-slot workers in the fleet");
ABSL_FLAG(int, seconds, 3600, "Simulated seconds");
ABSL_FLAG(bool, fair_share_preempt, false,
          "The scheduler's --fair-share-preempt: owners below their share "
          "preempt those above it");
ABSL_FLAG(std::string, out, "", "Append a JSON line to this file");
ABSL_FLAG(std::string, shares_csv, "",
          "Write each owner's running trials every 10 s to this CSV");

namespace dial::bench {
namespace {

using scheduler::Assignment;
using scheduler::SchedulerCore;

const auth::Principal kWorker{"fleet", auth::Role::kWorker, false};

struct Arrival {
  int at;  // simulated second
  std::string study, owner;
  int priority, trials, parallel;
};

struct Running {
  Assignment a;
  std::string worker;
  int64_t step = 0;      // last reported
  int64_t ckpt = 0;      // last checkpoint step
  int64_t duration = 0;  // steps (= simulated seconds) in all
  int64_t next_report = 0;
};

v1::StudySpec Spec(const Arrival& a) {
  auto spec = ParseStudySpec(
      absl::StrCat("name: ", a.study, "\npriority: ", a.priority,
                   "\nobjective: {metric: acc, goal: MAXIMIZE}\n"
                   "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
                   "budget: {max_trials: ",
                   a.trials, ", max_parallel_trials: ", a.parallel,
                   "}\ntrial: {trainer: {dataset: synthetic}}\n"));
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    std::exit(1);
  }
  return *spec;
}

int Run() {
  const int fleet = absl::GetFlag(FLAGS_workers);
  const int seconds = absl::GetFlag(FLAGS_seconds);
  const std::map<std::string, double> weight = {
      {"ann", 2}, {"bo", 1}, {"cy", 1}};
  const auto quotas_path = std::filesystem::temp_directory_path() /
                           absl::StrCat("dial-fairness-", getpid());
  std::ofstream(quotas_path)
      << "ann weight=2\nbo weight=1\ncy weight=1 max_priority=10\n";
  auto quotas = scheduler::Quotas::Load(quotas_path.string());
  std::filesystem::remove(quotas_path);
  if (!quotas.ok()) return 1;
  FakeClock clock;
  auto store = storage::MemoryStudyStore::Create();
  scheduler::SchedulerCoreOptions options;
  options.store = store.get();
  options.clock = &clock;
  options.tick = absl::ZeroDuration();
  options.worker_lease = absl::Hours(10);
  options.quotas = quotas->get();
  options.preempt_grace = absl::Seconds(30);
  options.preempt_min_run = absl::Seconds(60);
  options.fair_share_preempt = absl::GetFlag(FLAGS_fair_share_preempt);
  auto created = SchedulerCore::Create(options);
  if (!created.ok()) return 1;
  SchedulerCore& core = **created;

  const std::vector<Arrival> arrivals = {
      {0, "ann-sweep", "ann", 0, 100000, 64},
      {600, "bo-sweep", "bo", 0, 100000, 64},
      {1200, "cy-sweep", "cy", 0, 100000, 64},
      {2400, "cy-deadline", "cy", 10, 16, 16},
  };
  std::vector<std::string> workers;
  for (int i = 0; i < fleet; ++i) {
    v1::WorkerResources r;
    r.set_slots(1);
    workers.push_back(
        core.RegisterWorker(absl::StrCat("w", i), r, kWorker)->worker_id());
  }
  std::map<std::string, std::string> owner_of;
  for (const Arrival& a : arrivals) owner_of[a.study] = a.owner;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> length(120, 600);
  std::map<std::pair<std::string, int64_t>, int64_t> durations;
  std::map<std::string, Running> busy;  // by worker
  // Measurements.
  struct Sample {
    int t;
    std::map<std::string, int> held;
  };
  std::vector<Sample> samples;
  int64_t preempted = 0, lost_steps = 0;
  std::optional<int> deadline_all_running;
  size_t next_arrival = 0;
  for (int t = 0; t < seconds; ++t) {
    while (next_arrival < arrivals.size() && arrivals[next_arrival].at == t) {
      const Arrival& a = arrivals[next_arrival++];
      const auth::Principal who{a.owner, auth::Role::kUser, false};
      if (!core.CreateStudy(Spec(a), who).ok()) return 1;
    }
    core.WaitIdle();  // top-ups of PENDING trials
    // Trials report, checkpoint, pause or end.
    for (auto it = busy.begin(); it != busy.end();) {
      Running& r = it->second;
      bool freed = false;
      if (t >= r.next_report) {
        r.step = std::min(r.step + 10, r.duration);
        v1::ReportProgressRequest q;
        q.set_worker_id(r.worker);
        q.set_study(r.a.trial.study());
        q.set_trial(r.a.trial.number());
        q.set_attempt(r.a.attempt);
        q.set_lease_token(r.a.trial.lease_token());
        q.set_step(r.step);
        (*q.mutable_metrics())["acc"] = 0.5;
        if (r.step % 60 == 0) {
          q.set_checkpoint(absl::StrCat(r.a.trial.study(), "/",
                                        r.a.trial.number(), "/", r.step));
        }
        auto decision = core.ReportProgress(q, kWorker);
        if (decision.ok() && !q.checkpoint().empty()) r.ckpt = r.step;
        r.next_report = t + 10;
        if (decision.ok() && decision->action() == v1::Decision::PAUSE) {
          ++preempted;
          lost_steps += r.step - r.ckpt;
          freed = true;
        } else if (r.step >= r.duration) {
          v1::FinishTrialRequest f;
          f.set_worker_id(r.worker);
          f.set_study(q.study());
          f.set_trial(q.trial());
          f.set_attempt(q.attempt());
          f.set_lease_token(q.lease_token());
          (*f.mutable_final_metrics())["acc"] = 0.5;
          (void)core.FinishTrial(f, kWorker);
          freed = true;
        }
      }
      it = freed ? busy.erase(it) : std::next(it);
    }
    // Free workers ask for work.
    for (const std::string& w : workers) {
      if (busy.count(w)) continue;
      std::optional<Assignment> got;
      core.AcquireTrial(
          w, 0, absl::ZeroDuration(), [] { return true; },
          [&](absl::StatusOr<std::optional<Assignment>> r) {
            if (r.ok() && r->has_value()) got = **r;
          },
          kWorker);
      if (!got) continue;
      Running r;
      r.a = *got;
      r.worker = w;
      r.step = r.ckpt = got->start_step;
      auto key = std::make_pair(got->trial.study(), got->trial.number());
      if (!durations.count(key)) durations[key] = length(rng);
      r.duration = durations[key];
      r.next_report = t + 10;
      busy[w] = r;
    }
    core.Tick();
    if (t % 10 == 0) {
      Sample s{t, {}};
      int deadline = 0;
      for (const auto& [w, r] : busy) {
        ++s.held[owner_of[r.a.trial.study()]];
        deadline += r.a.trial.study() == "cy-deadline";
      }
      samples.push_back(s);
      if (!deadline_all_running && deadline == 16) deadline_all_running = t;
    }
    clock.Advance(absl::Seconds(1));
  }

  // Sanity: every trial the scheduler thinks RUNNING runs on a simulated
  // worker (a trial left RUNNING with nobody running it would hold a slot
  // forever; the bench found one such defect).
  int64_t stale = 0;
  for (const Arrival& a : arrivals) {
    auto running = core.ListTrials(a.study, {v1::RUNNING}, 1000, "");
    if (!running.ok()) continue;
    for (const auto& t : running->trials) {
      bool held = false;
      for (const auto& [w, r] : busy) {
        held |=
            r.a.trial.study() == a.study && r.a.trial.number() == t.number();
      }
      stale += !held;
    }
  }
  // Targets by period: who has demand (each sweep keeps demand forever).
  auto targets = [&](int t) {
    std::map<std::string, double> w;
    for (const Arrival& a : arrivals) {
      if (a.at <= t) w[a.owner] = weight.at(a.owner);
    }
    double total = 0;
    for (const auto& [o, x] : w) total += x;
    for (auto& [o, x] : w) x /= total;
    return w;
  };
  auto within = [&](const Sample& s, double band) {
    for (const auto& [owner, target] : targets(s.t)) {
      const double share = s.held.count(owner) ? s.held.at(owner) : 0;
      if (std::abs(share / fleet - target) > band) return false;
    }
    return true;
  };
  // Settling: seconds after each sweep's arrival until every owner is
  // within 10 % of the fleet of its target.
  std::vector<std::pair<std::string, int>> settle;
  for (const Arrival& a : arrivals) {
    if (a.priority != 0) continue;
    for (const Sample& s : samples) {
      if (s.t >= a.at && within(s, 0.10)) {
        settle.push_back({a.study, s.t - a.at});
        break;
      }
    }
  }
  // Jain's index of share/target over the settled samples (from 300 s
  // after each arrival to the next one), outside the deadline study's run.
  double jain_sum = 0;
  int jain_n = 0;
  for (const Sample& s : samples) {
    int since = 0;
    for (const Arrival& a : arrivals) {
      if (a.at <= s.t) since = s.t - a.at;
    }
    if (since < 300 || (s.t >= 2400 && s.t < 3000)) continue;
    double sum = 0, sq = 0;
    int n = 0;
    for (const auto& [owner, target] : targets(s.t)) {
      const double x =
          (s.held.count(owner) ? s.held.at(owner) : 0) / (fleet * target);
      sum += x;
      sq += x * x;
      ++n;
    }
    jain_sum += sq > 0 ? sum * sum / (n * sq) : 0;
    ++jain_n;
  }
  const double jain = jain_n ? jain_sum / jain_n : 0;
  std::printf("fleet %d slots, %d simulated s; weights ann 2, bo 1, cy 1\n",
              fleet, seconds);
  std::printf("%-8s %-22s %-22s %-22s\n", "t (s)", "ann (target)",
              "bo (target)", "cy (target)");
  for (const Sample& s : samples) {
    if (s.t % 300 != 290) continue;
    auto tg = targets(s.t);
    std::printf("%-8d", s.t);
    for (const char* o : {"ann", "bo", "cy"}) {
      const int held = s.held.count(o) ? s.held.at(o) : 0;
      std::printf(" %5.1f %% (%5.1f %%)       ", 100.0 * held / fleet,
                  100.0 * (tg.count(o) ? tg.at(o) : 0));
    }
    std::printf("\n");
  }
  for (const auto& [study, s] : settle) {
    std::printf("settled within 10 %% of target %d s after %s arrived\n", s,
                study.c_str());
  }
  std::printf("Jain's index of share/target (settled samples): %.4f\n", jain);
  std::printf(
      "cy-deadline (priority 10, 16 trials) all running %s s after it "
      "arrived\n",
      deadline_all_running
          ? std::to_string(*deadline_all_running - 2400).c_str()
          : "never");
  std::printf(
      "preempted attempts %lld, work lost %lld steps (%.1f per preemption; "
      "checkpoints every 60 steps)\n",
      static_cast<long long>(preempted), static_cast<long long>(lost_steps),
      preempted ? double(lost_steps) / preempted : 0.0);
  std::printf("trials RUNNING with nobody running them at the end: %lld\n",
              static_cast<long long>(stale));
  if (const std::string path = absl::GetFlag(FLAGS_shares_csv); !path.empty()) {
    std::ofstream csv(path);
    csv << "t,ann,bo,cy\n";
    for (const Sample& s : samples) {
      csv << s.t;
      for (const char* o : {"ann", "bo", "cy"}) {
        csv << "," << (s.held.count(o) ? s.held.at(o) : 0);
      }
      csv << "\n";
    }
  }
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    std::ofstream f(out, std::ios::app);
    f << "{\"workers\": " << fleet << ", \"seconds\": " << seconds
      << ", \"fair_share_preempt\": "
      << (absl::GetFlag(FLAGS_fair_share_preempt) ? "true" : "false")
      << ", \"jain\": " << jain << ", \"deadline_all_running_s\": "
      << (deadline_all_running ? *deadline_all_running - 2400 : -1)
      << ", \"preempted\": " << preempted << ", \"lost_steps\": " << lost_steps
      << ", \"stale_running\": " << stale << ", \"settle_s\": {";
    for (size_t i = 0; i < settle.size(); ++i) {
      f << (i ? ", " : "") << "\"" << settle[i].first
        << "\": " << settle[i].second;
    }
    f << "}}\n";
  }
  return 0;
}

}  // namespace
}  // namespace dial::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dial::bench::Run();
}
