// Parameter importance at scale: an ask/tell study of --trials trials over
// 8 parameters (log-scale float, floats, a wide and a narrow int, a
// categorical) on a scheduler in this process, completed with a known
// objective; then GetParameterImportance over gRPC, timed end to end
// (--repeats, median). Writes the trials as JSON lines (--data_out) so the
// Optuna peer (optuna_peer.py) scores the very same trials.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/local_scheduler.h"
#include "common/spec.h"

ABSL_FLAG(int32_t, trials, 10000, "Completed trials in the study");
ABSL_FLAG(int32_t, repeats, 5, "Timed GetParameterImportance calls");
ABSL_FLAG(std::string, data_out, "", "Write the trials here (JSON lines)");

namespace dial::bench {
namespace {

constexpr char kSpec[] = R"(
name: importance
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}
  - {name: x1, float: {min: 0, max: 1}}
  - {name: x2, float: {min: 0, max: 1}}
  - {name: x3, float: {min: 0, max: 1}}
  - {name: x4, float: {min: 0, max: 1}}
  - {name: units, int: {min: 1, max: 1000}}
  - {name: depth, int: {min: 1, max: 8}}
  - {name: optimizer, categorical: {values: [sgd, adam, rmsprop]}}
searcher: {random: {seed: 11}}
budget: {max_trials: 1, max_parallel_trials: 1000}
)";

// Depends on lr (log space), the optimizer, x1 and a little on depth;
// plus noise.
double Loss(const v1::Trial& t, std::mt19937_64& rng) {
  const auto& p = t.params();
  const double lr = std::log10(p.at("lr").double_value());
  const double x1 = p.at("x1").double_value();
  const double depth = static_cast<double>(p.at("depth").int_value());
  const bool adam = p.at("optimizer").string_value() == "adam";
  std::normal_distribution<double> noise(0, 0.1);
  return 4 * (lr + 2) * (lr + 2) + (adam ? 0 : 3) +
         20 * (x1 - 0.5) * (x1 - 0.5) + 0.2 * std::abs(depth - 4) + noise(rng);
}

int Run() {
  const int n = absl::GetFlag(FLAGS_trials);
  auto local = LocalScheduler::Start("dial-importance-bench");
  if (!local) {
    std::fprintf(stderr, "cannot start a scheduler\n");
    return 1;
  }
  auto& client = local->client();
  auto spec = ParseStudySpec(kSpec);
  if (!spec.ok()) {
    std::fprintf(stderr, "spec: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  spec->mutable_budget()->set_max_trials(n);
  if (auto created = client.CreateStudy(*spec); !created.ok()) {
    std::fprintf(stderr, "create: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::ofstream data;
  if (!absl::GetFlag(FLAGS_data_out).empty()) {
    data.open(absl::GetFlag(FLAGS_data_out));
  }
  std::mt19937_64 rng(7);
  const auto fill_start = std::chrono::steady_clock::now();
  for (int done = 0; done < n;) {
    auto s = client.SuggestTrials("importance", std::min(1000, n - done), "c");
    if (!s.ok()) {
      std::fprintf(stderr, "suggest: %s\n", s.status().ToString().c_str());
      return 1;
    }
    for (const auto& t : s->trials()) {
      const double loss = Loss(t, rng);
      auto r = client.CompleteTrial("importance", t.number(), {{"loss", loss}});
      if (!r.ok()) {
        std::fprintf(stderr, "complete: %s\n", r.status().ToString().c_str());
        return 1;
      }
      if (data.is_open()) {
        const auto& p = t.params();
        data << "{\"lr\": " << p.at("lr").double_value()
             << ", \"x1\": " << p.at("x1").double_value()
             << ", \"x2\": " << p.at("x2").double_value()
             << ", \"x3\": " << p.at("x3").double_value()
             << ", \"x4\": " << p.at("x4").double_value()
             << ", \"units\": " << p.at("units").int_value()
             << ", \"depth\": " << p.at("depth").int_value()
             << ", \"optimizer\": \"" << p.at("optimizer").string_value()
             << "\", \"loss\": " << loss << "}\n";
      }
      ++done;
    }
  }
  data.close();
  const double fill_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - fill_start)
                            .count();
  std::vector<double> ms;
  v1::GetParameterImportanceResponse last;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = client.GetParameterImportance("importance");
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    if (!r.ok()) {
      std::fprintf(stderr, "importance: %s\n", r.status().ToString().c_str());
      return 1;
    }
    last = *r;
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "trials %d (filled in %.1f s), GetParameterImportance median %.1f ms "
      "(min %.1f, max %.1f)\n",
      n, fill_s, ms[ms.size() / 2], ms.front(), ms.back());
  std::printf("importance");
  for (const auto& p : last.params()) {
    std::printf(" %s=%.4f", p.name().c_str(), p.importance());
  }
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace dial::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dial::bench::Run();
}
