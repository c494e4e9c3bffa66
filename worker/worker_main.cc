// dial-worker: runs trials for a scheduler on this machine. GPUs come from
// --gpus, CUDA_VISIBLE_DEVICES or a Slurm job's SLURM_JOB_GPUS (VisibleGpus);
// without GPUs it offers --slots CPU slots.
// SIGTERM/SIGINT: stop taking trials, let running ones checkpoint, exit.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/spec.h"
#include "http/server.h"
#include "spdlog/spdlog.h"
#include "transfer/transfer_client.h"
#include "worker/gpu_pool.h"
#include "worker/isolation.h"
#include "worker/startup_checks.h"
#include "worker/trial_users.h"
#include "worker/worker.h"

ABSL_FLAG(std::string, scheduler, "",
          "Scheduler address (default: $DIAL_SCHEDULER or 127.0.0.1:7070)");
ABSL_FLAG(int32_t, slots, 1, "Trials run at once (CPU slots)");
ABSL_FLAG(std::string, gpus, "",
          "Comma-separated GPU ids to use (default: $CUDA_VISIBLE_DEVICES, "
          "else $SLURM_JOB_GPUS, else none inside a Slurm job, else every "
          "GPU the NVIDIA driver lists)");
ABSL_FLAG(int32_t, trials_per_gpu, 1,
          "Trials that may share one GPU (small trials on big GPUs)");
ABSL_FLAG(int32_t, cpus, 0,
          "CPU cores to share among slots (0: those this process may run "
          "on, e.g. a Slurm job's or a cpuset's)");
ABSL_FLAG(std::string, trainer, "",
          "Path of dial-train (default: next to dial-worker, then PATH)");
ABSL_FLAG(std::string, work_dir, "dial-worker",
          "Directory for trial logs (created if missing)");
ABSL_FLAG(
    std::string, checkpoint_root, "dial-checkpoints",
    "Checkpoint root shared with the scheduler (local or a shared mount)");
ABSL_FLAG(std::string, checkpoint_cache, "",
          "Keep checkpoints on this host's disk, in this directory, and "
          "upload them to the scheduler (for hosts that share no filesystem "
          "with it; docs/checkpoint-transfer.md). Replaces --checkpoint-root");
ABSL_FLAG(int32_t, upload_wait_s, 600,
          "With --checkpoint-cache: seconds a finished trial waits for its "
          "checkpoint uploads before it is reported finished");
ABSL_FLAG(int32_t, grace_s, 30,
          "Seconds a trial gets to checkpoint and exit on shutdown");
ABSL_FLAG(int32_t, acquire_wait_ms, 5000, "Long-poll wait of AcquireTrial");
ABSL_FLAG(std::string, host, "", "Host name to register (default: hostname)");
ABSL_FLAG(std::vector<std::string>, label, {},
          "KEY=VALUE: a label studies may select this worker by "
          "(trial.resources.selector); repeat for more. `host` and, with "
          "GPUs, `gpu.model` (from nvidia-smi) are added unless given");
ABSL_FLAG(std::string, ack_log, "",
          "Audit log: append a line 'worker study trial attempt step' for "
          "every report the scheduler acknowledged (default: none)");
ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|off");
ABSL_FLAG(std::vector<std::string>, allow_command, {},
          "Glob (fnmatch, '*' does not cross '/') that argv[0] of a command "
          "trial must match to run here; repeat the flag or give a comma "
          "list. The built-in trainer always runs. Default: none");
ABSL_FLAG(bool, allow_any_command, false,
          "Run any command trial (trusted studies only)");
ABSL_FLAG(std::vector<std::string>, pass_env,
          absl::StrSplit(dial::worker::kDefaultPassEnv, ','),
          "Names or globs of this worker's environment variables that trials "
          "see; repeat or give a comma list (replaces the default). The "
          "worker's DIAL_* variables never pass");
ABSL_FLAG(std::vector<std::string>, allow_env, {},
          "Names or globs a study may set in trial.command.env and "
          "secret_env besides the default (plain names of letters, digits "
          "and '_' outside the loader, shell, interpreter and runtime "
          "families: LD_*, BASH*, PYTHON*, CUDA_*, NCCL_*, OMP_*, ...); repeat "
          "or give a comma list. A reserved name passes only when named here "
          "exactly");
