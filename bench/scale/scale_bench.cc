// Load generator for the scheduler: W simulated workers and C ask/tell
// clients over real gRPC on loopback against a real dial-scheduler process
// (started here on a fresh SQLite file, or --address). Workers register,
// long-poll AcquireTrial, send ReportProgress at the set rate and
// FinishTrial; clients SuggestTrials, ReportIntermediate and CompleteTrial.
// Every report gets a decision from the chosen trial scheduler (fifo, asha,
// pbt). Prints throughput and latency percentiles of every RPC kind.
//
//   scale_bench --workers=200 --clients=8 --seconds=20              # max rate
//   scale_bench --workers=200 --rate=2000 --seconds=20              # paced
//   scale_bench --mode=asktell --clients=8 --trials=10000           # trivial
//   trials
//   scale_bench --mode=large --large_trials=100000 --large_rows=100 --clients=8
//
// Mode large writes a study of --large_trials trials with --large_rows
// metric rows each straight into a fresh SQLite file (through
// SqliteStudyStore, no scheduler; skipped when --db_dir already holds
// scale.db), starts dial-scheduler on it (start-up time, RSS), times
// ListTrials pages, GetBestTrials, GetTrial and WatchStudy's first event
// against it, and runs a short ask/tell report load on that study.
//
// With --tls_dir (the output of deploy/dev-ca.sh) the same load runs with
// security on: the started scheduler serves TLS, requires client
// certificates (--tls-client-ca) and bearer tokens (--auth-tokens); the
// simulated workers connect with the worker certificate and token and carry
// each attempt's lease token, the ask/tell clients with the user certificate
// and alice's token (mode large: the admin's, as its study has no owner).
// bench/scale/run.sh with SCALE_SECURITY=1 compares the two.
//
// All calls are asynchronous (gRPC's callback API): a handful of threads
// drive hundreds of simulated workers, so the generator leaves most of the
// machine to the scheduler.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_channel.h"
#include "common/spec.h"
#include "dial/v1/service.grpc.pb.h"
#include "google/protobuf/util/time_util.h"
#include "storage/sqlite_study_store.h"
#include "tests/e2e/subprocess.h"

ABSL_FLAG(std::string, mode, "load", "load | asktell | large");
ABSL_FLAG(std::string, address, "",
          "a running scheduler; empty: start dial-scheduler here");
ABSL_FLAG(std::string, scheduler_binary, "",
          "dial-scheduler to start (default: next to this build)");
ABSL_FLAG(std::string, scheduler_args, "",
          "extra flags for the started scheduler, space separated");
ABSL_FLAG(std::string, db_dir, "",
          "directory for its database (default: a "
          "fresh one under /tmp, removed after)");
ABSL_FLAG(std::string, tls_dir, "",
          "security on: a deploy/dev-ca.sh directory (certificates, "
          "auth-tokens, tokens/NAME.token); empty: plaintext, no tokens");
ABSL_FLAG(std::string, tls_user, "alice",
          "with --tls_dir: whose token (tokens/NAME.token) the ask/tell "
          "clients send (mode large always uses admin)");
ABSL_FLAG(int32_t, workers, 100, "simulated worker daemons (mode load)");
ABSL_FLAG(int32_t, clients, 4, "simulated ask/tell clients");
ABSL_FLAG(double, rate, 0,
          "total reports/s to aim at, spread over workers and clients; 0: as "
          "fast as the scheduler answers (each simulator keeps one call out)");
ABSL_FLAG(double, seconds, 10, "measured time (mode load)");
ABSL_FLAG(double, warmup, 2, "seconds before measuring (mode load)");
ABSL_FLAG(int32_t, steps, 27, "reports per trial at most (mode load)");
ABSL_FLAG(int32_t, heartbeat_ms, 0,
          "simulated workers heartbeat this often, listing the trial they "
          "run (0: never; dial-worker beats every quarter lease)");
ABSL_FLAG(int32_t, studies, 1,
          "studies the simulated workers' trials come from, each allowed an "
          "equal part of the workers in parallel (mode load)");
ABSL_FLAG(int32_t, wait_ms, 500,
          "AcquireTrial long-poll wait of the simulated workers");
ABSL_FLAG(int32_t, trials, 10000, "trivial trials in all (mode asktell)");
ABSL_FLAG(std::string, trial_scheduler, "asha", "fifo | asha | pbt");
ABSL_FLAG(bool, json, false, "also print one JSON line of results");
ABSL_FLAG(std::string, asktell_study, "scale-asktell",
          "study of the ask/tell clients (modes load, asktell; mode large "
          "always uses its study `large`)");
ABSL_FLAG(double, start_timeout, 600,
          "seconds to wait for the started scheduler's readiness line");
ABSL_FLAG(int64_t, large_trials, 100000,
          "trials of the big study (mode large)");
ABSL_FLAG(
    int32_t, large_rows, 100,
    "metric rows (reported steps) per trial of the big study (mode large)");
ABSL_FLAG(int32_t, large_repeats, 50,
          "times each read RPC is timed (mode large)");
ABSL_FLAG(double, large_load_seconds, 5,
          "seconds of ask/tell report load on the big study, by --clients "
          "clients after --warmup (mode large; 0: none)");

namespace dial::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Latency samples (microseconds) and counts of one RPC kind.
struct Series {
  std::vector<float> us;
  int64_t errors = 0;
  std::map<std::string, int64_t> error_codes;
};

