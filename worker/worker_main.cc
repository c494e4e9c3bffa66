// dial-worker: runs trials for a scheduler on this machine. GPUs come from
// CUDA_VISIBLE_DEVICES (or --gpus); without GPUs it offers --slots CPU slots.
// SIGTERM/SIGINT: stop taking trials, let running ones checkpoint, exit.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "worker/worker.h"

ABSL_FLAG(std::string, scheduler, "",
          "Scheduler address (default: $DIAL_SCHEDULER or 127.0.0.1:7070)");
ABSL_FLAG(int32_t, slots, 1, "Trials run at once (CPU slots)");
ABSL_FLAG(std::string, gpus, "",
          "Comma-separated GPU ids to use (default: $CUDA_VISIBLE_DEVICES, "
          "else every GPU the NVIDIA driver lists)");
ABSL_FLAG(int32_t, trials_per_gpu, 1,
          "Trials that may share one GPU (small trials on big GPUs)");
ABSL_FLAG(int32_t, cpus, 0, "CPU cores to share among slots (0: all)");
ABSL_FLAG(std::string, trainer, "",
          "Path of dial-train (default: next to dial-worker, then PATH)");
ABSL_FLAG(std::string, work_dir, "dial-worker",
          "Directory for trial logs (created if missing)");
ABSL_FLAG(
    std::string, checkpoint_root, "dial-checkpoints",
    "Checkpoint root shared with the scheduler (local or a shared mount)");
ABSL_FLAG(int32_t, grace_s, 30,
          "Seconds a trial gets to checkpoint and exit on shutdown");
ABSL_FLAG(int32_t, acquire_wait_ms, 5000, "Long-poll wait of AcquireTrial");
ABSL_FLAG(std::string, host, "", "Host name to register (default: hostname)");
ABSL_FLAG(std::string, ack_log, "",
          "Audit log: append a line 'worker study trial attempt step' for "
          "every report the scheduler acknowledged (default: none)");
ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|off");

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("dial-worker --scheduler=ADDR --slots=N");
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
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
  auto client = dial::worker::NewGrpcSchedulerClient({target});
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
  std::string gpus = absl::GetFlag(FLAGS_gpus);
  if (gpus.empty()) {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    gpus = env ? env : "";
  }
  options.gpus = absl::StrSplit(gpus, ',', absl::SkipWhitespace());
  if (options.gpus.empty() && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    // No explicit list: every GPU the NVIDIA driver reports.
    std::error_code dir_ec;
    int count = 0;
    for (auto it = fs::directory_iterator("/proc/driver/nvidia/gpus", dir_ec);
         !dir_ec && it != fs::directory_iterator(); it.increment(dir_ec)) {
      ++count;
    }
    for (int i = 0; i < count; ++i) options.gpus.push_back(std::to_string(i));
  }
  options.trials_per_gpu = absl::GetFlag(FLAGS_trials_per_gpu);
  if (options.trials_per_gpu < 1) {
    spdlog::error("--trials-per-gpu must be at least 1");
    return 2;
  }
  options.cpus = absl::GetFlag(FLAGS_cpus);
  options.host = absl::GetFlag(FLAGS_host);
  options.trainer_path = absl::GetFlag(FLAGS_trainer);
  if (options.trainer_path.empty()) {
    options.trainer_path = dial::DefaultTrainerPath();
  }
  std::error_code ec;
  fs::create_directories(absl::GetFlag(FLAGS_work_dir), ec);
  fs::create_directories(absl::GetFlag(FLAGS_checkpoint_root), ec);
  options.work_dir = fs::absolute(absl::GetFlag(FLAGS_work_dir)).string();
  options.checkpoint_root =
      fs::absolute(absl::GetFlag(FLAGS_checkpoint_root)).string();
  options.grace = absl::Seconds(absl::GetFlag(FLAGS_grace_s));
  options.ack_log = absl::GetFlag(FLAGS_ack_log);
  options.acquire_wait =
      absl::Milliseconds(absl::GetFlag(FLAGS_acquire_wait_ms));

  dial::worker::Worker worker(options);
  std::thread signals([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    spdlog::info("signal {}: stopping; running trials checkpoint and exit",
                 signal);
    worker.Shutdown();
  });
  spdlog::info("worker for {}: {} slots, trainer {}", target, options.slots,
               options.trainer_path);
  auto status = worker.Run();
  // Run returns only after Shutdown; the signal thread has finished.
  signals.join();
  return status.ok() ? 0 : 1;
}
