// dial-scheduler: the central service. Opens the SQLite database and the
// checkpoint root, serves StudyService and WorkerService, and shuts down
// cleanly on SIGTERM or SIGINT.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/logging.h"
#include "scheduler/http_server.h"
#include "scheduler/leadership.h"
#include "scheduler/server.h"
#include "spdlog/spdlog.h"
#include "storage/checkpoint_store.h"
#include "storage/open_study_store.h"
#include "storage/pg_study_store.h"

ABSL_FLAG(std::string, db, "dial.db",
          "The database: a SQLite file (created if missing; also "
          "sqlite:///path) or postgresql://USER@HOST:PORT/DBNAME?sslmode=... "
          "(docs/ha.md)");
ABSL_FLAG(std::string, db_password_file, "",
          "File whose first line is the PostgreSQL password (or use "
          "PGPASSFILE); never put it in --db");
ABSL_FLAG(int32_t, leader_lease_ms, 3000,
          "PostgreSQL --db: the leader lease; a standby takes over within "
          "it once the leader is gone (docs/ha.md)");
ABSL_FLAG(std::string, advertise, "",
          "PostgreSQL --db: HOST:PORT where clients reach this scheduler "
          "when it leads (standbys point clients there); default: the "
          "address it listens on");
ABSL_FLAG(std::string, checkpoint_root, "dial-checkpoints",
          "Checkpoint directory (local or a shared mount)");
ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(std::string, auth_tokens, "",
          "File of principals, one per line: '<role> <name> <sha256-hex of "
          "the token>' (roles admin, user, worker, viewer); reloaded on "
          "SIGHUP. Without it every caller is an anonymous admin and only "
          "loopback addresses are allowed");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA: require client certificates signed by it (mTLS)");
ABSL_FLAG(bool, insecure_allow_remote, false,
          "Allow a plaintext non-loopback --listen (tokens travel in the "
          "clear; a warning is logged at every start)");
ABSL_FLAG(std::string, http_listen, "",
          "host:port of the HTTP edge: the dashboard at /, the JSON API "
          "under /api/v1, /metrics for Prometheus (same TLS and token rules "
          "as --listen); empty: off");
ABSL_FLAG(std::vector<std::string>, http_allowed_hosts, {},
          "Host names (comma list) that HTTP requests may name in Host, "
          "besides IP addresses and localhost; '*' allows any (not "
          "recommended: DNS rebinding)");
ABSL_FLAG(int, http_max_connections_per_address, 32,
          "Open HTTP connections one client address may hold; more are "
          "answered 503 and closed (raise it behind a proxy or NAT)");
ABSL_FLAG(std::string, dashboard_dir, "auto",
          "The dashboard's built files; auto: ../share/dial/dashboard or "
          "../dashboard beside the binary (installed, or the build tree); "
          "empty: no dashboard");
ABSL_FLAG(std::string, backup_dir, "",
          "Directory BackupDatabase writes new files into (admins only; "
          "created if missing); "
          "empty: backups are off");
// Limits (docs/limits.md has every one with its default and why).
ABSL_FLAG(int32_t, max_studies_per_owner,
          dial::scheduler::Limits{}.max_studies_per_owner,
          "Studies one principal may own at a time");
ABSL_FLAG(int32_t, max_workers_per_principal,
          dial::scheduler::Limits{}.max_workers_per_principal,
          "Registered workers one principal may have at a time");
ABSL_FLAG(int32_t, max_parked_polls_per_principal,
          dial::scheduler::Limits{}.max_parked_polls_per_principal,
          "AcquireTrial long polls one principal may have waiting");
// What any gRPC connection may hold, before a token is checked
// (scheduler/grpc_limits.h, docs/security.md).
ABSL_FLAG(int64_t, grpc_memory_mb,
          dial::scheduler::GrpcLimits{}.memory_bytes >> 20,
          "Memory the gRPC port may use for connections and messages in "
          "flight, all together, in MiB");
ABSL_FLAG(int32_t, grpc_max_streams_per_connection,
          dial::scheduler::GrpcLimits{}.max_concurrent_streams,
          "Calls open at once on one gRPC connection");
ABSL_FLAG(
    int64_t, grpc_max_connection_idle_s,
    absl::ToInt64Seconds(dial::scheduler::GrpcLimits{}.max_connection_idle),
    "A gRPC connection with no call open this long is closed");
