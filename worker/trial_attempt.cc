#include "worker/trial_attempt.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/trial_protocol.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"

namespace dial::worker {
namespace {

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

std::string AttemptName(const v1::AcquireTrialResponse& a) {
  return absl::StrCat(a.trial().study(), "/", a.trial().number(), " attempt ",
                      a.attempt());
}

// Creates the trial's checkpoint directory and hands it to the user trials
// run as. Only the directory itself: what the worker put in it (restore
// copies) stays the worker's and readable, and nothing below is walked,
// since another trial of the same user could swap a subdirectory for a
// link to anywhere while a root walk went through it. The directories
// above stay the worker's.
absl::Status GiveTrialDirectory(const std::string& dir, const RunAs& user) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || lchown(dir.c_str(), user.uid, user.gid) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot give the checkpoint directory ", dir, " to user ", user.name,
        " (--run-as): ", ec ? ec.message() : std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrialAttempt>> TrialAttempt::Start(
    const TrialAttemptOptions& options) {
  const v1::AcquireTrialResponse& a = options.assignment;
  const v1::Trial& trial = a.trial();
  const bool command = !a.run().has_trainer();
  if (a.run().resources().require_isolation() && options.users == nullptr) {
    return Refused(absl::PermissionDeniedError(
        "trial.resources.require_isolation: this worker cannot isolate "
        "trials from each other (it runs no per-attempt users: root and "
        "--run-as-range are needed)"));
  }
  TrialProcessOptions p;
  // The trial sees the variables --pass-env lets through, not the whole
  // environment of the worker (whose token and credentials stay here).
  p.env = PassedEnvironment(options.policy, options.worker_env);
  if (!command) {
    // The built-in trainer is always allowed.
    p.argv = {options.trainer_path};
    std::string knobs;
    (void)google::protobuf::util::MessageToJsonString(a.run().trainer(),
                                                      &knobs);
    p.env[kEnvTrainerKnobs] = knobs;
  } else {
    p.argv.assign(a.run().command().argv().begin(),
                  a.run().command().argv().end());
    absl::Status allowed = CheckCommand(options.policy, p.argv);
    if (!allowed.ok()) return allowed;
    // The study chooses these names and values; the worker decides which
    // names it accepts (BASH_ENV, LD_PRELOAD and the like run code).
    for (const auto& [k, v] : a.run().command().env()) {
      absl::Status env_ok =
          CheckTrialEnv(options.policy, "trial.command.env", k);
      if (!env_ok.ok()) return env_ok;
      p.env[k] = v;
    }
    for (const auto& [k, secret] : a.run().command().secret_env()) {
      absl::Status env_ok =
          CheckTrialEnv(options.policy, "trial.command.secret_env", k);
      if (!env_ok.ok()) return env_ok;
    }
    auto secrets = ResolveSecrets(
        options.policy, a.run().command().secret_env(), options.worker_env);
    if (!secrets.ok()) return secrets.status();
    for (auto& [k, v] : *secrets) p.env[k] = std::move(v);
  }
  absl::Status restore =
      CheckRestoreCheckpoint(a.restore_checkpoint(), trial.study(),
                             trial.number(), options.checkpoints);
  if (!restore.ok()) return restore;
  const std::string threads = std::to_string(options.cpu_threads);
  if (trial.has_seed()) p.env[kEnvSeed] = std::to_string(trial.seed());
  p.env[kEnvStudy] = trial.study();
  p.env[kEnvTrial] = std::to_string(trial.number());
  p.env[kEnvAttempt] = std::to_string(a.attempt());
  p.env[kEnvTrialParams] = ParamsJson(trial.params());
  p.env[kEnvCheckpointRoot] = options.checkpoint_root;
  p.env[kEnvCheckpointDir] = absl::StrCat(options.checkpoint_root, "/",
                                          trial.study(), "/", trial.number());
  p.env[kEnvRestoreCheckpoint] = a.restore_checkpoint();
  p.env[kEnvStartStep] = std::to_string(a.start_step());
  p.env[kEnvCpuThreads] = threads;
  p.env["OMP_NUM_THREADS"] = threads;
  p.env["MKL_NUM_THREADS"] = threads;
  p.env["OPENBLAS_NUM_THREADS"] = "1";
  p.env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(options.gpus, ",");
  const std::string log = absl::StrCat(options.work_dir, "/", trial.study(),
                                       "-", trial.number(), "-a", a.attempt());
  std::unique_ptr<UserLease> lease;
  if (options.users != nullptr) {
    auto got = options.users->Acquire();
    if (!got.ok()) return got.status();
    lease = std::move(*got);
    // Parents others may pass through but not list; the trial's own
    // directories 0700 and its uid's alone.
    // The checkpoint directory is reached from the root (root's, checked
    // at start-up) through no link; the work directory is always a fresh
    // one, whatever an earlier attempt or study of the same name left.
    const std::string work_name = absl::StrCat(
        trial.study(), "-", trial.number(), "-a", a.attempt(), ".work");
    const std::string work = options.work_dir + "/" + work_name;
    for (absl::Status s :
         {MakeTraverseOnly(options.checkpoint_root, /*own=*/false),
          MakeTraverseOnly(options.work_dir, /*own=*/true),
          lease->GiveBeneath(options.checkpoint_root,
                             {trial.study(), std::to_string(trial.number())}),
          lease->GiveScratch(options.work_dir, work_name)}) {
      if (!s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot prepare the attempt's directories for uid ",
                         lease->uid(), ": ", s.message()));
      }
    }
    p.run_as = lease->run_as();
    p.max_user_processes = options.policy.max_pids;
    p.private_proc = options.users->private_mounts();
    p.private_tmp_bytes = options.policy.private_tmp_mb << 20;
    p.private_tmp_keep = {options.checkpoint_root, options.work_dir};
    p.cwd = work;
    p.env["HOME"] = work;
    p.env["TMPDIR"] = work;
    p.env["USER"] = p.run_as->name;
    p.env["LOGNAME"] = p.run_as->name;
  } else if (const auto& user = options.policy.run_as) {
    p.run_as = user;
    p.max_user_processes = options.policy.max_pids * options.slots;
    p.env["HOME"] = user->home;
    p.env["USER"] = user->name;
    p.env["LOGNAME"] = user->name;
    absl::Status given = GiveTrialDirectory(p.env[kEnvCheckpointDir], *user);
    if (!given.ok()) return given;
  }
  p.stdout_path = log + ".out";
  p.stderr_path = log + ".err";
  p.max_log_bytes = options.max_log_bytes;
  const int64_t memory_mb = a.run().resources().memory_mb();
  const bool limit = options.cgroups != nullptr &&
                     options.cgroups->memory_limits() && memory_mb > 0;
  if (memory_mb > 0 && !limit) {
    spdlog::warn(
        "{}: trial.resources.memory_mb={} is not enforced: this worker has "
        "no cgroup v2 memory controller",
        AttemptName(a), memory_mb);
  }
  if (options.cgroups != nullptr) {
    auto scope = options.cgroups->NewScope(limit ? memory_mb : 0,
                                           options.policy.max_pids);
    if (!scope.ok()) {
      return absl::Status(scope.status().code(),
                          absl::StrCat("trial.resources.memory_mb: ",
                                       scope.status().message()));
    }
    p.cgroup = std::move(*scope);
  }