class Stats {
 public:
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    series_.clear();
    start_ = Clock::now();
  }
  void Record(const std::string& kind, Clock::time_point sent,
              const grpc::Status& status) {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (sent < start_) return;  // warm-up
    Series& s = series_[kind];
    if (status.ok()) {
      s.us.push_back(
          std::chrono::duration<float, std::micro>(now - sent).count());
    } else {
      ++s.errors;
      ++s.error_codes[absl::StrCat(status.error_code(), ": ",
                                   status.error_message().substr(0, 80))];
    }
  }
  // Prints one line per kind and returns the JSON fields.
  std::string Report(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string json;
    std::printf("%-20s %9s %9s %8s %8s %8s %8s %7s\n", "rpc", "calls", "per_s",
                "p50_ms", "p90_ms", "p99_ms", "max_ms", "errors");
    for (auto& [kind, s] : series_) {
      std::sort(s.us.begin(), s.us.end());
      auto pct = [&](double p) {
        if (s.us.empty()) return 0.0;
        size_t i = std::min(s.us.size() - 1, size_t(p * s.us.size()));
        return s.us[i] / 1000.0;
      };
      const double per_s = s.us.size() / seconds;
      std::printf("%-20s %9zu %9.0f %8.2f %8.2f %8.2f %8.2f %7" PRId64 "\n",
                  kind.c_str(), s.us.size(), per_s, pct(0.5), pct(0.9),
                  pct(0.99), pct(1.0), s.errors);
      for (const auto& [code, n] : s.error_codes) {
        std::printf("    error %s x%" PRId64 "\n", code.c_str(), n);
      }
      absl::StrAppend(&json, ",\"", kind, "\":{\"calls\":", s.us.size(),
                      ",\"per_s\":", per_s, ",\"p50_ms\":", pct(0.5),
                      ",\"p99_ms\":", pct(0.99), ",\"max_ms\":", pct(1.0),
                      ",\"errors\":", s.errors, "}");
    }
    return json;
  }
  int64_t Count(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return series_[kind].us.size();
  }
  int64_t Errors() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto& [kind, s] : series_) n += s.errors;
    return n;
  }

 private:
  std::mutex mu_;
  Clock::time_point start_ = Clock::now();
  std::map<std::string, Series> series_;
};

// Runs callbacks at a time: the pacing of reports at a set rate.
class Timer {
 public:
  Timer() : thread_([this] { Loop(); }) {}
  ~Timer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void At(Clock::time_point when, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push({when, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    Clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const {
      return when != o.when ? when > o.when : seq > o.seq;
    }
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      if (queue_.top().when > Clock::now()) {
        cv_.wait_until(lock, queue_.top().when);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Item&>(queue_.top()).fn);
      queue_.pop();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_;
  uint64_t seq_ = 0;
  bool done_ = false;
  std::thread thread_;
};

// Calls in flight, so the run can end with none outstanding.
class InFlight {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_;
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--n_ == 0) cv_.notify_all();
  }
  void WaitZero() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t n_ = 0;
};

struct Shared {
  v1::StudyService::Stub* study = nullptr;
  v1::WorkerService::Stub* worker = nullptr;
  // Bearer tokens of the ask/tell clients and of the workers; empty: none.
  std::string study_token, worker_token;
  Stats stats;
  Timer timer;
  InFlight in_flight;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> trials_done{0};
  // Heartbeats answered NOT_FOUND and reports fenced: leases the scheduler
  // took away from a worker that was alive.
  std::atomic<int64_t> lost_leases{0}, fenced{0};
  int heartbeat_ms = 0, wait_ms = 500;
  Clock::duration interval{};  // between one simulator's reports; 0: none
  // The gap before a simulator's next report: exponential with mean
  // `interval` (Poisson arrivals), so simulators do not report in lockstep
  // bursts the way a fixed period started at once would make them.
  Clock::duration NextGap() {
    std::lock_guard<std::mutex> lock(gap_mu);
    return std::chrono::duration_cast<Clock::duration>(
        interval * std::exponential_distribution<double>(1.0)(gap_rng));
  }
  std::mutex gap_mu;
  std::mt19937_64 gap_rng{7};
  int steps = 27;
  std::string asktell_study;
};

// A cost-free learning curve: trial q in (0, 1) approaches q as it trains,
// so the trial schedulers have something to rank.
double Loss(int64_t trial, int64_t step) {
  const double q = ((trial * 2654435761u) % 10007) / 10007.0;
  return q + 1.0 / (1.0 + step);
}

// One asynchronous unary call with its own context and messages.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
  Clock::time_point sent;
};

template <typename Req, typename Resp, typename Method>
void Send(Shared& s, const std::string& kind,
          std::shared_ptr<Call<Req, Resp>> c, Method method,
          std::function<void(const grpc::Status&, Resp&)> then) {
  s.in_flight.Add();
  // WorkerService requests name their worker; StudyService ones do not.
  constexpr bool kWorkerCall = requires(const Req& r) { r.worker_id(); };
  Authorize(c->ctx, kWorkerCall ? s.worker_token : s.study_token);
  c->ctx.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(60));
  c->sent = Clock::now();
  method(&c->ctx, &c->req, &c->resp, [&s, kind, c, then](grpc::Status st) {
    s.stats.Record(kind, c->sent, st);
    then(st, c->resp);
    s.in_flight.Done();
  });
}

// What simulated workers and clients share: their pacing. `Self` has a
// Report() that sends the next report.
template <typename Self>
class Paced : public std::enable_shared_from_this<Self> {
 protected:
  explicit Paced(Shared& s) : s_(s) {}
  // Runs `fn` after `ms` (a retry, or asking again).
  void Later(int ms, std::function<void()> fn) {
    s_.timer.At(Clock::now() + std::chrono::milliseconds(ms), std::move(fn));
  }
  // The next report: at once, or at the next paced time.
  void Next() {
    auto self = this->shared_from_this();
    if (s_.interval == Clock::duration::zero()) return self->Report();
    due_ += s_.NextGap();
    s_.timer.At(std::max(due_, Clock::now()), [self] { self->Report(); });
  }
  Shared& s_;
  Clock::time_point due_;
};

// A worker daemon that runs one trial at a time.
class SimWorker : public Paced<SimWorker> {
 public:
  SimWorker(Shared& s, std::string id) : Paced(s), id_(std::move(id)) {}

  void Acquire() {
    if (s_.stopping) return;
    auto c = std::make_shared<
        Call<v1::AcquireTrialRequest, v1::AcquireTrialResponse>>();
    c->req.set_worker_id(id_);
    c->req.set_free_slots(1);
    c->req.set_wait_ms(s_.wait_ms);
    auto self = shared_from_this();
    Send<v1::AcquireTrialRequest, v1::AcquireTrialResponse>(
        s_, "AcquireTrial", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.worker->async()->AcquireTrial(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::AcquireTrialResponse& resp) {
          if (!st.ok() || !resp.has_trial()) {
            self->Later(20, [self] { self->Acquire(); });
            return;
          }
          {
            std::lock_guard<std::mutex> lock(self->mu_);
            self->study_ = resp.trial().study();
            self->trial_ = resp.trial().number();
            self->attempt_ = resp.attempt();
            self->lease_token_ = resp.lease_token();
            self->running_ = true;
          }
          self->step_ = resp.start_step();
          self->due_ = Clock::now();
          self->Next();
        });
  }

