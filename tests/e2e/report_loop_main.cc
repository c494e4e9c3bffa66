// e2e_report_loop: an ask/tell client for tests that must run it where the
// test process cannot reach (a network namespace, with `ip netns exec`).
// It makes study --study (if it is not there), then trial after trial
// reports steps 1..--steps and completes the trial, through the C++ client
// with every address of --scheduler (it follows a standby's hint). It
// prints a line for each acknowledged report and each refused call:
//   ACK <unix ms> <trial> <step>
//   ERR <unix ms> <code name>
// and exits after --seconds. A refused call is tried again after 100 ms; a
// trial the scheduler no longer knows (its creation was lost) is left.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/spec.h"

ABSL_FLAG(std::string, scheduler, "", "host:port[,host:port...]");
ABSL_FLAG(std::string, study, "loop", "the study's name");
ABSL_FLAG(int32_t, steps, 5, "reports per trial");
ABSL_FLAG(double, seconds, 120, "run this long");
ABSL_FLAG(std::string, tls_ca, "", "the scheduler's CA (PEM); empty: plain");
ABSL_FLAG(std::string, token_file, "", "bearer token file; empty: none");

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string study = absl::GetFlag(FLAGS_study);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                         1000 * absl::GetFlag(FLAGS_seconds)));
  dial::client::DialClientOptions options;
  options.target = absl::GetFlag(FLAGS_scheduler);
  options.timeout = absl::Seconds(5);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    std::ifstream in(file);
    std::getline(in, options.token);
  }
  auto client = dial::client::DialClient::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 2;
  }
  auto now_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  auto err = [&](const absl::Status& s) {
    std::printf("ERR %lld %s\n", static_cast<long long>(now_ms()),
                absl::StatusCodeToString(s.code()).c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  auto spec = dial::ParseStudySpec(absl::StrCat("name: ", study, R"(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 100000, max_parallel_trials: 1}
)"));
  if (!spec.ok()) return 2;
  while (Clock::now() < deadline) {
    auto made = (*client)->CreateStudy(*spec);
    if (made.ok() || absl::IsAlreadyExists(made.status())) break;
    err(made.status());
  }
  while (Clock::now() < deadline) {
    auto s = (*client)->SuggestTrials(study, 1, "loop");
    if (!s.ok() || s->trials_size() == 0) {
      err(s.ok() ? absl::ResourceExhaustedError("no trial") : s.status());
      continue;
    }
    const int64_t number = s->trials(0).number();
    bool gone = false;
    for (int step = 1; step <= absl::GetFlag(FLAGS_steps) && !gone &&
                       Clock::now() < deadline;) {
      auto d = (*client)->ReportIntermediate(study, number, step,
                                             {{"loss", 1.0 / step}});
      if (d.ok()) {
        std::printf("ACK %lld %lld %d\n", static_cast<long long>(now_ms()),
                    static_cast<long long>(number), step);
        std::fflush(stdout);
        ++step;
        continue;
      }
      err(d.status());
      gone = absl::IsNotFound(d.status()) ||
             absl::IsFailedPrecondition(d.status());
    }
    while (!gone && Clock::now() < deadline) {
      auto c = (*client)->CompleteTrial(study, number, {{"loss", 0.5}});
      if (c.ok() || absl::IsNotFound(c.status()) ||
          absl::IsFailedPrecondition(c.status())) {
        break;
      }
      err(c.status());
    }
  }
  return 0;
}
