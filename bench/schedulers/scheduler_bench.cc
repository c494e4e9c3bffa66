// Trial schedulers on simulated learning curves (curves.h), through the real
// ask/tell gRPC API: each method evaluates the same ordered list of configs
// one at a time, reporting every step, until a budget of 16 full trials'
// steps is spent. Prints one JSON object per (method, seed): configs tried,
// steps spent, and the regret of the chosen config (the best one that ran
// to max_steps) against the family's optimum 0.1.
//
// usage: scheduler_bench --seeds=10
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/local_scheduler.h"
#include "bench/schedulers/curves.h"
#include "client/client.h"
#include "common/spec.h"

ABSL_FLAG(int, seeds, 10, "Seeds (config lists)");

namespace {

constexpr int kMaxSteps = 243;
constexpr int kBudget = 16 * kMaxSteps;

const std::pair<const char*, const char*> kMethods[] = {
    {"fifo", "{fifo: {}}"},
    {"median", "{median: {grace_steps: 9, min_samples: 3}}"},
    {"asha", "{asha: {min_steps: 3, max_steps: 243, reduction_factor: 3}}"},
    {"hyperband",
     "{hyperband: {min_steps: 3, max_steps: 243, reduction_factor: 3}}"},
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto local = dial::bench::LocalScheduler::Start("dial-scheduler-bench");
  if (!local) return 1;
  dial::client::DialClient& client = local->client();
  for (int seed = 0; seed < absl::GetFlag(FLAGS_seeds); ++seed) {
    for (const auto& [method, scheduler] : kMethods) {
      const std::string name = std::string(method) + "-" + std::to_string(seed);
      auto spec = dial::ParseStudySpec(
          "name: " + name +
          "\nobjective: {metric: loss, goal: MINIMIZE}\n"
          "budget: {max_trials: 10000, max_parallel_trials: 1}\n"
          "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
          "scheduler: " +
          scheduler);
      if (!spec.ok() || !client.CreateStudy(*spec).ok()) return 1;
      int steps = 0, configs = 0;
      double chosen_observed = 1e300, chosen_true = 1e300;
      while (steps < kBudget) {
        auto s = client.SuggestTrials(name, 1, "bench");
        if (!s.ok() || s->trials_size() != 1) return 1;
        const int64_t number = s->trials(0).number();
        // The searcher's params are ignored: every method sees config i.
        const dial::bench::Curve curve =
            dial::bench::MakeCurve(seed, configs++);
        double loss = 0;
        int step = 0;
        bool stopped = false;
        while (step < kMaxSteps && steps < kBudget) {
          ++step;
          ++steps;
          loss = curve.Loss(step);
          auto d =
              client.ReportIntermediate(name, number, step, {{"loss", loss}});
          if (!d.ok()) return 1;
          if (d->action() == dial::v1::Decision::STOP) {
            stopped = true;
            break;
          }
        }
        (void)client.CompleteTrial(name, number, {{"loss", loss}});
        if (!stopped && step == kMaxSteps && loss < chosen_observed) {
          chosen_observed = loss;
          chosen_true = curve.final_loss;
        }
      }
      std::printf(
          "{\"tool\": \"dial\", \"method\": \"%s\", \"seed\": %d, \"configs\": "
          "%d, \"steps\": %d, \"regret\": %.6f}\n",
          method, seed, configs, steps, chosen_true - 0.1);
      std::fflush(stdout);
    }
  }
  return 0;
}
