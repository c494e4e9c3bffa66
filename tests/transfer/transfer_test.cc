// Checkpoint transfer: manifests, the scheduler's depot (dedup, resume,
// checks), and uploads and downloads over a real gRPC server whose core
// fences them like reports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "scheduler/server.h"
#include "storage/checkpoint_store.h"
#include "storage/memory_study_store.h"
#include "storage/testing/temp_dir.h"
#include "transfer/checkpoint_depot.h"
#include "transfer/manifest.h"
#include "transfer/transfer_client.h"

namespace dial::transfer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSmallChunk = 4096;

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

void Write(const fs::path& path, const std::string& data) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class DepotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto depot = CheckpointDepot::Create({(dir_ / "server").string()});
    ASSERT_TRUE(depot.ok()) << depot.status();
    depot_ = std::move(*depot);
  }
  // Uploads local <root>/<id> with Start + Put of what is missing; returns
  // the bytes that had to be sent.
  int64_t Upload(const std::string& id, int64_t step,
                 const std::vector<std::string>& bases = {}) {
    auto m = Describe(local_, id, kSmallChunk);
    EXPECT_TRUE(m.ok()) << m.status();
    auto up = depot_->Start("s", 1, step, *m, bases);
    EXPECT_TRUE(up.ok()) << up.status();
    const auto chunks = Chunks(*m);
    int64_t sent = 0;
    for (int64_t i : up->missing) {
      auto data = ReadRange(
          local_,
          FilePath((fs::path(local_) / id).string(), *m, chunks[i].file),
          chunks[i].offset, chunks[i].length);
      EXPECT_TRUE(depot_->Put(up->upload_id, i, *data).ok());
      sent += chunks[i].length;
    }
    auto done = depot_->Commit(up->upload_id);
    EXPECT_TRUE(done.ok()) << done.status();
    return sent;
  }

  storage::testing::ScopedTempDir temp_{"transfer"};
  const fs::path dir_ = temp_.path();
  const std::string local_ = (dir_ / "local").string();
  std::unique_ptr<CheckpointDepot> depot_;
};

TEST(ManifestTest, DescribesFilesAndRefusesWhatCouldEscape) {
  storage::testing::ScopedTempDir temp("manifest");
  const fs::path root = temp.path();
  Write(root / "s/1/ck/a.bin", Random(10000, 1));
  Write(root / "s/1/ck/sub/b.bin", "");
  auto m = Describe(root.string(), "s/1/ck", kSmallChunk);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->directory());
  ASSERT_EQ(m->files_size(), 2);
  EXPECT_EQ(m->files(0).name(), "a.bin");
  EXPECT_EQ(m->files(0).chunks_size(), 3);  // 4096 + 4096 + 1808
  EXPECT_EQ(m->files(1).name(), "sub/b.bin");
  EXPECT_EQ(m->files(1).chunks_size(), 0);
  EXPECT_TRUE(CheckManifest(*m).ok());

  EXPECT_TRUE(
      absl::IsInvalidArgument(Describe(root.string(), "../x").status()));
  EXPECT_TRUE(absl::IsNotFound(Describe(root.string(), "s/1/none").status()));
  fs::create_symlink("/etc/passwd", root / "s/1/ck/link");
  EXPECT_TRUE(
      absl::IsInvalidArgument(Describe(root.string(), "s/1/ck").status()));

  v1::CheckpointManifest bad = *m;
  bad.mutable_files(0)->set_name("../../etc/x");
  EXPECT_THAT(CheckManifest(bad).message(), HasSubstr("files[0].name"));
  bad = *m;
  bad.mutable_files(0)->set_size(1 << 20);
  EXPECT_THAT(CheckManifest(bad).message(), HasSubstr("files[0].chunks"));
  bad = *m;
  bad.set_checkpoint("/abs");
  EXPECT_THAT(CheckManifest(bad).message(), HasSubstr("manifest.checkpoint"));
  bad = *m;
  bad.mutable_files(0)->set_chunks(0, "short");
  EXPECT_THAT(CheckManifest(bad).message(), HasSubstr("32-byte"));
}