 private:
  friend class Paced<SimWorker>;
  void Report() {
    if (s_.stopping) return;
    auto c = std::make_shared<
        Call<v1::ReportProgressRequest, v1::ReportProgressResponse>>();
    c->req.set_worker_id(id_);
    c->req.set_study(study_);
    c->req.set_trial(trial_);
    c->req.set_attempt(attempt_);
    c->req.set_lease_token(lease_token_);
    c->req.set_step(step_ + 1);
    (*c->req.mutable_metrics())["loss"] = Loss(trial_, step_ + 1);
    auto self = shared_from_this();
    Send<v1::ReportProgressRequest, v1::ReportProgressResponse>(
        s_, "ReportProgress", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.worker->async()->ReportProgress(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::ReportProgressResponse& resp) {
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
            return self->Later(20, [self] { self->Report(); });
          }
          if (!st.ok()) {  // fenced: drop the trial
            ++self->s_.fenced;
            self->Stopped();
            return self->Acquire();
          }
          ++self->step_;
          const auto action = resp.decision().action();
          if ((action == v1::Decision::CONTINUE ||
               action == v1::Decision::EXPLOIT) &&
              self->step_ < self->s_.steps) {
            return self->Next();
          }
          self->Finish();
        });
  }
  void Finish() {
    if (s_.stopping) return;
    auto c = std::make_shared<
        Call<v1::FinishTrialRequest, v1::FinishTrialResponse>>();
    c->req.set_worker_id(id_);
    c->req.set_study(study_);
    c->req.set_trial(trial_);
    c->req.set_attempt(attempt_);
    c->req.set_lease_token(lease_token_);
    (*c->req.mutable_final_metrics())["loss"] = Loss(trial_, step_);
    auto self = shared_from_this();
    Send<v1::FinishTrialRequest, v1::FinishTrialResponse>(
        s_, "FinishTrial", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.worker->async()->FinishTrial(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::FinishTrialResponse&) {
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
            return self->Later(20, [self] { self->Finish(); });
          }
          ++self->s_.trials_done;
          self->Stopped();
          self->Acquire();
        });
  }
  void Stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }

 public:
  // Heartbeats every --heartbeat_ms from now on, listing the trial it runs
  // (as dial-worker does); the first after a random part of the period, so
  // the fleet's beats spread out.
  void StartBeating(std::mt19937_64& rng) {
    if (s_.heartbeat_ms <= 0) return;
    auto self = shared_from_this();
    Later(std::uniform_int_distribution<int>(0, s_.heartbeat_ms - 1)(rng),
          [self] { self->Beat(); });
  }

 private:
  void Beat() {
    if (s_.stopping) return;
    auto c =
        std::make_shared<Call<v1::HeartbeatRequest, v1::HeartbeatResponse>>();
    c->req.set_worker_id(id_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (running_) {
        v1::RunningTrial* r = c->req.add_running();
        r->set_study(study_);
        r->set_trial(trial_);
        r->set_attempt(attempt_);
        r->set_lease_token(lease_token_);
      }
    }
    auto self = shared_from_this();
    Send<v1::HeartbeatRequest, v1::HeartbeatResponse>(
        s_, "Heartbeat", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.worker->async()->Heartbeat(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::HeartbeatResponse&) {
          if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
            // Lost for good: it does not register again.
            ++self->s_.lost_leases;
            return;
          }
          self->Later(self->s_.heartbeat_ms, [self] { self->Beat(); });
        });
  }

  const std::string id_;
  std::string study_;
  int64_t trial_ = 0;
  int32_t attempt_ = 0;
  std::string lease_token_;
  int64_t step_ = 0;
  // Guards the trial's identity (above), which heartbeats read from
  // another thread, and whether it runs one.
  std::mutex mu_;
  bool running_ = false;
};

// An ask/tell client: one trial at a time, `steps` reports each.
class SimClient : public Paced<SimClient> {
 public:
  SimClient(Shared& s, std::string id, int steps, std::atomic<int64_t>* quota)
      : Paced(s), id_(std::move(id)), steps_(steps), quota_(quota) {}

  void Suggest() {
    if (s_.stopping) return;
    if (quota_ != nullptr && quota_->fetch_sub(1) <= 0) return;
    auto c = std::make_shared<
        Call<v1::SuggestTrialsRequest, v1::SuggestTrialsResponse>>();
    c->req.set_study(s_.asktell_study);
    c->req.set_count(1);
    c->req.set_client_id(id_);
    auto self = shared_from_this();
    Send<v1::SuggestTrialsRequest, v1::SuggestTrialsResponse>(
        s_, "SuggestTrials", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.study->async()->SuggestTrials(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::SuggestTrialsResponse& resp) {
          if (!st.ok() || resp.trials().empty()) {
            if (self->quota_) self->quota_->fetch_add(1);
            if (resp.done()) return;
            return self->Later(5, [self] { self->Suggest(); });
          }
          self->trial_ = resp.trials(0).number();
          self->step_ =
              resp.trials(0).last_step() < 0 ? 0 : resp.trials(0).last_step();
          self->due_ = Clock::now();
          self->Next();
        });
  }

 private:
  friend class Paced<SimClient>;
  void Report() {
    if (s_.stopping) return;
    auto c = std::make_shared<
        Call<v1::ReportIntermediateRequest, v1::ReportIntermediateResponse>>();
    c->req.set_study(s_.asktell_study);
    c->req.set_trial(trial_);
    c->req.set_step(step_ + 1);
    (*c->req.mutable_metrics())["loss"] = Loss(trial_, step_ + 1);
    auto self = shared_from_this();
    Send<v1::ReportIntermediateRequest, v1::ReportIntermediateResponse>(
        s_, "ReportIntermediate", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.study->async()->ReportIntermediate(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::ReportIntermediateResponse& resp) {
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
            return self->Report();
          }
          if (st.ok()) ++self->step_;
          if (st.ok() && resp.decision().action() == v1::Decision::CONTINUE &&
              self->step_ < self->steps_) {
            return self->Next();
          }
          self->Complete();
        });
  }
  void Complete() {
    if (s_.stopping && quota_ == nullptr) return;
    auto c = std::make_shared<
        Call<v1::CompleteTrialRequest, v1::CompleteTrialResponse>>();
    c->req.set_study(s_.asktell_study);
    c->req.set_trial(trial_);
    (*c->req.mutable_final_metrics())["loss"] = Loss(trial_, step_);
    auto self = shared_from_this();
    Send<v1::CompleteTrialRequest, v1::CompleteTrialResponse>(
        s_, "CompleteTrial", c,
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          s_.study->async()->CompleteTrial(ctx, req, resp, std::move(cb));
        },
        [self](const grpc::Status& st, v1::CompleteTrialResponse&) {
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
            return self->Complete();
          }
          ++self->s_.trials_done;
          self->Suggest();
        });
  }

  const std::string id_;
  const int steps_;
  std::atomic<int64_t>* quota_;  // trials left to start; null: no limit
  int64_t trial_ = 0;
  int64_t step_ = 0;
};

