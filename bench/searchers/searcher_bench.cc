// Runs Dial's searchers through the real ask/tell gRPC API (an in-process
// scheduler on 127.0.0.1:0 with a SQLite file) on the benchmark functions,
// and measures suggestion latency of the Bayesian searcher as a study grows.
// Prints one JSON object per line.
//
// usage: searcher_bench --trials=100 --seeds=10
// [--searchers=random,tpe,bayesian]
//        searcher_bench --latency
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bench/local_scheduler.h"
#include "bench/searchers/functions.h"
#include "client/client.h"
#include "common/spec.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/bayesian_searcher.h"

ABSL_FLAG(int, trials, 100, "Trials per study");
ABSL_FLAG(int, seeds, 10, "Seeds per (function, searcher)");
ABSL_FLAG(std::string, searchers, "random,tpe,bayesian", "Searchers to run");
ABSL_FLAG(std::string, functions, "branin,hartmann6,rosenbrock4,mixed",
          "Functions to run");
ABSL_FLAG(bool, latency, false, "Measure Bayesian suggestion latency instead");

namespace {

using dial::bench::Function;
using dial::bench::kFunctions;

int RunRegret() {
  auto local = dial::bench::LocalScheduler::Start("dial-searcher-bench");
  if (!local) return 1;
  dial::client::DialClient& client = local->client();
  const std::vector<std::string> searchers =
      absl::StrSplit(absl::GetFlag(FLAGS_searchers), ',');
  const std::vector<std::string> functions =
      absl::StrSplit(absl::GetFlag(FLAGS_functions), ',');
  const int trials = absl::GetFlag(FLAGS_trials);
  for (const Function& fn : kFunctions) {
    if (std::find(functions.begin(), functions.end(), fn.name) ==
        functions.end()) {
      continue;
    }
    for (const auto& searcher : searchers) {
      for (int seed = 0; seed < absl::GetFlag(FLAGS_seeds); ++seed) {
        const std::string name =
            std::string(fn.name) + "-" + searcher + "-" + std::to_string(seed);
        auto spec = dial::ParseStudySpec(
            "name: " + name + "\nobjective: {metric: y, goal: MINIMIZE}\n" +
            "budget: {max_trials: " + std::to_string(trials) + "}\n" +
            "searcher: {" + searcher + ": {seed: " + std::to_string(seed + 1) +
            "}}\nsearch_space:\n" + fn.space_yaml);
        if (!spec.ok() || !client.CreateStudy(*spec).ok()) return 1;
        double best = 1e300;
        std::vector<double> regret;
        double seconds = 0;
        for (int t = 0; t < trials; ++t) {
          auto start = std::chrono::steady_clock::now();
          auto s = client.SuggestTrials(name, 1, "bench");
          seconds += std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
          if (!s.ok() || s->trials_size() != 1) return 1;
          const auto& trial = s->trials(0);
          const double y = fn.f(trial.params());
          best = std::min(best, y);
          regret.push_back(best - fn.optimum);
          if (!client.CompleteTrial(name, trial.number(), {{"y", y}}).ok()) {
            return 1;
          }
        }
        std::printf(
            "{\"tool\": \"dial\", \"searcher\": \"%s\", \"function\": \"%s\", "
            "\"seed\": %d, \"regret25\": %.10g, \"regret50\": %.10g, "
            "\"regret100\": %.10g, \"seconds\": %.3f}\n",
            searcher.c_str(), fn.name, seed, regret[std::min(24, trials - 1)],
            regret[std::min(49, trials - 1)], regret.back(), seconds);
        std::fflush(stdout);
      }
    }
  }
  return 0;
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
    auto observe = [&](int64_t number, const dial::searchers::Params& p) {
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
    std::vector<double> ms;
    for (int n = size; n < size + 20; ++n) {
      auto start = std::chrono::steady_clock::now();
      auto p = (*searcher)->Suggest(n);
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count());
      if (!p.ok()) return 1;
      observe(n, *p);
    }
    std::sort(ms.begin(), ms.end());
    std::printf(
        "{\"latency_observations\": %d, \"median_ms\": %.1f, \"p95_ms\": %.1f, "
        "\"max_ms\": %.1f}\n",
        size, (ms[9] + ms[10]) / 2, ms[18], ms[19]);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return absl::GetFlag(FLAGS_latency) ? RunLatency() : RunRegret();
}