  spdlog::info("{}: starting {}{}", AttemptName(a),
               p.argv.empty() ? "" : p.argv[0],
               a.restore_checkpoint().empty()
                   ? ""
                   : " from checkpoint " + a.restore_checkpoint());
  auto process = TrialProcess::Start(std::move(p));
  if (!process.ok()) return process.status();
  return std::unique_ptr<TrialAttempt>(
      new TrialAttempt(options, std::move(lease), std::move(*process)));
}

TrialAttempt::TrialAttempt(const TrialAttemptOptions& options,
                           std::unique_ptr<UserLease> user,
                           std::unique_ptr<TrialProcess> process)
    : options_(options),
      name_(AttemptName(options.assignment)),
      user_(std::move(user)),
      process_(std::move(process)) {}

AttemptEnd TrialAttempt::RelayReports(ReportRelay& relay) {
  const v1::AcquireTrialResponse& a = options_.assignment;
  const v1::Trial& trial = a.trial();
  AttemptEnd end;
  const absl::Duration timeout = a.run().timeout_s() > 0
                                     ? absl::Seconds(a.run().timeout_s())
                                     : absl::InfiniteDuration();
  ReadEnd read_end = ReadEnd::kNone;
  while (auto line = process_->ReadLine(timeout, &read_end)) {
    auto report = ParseReport(*line);
    if (!report.ok()) {
      end.protocol_error = std::string(report.status().message());
      break;
    }
    report->checkpoint =
        CheckpointIdOf(report->checkpoint, options_.checkpoint_root,
                       trial.study(), trial.number());
    v1::ReportProgressRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_study(trial.study());
    request.set_trial(trial.number());
    request.set_attempt(a.attempt());
    request.set_lease_token(a.lease_token());
    request.set_step(report->step);
    for (const auto& [k, v] : report->metrics) {
      (*request.mutable_metrics())[k] = v;
    }
    request.set_checkpoint(report->checkpoint);
    const bool upload = options_.upload && !report->checkpoint.empty();
    request.set_checkpoint_uploading(upload);
    auto decision = relay.Send(request);
    if (!decision.ok()) {
      if (IsFence(decision.status())) {
        spdlog::warn("{}: {}; killing it", name_,
                     std::string(decision.status().message()));
        end.fenced = true;
      } else if (absl::IsResourceExhausted(decision.status())) {
        end.protocol_error = std::string(decision.status().message());
      } else {
        // Refused for good (a malformed report): retrying cannot help, so
        // the attempt fails and counts toward max_failures_per_trial.
        end.rejected =
            absl::StrCat("the scheduler rejected the report of step ",
                         report->step, ": ", decision.status().message());
        spdlog::warn("{}: {}; killing it", name_, end.rejected);
      }
      break;
    }
    end.last_metrics = report->metrics;
    if (upload) options_.upload(report->step, report->checkpoint);
    TrialDecision out{ActionName(decision->action()), decision->reason(), "",
                      ""};
    if (decision->action() == v1::Decision::EXPLOIT) {
      // A private copy of the source checkpoint: the source may be deleted
      // later, the copy may not. Without a shared root the source comes
      // from the scheduler first.
      absl::Status fetched = options_.fetch
                                 ? options_.fetch(decision->source_checkpoint())
                                 : absl::OkStatus();
      if (!fetched.ok()) {
        end.protocol_error = absl::StrCat("cannot fetch checkpoint ",
                                          decision->source_checkpoint(), ": ",
                                          fetched.message());
        break;
      }
      // A store id (the built-in trainer's) is copied through the store; a
      // command trial's file or directory as it is.
      const std::string& source = decision->source_checkpoint();
      auto copy =
          !options_.checkpoints
              ? absl::StatusOr<storage::CheckpointInfo>(
                    absl::FailedPreconditionError("no checkpoint root"))
          : storage::CheckpointStore::ParseId(source).ok()
              ? options_.checkpoints->CopyInto(source, trial.study(),
                                               trial.number())
              : options_.checkpoints->CopyPathInto(
                    source, decision->source_trial(), decision->source_step(),
                    trial.study(), trial.number());
      if (!copy.ok()) {
        end.protocol_error = absl::StrCat("cannot copy checkpoint ",
                                          decision->source_checkpoint(), ": ",
                                          copy.status().message());
        break;
      }
      out.checkpoint = copy->id;
      out.params_json = ParamsJson(decision->new_params());
    }
    if (!process_->WriteLine(EncodeDecision(out)).ok()) break;
    if (decision->action() == v1::Decision::STOP ||
        decision->action() == v1::Decision::PAUSE) {
      // Told to end: it gets a grace period to exit, then its group is
      // killed, whether or not it keeps talking.
      end.stop_sent = true;
      break;
    }
  }
  if (read_end == ReadEnd::kTimedOut) {
    end.hung = true;
    end.protocol_error = absl::StrCat("no report for ", a.run().timeout_s(),
                                      " s (trial.timeout_s): hung, killed");
  } else if (read_end == ReadEnd::kLineTooLong) {
    end.protocol_error = absl::StrCat("a report line is longer than ",
                                      kMaxReportLineBytes, " bytes (1 MiB)");
  }
  return end;
}

