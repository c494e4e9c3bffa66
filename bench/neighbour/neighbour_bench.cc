// Does one study slow another? A real dial-scheduler process (started
// here, once per --threads value) and gRPC clients, as users would run it:
//   study B: random search on one float, ask and tell in a loop;
//   study A: Bayesian (GP) on Hartmann6's 6 floats with --a_trials
//            completed trials, whose client keeps asking (each ask is a
//            model fit over all of A's trials).
// B runs alone for --seconds, then beside A for --seconds. Prints B's ask
// latency (p50, p99, mean) and asks/s in both phases, A's own ask latency,
// and B's p99 beside A over B's p99 alone; appends a JSON line per
// scheduler to --out.
//
//   neighbour_bench [--threads=1,0] [--seconds=10] [--a_trials=400]
//                   [--out=FILE] [--scheduler_binary=PATH]
// --threads: the scheduler's --suggestion-threads for each run (1 is the
// old behaviour, one suggestion thread for every study; 0 one per core).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/searchers/functions.h"
#include "client/client.h"
#include "common/spec.h"
#include "tests/e2e/subprocess.h"

ABSL_FLAG(std::string, threads, "1,0",
          "--suggestion-threads of each scheduler run (comma list)");
ABSL_FLAG(double, seconds, 10, "Length of each phase");
ABSL_FLAG(int, a_trials, 400, "Completed trials of study A before it asks");
ABSL_FLAG(std::string, out, "", "Append a JSON line per run to this file");
ABSL_FLAG(std::string, scheduler_binary, "",
          "dial-scheduler to run; default: the one of this build");