// Security round two, H2: a trial ran `ln -s / $DIAL_CHECKPOINT_DIR/r`
// and reported s/1/r/<path of the server's key>; DownloadCheckpoint served
// the key. No component below the root may be a link, in any direction.
TEST(ManifestTest, ALinkAnywhereBelowTheRootIsNeverFollowed) {
  storage::testing::ScopedTempDir temp("links");
  const fs::path root = temp.path() / "root";
  const fs::path outside = temp.path() / "outside";
  Write(outside / "server.key", "PRIVATE KEY");
  Write(root / "s/1/10/w.bin", "weights");
  fs::create_directory_symlink(outside, root / "s/1/r");
  const std::string key_id = "s/1/r/server.key";
  auto described = Describe(root.string(), key_id);
  EXPECT_TRUE(absl::IsInvalidArgument(described.status()))
      << described.status();
  EXPECT_THAT(described.status().message(), HasSubstr("symbolic link"));
  auto read = ReadRange(root.string(), (root / key_id).string(), 0, 11);
  EXPECT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), Not(HasSubstr("PRIVATE")));
  // A linked trial directory cannot be read through either.
  fs::create_directory_symlink(root / "s/1", root / "s/2");
  EXPECT_FALSE(Describe(root.string(), "s/2/10").ok());
  // Writes go through no link: neither a staging file's directory nor the
  // place an upload is installed.
  fs::create_directories(root / "up");
  fs::create_directory_symlink(outside, root / "up/dir");
  EXPECT_TRUE(absl::IsPermissionDenied(
      WriteRange(root.string(), (root / "up/dir/x").string(), 0, "x")));
  EXPECT_FALSE(fs::exists(outside / "x"));
  Write(root / "up/staged", "new");
  EXPECT_FALSE(Install(root.string(), (root / "up/staged").string(),
                       (root / "s/1/r/installed").string())
                   .ok());
  EXPECT_FALSE(fs::exists(outside / "installed"));
  EXPECT_EQ(Read(outside / "server.key"), "PRIVATE KEY");
}

