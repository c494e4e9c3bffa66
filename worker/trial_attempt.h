// TrialAttempt: one attempt of a trial as a child process that speaks the
// trial protocol. It builds the command line and environment from the
// scheduler's assignment, starts the process (TrialProcess), reads its
// reports, hands each to a ReportRelay and writes the decision back
// (copying the source checkpoint for a PBT EXPLOIT), and stops or kills it
// at the end. What the scheduler hears of it is the relay's business; when
// it is finished, and whether, is the worker's. Not thread-safe: one owner
// thread, except Signal, which any thread may call.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dial/v1/service.pb.h"
#include "storage/checkpoint_store.h"
#include "worker/cgroups.h"
#include "worker/report_relay.h"
#include "worker/trial_policy.h"
#include "worker/trial_process.h"
#include "worker/trial_users.h"

namespace dial::worker {

struct TrialAttemptOptions {
  std::string worker_id;  // the id the trial was acquired under
  v1::AcquireTrialResponse assignment;
  std::vector<std::string> gpus;  // its devices (CUDA_VISIBLE_DEVICES)
  int cpu_threads = 1;
  int slots = 1;             // the worker's trial slots (TrialPolicy::max_pids)
  std::string trainer_path;  // dial-train, for trainer trials
  std::string work_dir;      // the process's stdout and stderr files
  std::string checkpoint_root;  // shared with the scheduler and trials
  // Where EXPLOIT copies a source checkpoint, and what a restore
  // checkpoint is checked against; null: EXPLOIT and restoring fail the
  // attempt. Not owned.
  storage::FileCheckpointStore* checkpoints = nullptr;
  // What command trials may run and see (trainer trials always run).
  TrialPolicy policy;
  // The worker's environment, for policy.pass_env and secrets.
  std::map<std::string, std::string> worker_env;
  int64_t max_log_bytes = 0;  // per log file; 0: no cap
  // Per-trial cgroup scopes; null: the supervisor alone. Not owned.
  Cgroups* cgroups = nullptr;
  // Per-attempt users (--run-as-range): the attempt runs as a uid of its
  // own, in a fresh 0700 work directory (<work_dir>/<study>-<trial>-a<N>
  // .work: its cwd, HOME and TMPDIR; removed when it stops, and removed
  // first if it exists) and its 0700 checkpoint directory (handed back to
  // root when it stops, unless a newer attempt has it), with private /tmp,
  // /var/tmp, /dev/shm and IPC objects (TrialUsers::private_mounts);
  // policy.run_as is then unused.
  // Null: no isolation. Not owned.
  TrialUsers* users = nullptr;
  // Checkpoint transfer (--checkpoint-cache), both null on a shared root:
  // `upload` gets each acknowledged report's checkpoint (the report says
  // it is still uploading); `fetch` makes a checkpoint of the study local
  // before an EXPLOIT copies it.
  std::function<void(int64_t step, const std::string& id)> upload;
  std::function<absl::Status(const std::string& id)> fetch;
};

// How the report loop ended.
struct AttemptEnd {
  // The scheduler refused the attempt (see ReportRelay::Send): kill the
  // process, do not finish the attempt.
  bool fenced = false;
  bool stop_sent = false;  // told to STOP or PAUSE
  bool hung = false;       // no report for run.timeout_s
  // Set when the attempt failed by breaking the protocol (or hanging).
  std::string protocol_error;
  // Set when the scheduler rejected a report for good (not fencing): the
  // attempt fails with the scheduler's reason.
  std::string rejected;
  // The metrics of the last report that got a decision.
  std::map<std::string, double> last_metrics;
};

class TrialAttempt {
 public:
  // Starts the process. Errors fail the attempt, with the message as its
  // error: INVALID_ARGUMENT for an empty command or a bad secret name,
  // PERMISSION_DENIED, marked Refused (trial_policy.h), for a command or a
  // variable name this worker does not allow, or a spec that requires
  // isolation (resources.require_isolation) of a worker without
  // per-attempt users; NOT_FOUND
  // for a missing secret, FAILED_PRECONDITION for a restore checkpoint
  // that is not the trial's own or a memory limit that cannot be applied,
  // UNAVAILABLE when it cannot be started (pipes, log files, fork,
  // cgroup). A program that cannot be executed starts and exits with code
  // 127.
  static absl::StatusOr<std::unique_ptr<TrialAttempt>> Start(
      const TrialAttemptOptions& options);

  // "study/3 attempt 1", for log lines.
  const std::string& name() const { return name_; }

  // Relays reports until the process closes its report pipe or exits, is
  // told to STOP or PAUSE (the decision has been written), hangs, breaks
  // the protocol (a bad line, a line over 1 MiB), has a report rejected,
  // or is fenced.
  AttemptEnd RelayReports(ReportRelay& relay);

  // Ends the process: with `kill`, SIGKILLs its group at once; otherwise
  // waits up to `grace` for it to exit and then kills the group. Under a
  // per-attempt user, then kills whatever still runs as it and hands its
  // directories back to root (the uid goes back to the pool). Returns the
  // wait status.
  int Stop(bool kill, absl::Duration grace);

  // Fills in how the attempt ended for the scheduler: final metrics, or an
  // error with the tail of stderr. `wait_status` is Stop's.
  void DescribeOutcome(const AttemptEnd& end, int wait_status,
                       v1::FinishTrialRequest* finish) const;

  // Sends `signal` to the process group; any thread.
  void Signal(int signal);

 private:
  TrialAttempt(const TrialAttemptOptions& options,
               std::unique_ptr<UserLease> user,
               std::unique_ptr<TrialProcess> process);

  const TrialAttemptOptions options_;
  const std::string name_;
  // Before process_: released after the process tree is gone.
  const std::unique_ptr<UserLease> user_;
  const std::unique_ptr<TrialProcess> process_;
};

}  // namespace dial::worker