std::string SchedulerYaml(const std::string& kind, int steps) {
  if (kind == "fifo") return "scheduler: {fifo: {}}\n";
  if (kind == "pbt") {
    return absl::StrCat("scheduler: {pbt: {perturbation_interval: ",
                        std::max(1, steps / 3), ", quantile: 0.25}}\n");
  }
  return absl::StrCat("scheduler: {asha: {min_steps: 3, max_steps: ", steps,
                      ", reduction_factor: 3}}\n");
}

v1::StudySpec Spec(const std::string& name, bool worker_run,
                   const std::string& trial_scheduler, int steps,
                   int64_t max_trials, int parallel) {
  std::string yaml = absl::StrCat(
      "name: ", name,
      "\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space:\n"
      "  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}\n"
      "  - {name: units, int: {min: 16, max: 512}}\n"
      "searcher: {random: {seed: 1}}\n",
      SchedulerYaml(trial_scheduler, steps),
      "budget: {max_trials: ", max_trials, ", max_parallel_trials: ", parallel,
      "}\n");
  if (worker_run) {
    // Never run: the simulated workers only report.
    absl::StrAppend(&yaml, "trial: {command: {argv: [/bin/true]}}\n");
  }
  auto spec = ParseStudySpec(yaml);
  if (!spec.ok()) {
    std::fprintf(stderr, "spec: %s\n", spec.status().ToString().c_str());
    std::exit(2);
  }
  return *spec;
}

bool CreateStudy(v1::StudyService::Stub& stub, const std::string& token,
                 const v1::StudySpec& spec) {
  grpc::ClientContext ctx;
  Authorize(ctx, token);
  v1::CreateStudyRequest req;
  *req.mutable_spec() = spec;
  v1::CreateStudyResponse resp;
  grpc::Status st = stub.CreateStudy(&ctx, req, &resp);
  if (!st.ok()) {
    std::fprintf(stderr, "CreateStudy: %s\n", st.error_message().c_str());
  }
  return st.ok();
}

// CPU seconds and peak resident set of a process, from /proc.
std::pair<double, double> CpuAndPeakMb(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
  double cpu = 0;
  if (f.size() > 13) {
    cpu = (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  double peak_mb = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0)
      peak_mb = std::stod(line.substr(6)) / 1024;
  }
  return {cpu, peak_mb};
}

// The directory for the started scheduler's files: --db_dir, or a fresh one
// under /tmp (`own` is then set: remove it after).
std::filesystem::path SchedulerDir(bool* own) {
  std::filesystem::path dir = absl::GetFlag(FLAGS_db_dir);
  *own = dir.empty();
  if (*own) {
    dir = std::filesystem::temp_directory_path() /
          absl::StrCat("dial-scale-", getpid());
  }
  std::filesystem::create_directories(dir);
  return dir;
}

// --scheduler_binary, or the dial-scheduler of this build.
std::string SchedulerBinary() {
  std::string binary = absl::GetFlag(FLAGS_scheduler_binary);
  if (!binary.empty()) return binary;
  // Not canonical(): a rebuild while this runs leaves /proc/self/exe
  // pointing at "... (deleted)".
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string deleted = " (deleted)";
  if (self.size() > deleted.size() &&
      self.compare(self.size() - deleted.size(), deleted.size(), deleted) ==
          0) {
    self.resize(self.size() - deleted.size());
  }
  return (std::filesystem::path(self).parent_path() / ".." / "scheduler" /
          "dial-scheduler")
      .lexically_normal()
      .string();
}

// Resolved once, at the first call (Main makes it early).
const std::string& SchedulerPath() {
  static const std::string binary = SchedulerBinary();
  return binary;
}

// Starts dial-scheduler on `dir`/scale.db and waits for its readiness line;
// returns its address, or "" after printing why not.
std::string StartScheduler(const std::filesystem::path& dir,
                           testing::Subprocess& scheduler) {
  const std::string& binary = SchedulerPath();
  std::vector<std::string> args = {
      binary,
      "--db=" + (dir / "scale.db").string(),
      "--checkpoint-root=" + (dir / "ckpt").string(),
      "--listen=127.0.0.1:0",
      "--worker-lease-ms=60000",
      "--log-level=warn"};
  if (const std::string tls = absl::GetFlag(FLAGS_tls_dir); !tls.empty()) {
    args.push_back("--tls-cert=" + tls + "/server.crt");
    args.push_back("--tls-key=" + tls + "/server.key");
    args.push_back("--tls-client-ca=" + tls + "/ca.crt");
    args.push_back("--auth-tokens=" + tls + "/auth-tokens");
  }
  for (absl::string_view a : absl::StrSplit(absl::GetFlag(FLAGS_scheduler_args),
                                            ' ', absl::SkipEmpty())) {
    args.emplace_back(a);
  }
  if (!scheduler.Start(args)) {
    std::fprintf(stderr, "cannot start %s\n", binary.c_str());
    return "";
  }
  const auto timeout = std::chrono::milliseconds(
      int64_t(1000 * absl::GetFlag(FLAGS_start_timeout)));
  auto line = scheduler.ReadLine(timeout);
  // On PostgreSQL it stands by until it holds the lease.
  if (line && line->rfind("dial-scheduler standby on ", 0) == 0) {
    line = scheduler.ReadLine(timeout);
  }
  const std::string prefix = "dial-scheduler listening on ";
  if (!line || line->rfind(prefix, 0) != 0) {
    std::fprintf(stderr, "%s did not start\n", binary.c_str());
    return "";
  }
  return line->substr(prefix.size());
}

