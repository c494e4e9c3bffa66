// Worker: registers this machine's resources with the scheduler, runs one
// acquire loop per slot (long-polling AcquireTrial), runs each trial as a
// child process (dial-train for trainer trials, the given argv for command
// trials), relays reports and decisions, heartbeats, and reconnects with
// backoff when the scheduler goes away. Thread-safe: Run blocks; Shutdown
// may be called from any thread (e.g. a signal thread).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dial/v1/service.pb.h"
#include "storage/checkpoint_store.h"
#include "worker/gpu_pool.h"
#include "worker/scheduler_client.h"

namespace dial::worker {

class TrialProcess;

struct WorkerOptions {
  SchedulerClient* client = nullptr;  // required, not owned
  int slots = 1;
  std::vector<std::string> gpus;  // device ids; empty on CPU-only machines
  int trials_per_gpu = 1;         // trials that may share one device
  int cpus = 0;                   // 0: hardware concurrency
  std::string host;               // default: hostname
  std::string trainer_path;       // dial-train
  std::string work_dir;           // trial logs
  std::string checkpoint_root;    // shared with the scheduler and trials
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
    TrialProcess* process = nullptr;
    std::string worker_id;  // the id it was acquired under
    bool lost = false;      // that id's lease is gone: killed, not finished
  };
  void SlotLoop(int slot);
  void HeartbeatLoop();
  // The registered worker id, registering (with backoff) if needed.
  std::string EnsureRegistered();
  void ForgetRegistration(const std::string& stale_id);
  void RunTrial(const std::string& worker_id,
                const v1::AcquireTrialResponse& assignment);
  bool Sleep(absl::Duration d);  // false when shutting down

  WorkerOptions options_;
  // The shared checkpoint root (for PBT copies); null if it cannot be made.
  std::unique_ptr<storage::FileCheckpointStore> checkpoints_;
  absl::Mutex register_mu_;  // one registration at a time
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  GpuPool gpus_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  int64_t next_run_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dial::worker