ABSL_FLAG(std::string, run_as, "",
          "Unprivileged user (name or uid) that trials run as; the worker "
          "itself must be root to switch. Default: the worker's own user");
ABSL_FLAG(std::string, run_as_range, "",
          "FIRST-LAST: run each trial attempt as a Unix user of its own, a "
          "uid drawn from this range (uids and gids with no passwd or group "
          "entry, at least --slots of them, disjoint from every other "
          "worker's range on this host or checkpoint root), in 0700 "
          "directories with private /tmp, /var/tmp, /dev/shm and /proc, so "
          "trials cannot reach each other's files or processes. Needs root "
          "and a root-owned --checkpoint-root; excludes --run-as");
ABSL_FLAG(int64_t, trial_max_pids, 4096,
          "Processes one trial may have (pids.max of its cgroup; under "
          "--run-as-range also its user's RLIMIT_NPROC; with --run-as that "
          "user's RLIMIT_NPROC, times --slots); 0: no limit. Given "
          "explicitly where nothing can enforce it, the worker refuses to "
          "start (see --allow-unenforced-limits)");
ABSL_FLAG(int64_t, trial_tmp_mb, 1024,
          "Under --run-as-range: the size in MiB of each attempt's private "
          "/tmp, /var/tmp and /dev/shm (tmpfs, emptied when it ends; counted "
          "against its memory limit where there is one)");
ABSL_FLAG(bool, allow_unenforced_limits, false,
          "Start even when an explicitly given --trial-max-pids cannot be "
          "enforced here (it is then listed in the registration's "
          "isolation.unenforced_limits)");
ABSL_FLAG(bool, insecure, false,
          "Send the token without TLS to a scheduler that is not on this "
          "host (a network you trust); refused otherwise");
ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token (preferred to --token and "
          "$DIAL_TOKEN, which a trial of the same user could read)");
ABSL_FLAG(std::string, secrets_dir, "",
          "Directory of secret files for trial.command.secret_env "
          "(<dir>/<secret-name>, trailing newline stripped)");
ABSL_FLAG(bool, secrets_from_env, false,
          "Let a secret missing from --secrets-dir come from this worker's "
          "environment (never its DIAL_* variables)");
ABSL_FLAG(int64_t, max_log_bytes, 64 << 20,
          "Size at which a trial's stdout or stderr file is rotated to "
          "<file>.1 (one older part is kept); 0: no cap");
ABSL_FLAG(std::string, cgroup, "auto",
          "Per-trial cgroup v2 scopes: auto (under this worker's cgroup when "
          "it can create them, else none), off, or the directory of a "
          "delegated cgroup to create them in");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the CA that signed the scheduler's certificate "
          "(enables TLS)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for mTLS (with --tls-key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the scheduler's certificate (default: the host "
          "of --scheduler)");
ABSL_FLAG(std::string, token, "",
          "Bearer token for the scheduler (default: $DIAL_TOKEN)");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port serving GET /metrics (Prometheus: busy slots, restarts, "
          "buffered reports, checkpoint uploads, GPU memory; counts only, no "
          "study data); empty: off");

namespace fs = std::filesystem;

namespace {

// Every --label value (absl keeps only the last of a repeated flag).
std::vector<std::string> LabelArgs(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    for (std::string_view prefix : {"--label=", "-label="}) {
      if (arg.substr(0, prefix.size()) == prefix) {
        out.emplace_back(arg.substr(prefix.size()));
      }
    }
    if ((arg == "--label" || arg == "-label") && i + 1 < argc) {
      out.emplace_back(argv[++i]);
    }
  }
  return out;
}

// Set on SIGTERM/SIGINT: checkpoint uploads stop retrying.
std::atomic<bool> stopping{false};

