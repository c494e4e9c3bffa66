#include "worker/worker.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/trial_protocol.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"
#include "worker/report_buffer.h"
#include "worker/trial_process.h"

namespace dial::worker {
namespace {

// One line appended with O_APPEND: whole lines even with several writers.
void AppendLine(const std::string& path, const std::string& line) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string data = line + "\n";
  (void)!write(fd, data.data(), data.size());
  close(fd);
}

bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsResourceExhausted(s) || absl::IsAborted(s);
}

const char* ActionName(v1::Decision::Action action) {
  switch (action) {
    case v1::Decision::STOP:
      return "STOP";
    case v1::Decision::PAUSE:
      return "PAUSE";
    case v1::Decision::EXPLOIT:
      return "EXPLOIT";
    default:
      return "CONTINUE";
  }
}

}  // namespace

Worker::Worker(const WorkerOptions& options)
    : options_(options), gpus_(options.gpus, options.trials_per_gpu) {
  if (options_.cpus <= 0) {
    options_.cpus = std::max(1u, std::thread::hardware_concurrency());
  }
  if (options_.host.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    options_.host = name[0] ? name : "worker";
  }
  if (!options_.checkpoint_root.empty()) {
    auto store =
        storage::FileCheckpointStore::Create({options_.checkpoint_root});
    if (store.ok()) {
      checkpoints_ = std::move(*store);
    } else {
      spdlog::warn("checkpoint root: {}", store.status().ToString());
    }
  }
}

Worker::~Worker() { Shutdown(); }

int Worker::ThreadsPerTrial() const {
  return std::max(1, options_.cpus / std::max(1, options_.slots));
}

bool Worker::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

std::string Worker::EnsureRegistered() {
  absl::MutexLock registering(&register_mu_);
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!worker_id_.empty()) return worker_id_;
      if (stopping_) return "";
    }
    v1::RegisterWorkerRequest request;
    request.set_host(options_.host);
    auto* resources = request.mutable_resources();
    for (const auto& id : options_.gpus) resources->add_gpus()->set_id(id);
    resources->set_cpus(options_.cpus);
    resources->set_slots(options_.slots);
    auto response = options_.client->Register(request);
    if (response.ok()) {
      absl::MutexLock lock(&mu_);
      if (worker_id_.empty()) {
        worker_id_ = response->worker_id();
        spdlog::info("registered as {} ({} slots, {} GPUs, {} threads/trial)",
                     worker_id_, options_.slots, options_.gpus.size(),
                     ThreadsPerTrial());
      }
      return worker_id_;
    }
    spdlog::warn("cannot register with the scheduler: {}; retrying in {}",
                 response.status().ToString(), absl::FormatDuration(backoff));
    if (!Sleep(backoff)) return "";
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void Worker::ForgetRegistration(const std::string& stale_id) {
  absl::MutexLock lock(&mu_);
  if (worker_id_ == stale_id) worker_id_.clear();
}

absl::Status Worker::Run() {
  std::vector<std::thread> threads;
  threads.emplace_back([this] { HeartbeatLoop(); });
  for (int slot = 0; slot < options_.slots; ++slot) {
    threads.emplace_back([this, slot] { SlotLoop(slot); });
  }
  for (auto& t : threads) t.join();
  return absl::OkStatus();
}

void Worker::Shutdown() {
  // Ask running trials to checkpoint and exit; the slot threads SIGKILL
  // what is left after the grace period. Signalled under the lock, so no
  // process is destroyed meanwhile; a trial that registers later sees
  // stopping_ and signals itself.
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  for (auto& [slot, r] : running_) r.process->Signal(SIGTERM);
}