// Resident set now (VmRSS) and at its peak (VmHWM) of a process, in MB.
std::pair<double, double> RssAndPeakMb(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  double rss = 0, peak = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stod(line.substr(6)) / 1024;
  }
  return {rss, peak};
}

// How one kind of simulated peer reaches the scheduler: its channel and
// the token its calls carry.
struct Peer {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;
};

// Reads --tls_dir/tokens/NAME.token; exits when it cannot.
std::string TokenOf(const std::string& name) {
  const std::string path =
      absl::StrCat(absl::GetFlag(FLAGS_tls_dir), "/tokens/", name, ".token");
  auto token = ReadSmallFile(path);
  if (!token.ok()) {
    std::fprintf(stderr, "%s\n", token.status().ToString().c_str());
    std::exit(2);
  }
  return std::string(absl::StripAsciiWhitespace(*token));
}

// A channel to `address`: plaintext without --tls_dir; else TLS checked
// against the dev CA, with the client certificate `cert` (worker or user)
// and the token of `principal`. Exits when it cannot.
Peer Connect(const std::string& address, const std::string& cert,
             const std::string& principal) {
  ConnectOptions options;
  options.target = address;
  const std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (!dir.empty()) {
    options.tls_ca = dir + "/ca.crt";
    options.tls_cert = absl::StrCat(dir, "/", cert, ".crt");
    options.tls_key = absl::StrCat(dir, "/", cert, ".key");
    options.token = TokenOf(principal);
  }
  auto channel = MakeChannel(options, grpc::ChannelArguments());
  if (!channel.ok()) {
    std::fprintf(stderr, "channel: %s\n", channel.status().ToString().c_str());
    std::exit(2);
  }
  return {*channel, options.token};
}

// ---- mode large ----

constexpr char kLargeStudy[] = "large";
constexpr int kLargeRunning = 100;    // the last trials, still RUNNING
constexpr int64_t kLargeStepMs = 10;  // between one trial's reports

google::protobuf::Timestamp FromMs(int64_t ms) {
  return google::protobuf::util::TimeUtil::MillisecondsToTimestamp(ms);
}

// A deterministic number in [0, 1) for (trial, salt).
double Unit(int64_t trial, uint64_t salt) {
  uint64_t x = uint64_t(trial) * 0x9E3779B97F4A7C15ull + salt;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (x >> 11) * (1.0 / 9007199254740992.0);
}

v1::StudySpec LargeSpec(int rows) {
  v1::StudySpec spec =
      Spec(kLargeStudy, false, "asha", rows, /*max_trials=*/1000000,
           /*parallel=*/1000);
  absl::Status valid = ValidateStudySpec(spec);
  if (!valid.ok()) {
    std::fprintf(stderr, "spec: %s\n", valid.ToString().c_str());
    std::exit(2);
  }
  FillSpecDefaults(1, spec);  // as SchedulerCore::CreateStudy stores it
  return spec;
}

// Writes the big study into a fresh database at `path`, as a scheduler
// would have recorded it: trials 0..n-1 created one after another, each
// reporting steps 1..rows (one metric, loss) kLargeStepMs apart, all
// COMPLETED but the last kLargeRunning, which are RUNNING for one ask/tell
// client. Returns the seconds it took, or a negative number after printing
// why it failed.
double PopulateLarge(const std::string& path, int64_t n, int rows) {
  const auto t0 = Clock::now();
  auto store = storage::SqliteStudyStore::Create(
      {path, /*full_sync=*/false, /*group_commit=*/true});
  if (!store.ok()) {
    std::fprintf(stderr, "open %s: %s\n", path.c_str(),
                 store.status().ToString().c_str());
    return -1;
  }
  const int64_t span_ms = (rows + 2) * kLargeStepMs;  // one trial's life
  const int64_t base_ms = absl::ToUnixMillis(absl::Now()) - n * span_ms;
  v1::Study study;
  study.set_name(kLargeStudy);
  *study.mutable_spec() = LargeSpec(rows);
  study.set_state(v1::STUDY_ACTIVE);
  *study.mutable_create_time() = FromMs(base_ms);
  *study.mutable_update_time() = study.create_time();
  absl::Status status = (*store)->CreateStudy(study);
  auto fail = [&](const char* what, int64_t trial) {
    std::fprintf(stderr, "%s (trial %" PRId64 "): %s\n", what, trial,
                 status.ToString().c_str());
    return -1.0;
  };
  if (!status.ok()) return fail("CreateStudy", -1);
  int64_t next_note = n / 10;
  for (int64_t i = 0; i < n; ++i) {
    const bool running = i >= n - kLargeRunning;
    const int64_t create_ms = base_ms + i * span_ms;
    v1::Trial trial;
    trial.set_study(kLargeStudy);
    trial.set_number(i);
    trial.set_state(running ? v1::RUNNING : v1::COMPLETED);
    (*trial.mutable_params())["lr"].set_double_value(
        std::pow(10.0, -4.0 + 4.0 * Unit(i, 1)));
    (*trial.mutable_params())["units"].set_int_value(16 +
                                                     int64_t(Unit(i, 2) * 497));
    trial.set_client_id("large-client");
    trial.set_attempt(1);
    trial.set_last_step(rows);
    *trial.mutable_create_time() = FromMs(create_ms);
    *trial.mutable_start_time() = trial.create_time();
    if (!running) {
      const double loss = Loss(i, rows);
      trial.set_objective_value(loss);
      (*trial.mutable_final_metrics())["loss"] = loss;
      *trial.mutable_end_time() = FromMs(create_ms + span_ms - kLargeStepMs);
    }
    status = (*store)->PutTrial(trial);
    if (!status.ok()) return fail("PutTrial", i);
    v1::MetricPoint point;
    for (int step = 1; step <= rows; ++step) {
      point.set_step(step);
      (*point.mutable_metrics())["loss"] = Loss(i, step);
      *point.mutable_time() = FromMs(create_ms + step * kLargeStepMs);
      status = (*store)->RecordReport(trial, point);
      if (!status.ok()) return fail("RecordReport", i);
    }
    if (i + 1 == next_note && i + 1 < n) {
      const double s = Seconds(Clock::now() - t0);
      std::fprintf(stderr, "  populate: %" PRId64 " trials, %.0f rows/s\n",
                   i + 1, (i + 1) * rows / s);
      next_note += n / 10;
    }
  }
  status = (*store)->Flush();
  if (!status.ok()) return fail("Flush", n);
  store->reset();  // closed, so the scheduler can open it
  return Seconds(Clock::now() - t0);
}