// Security round two, M1: a trial that reported a checkpoint and deleted
// it at once left an upload session open each time; 265 rounds filled the
// global cap of 256 and every other study's uploads were refused for an
// hour. Sessions are capped per attempt and per principal, and a worker
// can abort one.
TEST_F(DepotTest, OneWorkerCannotHoldEveryUploadSession) {
  Write(fs::path(local_) / "s/1/ck.bin", Random(kSmallChunk, 5));
  auto m = Describe(local_, "s/1/ck.bin", kSmallChunk);
  ASSERT_TRUE(m.ok());
  // A new checkpoint path each time, as the trial of the finding did.
  auto start = [&](int step, const std::string& who, const std::string& at) {
    v1::CheckpointManifest each = *m;
    each.set_checkpoint(absl::StrCat("s/1/ck-", who, "-", step, ".bin"));
    return depot_->Start("s", 1, step, each, {}, who, at);
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(start(i, "w1", "a/1").ok()) << i;
  auto per_attempt = start(4, "w1", "a/1");
  EXPECT_TRUE(absl::IsResourceExhausted(per_attempt.status()));
  EXPECT_THAT(per_attempt.status().message(), HasSubstr("attempt a/1"));
  int attempt = 2;
  while (depot_->OpenUploads() < 300) {
    auto up = start(attempt, "w1", absl::StrCat("a/", attempt));
    if (!up.ok()) {
      EXPECT_THAT(up.status().message(), HasSubstr("'w1' has 64"));
      break;
    }
    ++attempt;
  }
  EXPECT_EQ(depot_->OpenUploads(), 64u);
  // Another worker still uploads.
  auto other = start(1, "w2", "b/1");
  ASSERT_TRUE(other.ok()) << other.status();
  // An aborted session goes at once, staging and all.
  EXPECT_TRUE(depot_->Abort(other->upload_id).ok());
  EXPECT_EQ(depot_->OpenUploads(), 64u);
  EXPECT_TRUE(absl::IsAborted(depot_->Abort(other->upload_id)));
  EXPECT_TRUE(absl::IsAborted(depot_->Put(other->upload_id, 0, "")));
}

TEST_F(DepotTest, UploadsArriveWholeAndSharedChunksAreNotSentAgain) {
  // 100 chunks; the second checkpoint changes 10 of them.
  std::string data = Random(100 * kSmallChunk, 7);
  Write(fs::path(local_) / "s/1/10/model.bin", data);
  EXPECT_EQ(Upload("s/1/10", 10), 100 * kSmallChunk);
  EXPECT_EQ(Read(dir_ / "server/s/1/10/model.bin"), data);

  for (int k = 0; k < 10; ++k) data[k * 10 * kSmallChunk] ^= 1;
  Write(fs::path(local_) / "s/1/20/model.bin", data);
  const int64_t sent = Upload("s/1/20", 20, {"s/1/10"});
  EXPECT_EQ(sent, 10 * kSmallChunk);
  EXPECT_EQ(Read(dir_ / "server/s/1/20/model.bin"), data);
  // Without the base, everything is sent.
  Write(fs::path(local_) / "s/1/30/model.bin", data);
  EXPECT_EQ(Upload("s/1/30", 30), 100 * kSmallChunk);
}

TEST_F(DepotTest, AnInterruptedUploadResumesWithWhatIsMissing) {
  const std::string data = Random(8 * kSmallChunk, 3);
  Write(fs::path(local_) / "s/1/ck.bin", data);
  auto m = Describe(local_, "s/1/ck.bin", kSmallChunk);
  ASSERT_TRUE(m.ok());
  auto up = depot_->Start("s", 1, 5, *m, {});
  ASSERT_TRUE(up.ok());
  ASSERT_EQ(up->missing.size(), 8u);
  for (int64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        depot_->Put(up->upload_id, i, data.substr(i * kSmallChunk, kSmallChunk))
            .ok());
  }
  // A corrupt chunk is refused and not counted.
  EXPECT_TRUE(absl::IsInvalidArgument(
      depot_->Put(up->upload_id, 5, std::string(kSmallChunk, 'x'))));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(depot_->Commit(up->upload_id).status()));
  // The worker comes back: only chunks 5..7 are asked for, same upload.
  auto again = depot_->Start("s", 1, 5, *m, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->upload_id, up->upload_id);
  EXPECT_THAT(again->missing, ::testing::ElementsAre(5, 6, 7));
  for (int64_t i : again->missing) {
    ASSERT_TRUE(
        depot_->Put(up->upload_id, i, data.substr(i * kSmallChunk, kSmallChunk))
            .ok());
  }
  ASSERT_TRUE(depot_->Commit(up->upload_id).ok());
  EXPECT_EQ(Read(dir_ / "server/s/1/ck.bin"), data);
  EXPECT_TRUE(absl::IsAborted(depot_->Put(up->upload_id, 0, "")));
  // Served back with a manifest kept beside it.
  auto served = depot_->Manifest("s/1/ck.bin");
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(served->SerializeAsString(), m->SerializeAsString());
}

TEST_F(DepotTest, TheSamePathReportedAgainIsReplacedWhole) {
  Write(fs::path(local_) / "s/1/latest/w.bin", Random(3 * kSmallChunk, 1));
  Upload("s/1/latest", 1);
  const std::string newer = Random(2 * kSmallChunk, 2);
  fs::remove_all(fs::path(local_) / "s/1/latest");
  Write(fs::path(local_) / "s/1/latest/w.bin", newer);
  Upload("s/1/latest", 2);
  EXPECT_EQ(Read(dir_ / "server/s/1/latest/w.bin"), newer);
  // Nothing of the exchange is left behind.
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir_ / "server/s/1")) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(DepotTest, BadBasesAndManifestsAreRefused) {
  Write(fs::path(local_) / "s/1/a.bin", "abc");
  auto m = Describe(local_, "s/1/a.bin", kSmallChunk);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      depot_->Start("s", 1, 1, *m, {"other/1/2"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      depot_->Start("s", 1, 1, *m, {"s/../../x"}).status()));
  v1::CheckpointManifest bad = *m;
  bad.set_chunk_size(1);
  EXPECT_TRUE(
      absl::IsInvalidArgument(depot_->Start("s", 1, 1, bad, {}).status()));
}

