#include "worker/worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "transfer/manifest.h"
#include "worker/report_relay.h"
#include "worker/trial_attempt.h"

namespace dial::worker {

Worker::Worker(const WorkerOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : &real_clock_),
      sleeper_(options.sleeper != nullptr ? options.sleeper : &real_sleeper_),
      gpus_(options.gpus, options.trials_per_gpu) {
  if (options_.cpus <= 0) {
    options_.cpus = AvailableCpus();
  }
  if (options_.host.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    options_.host = name[0] ? name : "worker";
  }
  if (!options_.environment) options_.environment = CurrentEnvironment();
  if (!options_.checkpoint_root.empty()) {
    auto store =
        storage::FileCheckpointStore::Create({options_.checkpoint_root});
    if (store.ok()) {
      checkpoints_ = std::move(*store);
    } else {
      spdlog::warn("checkpoint root: {}", store.status().ToString());
    }
  }
  if (options_.metrics) AddMetrics();
  if (options_.transfer != nullptr) {
    uploader_ = std::make_unique<CheckpointUploader>(CheckpointUploaderOptions{
        options_.transfer, options_.checkpoint_root, checkpoints_.get(),
        meters_.upload_bytes, meters_.upload_seconds});
  }
}

void Worker::AddMetrics() {
  metrics::Registry& r = *options_.metrics;
  r.AddGauge("dial_worker_slots", "Trials this worker runs at once")
      ->With({})
      ->Set(options_.slots);
  metrics::Gauge* busy =
      r.AddGauge("dial_worker_busy_slots", "Slots running a trial now")
          ->With({});
  meters_.started = r.AddCounter("dial_worker_trials_started_total",
                                 "Trial attempts started here")
                        ->With({});
  meters_.restarts =
      r.AddCounter("dial_worker_trial_restarts_total",
                   "Attempts started here that were not a trial's first "
                   "(resumed after a failure, preemption or pause)")
          ->With({});
  meters_.ended = r.AddCounter("dial_worker_trials_ended_total",
                               "Attempts ended here, by outcome", {"outcome"});
  meters_.buffered = r.AddGauge("dial_worker_buffered_reports",
                                "Reports waiting for the scheduler")
                         ->With({});
  meters_.upload_bytes =
      r.AddCounter("dial_worker_checkpoint_upload_bytes_total",
                   "Checkpoint bytes sent to the scheduler (transfer mode)")
          ->With({});
  meters_.upload_seconds =
      r.AddHistogram("dial_worker_checkpoint_upload_seconds",
                     "Time to upload one checkpoint (transfer mode)", {},
                     {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300})
          ->With({});
  auto* gpu_used =
      r.AddGauge("dial_worker_gpu_memory_used_bytes",
                 "GPU memory in use, as nvidia-smi reports it", {"gpu"});
  auto* gpu_total = r.AddGauge("dial_worker_gpu_memory_total_bytes",
                               "GPU memory, as nvidia-smi reports it", {"gpu"});
  r.OnCollect([this, busy, gpu_used, gpu_total] {
    {
      absl::MutexLock lock(&mu_);
      busy->Set(static_cast<double>(running_.size()));
    }
    for (const GpuMemory& g : ReadGpuMemory(options_.gpus)) {
      gpu_used->With({g.id})->Set(static_cast<double>(g.used_bytes));
      gpu_total->With({g.id})->Set(static_cast<double>(g.total_bytes));
    }
  });
}

void Worker::CountEnd(const char* outcome) {
  if (meters_.ended) meters_.ended->With({outcome})->Add();
}

absl::Status Worker::Fetch(const std::string& study, const std::string& id) {
  auto parsed = storage::CheckpointStore::ParseId(id);
  if (parsed.ok() && checkpoints_ && checkpoints_->Verify(id).ok()) {
    return absl::OkStatus();  // a trainer checkpoint never changes
  }
  if (!transfer::SafeRelativePath(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", id, "' is not a relative path"));
  }
  auto got = options_.transfer->Download(
      study, id, absl::StrCat(options_.checkpoint_root, "/", id));
  if (!got.ok()) return got.status();
  spdlog::info("downloaded checkpoint {}: {} bytes", id, got->bytes_sent);
  return absl::OkStatus();
}

Worker::~Worker() { Shutdown(); }

int Worker::ThreadsPerTrial() const {
  return std::max(1, options_.cpus / std::max(1, options_.slots));
}

bool Worker::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  sleeper_->SleepUnless(mu_, absl::Condition(&stopping_), d);
  return !stopping_;
}

bool Worker::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
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
    for (const auto& [key, value] : options_.labels) {
      (*resources->mutable_labels())[key] = value;
    }
    if (resources->labels().count("host") == 0) {
      (*resources->mutable_labels())["host"] = options_.host;
    }
    *resources->mutable_isolation() = options_.isolation;
    // What it runs, so that the scheduler neither offers nor preempts for
    // a command it would refuse.
    v1::CommandPolicy* commands = resources->mutable_commands();
    commands->set_any(options_.policy.allow_any_command);
    for (const auto& glob : options_.policy.allowed_commands) {
      commands->add_allowed(glob);
    }
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
  for (auto& [run, r] : running_) r.process->Signal(SIGTERM);
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
        t->set_lease_token(r.lease_token);
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
        // must not advance in two places. The id is forgotten in the same
        // step: a slot whose trial dies of this kill must not ask for work
        // under the old id (a stale long poll; found as a flaky
        // WorkerTest.RegistersAgainAfterNotFoundAndKillsTheOldIdsTrials).
        absl::MutexLock lock(&mu_);
        for (auto& [slot, r] : running_) {
          if (r.worker_id == id) {
            r.lost = true;
            r.process->Signal(SIGKILL);
          }
        }
        if (worker_id_ == id) worker_id_.clear();
      }
      continue;
    }
    if (!Sleep(period)) {
      // Shutting down: keep the lease while trials checkpoint and exit.
      {
        absl::MutexLock lock(&mu_);
        if (running_.empty()) return;
      }
      sleeper_->SleepFor(period);
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

void Worker::SendFinish(const v1::FinishTrialRequest& finish,
                        const std::string& name) {
  absl::Duration backoff = absl::Milliseconds(200);
  for (int i = 0; i < 60; ++i) {
    absl::Status s = options_.client->Finish(finish);
    if (s.ok() || !IsRetryable(s)) {
      if (!s.ok()) spdlog::warn("{}: FinishTrial: {}", name, s.ToString());
      return;
    }
    sleeper_->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

int64_t Worker::Track(const v1::AcquireTrialResponse& a,
                      const std::string& worker_id, TrialAttempt* attempt) {
  absl::MutexLock lock(&mu_);
  const int64_t run = next_run_++;
  running_[run] =
      Running{a.trial().study(), a.trial().number(), a.attempt(),
              attempt,           worker_id,          a.lease_token()};
  if (stopping_) attempt->Signal(SIGTERM);  // raced with Shutdown
  return run;
}

bool Worker::Lost(int64_t run) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(run);
  return it != running_.end() && it->second.lost;
}

bool Worker::Untrack(int64_t run) {
  absl::MutexLock lock(&mu_);
  running_.erase(run);
  return stopping_;
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
  finish.set_lease_token(a.lease_token());

  std::optional<std::vector<std::string>> gpus;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) gpus = gpus_.Take(a.run().resources().gpus());
  }
  if (!gpus) {
    finish.set_requeue(true);
    return SendFinish(finish, name);
  }
  auto release_gpus = [&] {
    absl::MutexLock lock(&mu_);
    gpus_.Release(*gpus);
  };

  TrialAttemptOptions o;
  o.worker_id = worker_id;
  o.assignment = a;
  o.gpus = *gpus;
  o.cpu_threads = ThreadsPerTrial();
  o.slots = options_.slots;
  o.trainer_path = options_.trainer_path;
  o.work_dir = options_.work_dir;
  o.checkpoint_root = options_.checkpoint_root;
  o.checkpoints = checkpoints_.get();
  o.policy = options_.policy;
  o.worker_env = *options_.environment;
  o.max_log_bytes = options_.max_log_bytes;
  o.cgroups = options_.cgroups;
  o.users = options_.users;
  v1::TrialLease lease;
  lease.set_worker_id(worker_id);
  lease.set_study(trial.study());
  lease.set_trial(trial.number());
  lease.set_attempt(a.attempt());
  lease.set_lease_token(a.lease_token());
  if (uploader_) {
    if (!a.restore_checkpoint().empty()) {
      // Resumed here without the checkpoint on this host's disk.
      absl::Status fetched = Fetch(trial.study(), a.restore_checkpoint());
      if (!fetched.ok()) {
        release_gpus();
        finish.set_error(absl::StrCat("cannot download restore checkpoint ",
                                      a.restore_checkpoint(), ": ",
                                      fetched.message()));
        spdlog::warn("{}: failed: {}", name, finish.error());
        return SendFinish(finish, name);
      }
      uploader_->Begin(lease, {a.restore_checkpoint()});
    } else {
      uploader_->Begin(lease, {});
    }
    o.upload = [this, lease](int64_t step, const std::string& id) {
      uploader_->Enqueue(lease, step, id);
    };
    o.fetch = [this, lease](const std::string& id) {
      // Pinned first: its own trial's uploads on this worker would
      // otherwise drop it from the cache while it is copied.
      uploader_->Pin(lease, id);
      DIAL_RETURN_IF_ERROR(Fetch(lease.study(), id));
      uploader_->AddBase(lease, id);
      return absl::OkStatus();
    };
  }
  auto attempt = TrialAttempt::Start(o);
  if (!attempt.ok()) {
    // Refused by this worker's policy (a command it does not run, a
    // variable name it does not accept, an isolation it cannot give): the
    // scheduler does not count it and keeps the study off this worker.
    // Anything else (a missing secret, a foreign restore checkpoint, no
    // fork) is a counted failure.
    release_gpus();
    if (uploader_) uploader_->Cancel(lease);
    finish.set_error(std::string(attempt.status().message()));
    finish.set_refused(IsRefused(attempt.status()));
    spdlog::warn("{}: {}: {}", name, finish.refused() ? "refused" : "failed",
                 finish.error());
    if (finish.refused()) CountEnd("refused");
    return SendFinish(finish, name);
  }
  const int64_t run = Track(a, worker_id, attempt->get());
  if (meters_.started) {
    meters_.started->Add();
    if (a.attempt() > 1) meters_.restarts->Add();
  }

  ReportRelayOptions r;
  r.client = options_.client;
  r.clock = clock_;
  r.sleeper = sleeper_;
  r.name = name;
  r.spill_path = absl::StrCat(options_.work_dir, "/", trial.study(), "-",
                              trial.number(), "-a", a.attempt(), ".reports");
  r.memory_limit = options_.report_buffer;
  r.ack_log = options_.ack_log;
  r.buffered = meters_.buffered;
  ReportRelay relay(r);
  AttemptEnd end = (*attempt)->RelayReports(relay);

  // Fenced by the scheduler, or its lease was lost (the heartbeat killed
  // it): someone else runs this trial now; it is killed, not finished.
  bool lost = end.fenced || Lost(run);
  const int status = (*attempt)->Stop(
      lost || !end.protocol_error.empty() || !end.rejected.empty(),
      Stopping() || end.stop_sent ? options_.grace : absl::Seconds(30));
  // What the trial reported while the scheduler was away goes first, in
  // order, for as long as the scheduler may take to come back. The trial
  // stays in the heartbeat's running list meanwhile, so a restarted
  // scheduler keeps it attached.
  if (!lost) {
    absl::Status flushed = relay.Flush(options_.outage_limit);
    if (absl::IsUnavailable(flushed) || IsFence(flushed)) {
      lost = true;
    } else if (!flushed.ok() && end.rejected.empty()) {
      end.rejected =
          absl::StrCat("the scheduler rejected a report: ", flushed.message());
    }
  }
  // Its checkpoints reach the scheduler before the attempt is reported
  // finished, so whoever resumes it starts from the newest one. The trial
  // stays listed meanwhile, which keeps its lease.
  if (uploader_) {
    if (lost) {
      uploader_->Cancel(lease);
    } else {
      // Shutting down, uploads get the trials' grace period, not more.
      const absl::Duration wait =
          Stopping() ? std::min(options_.grace, options_.upload_wait)
                     : options_.upload_wait;
      if (!uploader_->Finish(lease, wait)) {
        spdlog::warn(
            "{}: checkpoint uploads did not finish in {}; it resumes from an "
            "earlier checkpoint",
            name, absl::FormatDuration(wait));
      }
    }
  }
  const bool shutting_down = Untrack(run);
  release_gpus();
  if (lost) return CountEnd("lost");
  if (shutting_down && end.rejected.empty()) {
    finish.set_requeue(true);
  } else {
    (*attempt)->DescribeOutcome(end, status, &finish);
  }
  spdlog::info("{}: {}", name,
               finish.requeue()         ? "requeued (worker shutting down)"
               : finish.error().empty() ? "finished"
                                        : "failed: " + finish.error());
  CountEnd(finish.requeue()         ? "requeued"
           : finish.error().empty() ? "finished"
                                    : "failed");
  SendFinish(finish, name);
}

}  // namespace dial::worker
