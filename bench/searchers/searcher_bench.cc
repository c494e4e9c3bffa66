// Runs Dial's searchers through the real ask/tell gRPC API (an in-process
// scheduler on 127.0.0.1:0 with a SQLite file) on the benchmark functions
// (functions.h) and the multi-objective and constrained problems
// (mo_functions.h), and measures suggestion latency as a study grows.
// Prints one JSON object per line.
//
// usage: searcher_bench --trials=100 --seeds=10
//          [--searchers=random,tpe,bayesian]
//          [--functions=branin,hartmann6,rosenbrock4,mixed]
//        searcher_bench --latency
//        searcher_bench --multi --trials=100 --seeds=10
//          [--searchers=nsga2,tpe,bayesian,random]
//          [--functions=zdt1,zdt2,zdt3,dtlz2,branin_c,mixed_c]
//        searcher_bench --mo_latency
//        searcher_bench --warm --trials=100 --seeds=20 [--first_seed=0]
//          [--shift=0.05] [--curves] [--functions=...] [--searchers=...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/local_scheduler.h"
#include "bench/searchers/functions.h"
#include "bench/searchers/mo_functions.h"
#include "client/client.h"
#include "common/spec.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/bayesian_searcher.h"
#include "searchers/searcher.h"

ABSL_FLAG(int, trials, 100, "Trials per study");
ABSL_FLAG(int, seeds, 10, "Seeds per (function, searcher)");
ABSL_FLAG(int, first_seed, 0, "--warm: the first seed (to split a run)");
ABSL_FLAG(std::string, searchers, "",
          "Searchers to run; default random,tpe,bayesian, with --multi "
          "nsga2,tpe,bayesian,random");
ABSL_FLAG(std::string, functions, "",
          "Functions to run; default branin,hartmann6,rosenbrock4,mixed, "
          "with --multi zdt1,zdt2,zdt3,dtlz2,branin_c,mixed_c");
ABSL_FLAG(bool, latency, false, "Measure Bayesian suggestion latency instead");
ABSL_FLAG(bool, warm, false,
          "Warm start: per function and seed, a cold study, a source study "
          "on a shifted copy of the function and a study warm-started from "
          "it; prints when the warm one reaches the cold one's final regret");
ABSL_FLAG(double, shift, 0.05,
          "--warm: the copy's shift, as a share of each float's range");
ABSL_FLAG(bool, curves, false,
          "--warm: also print both studies' regret after every trial");
ABSL_FLAG(bool, multi, false,
          "Run the multi-objective and constrained problems instead");
ABSL_FLAG(bool, mo_latency, false,
          "Measure 2-objective suggestion latency of nsga2, tpe and bayesian "
          "instead");

namespace {

using dial::bench::Function;
using dial::bench::kFunctions;
using dial::bench::kMoProblems;
using dial::bench::MoProblem;
using dial::searchers::Params;
using Metrics = std::map<std::string, double>;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "searcher_bench: %s\n", status.ToString().c_str());
  return 1;
}