// p50 and max (ms) of a timed RPC repeated; one printed line and its JSON.
struct Timed {
  std::vector<double> ms;
  int64_t errors = 0;
  std::string first_error;
};

// Times every read `n` times, in rounds that call each one once, so
// warm-up and background noise fall on all of them alike.
using Read = std::function<grpc::Status()>;
std::vector<Timed> TimeReads(int n, const std::vector<Read>& reads) {
  std::vector<Timed> out(reads.size());
  for (int round = 0; round < n; ++round) {
    for (size_t r = 0; r < reads.size(); ++r) {
      const auto t0 = Clock::now();
      grpc::Status st = reads[r]();
      const double ms = 1000 * Seconds(Clock::now() - t0);
      Timed& t = out[r];
      if (st.ok()) {
        t.ms.push_back(ms);
      } else if (t.errors++ == 0) {
        t.first_error = absl::StrCat(st.error_code(), ": ", st.error_message());
      }
    }
  }
  return out;
}

std::string ReportTimed(const std::string& name, Timed t) {
  std::sort(t.ms.begin(), t.ms.end());
  const double p50 = t.ms.empty() ? 0 : t.ms[t.ms.size() / 2];
  const double max = t.ms.empty() ? 0 : t.ms.back();
  std::printf("%-22s %6zu %9.2f %9.2f %7" PRId64 "\n", name.c_str(),
              t.ms.size(), p50, max, t.errors);
  if (t.errors) std::printf("    first error %s\n", t.first_error.c_str());
  return absl::StrCat(",\"", name, "\":{\"p50_ms\":", p50, ",\"max_ms\":", max,
                      ",\"errors\":", t.errors, "}");
}

