// Checkpoint transfer speed against a running dial-scheduler: acts as a
// worker (a study of one command trial, a registered worker holding its
// lease), writes a checkpoint of --size_mb random bytes, reports it and
// uploads it through CheckpointService, downloads it back to another
// directory, then uploads a second checkpoint that differs in
// --changed_percent of its chunks (with the first as its base). Prints one
// JSON line: seconds and MB/s of each, and the bytes the second upload
// sent. bench/transfer/run.sh runs it between network namespaces next to a
// plain TCP copy (socat) of the same size.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/grpc_channel.h"
#include "common/spec.h"
#include "dial/v1/service.grpc.pb.h"
#include "transfer/manifest.h"
#include "transfer/transfer_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:7070", "the scheduler");
ABSL_FLAG(std::string, dir, "/tmp/dial-transfer-bench", "local scratch");
ABSL_FLAG(int64_t, size_mb, 1024, "checkpoint size in MiB");
ABSL_FLAG(int32_t, changed_percent, 10,
          "share of chunks the second checkpoint changes");

namespace {

namespace fs = std::filesystem;
namespace v1 = dial::v1;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

int Fail(const std::string& what, const absl::Status& s) {
  std::cerr << "transfer_bench: " << what << ": " << s << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string target = absl::GetFlag(FLAGS_target);
  const fs::path dir = absl::GetFlag(FLAGS_dir);
  const int64_t size = absl::GetFlag(FLAGS_size_mb) << 20;
  fs::remove_all(dir);
  fs::create_directories(dir);

  // The token, if the scheduler wants one: $DIAL_TOKEN.
  const std::string token = dial::TokenFromFlagOrEnv("");
  dial::client::DialClientOptions client_options;
  client_options.target = target;
  client_options.timeout = absl::Seconds(30);
  client_options.token = token;
  // Between the bench's own network namespaces, without TLS.
  client_options.insecure = true;
  auto client = dial::client::DialClient::Create(client_options);
  if (!client.ok()) return Fail("client", client.status());
  const std::string study =
      absl::StrCat("transfer-bench-", std::random_device()());
  auto spec = dial::ParseStudySpec(
      absl::StrCat("name: ", study,
                   "\nobjective: {metric: loss, goal: MINIMIZE}\n"
                   "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                   "budget: {max_trials: 1}\n"
                   "trial: {command: {argv: [/bin/true]}}"));
  if (!spec.ok()) return Fail("spec", spec.status());
  auto created = (*client)->CreateStudy(*spec);
  if (!created.ok()) return Fail("CreateStudy", created.status());

  dial::ConnectOptions connect;
  connect.target = target;
  connect.token = token;
  auto channel = dial::MakeChannel(connect, grpc::ChannelArguments());
  if (!channel.ok()) return Fail("channel", channel.status());
  auto workers = v1::WorkerService::NewStub(*channel);
  v1::RegisterWorkerRequest reg;
  reg.set_host("bench");
  reg.mutable_resources()->set_slots(1);
  v1::RegisterWorkerResponse registered;
  {
    grpc::ClientContext ctx;
    dial::Authorize(ctx, token);
    auto s = workers->RegisterWorker(&ctx, reg, &registered);
    if (!s.ok())
      return Fail("RegisterWorker", absl::UnknownError(s.error_message()));
  }
  v1::AcquireTrialRequest acquire;
  acquire.set_worker_id(registered.worker_id());
  acquire.set_free_slots(1);
  acquire.set_wait_ms(10000);
  v1::AcquireTrialResponse assigned;
  {
    grpc::ClientContext ctx;
    dial::Authorize(ctx, token);
    auto s = workers->AcquireTrial(&ctx, acquire, &assigned);
    if (!s.ok() || !assigned.has_trial()) {
      return Fail("AcquireTrial", absl::UnknownError(s.error_message()));
    }
  }
  v1::TrialLease lease;
  lease.set_worker_id(registered.worker_id());
  lease.set_study(study);
  lease.set_trial(assigned.trial().number());
  lease.set_attempt(assigned.attempt());
  lease.set_lease_token(assigned.lease_token());
  auto report = [&](int64_t step, const std::string& id) {
    v1::ReportProgressRequest r;
    r.set_worker_id(lease.worker_id());
    r.set_study(study);
    r.set_trial(lease.trial());
    r.set_attempt(lease.attempt());
    r.set_lease_token(lease.lease_token());
    r.set_step(step);
    (*r.mutable_metrics())["loss"] = 1.0 / static_cast<double>(step);
    r.set_checkpoint(id);
    r.set_checkpoint_uploading(true);
    v1::ReportProgressResponse out;
    grpc::ClientContext ctx;
    dial::Authorize(ctx, token);
    return workers->ReportProgress(&ctx, r, &out).ok();
  };

  // The first checkpoint: random bytes, so nothing compresses or repeats.
  const fs::path local = dir / "local";
  const std::string trial_dir = absl::StrCat(study, "/", lease.trial());
  const std::string first = trial_dir + "/ckpt-1.bin";
  std::string data(static_cast<size_t>(size), '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  fs::create_directories(local / trial_dir);
  std::ofstream(local / first, std::ios::binary).write(data.data(), size);
  if (!report(1, first)) return Fail("report", absl::UnknownError("step 1"));

  dial::transfer::GrpcCheckpointTransferOptions options;
  auto transfer = dial::transfer::ConnectCheckpointTransfer(connect, options);
  if (!transfer.ok()) return Fail("transfer", transfer.status());
  auto t0 = std::chrono::steady_clock::now();
  auto up = (*transfer)->Upload(lease, 1, local.string(), first, {});
  const double upload_s = Seconds(t0);
  if (!up.ok()) return Fail("upload", up.status());

  t0 = std::chrono::steady_clock::now();
  auto down = (*transfer)->Download(study, first,
                                    (dir / "downloaded" / first).string());
  const double download_s = Seconds(t0);
  if (!down.ok()) return Fail("download", down.status());

  // The second: every k-th chunk changed.
  const int percent = absl::GetFlag(FLAGS_changed_percent);
  const int64_t chunks = size / dial::transfer::kChunkSize;
  int64_t changed = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    if ((c * percent) % 100 < percent) {
      data[static_cast<size_t>(c * dial::transfer::kChunkSize)] ^= 1;
      ++changed;
    }
  }
  const std::string second = trial_dir + "/ckpt-2.bin";
  std::ofstream(local / second, std::ios::binary).write(data.data(), size);
  if (!report(2, second)) return Fail("report", absl::UnknownError("step 2"));
  t0 = std::chrono::steady_clock::now();
  auto delta = (*transfer)->Upload(lease, 2, local.string(), second, {first});
  const double delta_s = Seconds(t0);
  if (!delta.ok()) return Fail("second upload", delta.status());

  const double mb = static_cast<double>(size) / (1 << 20);
  std::cout << absl::StrCat("{\"size_mb\":", mb, ",\"upload_s\":", upload_s,
                            ",\"upload_mb_s\":", mb / upload_s,
                            ",\"download_s\":", download_s,
                            ",\"download_mb_s\":", mb / download_s,
                            ",\"second_changed_chunks\":", changed,
                            ",\"second_sent_bytes\":", delta->bytes_sent,
                            ",\"second_sent_fraction\":",
                            static_cast<double>(delta->bytes_sent) /
                                static_cast<double>(size),
                            ",\"second_upload_s\":", delta_s, "}")
            << std::endl;
  fs::remove_all(dir);
  return 0;
}