// Over gRPC, against a real server whose core owns the trial's lease.
class TransferServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartServer();
    CreateStudy(
        "name: s\nobjective: {metric: acc, goal: MAXIMIZE}\n"
        "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
        "budget: {max_trials: 1, max_parallel_trials: 1}\n"
        "trial: {command: {argv: [/bin/true]}}");
    RegisterWorker(1);
    ASSERT_TRUE(Acquire().has_value());
  }
  void StartServer() {
    store_ = storage::MemoryStudyStore::Create();
    scheduler::SchedulerServerOptions options;
    options.store = store_.get();
    options.listen = "127.0.0.1:0";
    options.checkpoint_root = (dir_ / "server").string();
    auto server = scheduler::SchedulerServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ConnectOptions connect;
    connect.target = server_->address();
    GrpcCheckpointTransferOptions t;
    t.give_up_after = absl::Seconds(5);
    auto transfer = ConnectCheckpointTransfer(connect, t);
    ASSERT_TRUE(transfer.ok());
    transfer_ = std::move(*transfer);
  }
  void RegisterWorker(int slots) {
    v1::WorkerResources r;
    r.set_slots(slots);
    auto w = server_->core()->RegisterWorker("h", r);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_id_ = w->worker_id();
  }
  void CreateStudy(const std::string& text) {
    auto spec = ParseStudySpec(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(server_->core()->CreateStudy(*spec).ok());
    server_->core()->WaitIdle();
  }
  // The trial the worker is given now, if any; its lease becomes lease_.
  std::optional<scheduler::Assignment> Acquire() {
    server_->core()->WaitIdle();
    std::optional<scheduler::Assignment> got;
    absl::Notification answered;
    server_->core()->AcquireTrial(
        worker_id_, 0, absl::ZeroDuration(), [] { return true; },
        [&](absl::StatusOr<std::optional<scheduler::Assignment>> a) {
          EXPECT_TRUE(a.ok()) << a.status();
          if (a.ok()) got = std::move(*a);
          answered.Notify();
        });
    answered.WaitForNotification();
    if (got) {
      lease_.set_worker_id(worker_id_);
      lease_.set_study(got->trial.study());
      lease_.set_trial(got->trial.number());
      lease_.set_attempt(got->attempt);
      lease_.set_lease_token(got->trial.lease_token());
    }
    return got;
  }
  // A report of `step` naming `checkpoint` as still uploading.
  v1::Decision Report(int64_t step, const std::string& checkpoint,
                      double acc = 0.5) {
    v1::ReportProgressRequest r;
    r.set_worker_id(lease_.worker_id());
    r.set_study(lease_.study());
    r.set_trial(lease_.trial());
    r.set_attempt(lease_.attempt());
    r.set_lease_token(lease_.lease_token());
    r.set_step(step);
    (*r.mutable_metrics())["acc"] = acc;
    r.set_checkpoint(checkpoint);
    r.set_checkpoint_uploading(true);
    auto decision = server_->core()->ReportProgress(r);
    EXPECT_TRUE(decision.ok()) << decision.status();
    return decision.ok() ? *decision : v1::Decision();
  }
  v1::Trial Trial() {
    auto t = server_->core()->GetTrial("s", lease_.trial());
    EXPECT_TRUE(t.ok());
    return t.ok() ? *t : v1::Trial();
  }
  std::string Id(const std::string& name) const {
    return absl::StrCat(lease_.study(), "/", lease_.trial(), "/", name);
  }

  storage::testing::ScopedTempDir temp_{"transfer-grpc"};
  const fs::path dir_ = temp_.path();
  const std::string local_ = (dir_ / "worker").string();
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<scheduler::SchedulerServer> server_;
  std::unique_ptr<CheckpointTransfer> transfer_;
  std::string worker_id_;
  v1::TrialLease lease_;
};

TEST_F(TransferServiceTest, AnUploadBecomesTheRestorePointOnlyWhenCommitted) {
  const std::string data = Random(3 << 20, 5);  // 3 chunks of 1 MiB
  Write(fs::path(local_) / Id("ck-1/state.bin"), data);
  Report(1, Id("ck-1"));
  // Reported, not yet uploaded: not a restore point.
  EXPECT_EQ(Trial().checkpoint(), "");
  auto up = transfer_->Upload(lease_, 1, local_, Id("ck-1"), {});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_TRUE(up->restore_point);
  EXPECT_EQ(up->bytes_sent, 3 << 20);
  EXPECT_EQ(Trial().checkpoint(), Id("ck-1"));
  EXPECT_EQ(Trial().checkpoint_step(), 1);

  // The next one shares two of its three chunks with the first.
  std::string next = data;
  next[0] ^= 1;
  Write(fs::path(local_) / Id("ck-2/state.bin"), next);
  Report(2, Id("ck-2"));
  up = transfer_->Upload(lease_, 2, local_, Id("ck-2"), {Id("ck-1")});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->bytes_sent, 1 << 20);
  EXPECT_EQ(Trial().checkpoint(), Id("ck-2"));

  // Another host downloads it whole.
  const fs::path there = dir_ / "other" / Id("ck-2");
  auto down = transfer_->Download("s", Id("ck-2"), there.string());
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(Read(there / "state.bin"), next);
}

