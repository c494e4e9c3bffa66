// Worker: registers this machine's resources with the scheduler, runs one
// acquire loop per slot (long-polling AcquireTrial), runs each trial as a
// child process (dial-train for trainer trials, the given argv for command
// trials; see TrialAttempt), relays reports and decisions (ReportRelay),
// heartbeats, and reconnects with backoff when the scheduler goes away.
// Waiting goes through the injected Clock and Sleeper, so tests drive
// backoff, heartbeats and outages without real waiting. The process must
// ignore SIGPIPE (dial-worker's main does): a trial that exits closes its
// decision pipe under the worker's feet. Thread-safe: Run blocks; Shutdown
// may be called from any thread (e.g. a signal thread).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "dial/v1/service.pb.h"
#include "storage/checkpoint_store.h"
#include "transfer/transfer_client.h"
#include "worker/cgroups.h"
#include "worker/checkpoint_uploader.h"
#include "worker/gpu_pool.h"
#include "worker/scheduler_client.h"
#include "worker/sleeper.h"
#include "worker/trial_policy.h"
#include "worker/trial_users.h"

namespace dial::worker {

class TrialAttempt;

struct WorkerOptions {
  SchedulerClient* client = nullptr;  // required, not owned
  int slots = 1;
  std::vector<std::string> gpus;  // device ids; empty on CPU-only machines
  int trials_per_gpu = 1;         // trials that may share one device
  int cpus = 0;                   // 0: hardware concurrency
  std::string host;               // default: hostname
  // Labels it registers (--label KEY=VALUE); `host` and, with GPUs,
  // `gpu.model` are added unless given.
  std::map<std::string, std::string> labels;
  std::string trainer_path;  // dial-train
  std::string work_dir;      // trial logs
  // Where trials write checkpoints: the root shared with the scheduler,
  // or with `transfer` this host's own cache.
  std::string checkpoint_root;
  // Checkpoint transfer (--checkpoint-cache): checkpoints are uploaded to
  // the scheduler in the background and downloaded before a resume or a
  // PBT exploit needs them. Null: checkpoint_root is shared. Not owned.
  transfer::CheckpointTransfer* transfer = nullptr;
  // How long a finished attempt waits for its uploads before it is
  // reported finished (a paused trial then resumes from its newest
  // checkpoint).
  absl::Duration upload_wait = absl::Minutes(10);
  absl::Duration acquire_wait = absl::Seconds(10);
  absl::Duration grace = absl::Seconds(30);  // SIGTERM -> SIGKILL
  // Reports kept in memory per trial while the scheduler is unreachable;
  // more spill to a file in work_dir.
  size_t report_buffer = 256;
  // How long a finished trial's buffered reports wait for the scheduler to
  // come back before they are dropped.
  absl::Duration outage_limit = absl::Minutes(30);
  // Audit log of acknowledged reports (one line each); empty: none.
  std::string ack_log;
  // Time for the outage limit; null: real time. Not owned. (`grace` and a
  // trial's timeout_s stay real time: they bound a real process.)
  const Clock* clock = nullptr;
  // How the worker waits (backoff, heartbeat periods); null: real time.
  // Not owned. A test gives a fake clock and sleeper that share one time.
  Sleeper* sleeper = nullptr;
  // What command trials may run and see (docs/workers.md, "Safe
  // workers"). By default only the built-in trainer runs.
  TrialPolicy policy;
  // The environment pass_env and secrets are taken from; nullopt: this
  // process's own.
  std::optional<std::map<std::string, std::string>> environment;
  // Each of a trial's stdout and stderr files is rotated past this size.
  int64_t max_log_bytes = 64 << 20;
  // Per-trial cgroup v2 scopes; null: none (each trial's supervisor still
  // kills whatever it started). Not owned.
  Cgroups* cgroups = nullptr;
  // Per-attempt Unix users (--run-as-range); null: none. Not owned.
  TrialUsers* users = nullptr;
  // What the worker says at registration about the walls between its
  // trials and the limits it enforces (DescribeIsolation).
  v1::WorkerIsolation isolation;
  // dial_worker_* metrics (dial-worker --metrics-listen, docs/operations.md);
  // null: none. Not owned; outlives the worker.
  metrics::Registry* metrics = nullptr;
};

class Worker {
 public:
  explicit Worker(const WorkerOptions& options);
  ~Worker();

  // Runs until Shutdown; returns once every trial has ended.
  absl::Status Run();
  // Stops taking trials, asks running ones to checkpoint (SIGTERM), and
  // SIGKILLs what is left after the grace period.
  void Shutdown();

  // The CPU threads each trial gets so that slots do not oversubscribe.
  int ThreadsPerTrial() const;

 private:
  struct Running {
    std::string study;
    int64_t trial = 0;
    int32_t attempt = 0;
    TrialAttempt* process = nullptr;
    std::string worker_id;  // the id it was acquired under
    std::string lease_token;
    bool lost = false;  // that id's lease is gone: killed, not finished
  };
  void SlotLoop(int slot);
  void HeartbeatLoop();
  // The registered worker id, registering (with backoff) if needed.
  std::string EnsureRegistered();
  void ForgetRegistration(const std::string& stale_id);
  // Runs one assignment: takes its GPUs, runs the attempt, relays its
  // reports, and tells the scheduler how it ended (unless it was fenced or
  // its lease was lost).
  void RunTrial(const std::string& worker_id,
                const v1::AcquireTrialResponse& assignment);
  // FinishTrial, retried with backoff while the scheduler is unreachable.
  void SendFinish(const v1::FinishTrialRequest& finish,
                  const std::string& name);
  // Lists a started attempt for heartbeats, Shutdown and lease loss;
  // returns its key in running_.
  int64_t Track(const v1::AcquireTrialResponse& assignment,
                const std::string& worker_id, TrialAttempt* attempt);
  // Whether its worker id's lease was lost meanwhile.
  bool Lost(int64_t run);
  // Unlists it; returns whether the worker is shutting down.
  bool Untrack(int64_t run);
  bool Stopping();
  bool Sleep(absl::Duration d);  // false when shutting down

  // Registers the dial_worker_* families (options_.metrics).
  void AddMetrics();
  // Outcome of an attempt on this worker: completed, failed, requeued,
  // lost.
  void CountEnd(const char* outcome);

  WorkerOptions options_;
  struct Meters {
    metrics::Counter* started = nullptr;
    metrics::Counter* restarts = nullptr;
    metrics::Family<metrics::Counter>* ended = nullptr;
    metrics::Gauge* buffered = nullptr;
    metrics::Counter* upload_bytes = nullptr;
    metrics::Histogram* upload_seconds = nullptr;
  } meters_;
  RealClock real_clock_;
  RealSleeper real_sleeper_;
  const Clock* const clock_;
  Sleeper* const sleeper_;
  // Makes checkpoint `id` of `study` local (transfer mode): a trainer
  // checkpoint already in the cache is used as it is; anything else is
  // downloaded.
  absl::Status Fetch(const std::string& study, const std::string& id);

  // The checkpoint root (for PBT copies); null if it cannot be made.
  std::unique_ptr<storage::FileCheckpointStore> checkpoints_;
  std::unique_ptr<CheckpointUploader> uploader_;  // transfer mode only
  absl::Mutex register_mu_;                       // one registration at a time
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  GpuPool gpus_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  int64_t next_run_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dial::worker