namespace dial::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Latencies {
  std::vector<double> ms;
  double seconds = 0;
  double Quantile(double q) const {
    if (ms.empty()) return 0;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1,
                           static_cast<size_t>(q * sorted.size()))];
  }
  double Mean() const {
    double s = 0;
    for (double v : ms) s += v;
    return ms.empty() ? 0 : s / ms.size();
  }
  double Rate() const { return seconds > 0 ? ms.size() / seconds : 0; }
  std::string Json() const {
    return absl::StrCat("{\"asks\": ", ms.size(), ", \"per_s\": ", Rate(),
                        ", \"p50_ms\": ", Quantile(0.5),
                        ", \"p99_ms\": ", Quantile(0.99),
                        ", \"mean_ms\": ", Mean(), "}");
  }
};

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Asks one trial of `study` and tells it `value(params)`, until `stop`
// (or for `seconds` when stop is null); the asks' latencies.
template <typename Value>
Latencies AskAndTell(client::DialClient& c, const std::string& study,
                     Value value, double seconds,
                     const std::atomic<bool>* stop) {
  Latencies out;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds));
  while (stop ? !stop->load() : Clock::now() < end) {
    const auto t0 = Clock::now();
    auto asked = c.SuggestTrials(study, 1, "");
    if (!asked.ok() || asked->trials_size() != 1) {
      std::fprintf(stderr, "%s: ask failed: %s\n", study.c_str(),
                   asked.status().ToString().c_str());
      break;
    }
    out.ms.push_back(Ms(Clock::now() - t0));
    const v1::Trial& t = asked->trials(0);
    auto told = c.CompleteTrial(study, t.number(), {{"loss", value(t)}});
    if (!told.ok()) {
      std::fprintf(stderr, "%s: tell failed: %s\n", study.c_str(),
                   told.status().ToString().c_str());
      break;
    }
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

int RunOne(const std::string& threads) {
  const auto dir = std::filesystem::temp_directory_path() /
                   absl::StrCat("dial-neighbour-", getpid(), "-", threads);
  std::filesystem::create_directories(dir);
  std::string binary = absl::GetFlag(FLAGS_scheduler_binary);
  if (binary.empty()) {
    binary = (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
              ".." / "scheduler" / "dial-scheduler")
                 .lexically_normal()
                 .string();
  }
  testing::Subprocess scheduler;
  if (!scheduler.Start({binary, "--db=" + (dir / "n.db").string(),
                        "--checkpoint-root=" + (dir / "ckpt").string(),
                        "--listen=127.0.0.1:0", "--log-level=warn",
                        "--suggestion-threads=" + threads})) {
    return 1;
  }
  const std::string prefix = "dial-scheduler listening on ";
  auto line = scheduler.ReadLine(std::chrono::seconds(60));
  if (!line || line->rfind(prefix, 0) != 0) {
    std::fprintf(stderr, "%s did not start\n", binary.c_str());
    return 1;
  }
  const std::string target = line->substr(prefix.size());
  auto a_client = client::DialClient::Create({target});
  auto b_client = client::DialClient::Create({target});
  if (!a_client.ok() || !b_client.ok()) return 1;

  std::string a_space;
  for (int i = 0; i < 6; ++i) {
    absl::StrAppend(&a_space, "  - {name: x", i,
                    ", float: {min: 0, max: 1}}\n");
  }
  auto a_spec = ParseStudySpec(
      "name: a\nobjective: {metric: loss, goal: MINIMIZE}\nsearch_space:\n" +
      a_space +
      "budget: {max_trials: 1000000}\nsearcher: {bayesian: {seed: 1}}\n");
  auto b_spec = ParseStudySpec(
      "name: b\nobjective: {metric: loss, goal: MINIMIZE}\nsearch_space:\n"
      "  - {name: y, float: {min: -1, max: 1}}\n"
      "budget: {max_trials: 1000000}\nsearcher: {random: {seed: 2}}\n");
  if (!a_spec.ok() || !b_spec.ok() || !(*a_client)->CreateStudy(*a_spec).ok() ||
      !(*b_client)->CreateStudy(*b_spec).ok()) {
    std::fprintf(stderr, "cannot create the studies\n");
    return 1;
  }
  // A's history: uniform points, queued so that no fit runs while they
  // are asked for.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0, 1);
  const int a_trials = absl::GetFlag(FLAGS_a_trials);
  for (int done = 0; done < a_trials;) {
    std::vector<v1::QueuedTrial> batch;
    for (int i = 0; i < 100 && done + i < a_trials; ++i) {
      v1::QueuedTrial q;
      for (int j = 0; j < 6; ++j) {
        (*q.mutable_params())["x" + std::to_string(j)].set_double_value(
            unit(rng));
      }
      batch.push_back(q);
    }
    if (!(*a_client)->EnqueueTrials("a", batch).ok()) return 1;
    for (size_t i = 0; i < batch.size(); ++i) {
      auto asked = (*a_client)->SuggestTrials("a", 1, "");
      if (!asked.ok() || asked->trials_size() != 1) return 1;
      const v1::Trial& t = asked->trials(0);
      if (!(*a_client)
               ->CompleteTrial("a", t.number(),
                               {{"loss", Hartmann6(t.params())}})
               .ok()) {
        return 1;
      }
    }
    done += static_cast<int>(batch.size());
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  auto b_value = [](const v1::Trial& t) {
    const double y = t.params().at("y").double_value();
    return y * y;
  };
  auto a_value = [](const v1::Trial& t) { return Hartmann6(t.params()); };
  const Latencies alone =
      AskAndTell(**b_client, "b", b_value, seconds, nullptr);
  std::atomic<bool> stop{false};
  Latencies a_asks;
  std::thread a_thread(
      [&] { a_asks = AskAndTell(**a_client, "a", a_value, 0, &stop); });
  // A's first fit is under way before B's clock starts.
  const Latencies beside =
      AskAndTell(**b_client, "b", b_value, seconds, nullptr);
  stop = true;
  a_thread.join();
  const double ratio = beside.Quantile(0.99) / alone.Quantile(0.99);
  std::printf(
      "--suggestion-threads=%s (A: %d trials before)\n"
      "  B alone:    %7.1f asks/s  p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms\n"
      "  B beside A: %7.1f asks/s  p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms\n"
      "  A's asks:   %7.1f asks/s  p50 %7.2f ms  p99 %7.2f ms  (%zu asks)\n"
      "  B p99 beside / alone: %.2f\n",
      threads.c_str(), a_trials, alone.Rate(), alone.Quantile(0.5),
      alone.Quantile(0.99), alone.Mean(), beside.Rate(), beside.Quantile(0.5),
      beside.Quantile(0.99), beside.Mean(), a_asks.Rate(), a_asks.Quantile(0.5),
      a_asks.Quantile(0.99), a_asks.ms.size(), ratio);
  std::fflush(stdout);
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    std::ofstream(out, std::ios::app)
        << "{\"suggestion_threads\": " << threads
        << ", \"cores\": " << std::thread::hardware_concurrency()
        << ", \"a_trials\": " << a_trials << ", \"seconds\": " << seconds
        << ", \"b_alone\": " << alone.Json()
        << ", \"b_beside_a\": " << beside.Json() << ", \"a\": " << a_asks.Json()
        << ", \"p99_ratio\": " << ratio << "}\n";
  }
  a_client->reset();
  b_client->reset();
  scheduler.Kill(SIGTERM);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
}  // namespace dial::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    if (int rc = dial::bench::RunOne(std::string(t)); rc != 0) return rc;
  }
  return 0;
}