ABSL_FLAG(
    int64_t, grpc_max_connection_age_s,
    absl::ToInt64Seconds(dial::scheduler::GrpcLimits{}.max_connection_age),
    "A gRPC connection is asked to reconnect after this long (and "
    "closed 5 minutes later)");
ABSL_FLAG(int64_t, max_spec_bytes, dial::SpecLimits{}.max_spec_bytes,
          "Largest study spec accepted (serialized bytes)");
ABSL_FLAG(int32_t, max_parallel_trials, dial::SpecLimits{}.max_parallel_trials,
          "Largest budget.max_parallel_trials accepted");
ABSL_FLAG(int, suggestion_threads, 0,
          "Threads that run studies' suggestion work (model fits, new "
          "trials); one study's work runs on one at a time; 0: one per "
          "core");
ABSL_FLAG(int64_t, max_checkpoint_bytes_per_owner, 0,
          "Bytes of checkpoints one owner's studies may keep on the "
          "checkpoint root (what retention keeps); a report or upload over "
          "it is refused. 0: no quota");
ABSL_FLAG(int32_t, max_metrics_per_report,
          dial::scheduler::Limits{}.max_metrics_per_report,
          "Metrics one report may carry");
ABSL_FLAG(int64_t, max_watcher_queue,
          dial::scheduler::Limits{}.max_watcher_queue,
          "Events queued for a watcher that does not read before it is "
          "dropped");
ABSL_FLAG(int32_t, max_pending_ahead,
          dial::scheduler::Limits{}.max_pending_ahead,
          "PENDING trials a worker-run study queues ahead of demand");
ABSL_FLAG(bool, sync_full, true,
          "Fsync every commit fully (survives power loss); false survives "
          "process crashes only but commits faster");
ABSL_FLAG(bool, group_commit, true,
          "commit many clients' writes with one fsync; every answer still "
          "waits for the commit of what it reports (off: one commit per "
          "write)");
ABSL_FLAG(int32_t, worker_lease_ms, 10000,
          "A worker silent this long is lost and its trials are requeued");
ABSL_FLAG(std::string, quotas, "",
          "Owners' quotas: one line per owner, '<owner> weight=2 max_slots=16 "
          "max_gpus=8 max_priority=10', and a 'default' line "
          "(docs/scheduling.md); reloaded on SIGHUP");
ABSL_FLAG(absl::Duration, fair_share_half_life, absl::Hours(24 * 7),
          "Half-life of an owner's recent usage in fair share (as Slurm's "
          "PriorityDecayHalfLife)");
ABSL_FLAG(int32_t, preempt_grace_s, 30,
          "Seconds a preempted trial has to pause at a report before its "
          "attempt is fenced and requeued");
ABSL_FLAG(int32_t, preempt_min_run_s, 60,
          "Seconds an attempt runs before a higher-priority study may "
          "preempt it");
ABSL_FLAG(bool, fair_share_preempt, false,
          "Let an owner below its fair share preempt trials of an owner above "
          "it at equal priority (otherwise fair share only orders dispatch)");
ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|off");
ABSL_FLAG(bool, stop_on_stdin_eof, false,
          "Stop, as on SIGTERM, when standard input reaches its end: a parent "
          "that holds a pipe to it stops the scheduler by exiting, however "
          "it exits (the Python SDK's LocalScheduler)");

