// dial-scheduler: the central service. Opens the SQLite database and the
// checkpoint root, serves StudyService and WorkerService, and shuts down
// cleanly on SIGTERM or SIGINT.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/logging.h"
#include "scheduler/server.h"
#include "spdlog/spdlog.h"
#include "storage/checkpoint_store.h"
#include "storage/sqlite_study_store.h"

ABSL_FLAG(std::string, db, "dial.db",
          "SQLite database file (created if missing)");
ABSL_FLAG(std::string, checkpoint_root, "dial-checkpoints",
          "Checkpoint directory (local or a shared mount)");
ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(bool, allow_remote, false,
          "Allow listening on a non-loopback address (no authentication yet)");
ABSL_FLAG(bool, sync_full, true,
          "Fsync every commit fully (survives power loss); false survives "
          "process crashes only but commits faster");
ABSL_FLAG(bool, group_commit, true,
          "commit many clients' writes with one fsync; every answer still "
          "waits for the commit of what it reports (off: one commit per "
          "write)");
ABSL_FLAG(int32_t, worker_lease_ms, 10000,
          "A worker silent this long is lost and its trials are requeued");
ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|off");

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
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto store = dial::storage::SqliteStudyStore::Create(
      {absl::GetFlag(FLAGS_db), absl::GetFlag(FLAGS_sync_full),
       absl::GetFlag(FLAGS_group_commit)});
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
  options.listen = absl::GetFlag(FLAGS_listen);
  options.allow_remote = absl::GetFlag(FLAGS_allow_remote);
  options.worker_lease =
      absl::Milliseconds(absl::GetFlag(FLAGS_worker_lease_ms));
  auto server = dial::scheduler::SchedulerServer::Create(options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  spdlog::info("database {}, checkpoints {}", absl::GetFlag(FLAGS_db),
               (*checkpoints)->root());
  // Machine-readable readiness line (tests and scripts read it).
  std::printf("dial-scheduler listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("signal {}: shutting down", signal);
  (*server)->Shutdown();
  return 0;
}