int RunLarge() {
  const int64_t n = absl::GetFlag(FLAGS_large_trials);
  const int rows = absl::GetFlag(FLAGS_large_rows);
  const int repeats = absl::GetFlag(FLAGS_large_repeats);
  if (n < kLargeRunning + 1 || rows < 1 || repeats < 1) {
    std::fprintf(stderr,
                 "--large_trials > %d, --large_rows and "
                 "--large_repeats >= 1\n",
                 kLargeRunning);
    return 2;
  }
  std::string json = absl::StrCat("{\"mode\":\"large\"");
  std::string address = absl::GetFlag(FLAGS_address);
  testing::Subprocess scheduler;
  bool own_dir = false;
  std::filesystem::path dir;
  double startup_rss = 0;
  if (address.empty()) {
    dir = SchedulerDir(&own_dir);
    const std::filesystem::path db = dir / "scale.db";
    if (!own_dir && std::filesystem::exists(db)) {
      std::printf("reusing %s (%.0f MB); not populated\n", db.c_str(),
                  std::filesystem::file_size(db) / 1e6);
      absl::StrAppend(&json, ",\"populated\":false");
    } else {
      std::printf("populating %s: %" PRId64 " trials x %d rows\n", db.c_str(),
                  n, rows);
      std::fflush(stdout);
      const double secs = PopulateLarge(db.string(), n, rows);
      if (secs < 0) return 1;
      const double mb = std::filesystem::file_size(db) / 1e6;
      std::printf("populated %" PRId64
                  " rows in %.1f s: %.0f rows/s, %.0f "
                  "trials/s; database %.0f MB\n",
                  n * rows, secs, n * rows / secs, n / secs, mb);
      absl::StrAppend(&json, ",\"populated\":true,\"trials\":", n,
                      ",\"rows\":", rows, ",\"populate_s\":", secs,
                      ",\"populate_rows_per_s\":", n * rows / secs,
                      ",\"db_mb\":", mb);
    }
    std::fflush(stdout);
    const auto t0 = Clock::now();
    address = StartScheduler(dir, scheduler);
    if (address.empty()) return 1;
    const double startup = Seconds(Clock::now() - t0);
    auto [rss, peak] = RssAndPeakMb(scheduler.pid());
    const double cpu = CpuAndPeakMb(scheduler.pid()).first;
    startup_rss = rss;
    std::printf(
        "scheduler start-up: %.2f s to ready (%.1f CPU s), RSS %.0f "
        "MB (peak so far %.0f MB)\n",
        startup, cpu, rss, peak);
    absl::StrAppend(&json, ",\"startup_s\":", startup,
                    ",\"startup_cpu_s\":", cpu, ",\"startup_rss_mb\":", rss,
                    ",\"startup_peak_mb\":", peak);
  }

  // The big study was written without an owner: only an admin acts on it.
  const Peer peer = Connect(address, "user", "admin");
  const std::string& token = peer.token;
  auto study_stub = v1::StudyService::NewStub(peer.channel);
  int64_t total = 0;  // trials in the study now
  {
    grpc::ClientContext ctx;
    Authorize(ctx, token);
    v1::GetStudyRequest req;
    req.set_study(kLargeStudy);
    v1::GetStudyResponse resp;
    grpc::Status st = study_stub->GetStudy(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "GetStudy: %s\n", st.error_message().c_str());
      return 1;
    }
    total = resp.study().trials_created();
    std::string counts;
    for (const auto& [state, k] : resp.study().trial_counts()) {
      absl::StrAppend(&counts, " ", state, "=", k);
    }
    std::printf("study %s: %s, %" PRId64 " trials:%s\n", kLargeStudy,
                v1::StudyState_Name(resp.study().state()).c_str(), total,
                counts.c_str());
    absl::StrAppend(&json, ",\"study_trials\":", total);
  }
  if (total < 2) {
    std::fprintf(stderr, "study %s has too few trials\n", kLargeStudy);
    return 1;
  }

  std::printf("%-22s %6s %9s %9s %7s\n", "read (ms)", "calls", "p50_ms",
              "max_ms", "errors");
  auto list_page = [&](int64_t after) -> Read {
    return [&, after] {
      grpc::ClientContext ctx;
      Authorize(ctx, token);
      v1::ListTrialsRequest req;
      req.set_study(kLargeStudy);
      req.set_page_size(100);
      if (after >= 0) req.set_page_token(std::to_string(after));
      v1::ListTrialsResponse resp;
      grpc::Status st = study_stub->ListTrials(&ctx, req, &resp);
      if (st.ok() &&
          resp.trials_size() != std::min<int64_t>(100, total - after - 1)) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat("page of ", resp.trials_size()));
      }
      return st;
    };
  };
  std::mt19937_64 rng(42);
  int64_t points = 0;
  const std::vector<std::string> names = {
      "ListTrials_start", "ListTrials_middle", "ListTrials_end",
      "GetBestTrials_10", "GetTrial_random",   "WatchStudy_first"};
  const std::vector<Read> reads = {
      list_page(-1),
      list_page(total / 2 - 1),
      list_page(std::max<int64_t>(-1, total - 101)),
      [&] {
        grpc::ClientContext ctx;
        Authorize(ctx, token);
        v1::GetBestTrialsRequest req;
        req.set_study(kLargeStudy);
        req.set_count(10);
        v1::GetBestTrialsResponse resp;
        return study_stub->GetBestTrials(&ctx, req, &resp);
      },
      [&] {
        grpc::ClientContext ctx;
        Authorize(ctx, token);
        v1::GetTrialRequest req;
        req.set_study(kLargeStudy);
        req.set_trial(
            std::uniform_int_distribution<int64_t>(0, total - 1)(rng));
        v1::GetTrialResponse resp;
        grpc::Status st = study_stub->GetTrial(&ctx, req, &resp);
        points += resp.trial().metric_history_size();
        return st;
      },
      [&] {
        // Time to the first event (the SNAPSHOT), then hang up.
        grpc::ClientContext ctx;
        Authorize(ctx, token);
        v1::WatchStudyRequest req;
        req.set_study(kLargeStudy);
        auto reader = study_stub->WatchStudy(&ctx, req);
        v1::WatchStudyResponse resp;
        const bool got = reader->Read(&resp);
        ctx.TryCancel();
        grpc::Status st = reader->Finish();
        if (got && resp.event().kind() != v1::StudyEvent::SNAPSHOT) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "first event not SNAPSHOT");
        }
        return got ? grpc::Status::OK : st;
      },
  };
  std::vector<Timed> timed = TimeReads(repeats, reads);
  for (size_t r = 0; r < reads.size(); ++r) {
    absl::StrAppend(&json, ReportTimed(names[r], std::move(timed[r])));
  }
  std::printf("    (%.1f metric points per GetTrial on average)\n",
              double(points) / repeats);

  const double load_seconds = absl::GetFlag(FLAGS_large_load_seconds);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (load_seconds > 0 && clients > 0) {
    Shared s;
    s.study = study_stub.get();
    s.study_token = token;
    s.steps = rows;
    s.asktell_study = kLargeStudy;
    std::vector<std::shared_ptr<SimClient>> sim;
    for (int i = 0; i < clients; ++i) {
      sim.push_back(std::make_shared<SimClient>(
          s, absl::StrCat("large-load-", i), rows, nullptr));
    }
    const double cpu0 =
        scheduler.pid() > 0 ? CpuAndPeakMb(scheduler.pid()).first : 0;
    for (auto& c : sim) c->Suggest();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup)));
    s.stats.Start();
    const int64_t done0 = s.trials_done;
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(load_seconds));
    s.stopping = true;
    const double elapsed = Seconds(Clock::now() - t0);
    const int64_t reports = s.stats.Count("ReportIntermediate");
    std::printf("report load on %s, %d ask/tell clients, %.1f s: %" PRId64
                " reports (%.0f/s), %" PRId64 " trials finished\n",
                kLargeStudy, clients, elapsed, reports, reports / elapsed,
                int64_t(s.trials_done - done0));
    std::string load = absl::StrCat(
        "{\"clients\":", clients, ",\"seconds\":", elapsed,
        ",\"reports\":", reports, ",\"reports_per_s\":", reports / elapsed,
        ",\"trials_finished\":", s.trials_done - done0);
    s.in_flight.WaitZero();
    absl::StrAppend(&load, s.stats.Report(elapsed));
    if (scheduler.pid() > 0) {
      const double cpu = CpuAndPeakMb(scheduler.pid()).first - cpu0;
      std::printf("scheduler: %.1f CPU s under load (%.0f%% of one core)\n",
                  cpu, 100 * cpu / elapsed);
      absl::StrAppend(&load, ",\"scheduler_cpu_s\":", cpu);
    }
    absl::StrAppend(&json, ",\"load\":", load, "}");
  }

  if (scheduler.pid() > 0) {
    auto [rss, peak] = RssAndPeakMb(scheduler.pid());
    std::printf(
        "scheduler memory: RSS %.0f MB after start-up, %.0f MB now, "
        "peak %.0f MB\n",
        startup_rss, rss, peak);
    absl::StrAppend(&json, ",\"end_rss_mb\":", rss, ",\"peak_mb\":", peak);
    scheduler.Kill(SIGTERM);
  }
  absl::StrAppend(&json, "}");
  if (absl::GetFlag(FLAGS_json)) std::printf("%s\n", json.c_str());
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}