namespace {

// The dashboard beside the binary: installed (PREFIX/bin and
// PREFIX/share/dial/dashboard) or in the build tree (build/scheduler and
// build/dashboard); empty if neither has an index.html.
std::string FindDashboard() {
  std::error_code error;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  for (const char* dir : {"../share/dial/dashboard", "../dashboard"}) {
    const std::filesystem::path candidate = exe.parent_path() / dir;
    if (std::filesystem::exists(candidate / "index.html", error)) {
      return std::filesystem::weakly_canonical(candidate, error).string();
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "dial-scheduler --db=PATH --checkpoint-root=PATH --listen=ADDR");
  // Thousands of small requests a second: keep freed memory in the heap
  // rather than returning it to the kernel after every burst (madvise and
  // page faults were ~7% of the scheduler's time under load), and skip
  // absl's lock-order graph, which costs on every lock taken.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  dial::InitLogging("dial-scheduler", absl::GetFlag(FLAGS_log_level));

  // Block the stop signals before gRPC starts threads, then wait for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  if (absl::GetFlag(FLAGS_stop_on_stdin_eof)) {
    // The thread inherits the blocked signals: its SIGTERM goes to the
    // sigwait below like one sent from outside.
    std::thread([] {
      char buffer[256];
      ssize_t n;
      do {
        n = read(STDIN_FILENO, buffer, sizeof buffer);
      } while (n > 0 || (n < 0 && errno == EINTR));
      spdlog::info("standard input closed: shutting down");
      kill(getpid(), SIGTERM);
    }).detach();
  }

  std::unique_ptr<dial::auth::TokenTable> tokens;
  if (!absl::GetFlag(FLAGS_auth_tokens).empty()) {
    auto loaded =
        dial::auth::TokenTable::Load(absl::GetFlag(FLAGS_auth_tokens));
    if (!loaded.ok()) {
      spdlog::error("{}", loaded.status().ToString());
      return 1;
    }
    tokens = std::move(*loaded);
    spdlog::info("authentication on: {} principals from {}", tokens->size(),
                 absl::GetFlag(FLAGS_auth_tokens));
  }
  auto quotas =
      absl::GetFlag(FLAGS_quotas).empty()
          ? absl::StatusOr<std::unique_ptr<dial::scheduler::Quotas>>(
                std::make_unique<dial::scheduler::Quotas>())
          : dial::scheduler::Quotas::Load(absl::GetFlag(FLAGS_quotas));
  if (!quotas.ok()) {
    spdlog::error("{}", quotas.status().ToString());
    return 1;
  }

  // /metrics (--http-listen): outlives the store and the server.
  dial::metrics::Registry registry;
  // On PostgreSQL a call unanswered for a lease fails: a leader cut off
  // from the database must stop (and stand by) within about a lease, not
  // wait on the kernel's TCP timeouts.
  auto store = dial::storage::OpenStudyStore(
      {absl::GetFlag(FLAGS_db), absl::GetFlag(FLAGS_db_password_file),
       absl::GetFlag(FLAGS_sync_full), absl::GetFlag(FLAGS_group_commit),
       &registry, absl::Milliseconds(absl::GetFlag(FLAGS_leader_lease_ms))});
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }
  auto checkpoints = dial::storage::FileCheckpointStore::Create(
      {absl::GetFlag(FLAGS_checkpoint_root)});
  if (!checkpoints.ok()) {
    spdlog::error("{}", checkpoints.status().ToString());
    return 1;
  }
  dial::scheduler::SchedulerServerOptions options;
  options.store = store->get();
  options.checkpoints = checkpoints->get();
  options.checkpoint_root = (*checkpoints)->root();
  options.listen = absl::GetFlag(FLAGS_listen);
  options.tokens = tokens.get();
  options.quotas = quotas->get();
  options.fair_share_half_life = absl::GetFlag(FLAGS_fair_share_half_life);
  options.preempt_grace = absl::Seconds(absl::GetFlag(FLAGS_preempt_grace_s));
  options.preempt_min_run =
      absl::Seconds(absl::GetFlag(FLAGS_preempt_min_run_s));
  options.fair_share_preempt = absl::GetFlag(FLAGS_fair_share_preempt);
  if (options.preempt_grace < absl::ZeroDuration() ||
      options.preempt_min_run < absl::ZeroDuration()) {
    spdlog::error("--preempt-grace-s, --preempt-min-run-s: must be 0 or more");
    return 1;
  }
  if (options.fair_share_half_life <= absl::ZeroDuration()) {
    spdlog::error("--fair-share-half-life: must be above 0");
    return 1;
  }
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.insecure_allow_remote = absl::GetFlag(FLAGS_insecure_allow_remote);
  if (!absl::GetFlag(FLAGS_backup_dir).empty()) {
    // Created if missing (a fresh volume), owner-only: backups hold
    // everything the database does.
    std::error_code ec;
    if (std::filesystem::create_directories(absl::GetFlag(FLAGS_backup_dir),
                                            ec)) {
      std::filesystem::permissions(absl::GetFlag(FLAGS_backup_dir),
                                   std::filesystem::perms::owner_all, ec);
    }
    const auto dir =
        std::filesystem::canonical(absl::GetFlag(FLAGS_backup_dir), ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      spdlog::error("--backup-dir: {} is not a directory",
                    absl::GetFlag(FLAGS_backup_dir));
      return 1;
    }
    options.backup_dir = dir.string();
  }
  dial::scheduler::Limits& limits = options.limits;
  limits.max_studies_per_owner = absl::GetFlag(FLAGS_max_studies_per_owner);
  limits.max_workers_per_principal =
      absl::GetFlag(FLAGS_max_workers_per_principal);
  limits.max_parked_polls_per_principal =
      absl::GetFlag(FLAGS_max_parked_polls_per_principal);
  limits.spec.max_spec_bytes = absl::GetFlag(FLAGS_max_spec_bytes);
  limits.spec.max_parallel_trials = absl::GetFlag(FLAGS_max_parallel_trials);
  limits.max_metrics_per_report = absl::GetFlag(FLAGS_max_metrics_per_report);
  limits.max_checkpoint_bytes_per_owner =
      absl::GetFlag(FLAGS_max_checkpoint_bytes_per_owner);
  limits.max_watcher_queue = absl::GetFlag(FLAGS_max_watcher_queue);
  limits.max_pending_ahead = absl::GetFlag(FLAGS_max_pending_ahead);
  options.worker_lease =
      absl::Milliseconds(absl::GetFlag(FLAGS_worker_lease_ms));
  options.suggestion_threads = absl::GetFlag(FLAGS_suggestion_threads);
  if (options.suggestion_threads < 0) {
    spdlog::error("--suggestion-threads: must be 0 (one per core) or more");
    return 1;
  }
  dial::scheduler::GrpcLimits& grpc_limits = options.grpc_limits;
  grpc_limits.max_concurrent_streams =
      absl::GetFlag(FLAGS_grpc_max_streams_per_connection);
  grpc_limits.max_connection_idle =
      absl::Seconds(absl::GetFlag(FLAGS_grpc_max_connection_idle_s));
  grpc_limits.max_connection_age =
      absl::Seconds(absl::GetFlag(FLAGS_grpc_max_connection_age_s));
  if (absl::GetFlag(FLAGS_grpc_memory_mb) < 16 ||
      absl::GetFlag(FLAGS_grpc_memory_mb) > (int64_t{1} << 30) ||
      grpc_limits.max_concurrent_streams < 1 ||
      grpc_limits.max_connection_idle <= absl::ZeroDuration() ||
      grpc_limits.max_connection_age <= absl::ZeroDuration()) {
    spdlog::error(
        "--grpc-memory-mb must be 16 to 2^30, and "
        "--grpc-max-streams-per-connection, --grpc-max-connection-idle-s and "
        "--grpc-max-connection-age-s at least 1");
    return 1;
  }
  grpc_limits.memory_bytes = absl::GetFlag(FLAGS_grpc_memory_mb) << 20;
  options.metrics = &registry;
  // SIGHUP reloads the quotas and tokens; any other stop signal ends.
  auto handle_signal = [&](int signal) {
    if (signal != SIGHUP) {
      spdlog::info("signal {}: shutting down", signal);
      return true;
    }
    if (!(*quotas)->path().empty()) {
      absl::Status reloaded = (*quotas)->Reload();
      if (reloaded.ok()) {
        spdlog::info("SIGHUP: quotas reloaded from {}", (*quotas)->path());
      } else {
        spdlog::error("SIGHUP: keeping the previous quotas: {}",
                      reloaded.ToString());
      }
    }
    if (!tokens) {
      spdlog::info("SIGHUP: no --auth-tokens to reload");
      return false;
    }
    absl::Status reloaded = tokens->Reload();
    if (reloaded.ok()) {
      spdlog::info("SIGHUP: {} principals reloaded", tokens->size());
    } else {
      spdlog::error("SIGHUP: keeping the previous tokens: {}",
                    reloaded.ToString());
    }
    return false;
  };
  // One term of serving: the gRPC server (its core loads the state from the
  // store) and the HTTP edge; what it returns stops them.
  auto start_term =
      [&](const std::string& listen) -> absl::StatusOr<std::function<void()>> {
    dial::scheduler::SchedulerServerOptions term = options;
    term.listen = listen;
    auto server = dial::scheduler::SchedulerServer::Create(term);
    if (!server.ok()) return server.status();
    std::shared_ptr<dial::scheduler::SchedulerServer> grpc_server =
        std::move(*server);
    std::shared_ptr<dial::scheduler::HttpServer> http;
    if (!absl::GetFlag(FLAGS_http_listen).empty()) {
      dial::scheduler::HttpServerOptions h;
      h.listen = absl::GetFlag(FLAGS_http_listen);
      h.tokens = tokens.get();
      h.tls_cert = options.tls_cert;
      h.tls_key = options.tls_key;
      h.tls_client_ca = options.tls_client_ca;
      h.insecure_allow_remote = options.insecure_allow_remote;
      h.metrics = &registry;
      h.channel = grpc_server->InProcessChannel();
      h.dashboard_dir = absl::GetFlag(FLAGS_dashboard_dir);
      h.limits.max_connections_per_address =
          absl::GetFlag(FLAGS_http_max_connections_per_address);
      if (h.limits.max_connections_per_address < 1) {
        return absl::InvalidArgumentError(
            "--http-max-connections-per-address: must be 1 or more");
      }
      for (const auto& host : absl::GetFlag(FLAGS_http_allowed_hosts)) {
        if (!host.empty()) h.allowed_hosts.push_back(host);
      }
      if (h.dashboard_dir == "auto") h.dashboard_dir = FindDashboard();
      if (h.dashboard_dir.empty()) {
        spdlog::info("no dashboard files: serving /api/v1 and /metrics only");
      }
      auto started = dial::scheduler::HttpServer::Start(h);
      if (!started.ok()) return started.status();
      http = std::move(*started);
      // Machine-readable, as the gRPC line below.
      std::printf("dial-scheduler http on port %d\n", http->port());
    }
    spdlog::info("database {}, checkpoints {}",
                 dial::storage::DescribeDb(absl::GetFlag(FLAGS_db)),
                 (*checkpoints)->root());
    // Machine-readable readiness line (tests and scripts read it).
    std::printf("dial-scheduler listening on %s\n",
                grpc_server->address().c_str());
    std::fflush(stdout);
    if (options.tls_cert.empty() &&
        !dial::scheduler::IsLoopbackListen(options.listen)) {
      spdlog::warn(
          "serving {} in plaintext (--insecure-allow-remote): tokens and "
          "trial data cross the network unencrypted",
          grpc_server->address());
    }
    return std::function<void()>([grpc_server, http]() mutable {
      http.reset();
      grpc_server->Shutdown();
    });
  };