// Abseil's list flags keep the last occurrence only: merges every
// "--name=value" and "--name value" of the list flags `names` (after
// DashesToUnderscores) into one comma list, so repeating such a flag adds
// to it. Returns the new argv's storage; `argv` points into it.
std::vector<std::string> MergeRepeatedListFlags(
    std::vector<std::string> args, const std::vector<std::string>& names,
    std::vector<char*>* argv) {
  std::vector<std::string> out;
  std::map<std::string, std::vector<std::string>> values;
  bool done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") done = true;
    bool merged = false;
    for (const auto& name : names) {
      if (done || i == 0) break;
      for (const std::string& prefix : {"--" + name, "-" + name}) {
        if (a == prefix && i + 1 < args.size()) {
          values[name].push_back(args[++i]);
          merged = true;
        } else if (a.rfind(prefix + "=", 0) == 0) {
          values[name].push_back(a.substr(prefix.size() + 1));
          merged = true;
        }
        if (merged) break;
      }
      if (merged) break;
    }
    if (!merged) out.push_back(a);
  }
  for (const auto& [name, list] : values) {
    out.insert(out.begin() + 1, "--" + name + "=" + absl::StrJoin(list, ","));
  }
  argv->clear();
  for (auto& a : out) argv->push_back(a.data());
  argv->push_back(nullptr);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("dial-worker --scheduler=ADDR --slots=N");
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
  std::vector<char*> merged_argv;
  auto merged_storage = MergeRepeatedListFlags(
      arg_storage, {"allow_command", "pass_env", "allow_env"}, &merged_argv);
  argc = static_cast<int>(merged_argv.size()) - 1;
  argv = merged_argv.data();
  absl::ParseCommandLine(argc, argv);
  dial::InitLogging("dial-worker", absl::GetFlag(FLAGS_log_level));

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string target = absl::GetFlag(FLAGS_scheduler);
  if (target.empty()) {
    const char* env = std::getenv("DIAL_SCHEDULER");
    target = env && *env ? env : "127.0.0.1:7070";
  }
  dial::worker::GrpcSchedulerClientOptions client_options;
  client_options.target = target;
  client_options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  client_options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  client_options.tls_key = absl::GetFlag(FLAGS_tls_key);
  client_options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  // Trials of this worker's user cannot read its memory or environment
  // (/proc/<pid>/environ, ptrace) once it is not dumpable.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  absl::StatusOr<std::string> token = dial::TakeToken(
      absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) {
    spdlog::error("{}", token.status().ToString());
    return 2;
  }
  client_options.token = *token;
  client_options.insecure = absl::GetFlag(FLAGS_insecure);
  auto client = dial::worker::NewGrpcSchedulerClient(client_options);
  if (!client.ok()) {
    spdlog::error("{}", client.status().ToString());
    return 2;
  }
  dial::worker::WorkerOptions options;
  options.client = client->get();
  options.slots = absl::GetFlag(FLAGS_slots);
  if (options.slots < 1) {
    spdlog::error("--slots must be at least 1");
    return 2;
  }
  options.gpus = dial::worker::VisibleGpus(
      absl::GetFlag(FLAGS_gpus),
      [](const char* name) -> std::optional<std::string> {
        const char* value = std::getenv(name);
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      },
      dial::worker::DriverGpuCount());
  options.trials_per_gpu = absl::GetFlag(FLAGS_trials_per_gpu);
  if (options.trials_per_gpu < 1) {
    spdlog::error("--trials-per-gpu must be at least 1");
    return 2;
  }
  options.cpus = absl::GetFlag(FLAGS_cpus);
  options.host = absl::GetFlag(FLAGS_host);
  if (!options.host.empty()) {
    absl::Status host = dial::worker::CheckHostFlag(options.host);
    if (!host.ok()) {
      spdlog::error("{}", std::string(host.message()));
      return 2;
    }
  }
  for (const std::string& label : LabelArgs(argc, argv)) {
    const size_t eq = label.find('=');
    const std::string key = label.substr(0, eq);
    const std::string value =
        eq == std::string::npos ? "" : label.substr(eq + 1);
    absl::Status valid =
        dial::ValidateWorkerLabel("--label " + key, key, value);
    if (eq == std::string::npos) {
      valid = absl::InvalidArgumentError("--label: '" + label +
                                         "' is not KEY=VALUE");
    }
    if (!valid.ok()) {
      spdlog::error("{}", std::string(valid.message()));
      return 1;
    }
    options.labels[key] = value;
  }
  if (!options.gpus.empty() && options.labels.count("gpu.model") == 0) {
    const std::string model = dial::worker::ReadGpuModel(options.gpus);
    if (!model.empty()) options.labels["gpu.model"] = model;
  }
  options.trainer_path = absl::GetFlag(FLAGS_trainer);
  if (options.trainer_path.empty()) {
    options.trainer_path = dial::DefaultTrainerPath();
  }
  std::error_code ec;
  fs::create_directories(absl::GetFlag(FLAGS_work_dir), ec);
  const std::string cache = absl::GetFlag(FLAGS_checkpoint_cache);
  const std::string root =
      cache.empty() ? absl::GetFlag(FLAGS_checkpoint_root) : cache;
  fs::create_directories(root, ec);
  options.work_dir = fs::absolute(absl::GetFlag(FLAGS_work_dir)).string();
  options.checkpoint_root = fs::absolute(root).string();
  std::unique_ptr<dial::transfer::CheckpointTransfer> transfer;
  if (!cache.empty()) {
    dial::ConnectOptions connect;
    connect.target = target;
    connect.tls_ca = client_options.tls_ca;
    connect.tls_cert = client_options.tls_cert;
    connect.tls_key = client_options.tls_key;
    connect.tls_server_name = client_options.tls_server_name;
    connect.token = client_options.token;
    connect.insecure = client_options.insecure;
    dial::transfer::GrpcCheckpointTransferOptions transfer_options;
    // Retries end at shutdown: the uploads left are given up (their trials
    // resume from their last uploaded checkpoint).
    transfer_options.sleep = [](absl::Duration d) {
      absl::SleepFor(d);
      return !stopping.load();
    };
    auto made =
        dial::transfer::ConnectCheckpointTransfer(connect, transfer_options);
    if (!made.ok()) {
      spdlog::error("{}", made.status().ToString());
      return 2;
    }
    transfer = std::move(*made);
    options.transfer = transfer.get();
    options.upload_wait = absl::Seconds(absl::GetFlag(FLAGS_upload_wait_s));
    spdlog::info("checkpoints: cache {}, uploaded to the scheduler",
                 options.checkpoint_root);
  }
  options.grace = absl::Seconds(absl::GetFlag(FLAGS_grace_s));
  options.ack_log = absl::GetFlag(FLAGS_ack_log);
  options.acquire_wait =
      absl::Milliseconds(absl::GetFlag(FLAGS_acquire_wait_ms));
  for (const auto& glob : absl::GetFlag(FLAGS_allow_command)) {
    if (!glob.empty()) options.policy.allowed_commands.push_back(glob);
  }
  options.policy.allow_any_command = absl::GetFlag(FLAGS_allow_any_command);
  options.policy.pass_env.clear();
  for (const auto& name : absl::GetFlag(FLAGS_pass_env)) {
    if (!name.empty()) options.policy.pass_env.push_back(name);
  }
  options.policy.secrets_dir = absl::GetFlag(FLAGS_secrets_dir);
  if (!options.policy.secrets_dir.empty()) {
    options.policy.secrets_dir =
        fs::absolute(options.policy.secrets_dir).string();
  }
  options.policy.secrets_from_env = absl::GetFlag(FLAGS_secrets_from_env);
  options.policy.max_pids = absl::GetFlag(FLAGS_trial_max_pids);
  if (options.policy.max_pids < 0) {
    spdlog::error("--trial-max-pids must be 0 or more");
    return 2;
  }
  for (const auto& name : absl::GetFlag(FLAGS_allow_env)) {
    if (!name.empty()) options.policy.allowed_env.push_back(name);
  }
  if (!options.policy.allowed_env.empty()) {
    spdlog::info(
        "--allow-env: studies may also set {} (exact names reopen a reserved "
        "family; globs add only names outside them)",
        absl::StrJoin(options.policy.allowed_env, ", "));
  }
  options.policy.private_tmp_mb = absl::GetFlag(FLAGS_trial_tmp_mb);
  if (options.policy.private_tmp_mb < 1) {
    spdlog::error("--trial-tmp-mb must be at least 1");
    return 2;
  }
  if (const std::string user = absl::GetFlag(FLAGS_run_as); !user.empty()) {
    auto run_as = dial::LookUpRunAs(user);
    if (!run_as.ok()) {
      spdlog::error("--run-as: {}", std::string(run_as.status().message()));
      return 2;
    }
    if (geteuid() != 0) {
      spdlog::error("--run-as={}: the worker must run as root to switch users",
                    user);
      return 2;
    }
    options.policy.run_as = *run_as;
    spdlog::info("trials run as user {} (uid {})", run_as->name, run_as->uid);
  }
  options.max_log_bytes = absl::GetFlag(FLAGS_max_log_bytes);
  if (options.max_log_bytes < 0) {
    spdlog::error("--max-log-bytes must be 0 or more");
    return 2;
  }
  std::unique_ptr<dial::worker::Cgroups> cgroups;
  const std::string cgroup = absl::GetFlag(FLAGS_cgroup);
  if (cgroup != "off") {
    auto made = dial::worker::Cgroups::Create(
        {cgroup == "auto" ? std::string() : cgroup});
    if (made.ok()) {
      cgroups = std::move(*made);
      options.cgroups = cgroups.get();
      spdlog::info(
          "trials run in cgroup v2 scopes under {} (memory limits: {})",
          cgroups->parent(), cgroups->memory_limits() ? "yes" : "no");
    } else if (cgroup != "auto") {
      spdlog::error("--cgroup={}: {}", cgroup, made.status().ToString());
      return 2;
    } else {
      spdlog::info(
          "no cgroup v2 scopes for trials ({}); a supervisor per trial kills "
          "what it leaves behind",
          std::string(made.status().message()));
    }
  }
  std::unique_ptr<dial::worker::TrialUsers> users;
  std::optional<dial::worker::UidRange> uid_range;
  if (const std::string range = absl::GetFlag(FLAGS_run_as_range);
      !range.empty()) {
    auto parsed = dial::worker::ParseUidRange(range);
    if (!parsed.ok()) {
      spdlog::error("{}", std::string(parsed.status().message()));
      return 2;
    }
    uid_range = *parsed;
  }
  bool private_mounts = true;
  std::vector<std::string> degraded;
  if (uid_range && geteuid() == 0) {
    // The range must be this worker's alone, and what an earlier run of it
    // left behind goes back to root before any uid is drawn again.
    absl::Status checked =
        dial::worker::CheckUidRange(*uid_range, options.slots);
    if (checked.ok()) {
      checked = dial::worker::CheckRootDirectory(
          cache.empty() ? "--checkpoint-root" : "--checkpoint-cache",
          options.checkpoint_root);
    }
    if (checked.ok()) {
      checked = dial::worker::MakeTraverseOnly(options.work_dir, true);
      if (!checked.ok()) {
        checked = absl::Status(checked.code(),
                               absl::StrCat("--work-dir: ", checked.message()));
      }
    }
    if (checked.ok()) checked = dial::worker::KillRangeProcesses(*uid_range);
    if (!checked.ok()) {
      spdlog::error("{}", std::string(checked.message()));
      return 2;
    }
    auto reclaimed = dial::worker::ReclaimRangeDirectories(
        *uid_range, options.checkpoint_root, options.work_dir);
    if (!reclaimed.ok()) {
      spdlog::error("--run-as-range: {}", reclaimed.status().ToString());
      return 2;
    }
    if (*reclaimed > 0) {
      spdlog::warn(
          "--run-as-range: {} directories of range uids (left by an earlier "
          "run) handed back to root",
          *reclaimed);
    }
    const std::vector<std::string> keep = {options.checkpoint_root,
                                           options.work_dir};
    absl::Status probe =
        dial::worker::ProbeChildSetup(uid_range->first, true, keep);
    if (!probe.ok()) {
      degraded.push_back(absl::StrCat(
          "no private /proc, /tmp, /var/tmp, /dev/shm or IPC namespace for "
          "trials (",
          probe.message(),
          "; a container needs CAP_SYS_ADMIN): trials see each other's "
          "processes and share temporary files"));
      private_mounts = false;
      absl::Status plain =
          dial::worker::ProbeChildSetup(uid_range->first, false, keep);
      if (!plain.ok()) {
        spdlog::error("--run-as-range: cannot run a process as uid {} here: {}",
                      uid_range->first, std::string(plain.message()));
        return 2;
      }
    }
    if (auto links = dial::worker::HardlinkProtectionProblem()) {
      degraded.push_back(*links);
    }
  }
  dial::worker::IsolationInputs isolation_in;
  isolation_in.root = geteuid() == 0;
  isolation_in.uid_range = uid_range.has_value();
  isolation_in.run_as = absl::GetFlag(FLAGS_run_as);
  isolation_in.cgroups = cgroups != nullptr;
  isolation_in.memory_controller = cgroups && cgroups->memory_limits();
  isolation_in.pids_controller = cgroups && cgroups->pid_limits();
  isolation_in.max_pids = options.policy.max_pids;
  for (const std::string& arg : arg_storage) {
    if (arg == "--") break;
    for (const std::string prefix : {"--trial_max_pids", "-trial_max_pids"}) {
      if (arg == prefix || arg.rfind(prefix + "=", 0) == 0) {
        isolation_in.max_pids_explicit = true;
      }
    }
  }
  isolation_in.allow_unenforced = absl::GetFlag(FLAGS_allow_unenforced_limits);
  isolation_in.degraded = absl::StrJoin(degraded, "; ");
  auto isolation = dial::worker::DescribeIsolation(isolation_in);
  if (!isolation.ok()) {
    spdlog::error("{}", std::string(isolation.status().message()));
    return 2;
  }
  options.isolation = *isolation;
  if (uid_range) {
    users =
        std::make_unique<dial::worker::TrialUsers>(*uid_range, private_mounts);
    options.users = users.get();
    options.policy.run_as.reset();
    spdlog::info(
        "isolation: per-attempt users, uids {}-{}: each attempt runs as a "
        "user of its own in 0700 directories{}",
        uid_range->first, uid_range->last,
        private_mounts ? ", with private /proc, /tmp, /var/tmp, /dev/shm" : "");
    if (!isolation->isolated()) {
      spdlog::warn("isolation: not isolated: {}", isolation->reason());
    }
  } else {
    spdlog::warn("isolation: none: {}", isolation->reason());
  }
  spdlog::info("limits enforced per trial: {}; not enforced: {}",
               isolation->enforced_limits().empty()
                   ? std::string("none")
                   : absl::StrJoin(isolation->enforced_limits(), ", "),
               isolation->unenforced_limits().empty()
                   ? std::string("none")
                   : absl::StrJoin(isolation->unenforced_limits(), ", "));
  if (options.policy.allow_any_command) {
    spdlog::warn("--allow-any-command: any study can run any program here");
  } else {
    spdlog::info("command trials allowed: {}",
                 options.policy.allowed_commands.empty()
                     ? std::string("none (the built-in trainer only)")
                     : absl::StrJoin(options.policy.allowed_commands, " "));
  }

  dial::metrics::Registry registry;
  options.metrics = &registry;
  dial::worker::Worker worker(options);
  // After the worker (its collector reads it), so stopped before it goes.
  // Plain HTTP, no token: counts only (docs/decisions.md).
  dial::http::ServerOptions metrics_options;
  metrics_options.listen = absl::GetFlag(FLAGS_metrics_listen);
  metrics_options.listen_flag = "--metrics-listen";
  metrics_options.handler_threads = 2;
  dial::http::Server metrics_http(metrics_options);
  if (!metrics_options.listen.empty()) {
    metrics_http.Get("/metrics", [&registry](const dial::http::Request&,
                                             dial::http::Response& res) {
      res.set_content(registry.Render(), "text/plain; version=0.0.4");
    });
    auto port = metrics_http.Start();
    if (!port.ok()) {
      spdlog::error("{}", port.status().ToString());
      return 1;
    }
    // Machine-readable, for scripts and tests.
    std::printf("dial-worker metrics on port %d\n", *port);
    std::fflush(stdout);
  }
  std::thread signals([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    spdlog::info("signal {}: stopping; running trials checkpoint and exit",
                 signal);
    stopping = true;
    worker.Shutdown();
  });
  spdlog::info("worker for {}: {} slots, trainer {}", target, options.slots,
               options.trainer_path);
  auto status = worker.Run();
  // Run returns only after Shutdown; the signal thread has finished.
  signals.join();
  metrics_http.Stop();
  return status.ok() ? 0 : 1;
}