// A list flag's entries, or `fallback`'s when the flag is empty.
std::vector<std::string> ListFlag(const absl::Flag<std::string>& flag,
                                  const char* fallback) {
  const std::string value = absl::GetFlag(flag);
  return absl::StrSplit(value.empty() ? fallback : value, ',');
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The spec of a bench study; `goals` holds its objective(s) and
// constraints, one YAML line each.
absl::StatusOr<dial::v1::StudySpec> BenchSpec(const std::string& name,
                                              const std::string& goals,
                                              const std::string& searcher,
                                              int seed, int trials,
                                              const char* space_yaml) {
  return dial::ParseStudySpec("name: " + name + "\n" + goals +
                              "budget: {max_trials: " + std::to_string(trials) +
                              "}\n" + "searcher: {" + searcher +
                              ": {seed: " + std::to_string(seed) +
                              "}}\nsearch_space:\n" + space_yaml);
}

// One study through the real ask/tell API: creates it, then `trials` times
// SuggestTrials(name, 1, "bench"), `evaluate` on the trial's params and
// CompleteTrial with every metric it returns; `observe` sees each trial's
// metrics in order. Returns the seconds spent in SuggestTrials.
absl::StatusOr<double> RunStudy(
    dial::client::DialClient& client, const dial::v1::StudySpec& spec,
    int trials, const std::function<Metrics(const Params&)>& evaluate,
    const std::function<void(const Metrics&)>& observe) {
  if (auto created = client.CreateStudy(spec); !created.ok()) {
    return created.status();
  }
  double seconds = 0;
  for (int t = 0; t < trials; ++t) {
    auto start = std::chrono::steady_clock::now();
    auto s = client.SuggestTrials(spec.name(), 1, "bench");
    seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (!s.ok()) return s.status();
    if (s->trials_size() != 1) {
      return absl::InternalError(absl::StrCat(
          spec.name(), ": SuggestTrials gave ", s->trials_size(), " trials"));
    }
    const auto& trial = s->trials(0);
    const Metrics metrics = evaluate(trial.params());
    observe(metrics);
    auto completed = client.CompleteTrial(spec.name(), trial.number(), metrics);
    if (!completed.ok()) return completed.status();
  }
  return seconds;
}

int RunRegret() {
  auto local = dial::bench::LocalScheduler::Start("dial-searcher-bench");
  if (!local) return 1;
  dial::client::DialClient& client = local->client();
  const auto searchers = ListFlag(FLAGS_searchers, "random,tpe,bayesian");
  const auto functions =
      ListFlag(FLAGS_functions, "branin,hartmann6,rosenbrock4,mixed");
  const int trials = absl::GetFlag(FLAGS_trials);
  for (const Function& fn : kFunctions) {
    if (!Contains(functions, fn.name)) continue;
    for (const auto& searcher : searchers) {
      for (int seed = 0; seed < absl::GetFlag(FLAGS_seeds); ++seed) {
        const std::string name =
            std::string(fn.name) + "-" + searcher + "-" + std::to_string(seed);
        auto spec = BenchSpec(name, "objective: {metric: y, goal: MINIMIZE}\n",
                              searcher, seed + 1, trials, fn.space_yaml);
        if (!spec.ok()) return Fail(spec.status());
        double best = 1e300;
        std::vector<double> regret;
        auto seconds = RunStudy(
            client, *spec, trials,
            [&](const Params& p) {
              return Metrics{{"y", fn.f(p)}};
            },
            [&](const Metrics& m) {
              best = std::min(best, m.at("y"));
              regret.push_back(best - fn.optimum);
            });
        if (!seconds.ok()) return Fail(seconds.status());
        std::printf(
            "{\"tool\": \"dial\", \"searcher\": \"%s\", \"function\": \"%s\", "
            "\"seed\": %d, \"regret25\": %.10g, \"regret50\": %.10g, "
            "\"regret100\": %.10g, \"seconds\": %.3f}\n",
            searcher.c_str(), fn.name, seed, regret[std::min(24, trials - 1)],
            regret[std::min(49, trials - 1)], regret.back(), *seconds);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

// The objective(s) and constraints lines of a problem's spec: objectives
// f1, f2, ... (one objective: y), constraints c1, c2, ... each at most 0.
std::string Goals(const MoProblem& problem) {
  std::string goals = "objective: {metric: y, goal: MINIMIZE}\n";
  if (problem.objectives > 1) {
    std::vector<std::string> objectives;
    for (int i = 1; i <= problem.objectives; ++i) {
      objectives.push_back(absl::StrCat("{metric: f", i, ", goal: MINIMIZE}"));
    }
    goals = "objectives: [" + absl::StrJoin(objectives, ", ") + "]\n";
  }
  if (problem.constraints > 0) {
    std::vector<std::string> constraints;
    for (int i = 1; i <= problem.constraints; ++i) {
      constraints.push_back(absl::StrCat("{metric: c", i, ", max: 0}"));
    }
    goals += "constraints: [" + absl::StrJoin(constraints, ", ") + "]\n";
  }
  return goals;
}

std::string ObjectiveMetric(const MoProblem& problem, size_t i) {
  return problem.objectives == 1 ? "y" : absl::StrCat("f", i + 1);
}

// Every metric of one trial, as named by Goals.
Metrics Evaluate(const MoProblem& problem, const Params& params) {
  Metrics metrics;
  const std::vector<double> f = problem.f(params);
  for (size_t i = 0; i < f.size(); ++i) {
    metrics[ObjectiveMetric(problem, i)] = f[i];
  }
  if (problem.c != nullptr) {
    const std::vector<double> c = problem.c(params);
    for (size_t i = 0; i < c.size(); ++i) {
      metrics[absl::StrCat("c", i + 1)] = c[i];
    }
  }
  return metrics;
}

// The objectives of the feasible trials among the first `count`.
std::vector<std::vector<double>> FeasibleObjectives(
    const MoProblem& problem, const std::vector<Metrics>& trials,
    size_t count) {
  std::vector<std::vector<double>> out;
  for (size_t t = 0; t < count; ++t) {
    bool feasible = true;
    for (int i = 1; i <= problem.constraints; ++i) {
      feasible &= trials[t].at(absl::StrCat("c", i)) <= 0;
    }
    if (!feasible) continue;
    out.emplace_back();
    for (int i = 0; i < problem.objectives; ++i) {
      out.back().push_back(trials[t].at(ObjectiveMetric(problem, i)));
    }
  }
  return out;
}

// The score after the first `count` trials: the hypervolume of the feasible
// ones against the problem's reference (several objectives), or the best
// feasible value, null while there is none (one objective).
std::string Score(const MoProblem& problem, const std::vector<Metrics>& trials,
                  size_t count) {
  const auto feasible = FeasibleObjectives(problem, trials, count);
  if (problem.objectives == 1 && feasible.empty()) return "null";
  double score = 1e300;
  if (problem.objectives > 1) {
    score = dial::bench::Hypervolume(feasible, problem.reference);
  } else {
    for (const auto& f : feasible) score = std::min(score, f[0]);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", score);
  return buf;
}

// Every (problem, searcher, seed) of --functions x --searchers x --seeds.
// A study that cannot run (e.g. a searcher refusing a problem) is reported
// on stderr and skips that (problem, searcher); the exit status is then 1.
int RunMulti() {
  auto local = dial::bench::LocalScheduler::Start("dial-searcher-bench-mo");
  if (!local) return 1;
  dial::client::DialClient& client = local->client();
  const auto searchers = ListFlag(FLAGS_searchers, "nsga2,tpe,bayesian,random");
  const auto functions =
      ListFlag(FLAGS_functions, "zdt1,zdt2,zdt3,dtlz2,branin_c,mixed_c");
  const int trials = absl::GetFlag(FLAGS_trials);
  int status = 0;
  for (const MoProblem& problem : kMoProblems) {
    if (!Contains(functions, problem.name)) continue;
    const char* score = problem.objectives > 1 ? "hv" : "best_feasible";
    for (const auto& searcher : searchers) {
      for (int seed = 0; seed < absl::GetFlag(FLAGS_seeds); ++seed) {
        const std::string name =
            absl::StrCat(problem.name, "-", searcher, "-", seed);
        auto spec = BenchSpec(name, Goals(problem), searcher, seed + 1, trials,
                              problem.space_yaml);
        if (!spec.ok()) return Fail(spec.status());
        std::vector<Metrics> done;
        auto seconds = RunStudy(
            client, *spec, trials,
            [&](const Params& p) { return Evaluate(problem, p); },
            [&](const Metrics& m) { done.push_back(m); });
        if (!seconds.ok()) {
          status = Fail(seconds.status());
          break;
        }
        std::printf(
            "{\"tool\": \"dial\", \"searcher\": \"%s\", \"function\": \"%s\", "
            "\"seed\": %d, \"%s25\": %s, \"%s50\": %s, \"%s100\": %s, "
            "\"trials\": %d, \"seconds_per_suggest\": %.6f}\n",
            searcher.c_str(), problem.name, seed, score,
            Score(problem, done, std::min(25, trials)).c_str(), score,
            Score(problem, done, std::min(50, trials)).c_str(), score,
            Score(problem, done, trials).c_str(), trials, *seconds / trials);
        std::fflush(stdout);
      }
    }
  }
  return status;
}

// Times 20 consecutive Suggest calls from trial `from` on, each followed by
// `observe` (untimed, so on-schedule refits are in the sample). Returns
// the "median_ms", "p95_ms" and "max_ms" JSON fields.
absl::StatusOr<std::string> TimeSuggestions(
    dial::searchers::Searcher& searcher, int64_t from,
    const std::function<void(int64_t, const Params&)>& observe) {
  std::vector<double> ms;
  for (int64_t n = from; n < from + 20; ++n) {
    auto start = std::chrono::steady_clock::now();
    auto p = searcher.Suggest(n);
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    if (!p.ok()) return p.status();
    observe(n, *p);
  }
  std::sort(ms.begin(), ms.end());
  char buf[128];
  std::snprintf(buf, sizeof buf,
                "\"median_ms\": %.1f, \"p95_ms\": %.1f, \"max_ms\": %.1f",
                (ms[9] + ms[10]) / 2, ms[18], ms[19]);
  return std::string(buf);
}

// Suggest + observe, 20 steps from each size, in 6-D (Hartmann6).
int RunLatency() {
  const Function& fn = kFunctions[1];
  auto spec = dial::ParseStudySpec(
      std::string(
          "name: lat\nobjective: {metric: y, goal: MINIMIZE}\n"
          "budget: {max_trials: 2000}\nsearcher: {bayesian: {seed: 1}}\n"
          "search_space:\n") +
      fn.space_yaml);
  if (!spec.ok()) return 1;
  dial::FillSpecDefaults(1, *spec);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0, 1);
  auto space = dial::searchers::SearchSpace::Create(*spec);
  for (int size : {100, 500, 1000}) {
    auto searcher = dial::searchers::BayesianSearcher::Create(*spec);
    if (!searcher.ok()) return 1;
    auto observe = [&](int64_t number, const Params& p) {
      dial::v1::Trial t;
      t.set_number(number);
      t.set_state(dial::v1::COMPLETED);
      *t.mutable_params() = p;
      t.set_objective_value(fn.f(p));
      *t.mutable_end_time() =
          google::protobuf::util::TimeUtil::MillisecondsToTimestamp(number);
      (*searcher)->Observe(t);
    };
    // A history of random observations (what is observed does not change
    // the cost of a suggestion).
    for (int n = 0; n < size; ++n) {
      std::vector<double> u(6);
      for (auto& v : u) v = unit(rng);
      observe(n, space->Decode(u));
    }
    auto fields = TimeSuggestions(**searcher, size, observe);
    if (!fields.ok()) return 1;
    std::printf("{\"latency_observations\": %d, %s}\n", size, fields->c_str());
    std::fflush(stdout);
  }
  return 0;
}

// As RunLatency, for a 2-objective study (ZDT1, 6-D): nsga2, tpe and
// bayesian given 100 and 500 random completed trials, in process (a gRPC
// round trip adds about 0.1 ms).
int RunMoLatency() {
  const MoProblem& problem = kMoProblems[0];
  for (const char* searcher_name : {"nsga2", "tpe", "bayesian"}) {
    auto spec = BenchSpec("mo-lat", Goals(problem), searcher_name, 1, 2000,
                          problem.space_yaml);
    if (!spec.ok()) return Fail(spec.status());
    dial::FillSpecDefaults(1, *spec);
    auto space = dial::searchers::SearchSpace::Create(*spec);
    if (!space.ok()) return Fail(space.status());
    std::mt19937_64 rng(7);
    for (int size : {100, 500}) {
      auto searcher = dial::searchers::CreateSearcher(*spec);
      if (!searcher.ok()) return Fail(searcher.status());
      // What the scheduler hands a searcher for a completed trial.
      auto observe = [&](int64_t number, const Params& p) {
        const Metrics metrics = Evaluate(problem, p);
        dial::v1::Trial t;
        t.set_number(number);
        t.set_state(dial::v1::COMPLETED);
        *t.mutable_params() = p;
        for (const auto& [metric, value] : metrics) {
          (*t.mutable_final_metrics())[metric] = value;
        }
        t.set_objective_value(metrics.at("f1"));
        for (int i = 0; i < problem.objectives; ++i) {
          t.add_objective_values(metrics.at(ObjectiveMetric(problem, i)));
        }
        *t.mutable_end_time() =
            google::protobuf::util::TimeUtil::MillisecondsToTimestamp(number);
        (*searcher)->Observe(t);
      };
      for (int n = 0; n < size; ++n) observe(n, space->Sample(rng));
      auto fields = TimeSuggestions(**searcher, size, observe);
      if (!fields.ok()) return Fail(fields.status());
      std::printf(
          "{\"tool\": \"dial\", \"mo_latency\": \"%s\", \"observations\": %d, "
          "%s}\n",
          searcher_name, size, fields->c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

// The same point `share` of each float parameter's range lower, so the
// copy f(x - d) has its optima `share` of the range higher (clamped).
Params ShiftedBack(const dial::v1::StudySpec& spec, const Params& p,
                   double share) {
  Params out = p;
  for (const auto& s : spec.search_space()) {
    if (!s.has_float_() || !out.count(s.name())) continue;
    const auto& r = s.float_();
    auto& v = out[s.name()];
    v.set_double_value(std::clamp(
        v.double_value() - share * (r.max() - r.min()), r.min(), r.max()));
  }
  return out;
}

int RunWarm() {
  auto local = dial::bench::LocalScheduler::Start("dial-warm-bench");
  if (!local) return 1;
  dial::client::DialClient& client = local->client();
  const auto searchers = ListFlag(FLAGS_searchers, "bayesian,tpe");
  const auto functions = ListFlag(FLAGS_functions, "branin,hartmann6");
  const int trials = absl::GetFlag(FLAGS_trials);
  const double share = absl::GetFlag(FLAGS_shift);
  for (const Function& fn : kFunctions) {
    if (!Contains(functions, fn.name)) continue;
    for (const auto& searcher : searchers) {
      const int first = absl::GetFlag(FLAGS_first_seed);
      for (int seed = first; seed < first + absl::GetFlag(FLAGS_seeds);
           ++seed) {
        const std::string tag = absl::StrCat(fn.name, "-", searcher, "-", seed);
        const std::string goal = "objective: {metric: y, goal: MINIMIZE}\n";
        auto run = [&](const std::string& name, const std::string& extra,
                       bool shifted, std::vector<double>* regret) {
          auto spec = BenchSpec(name, goal + extra, searcher, seed + 1, trials,
                                fn.space_yaml);
          if (!spec.ok()) return spec.status();
          double best = 1e300;
          return RunStudy(
                     client, *spec, trials,
                     [&](const Params& p) {
                       return Metrics{
                           {"y",
                            fn.f(shifted ? ShiftedBack(*spec, p, share) : p)}};
                     },
                     [&](const Metrics& m) {
                       best = std::min(best, m.at("y"));
                       if (regret) regret->push_back(best - fn.optimum);
                     })
              .status();
        };
        std::vector<double> cold, warm;
        absl::Status status = run("cold-" + tag, "", false, &cold);
        if (status.ok()) status = run("source-" + tag, "", true, nullptr);
        if (status.ok()) {
          status = run("warm-" + tag,
                       "warm_start: {studies: [source-" + tag + "]}\n", false,
                       &warm);
        }
        if (!status.ok()) return Fail(status);
        // The first trial count at which the warm study's regret is at
        // most the cold study's after all its trials.
        int reached = -1;
        for (size_t t = 0; t < warm.size(); ++t) {
          if (warm[t] <= cold.back()) {
            reached = static_cast<int>(t) + 1;
            break;
          }
        }
        std::printf(
            "{\"tool\": \"dial\", \"mode\": \"warm\", \"searcher\": "
            "\"%s\", \"function\": \"%s\", \"seed\": %d, \"trials\": %d, "
            "\"shift\": %g, \"cold_regret\": %.10g, \"warm_regret\": "
            "%.10g, \"warm_regret_at_half\": %.10g, \"reached_at\": %d}\n",
            searcher.c_str(), fn.name, seed, trials, share, cold.back(),
            warm.back(), warm[warm.size() / 2 - 1], reached);
        if (absl::GetFlag(FLAGS_curves)) {
          std::printf(
              "{\"function\": \"%s\", \"seed\": %d, \"cold\": [%s], "
              "\"warm\": [%s]}\n",
              fn.name, seed, absl::StrJoin(cold, ", ").c_str(),
              absl::StrJoin(warm, ", ").c_str());
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_warm)) return RunWarm();
  if (absl::GetFlag(FLAGS_mo_latency)) return RunMoLatency();
  if (absl::GetFlag(FLAGS_multi)) return RunMulti();
  return absl::GetFlag(FLAGS_latency) ? RunLatency() : RunRegret();
}