  if (auto* pg = dynamic_cast<dial::storage::PgStudyStore*>(store->get())) {
    dial::scheduler::LeadOptions lead;
    lead.lease.target = {absl::GetFlag(FLAGS_db), ""};
    if (!absl::GetFlag(FLAGS_db_password_file).empty()) {
      // The lease has a connection of its own: the same password.
      auto password =
          dial::storage::ReadDbPassword(absl::GetFlag(FLAGS_db_password_file));
      if (!password.ok()) {
        spdlog::error("{}", password.status().ToString());
        return 1;
      }
      lead.lease.target.password = std::move(*password);
    }
    lead.lease.holder = dial::scheduler::Leadership::HolderName();
    lead.lease.advertise = absl::GetFlag(FLAGS_advertise);
    lead.lease.lease = absl::Milliseconds(absl::GetFlag(FLAGS_leader_lease_ms));
    lead.listen = options.listen;
    // The standby holds the address before any term: the same checks.
    absl::Status listen_ok = dial::scheduler::CheckListenAddress(
        options.listen, tokens != nullptr, !options.tls_cert.empty(),
        options.insecure_allow_remote);
    if (!listen_ok.ok()) {
      spdlog::error("{}", listen_ok.ToString());
      return 1;
    }
    auto credentials = dial::scheduler::ServerCredentialsFor(options);
    if (!credentials.ok()) {
      spdlog::error("{}", credentials.status().ToString());
      return 1;
    }
    lead.credentials = *credentials;
    lead.store = pg;
    lead.signals = stop_signals;
    lead.handle = handle_signal;
    return dial::scheduler::RunWithLeadership(std::move(lead), start_term);
  }

  auto stop = start_term(options.listen);
  if (!stop.ok()) {
    spdlog::error("{}", stop.status().ToString());
    return 1;
  }
  int signal = 0;
  do {
    sigwait(&stop_signals, &signal);
  } while (!handle_signal(signal));
  (*stop)();
  return 0;
}