void Worker::HeartbeatLoop() {
  while (true) {
    const std::string id = EnsureRegistered();
    if (id.empty()) return;
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [slot, r] : running_) {
        auto* t = request.add_running();
        t->set_study(r.study);
        t->set_trial(r.trial);
        t->set_attempt(r.attempt);
      }
    }
    auto response = options_.client->Heartbeat(request);
    absl::Duration period = absl::Seconds(2);
    if (response.ok()) {
      period = std::max(absl::Milliseconds(100),
                        absl::Milliseconds(response->lease_ms()) / 4);
    } else if (absl::IsNotFound(response.status())) {
      spdlog::warn(
          "the scheduler no longer knows this worker; registering "
          "again and killing the trials it handed to the old id");
      {
        // Their leases are gone and the scheduler has requeued them: they
        // must not advance in two places.
        absl::MutexLock lock(&mu_);
        for (auto& [slot, r] : running_) {
          if (r.worker_id == id) {
            r.lost = true;
            r.process->Signal(SIGKILL);
          }
        }
      }
      ForgetRegistration(id);
      continue;
    }
    if (!Sleep(period)) {
      // Shutting down: keep the lease while trials checkpoint and exit.
      {
        absl::MutexLock lock(&mu_);
        if (running_.empty()) return;
      }
      absl::SleepFor(period);
    }
  }
}

void Worker::SlotLoop(int slot) {
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;  // take no more trials
    }
    const std::string id = EnsureRegistered();
    if (id.empty()) return;
    v1::AcquireTrialRequest request;
    request.set_worker_id(id);
    request.set_free_slots(1);
    {
      absl::MutexLock lock(&mu_);
      request.set_free_gpus(gpus_.FreeDevices());
    }
    request.set_wait_ms(absl::ToInt64Milliseconds(options_.acquire_wait));
    auto response = options_.client->Acquire(request);
    if (!response.ok()) {
      if (absl::IsNotFound(response.status())) {
        ForgetRegistration(id);
        continue;
      }
      spdlog::warn("AcquireTrial failed: {}; retrying in {}",
                   response.status().ToString(), absl::FormatDuration(backoff));
      if (!Sleep(backoff)) return;
      backoff = std::min(backoff * 2, absl::Seconds(5));
      continue;
    }
    backoff = absl::Milliseconds(200);
    if (!response->has_trial()) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      continue;
    }
    RunTrial(id, *response);
  }
}