int Main() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "load" && mode != "asktell" && mode != "large") {
    std::fprintf(stderr, "--mode: load, asktell or large\n");
    return 2;
  }
  SchedulerPath();  // resolved now, before a rebuild can replace us
  if (mode == "large") return RunLarge();
  std::string address = absl::GetFlag(FLAGS_address);
  testing::Subprocess scheduler;
  bool own_dir = false;
  std::filesystem::path dir;
  if (address.empty()) {
    dir = SchedulerDir(&own_dir);
    address = StartScheduler(dir, scheduler);
    if (address.empty()) return 1;
  }

  // Two channels, in both modes, so that security on and off differ only
  // in the channels' credentials and the tokens.
  const Peer user = Connect(address, "user", absl::GetFlag(FLAGS_tls_user));
  const Peer worker = Connect(address, "worker", "worker");
  auto study_stub = v1::StudyService::NewStub(user.channel);
  auto worker_stub = v1::WorkerService::NewStub(worker.channel);

  Shared s;
  s.study = study_stub.get();
  s.worker = worker_stub.get();
  s.study_token = user.token;
  s.worker_token = worker.token;
  s.steps = absl::GetFlag(FLAGS_steps);
  s.heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  s.wait_ms = absl::GetFlag(FLAGS_wait_ms);
  const int workers = mode == "load" ? absl::GetFlag(FLAGS_workers) : 0;
  const int clients = absl::GetFlag(FLAGS_clients);
  const double rate = absl::GetFlag(FLAGS_rate);
  if (rate > 0 && workers + clients > 0) {
    s.interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>((workers + clients) / rate));
  }
  const std::string kind = absl::GetFlag(FLAGS_trial_scheduler);
  s.asktell_study = absl::GetFlag(FLAGS_asktell_study);
  const int64_t big = 1000000;
  // The workers' studies share them out: each may run its part of them.
  const int studies = std::max(1, absl::GetFlag(FLAGS_studies));
  for (int i = 0; workers > 0 && i < studies; ++i) {
    const std::string name =
        studies == 1 ? "scale-workers" : absl::StrCat("scale-workers-", i);
    if (!CreateStudy(*study_stub, s.study_token,
                     Spec(name, true, kind, s.steps, big,
                          (workers + studies - 1) / studies))) {
      return 1;
    }
  }
  const bool asktell = mode == "asktell";
  if (clients > 0 &&
      !CreateStudy(
          *study_stub, s.study_token,
          Spec(s.asktell_study, false, asktell ? "fifo" : kind,
               asktell ? 1 : s.steps,
               asktell ? absl::GetFlag(FLAGS_trials) : big, clients))) {
    return 1;
  }

  std::vector<std::shared_ptr<SimWorker>> sim_workers;
  std::mt19937_64 beat_rng(11);
  for (int i = 0; i < workers; ++i) {
    grpc::ClientContext ctx;
    Authorize(ctx, s.worker_token);
    v1::RegisterWorkerRequest req;
    req.set_host(absl::StrCat("sim-", i));
    req.mutable_resources()->set_slots(1);
    v1::RegisterWorkerResponse resp;
    grpc::Status st = worker_stub->RegisterWorker(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "RegisterWorker: %s\n", st.error_message().c_str());
      return 1;
    }
    sim_workers.push_back(std::make_shared<SimWorker>(s, resp.worker_id()));
    // Its lease runs from now: it beats while the others register.
    sim_workers.back()->StartBeating(beat_rng);
  }
  std::atomic<int64_t> quota(absl::GetFlag(FLAGS_trials));
  std::vector<std::shared_ptr<SimClient>> sim_clients;
  for (int i = 0; i < clients; ++i) {
    sim_clients.push_back(std::make_shared<SimClient>(
        s, absl::StrCat("client-", i), asktell ? 1 : s.steps,
        asktell ? &quota : nullptr));
  }

  std::string json = absl::StrCat(
      "{\"mode\":\"", mode,
      "\",\"secure\":", absl::GetFlag(FLAGS_tls_dir).empty() ? "false" : "true",
      ",\"workers\":", workers, ",\"clients\":", clients, ",\"rate\":", rate,
      ",\"scheduler\":\"", kind, "\"");
  // The scheduler's CPU time over the measured window only (mode load:
  // not the warm-up, not the drain after it).
  auto scheduler_cpu = [&] {
    return scheduler.pid() > 0 ? CpuAndPeakMb(scheduler.pid()).first : 0.0;
  };
  double cpu0 = scheduler_cpu(), cpu1 = 0;
  double elapsed = 0;
  int64_t finished = 0;  // trials, in the measured window
  if (asktell) {
    s.stats.Start();
    const auto t0 = Clock::now();
    for (auto& c : sim_clients) c->Suggest();
    s.in_flight.WaitZero();
    elapsed = Seconds(Clock::now() - t0);
    cpu1 = scheduler_cpu();
    std::printf("%" PRId64 " ask/tell trials in %.2f s: %.0f trials/s\n",
                s.trials_done.load(), elapsed, s.trials_done / elapsed);
    absl::StrAppend(&json, ",\"trials\":", s.trials_done.load(),
                    ",\"seconds\":", elapsed,
                    ",\"trials_per_s\":", s.trials_done / elapsed);
  } else {
    for (auto& w : sim_workers) w->Acquire();
    for (auto& c : sim_clients) c->Suggest();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup)));
    s.stats.Start();
    cpu0 = scheduler_cpu();
    const int64_t done0 = s.trials_done;
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
    s.stopping = true;
    elapsed = Seconds(Clock::now() - t0);
    cpu1 = scheduler_cpu();
    const int64_t reports =
        s.stats.Count("ReportProgress") + s.stats.Count("ReportIntermediate");
    std::printf(
        "%.1f s: %" PRId64 " reports (%.0f/s), %" PRId64 " trials finished\n",
        elapsed, reports, reports / elapsed, int64_t(s.trials_done - done0));
    finished = s.trials_done - done0;
    absl::StrAppend(&json, ",\"seconds\":", elapsed, ",\"reports\":", reports,
                    ",\"reports_per_s\":", reports / elapsed,
                    ",\"trials_finished\":", finished,
                    ",\"lost_leases\":", s.lost_leases.load(),
                    ",\"fenced\":", s.fenced.load());
    if (s.heartbeat_ms > 0) {
      std::printf("leases lost: %" PRId64 ", reports fenced: %" PRId64 "\n",
                  s.lost_leases.load(), s.fenced.load());
    }
    s.in_flight.WaitZero();
  }
  absl::StrAppend(&json, s.stats.Report(elapsed));
  if (scheduler.pid() > 0) {
    const double peak_mb = CpuAndPeakMb(scheduler.pid()).second;
    std::printf(
        "scheduler: %.1f CPU s (%.0f%% of one core), peak RSS %.0f MB\n",
        cpu1 - cpu0, 100 * (cpu1 - cpu0) / elapsed, peak_mb);
    if (finished > 0) {
      std::printf("scheduler CPU per finished trial: %.3f ms\n",
                  1000 * (cpu1 - cpu0) / finished);
      absl::StrAppend(
          &json, ",\"cpu_ms_per_trial\":", 1000 * (cpu1 - cpu0) / finished);
    }
    absl::StrAppend(&json, ",\"scheduler_cpu_s\":", cpu1 - cpu0,
                    ",\"scheduler_peak_mb\":", peak_mb);
    scheduler.Kill(SIGTERM);
  }
  absl::StrAppend(&json, "}");
  if (absl::GetFlag(FLAGS_json)) std::printf("%s\n", json.c_str());
  if (own_dir) std::filesystem::remove_all(dir);
  // A clean run has no failed call: any is a bug to look at.
  if (const int64_t errors = s.stats.Errors(); errors > 0) {
    std::fprintf(stderr, "%" PRId64 " calls failed\n", errors);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dial::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dial::bench::Main();
}