int TrialAttempt::Stop(bool kill, absl::Duration grace) {
  if (kill) process_->Signal(SIGKILL);
  const int status = process_->WaitOrKill(grace);
  if (user_) user_->Release();
  return status;
}

void TrialAttempt::DescribeOutcome(const AttemptEnd& end, int wait_status,
                                   v1::FinishTrialRequest* finish) const {
  if (const CgroupScope* cgroup = process_->cgroup()) {
    if (auto cpu = cgroup->CpuSeconds()) finish->set_cpu_seconds(*cpu);
  }
  if (!end.rejected.empty()) {
    finish->set_error(end.rejected);
    finish->set_stderr_tail(process_->StderrTail(20));
  } else if (!end.protocol_error.empty()) {
    finish->set_error(end.hung ? end.protocol_error
                               : "trial protocol error: " + end.protocol_error);
    finish->set_stderr_tail(process_->StderrTail(20));
  } else if (end.stop_sent ||
             (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)) {
    for (const auto& [k, v] : end.last_metrics) {
      (*finish->mutable_final_metrics())[k] = v;
    }
  } else {
    std::string error = DescribeExit(wait_status);
    if (process_->killed_after_grace()) {
      // It closed its report pipe but did not exit.
      error = absl::StrCat(
          error, ": it closed its report pipe and did not exit in time");
    }
    finish->set_error(error);
    finish->set_stderr_tail(process_->StderrTail(20));
  }
}

void TrialAttempt::Signal(int signal) { process_->Signal(signal); }

}  // namespace dial::worker