void Worker::RunTrial(const std::string& worker_id,
                      const v1::AcquireTrialResponse& a) {
  const v1::Trial& trial = a.trial();
  const std::string name = absl::StrCat(trial.study(), "/", trial.number(),
                                        " attempt ", a.attempt());
  v1::FinishTrialRequest finish;
  finish.set_worker_id(worker_id);
  finish.set_study(trial.study());
  finish.set_trial(trial.number());
  finish.set_attempt(a.attempt());
  auto send_finish = [&] {
    absl::Duration backoff = absl::Milliseconds(200);
    for (int i = 0; i < 60; ++i) {
      absl::Status s = options_.client->Finish(finish);
      if (s.ok() || !Retryable(s)) {
        if (!s.ok()) spdlog::warn("{}: FinishTrial: {}", name, s.ToString());
        return;
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(5));
    }
  };

  std::vector<std::string> gpus;
  const int needed = a.run().resources().gpus();
  {
    absl::MutexLock lock(&mu_);
    auto taken = stopping_ ? std::nullopt : gpus_.Take(needed);
    if (taken) {
      gpus = *taken;
    } else {
      finish.set_requeue(true);
    }
  }
  if (finish.requeue()) return send_finish();
  auto release_gpus = [&] {
    absl::MutexLock lock(&mu_);
    gpus_.Release(gpus);
  };

  TrialProcessOptions p;
  if (a.run().has_trainer()) {
    p.argv = {options_.trainer_path};
    std::string knobs;
    (void)google::protobuf::util::MessageToJsonString(a.run().trainer(),
                                                      &knobs);
    p.env[kEnvTrainerKnobs] = knobs;
  } else {
    p.argv.assign(a.run().command().argv().begin(),
                  a.run().command().argv().end());
    for (const auto& [k, v] : a.run().command().env()) p.env[k] = v;
  }
  const int threads = ThreadsPerTrial();
  p.env[kEnvStudy] = trial.study();
  p.env[kEnvTrial] = std::to_string(trial.number());
  p.env[kEnvAttempt] = std::to_string(a.attempt());
  p.env[kEnvTrialParams] = ParamsJson(trial.params());
  p.env[kEnvCheckpointRoot] = options_.checkpoint_root;
  p.env[kEnvCheckpointDir] = absl::StrCat(options_.checkpoint_root, "/",
                                          trial.study(), "/", trial.number());
  p.env[kEnvRestoreCheckpoint] = a.restore_checkpoint();
  p.env[kEnvStartStep] = std::to_string(a.start_step());
  p.env[kEnvCpuThreads] = std::to_string(threads);
  p.env["OMP_NUM_THREADS"] = std::to_string(threads);
  p.env["MKL_NUM_THREADS"] = std::to_string(threads);
  p.env["OPENBLAS_NUM_THREADS"] = "1";
  p.env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(gpus, ",");
  const std::string log = absl::StrCat(options_.work_dir, "/", trial.study(),
                                       "-", trial.number(), "-a", a.attempt());
  p.stdout_path = log + ".out";
  p.stderr_path = log + ".err";

  spdlog::info("{}: starting {}{}", name, p.argv[0],
               a.restore_checkpoint().empty()
                   ? ""
                   : " from checkpoint " + a.restore_checkpoint());
  auto process = TrialProcess::Start(p);
  if (!process.ok()) {
    release_gpus();
    finish.set_error(std::string(process.status().message()));
    return send_finish();
  }
  {
    absl::MutexLock lock(&mu_);
    running_[next_run_++] = Running{trial.study(), trial.number(), a.attempt(),
                                    process->get(), worker_id};
    if (stopping_) (*process)->Signal(SIGTERM);  // raced with Shutdown
  }
  std::map<std::string, double> last_metrics;
  std::string protocol_error;
  bool lost = false;
  bool stop_sent = false;
  // Reports not yet acknowledged. While the scheduler is unreachable the
  // trial goes on with a provisional CONTINUE and its reports wait here, to
  // be replayed in order (each once: the scheduler ignores steps it has)
  // when the scheduler is back.
  ReportBuffer pending(
      absl::StrCat(options_.work_dir, "/", trial.study(), "-", trial.number(),
                   "-a", a.attempt(), ".reports"),
      options_.report_buffer);
  // A replayed report's STOP, PAUSE or EXPLOIT, for the trial's next report.
  std::optional<v1::Decision> held;
  // Sends what is pending, oldest first. OK: all acknowledged, `*current`
  // is the newest report's decision. UNAVAILABLE: the scheduler is not
  // reachable now (the rest stays pending). Anything else ends the trial.
  auto drain = [&](v1::Decision* current) -> absl::Status {
    while (!pending.empty()) {
      auto response = options_.client->Report(pending.Front());
      if (!response.ok()) {
        return Retryable(response.status())
                   ? absl::UnavailableError(response.status().message())
                   : response.status();
      }
      if (!options_.ack_log.empty()) {
        const auto& r = pending.Front();
        AppendLine(options_.ack_log,
                   absl::StrCat(r.worker_id(), " ", r.study(), " ", r.trial(),
                                " ", r.attempt(), " ", r.step()));
      }
      pending.Pop();
      const v1::Decision& d = response->decision();
      if (pending.empty()) {
        *current = d;
      } else if (d.action() != v1::Decision::CONTINUE && !held) {
        held = d;
        if (d.action() != v1::Decision::EXPLOIT) {
          // Stopped or paused at a replayed step: later ones are moot.
          while (!pending.empty()) pending.Pop();
        }
      }
    }
    return absl::OkStatus();
  };
  const absl::Duration timeout = a.run().timeout_s() > 0
                                     ? absl::Seconds(a.run().timeout_s())
                                     : absl::InfiniteDuration();
  bool hung = false;
  while (auto line = (*process)->ReadLine(timeout, &hung)) {
    auto report = ParseReport(*line);
    if (!report.ok()) {
      protocol_error = std::string(report.status().message());
      break;
    }
    v1::ReportProgressRequest request;
    request.set_worker_id(worker_id);
    request.set_study(trial.study());
    request.set_trial(trial.number());
    request.set_attempt(a.attempt());
    request.set_step(report->step);
    for (const auto& [k, v] : report->metrics) {
      (*request.mutable_metrics())[k] = v;
    }
    request.set_checkpoint(report->checkpoint);
    absl::Status buffered = pending.Push(request);
    if (!buffered.ok()) {
      protocol_error = std::string(buffered.message());
      break;
    }
    v1::Decision decision;
    absl::Status sent = drain(&decision);
    if (absl::IsUnavailable(sent)) {
      spdlog::warn(
          "{}: scheduler unreachable ({}); {} report(s) buffered, "
          "training goes on",
          name, std::string(sent.message()), pending.size());
      decision.set_action(v1::Decision::CONTINUE);
      decision.set_reason("scheduler unreachable; report buffered");
    } else if (!sent.ok()) {
      if (absl::IsInvalidArgument(sent)) {
        protocol_error = std::string(sent.message());
      } else {
        // Stale attempt or lost lease: the trial is someone else's now.
        spdlog::warn("{}: {}; killing it", name, sent.ToString());
        lost = true;
      }
      break;
    }
    if (held) {
      decision = *held;
      held.reset();
    }
    last_metrics = report->metrics;
    TrialDecision out{ActionName(decision.action()), decision.reason(), "", ""};
    if (decision.action() == v1::Decision::EXPLOIT) {
      // A private copy of the source checkpoint: the source may be deleted
      // later, the copy may not.
      auto copy =
          checkpoints_
              ? checkpoints_->CopyInto(decision.source_checkpoint(),
                                       trial.study(), trial.number())
              : absl::StatusOr<storage::CheckpointInfo>(
                    absl::FailedPreconditionError("no checkpoint root"));
      if (!copy.ok()) {
        protocol_error = absl::StrCat("cannot copy checkpoint ",
                                      decision.source_checkpoint(), ": ",
                                      copy.status().message());
        break;
      }
      out.checkpoint = copy->id;
      out.params_json = ParamsJson(decision.new_params());
    }
    if (!(*process)->WriteLine(EncodeDecision(out)).ok()) break;
    if (decision.action() == v1::Decision::STOP ||
        decision.action() == v1::Decision::PAUSE) {
      // Told to end: it gets a grace period to exit, then its group is
      // killed, whether or not it keeps talking.
      stop_sent = true;
      break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [slot, r] : running_) {
      if (r.process == process->get() && r.lost) lost = true;
    }
  }
  bool shutting_down;
  {
    absl::MutexLock lock(&mu_);
    shutting_down = stopping_;
  }
  if (hung) {
    protocol_error = absl::StrCat("no report for ", a.run().timeout_s(),
                                  " s (trial.timeout_s): hung, killed");
  }
  if (lost || !protocol_error.empty()) (*process)->Signal(SIGKILL);
  const int status = (*process)->WaitOrKill(
      shutting_down || stop_sent ? options_.grace : absl::Seconds(30));
  // What the trial reported while the scheduler was away goes first, in
  // order, for as long as the scheduler may take to come back. The trial
  // stays in the heartbeat's running list meanwhile, so a restarted
  // scheduler keeps it attached.
  absl::Duration backoff = absl::Milliseconds(200);
  const absl::Time give_up = absl::Now() + options_.outage_limit;
  while (!lost && !pending.empty()) {
    v1::Decision ignored;
    absl::Status sent = drain(&ignored);
    if (sent.ok()) break;
    if (!absl::IsUnavailable(sent) || absl::Now() > give_up) {
      spdlog::warn("{}: {} buffered report(s) dropped: {}", name,
                   pending.size(), sent.ToString());
      lost = true;
      break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->second.process == process->get()) {
        running_.erase(it);
        break;
      }
    }
    shutting_down = stopping_;
  }
  release_gpus();
  if (lost) return;
  if (shutting_down) {
    finish.set_requeue(true);
  } else if (!protocol_error.empty()) {
    finish.set_error(hung ? protocol_error
                          : "trial protocol error: " + protocol_error);
    finish.set_stderr_tail((*process)->StderrTail(20));
  } else if (stop_sent || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    for (const auto& [k, v] : last_metrics) {
      (*finish.mutable_final_metrics())[k] = v;
    }
  } else {
    finish.set_error(DescribeExit(status));
    finish.set_stderr_tail((*process)->StderrTail(20));
  }
  spdlog::info("{}: {}", name,
               finish.requeue()         ? "requeued (worker shutting down)"
               : finish.error().empty() ? "finished"
                                        : "failed: " + finish.error());
  send_finish();
}

}  // namespace dial::worker