TEST_F(TransferServiceTest, StaleAttemptsAndForeignPathsAreRefused) {
  Write(fs::path(local_) / Id("ck.bin"), "weights");
  Report(1, Id("ck.bin"));
  v1::TrialLease stale = lease_;
  stale.set_lease_token("guessed");
  auto up = transfer_->Upload(stale, 1, local_, Id("ck.bin"), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(up.status())) << up.status();
  // Another trial's directory is not this attempt's to write.
  Write(fs::path(local_) / "s/99/ck.bin", "weights");
  up = transfer_->Upload(lease_, 1, local_, "s/99/ck.bin", {});
  EXPECT_TRUE(absl::IsInvalidArgument(up.status())) << up.status();
  EXPECT_FALSE(fs::exists(dir_ / "server/s/99/ck.bin"));
  // A step never reported does not become the restore point.
  GrpcCheckpointTransferOptions quick;
  ConnectOptions connect;
  connect.target = server_->address();
  quick.give_up_after = absl::Milliseconds(300);
  auto impatient = ConnectCheckpointTransfer(connect, quick);
  ASSERT_TRUE(impatient.ok());
  up = (*impatient)->Upload(lease_, 7, local_, Id("ck.bin"), {});
  EXPECT_TRUE(absl::IsUnavailable(up.status())) << up.status();
  EXPECT_EQ(Trial().checkpoint(), "");
  // Downloads of a path outside the study are refused.
  auto down = transfer_->Download("s", "other/1/2", (dir_ / "x").string());
  EXPECT_TRUE(absl::IsInvalidArgument(down.status())) << down.status();
}

// Found by the e2e ASHA promotion test: a paused trial promoted while its
// checkpoint was still uploading was started again from step 0.
class PromotedUploadTest : public TransferServiceTest {
 protected:
  void SetUp() override {
    StartServer();
    CreateStudy(
        "name: p\nobjective: {metric: acc, goal: MAXIMIZE}\n"
        "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
        "scheduler: {asha: {min_steps: 1, max_steps: 9, reduction_factor: 3, "
        "promotion: true}}\n"
        "budget: {max_trials: 3, max_parallel_trials: 3}\n"
        "trial: {command: {argv: [/bin/true]}}");
    RegisterWorker(4);
  }
};

TEST_F(PromotedUploadTest, APromotedTrialWaitsForTheUploadItPausedWith) {
  // Three trials reach the first rung and pause; the best one's checkpoint
  // is still on its way when the third report promotes it.
  std::vector<v1::TrialLease> leases;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Acquire().has_value());
    leases.push_back(lease_);
  }
  lease_ = leases[0];
  const std::string checkpoint = Id("ck-1");
  Write(fs::path(local_) / checkpoint / "state.bin", "best weights");
  EXPECT_EQ(Report(1, checkpoint, 0.9).action(), v1::Decision::PAUSE);
  lease_ = leases[1];
  EXPECT_EQ(Report(1, "", 0.1).action(), v1::Decision::PAUSE);
  lease_ = leases[2];
  EXPECT_EQ(Report(1, "", 0.2).action(), v1::Decision::PAUSE);
  EXPECT_FALSE(Acquire().has_value())
      << "dispatched before its checkpoint arrived";
  lease_ = leases[0];
  auto up = transfer_->Upload(lease_, 1, local_, checkpoint, {});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_TRUE(up->restore_point);
  auto again = Acquire();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->trial.number(), leases[0].trial());
  EXPECT_EQ(again->restore_checkpoint, checkpoint);
  EXPECT_EQ(again->start_step, 1);
}

}  // namespace
}  // namespace dial::transfer
