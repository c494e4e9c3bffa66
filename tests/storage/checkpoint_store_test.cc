#include "storage/checkpoint_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace dial::storage {
namespace {

namespace fs = std::filesystem;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("dial-ckpt-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    auto store = FileCheckpointStore::Create({root_.string()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  std::unique_ptr<FileCheckpointStore> store_;
};

TEST_F(CheckpointStoreTest, WriteVerifyRead) {
  auto info = store_->Write(
      "study", 3, 200,
      {{"model.pt", std::string(1000, 'w')}, {"optim.pt", "state"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->id, "study/3/200");
  EXPECT_EQ(info->size_bytes, 1005);
  EXPECT_TRUE(fs::exists(root_ / "study/3/200/MANIFEST"));
  auto verified = store_->Verify(info->id);
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->checksum, info->checksum);
  auto files = store_->Read(info->id);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->at("optim.pt"), "state");
  EXPECT_EQ(files->at("model.pt").size(), 1000u);
  EXPECT_EQ(*store_->ListSteps("study", 3), (std::vector<int64_t>{200}));
}

TEST_F(CheckpointStoreTest, CorruptionIsDetected) {
  auto info = store_->Write("s", 0, 1, {{"w", "abcdef"}});
  ASSERT_TRUE(info.ok());
  {
    std::ofstream out(root_ / "s/0/1/w", std::ios::binary | std::ios::trunc);
    out << "abcdeX";  // same size, different bytes
  }
  EXPECT_EQ(store_->Verify(info->id).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(store_->Read(info->id).status().code(),
            absl::StatusCode::kDataLoss);
  fs::remove(root_ / "s/0/1/w");
  EXPECT_EQ(store_->Verify(info->id).status().code(),
            absl::StatusCode::kDataLoss);
}

// Issue 16: manifest file names are validated, so a tampered manifest can
// never make a reader (a resumed trial, a PBT copy) open files elsewhere.
TEST_F(CheckpointStoreTest, AManifestNamingFilesElsewhereIsRefused) {
  std::ofstream(root_ / "secret") << "top";
  for (const std::string& name :
       {std::string("../../../secret"), std::string("/etc/passwd"),
        std::string(".hidden"), std::string("MANIFEST")}) {
    auto info = store_->Write("s", 0, 1, {{"w", "abc"}});
    ASSERT_TRUE(info.ok()) << info.status();
    {
      std::ofstream out(root_ / "s/0/1/MANIFEST", std::ios::app);
      out << "3 00000000 " << name << "\n";
    }
    auto verified = store_->Verify(info->id);
    EXPECT_EQ(verified.status().code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_THAT(std::string(verified.status().message()),
                ::testing::HasSubstr("not a file of the checkpoint"))
        << name;
    EXPECT_EQ(store_->Read(info->id).status().code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(store_->CopyInto(info->id, "s", 2).status().code(),
              absl::StatusCode::kDataLoss);
    ASSERT_TRUE(store_->Delete(info->id).ok());
  }
}

TEST_F(CheckpointStoreTest, CommandTrialCheckpointsAreCopiedAsTheyAre) {
  // A command trial's checkpoint is whatever it wrote: a file...
  fs::create_directories(root_ / "s/2/run");
  std::ofstream(root_ / "s/2/ckpt-4.pt") << "weights";
  auto file = store_->CopyPathInto("s/2/ckpt-4.pt", 2, 4, "s", 1);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->id, "s/1/from-2-4");
  EXPECT_EQ(file->size_bytes, 7);
  EXPECT_TRUE(fs::is_regular_file(root_ / "s/1/from-2-4"));
  // ... or a directory; each copy appears once, whole.
  std::ofstream(root_ / "s/2/run/a") << "x";
  auto dir = store_->CopyPathInto("s/2/run", 2, 6, "s", 1);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(fs::is_regular_file(root_ / "s/1/from-2-6/a"));
  EXPECT_TRUE(store_->CopyPathInto("s/2/run", 2, 6, "s", 1).ok());
  for (const auto& entry : fs::directory_iterator(root_ / "s/1")) {
    EXPECT_NE(entry.path().filename().string().rfind(".staging-", 0), 0u);
  }
  // Only the source trial's own checkpoints, and only existing ones.
  EXPECT_EQ(store_->CopyPathInto("s/3/x", 2, 6, "s", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CopyPathInto("s/2/../0/x", 2, 6, "s", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CopyPathInto("s/2/none", 2, 8, "s", 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointStoreTest, UnfinishedWritesAreInvisible) {
  // A writer that dies before Commit leaves only a staging directory.
  auto staging = store_->BeginWrite("s", 1, 50);
  ASSERT_TRUE(staging.ok());
  std::ofstream(*staging + "/model.pt") << "half";
  EXPECT_TRUE(store_->ListSteps("s", 1)->empty());
  EXPECT_EQ(store_->Verify("s/1/50").status().code(),
            absl::StatusCode::kNotFound);
  // Committing it later makes it whole.
  auto info = store_->Commit(*staging, "s", 1, 50);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(store_->Verify("s/1/50").ok());
  EXPECT_FALSE(fs::exists(*staging));
}

TEST_F(CheckpointStoreTest, ExistingCheckpointIsNeverOverwritten) {
  ASSERT_TRUE(store_->Write("s", 0, 10, {{"w", "first"}}).ok());
  auto again = store_->Write("s", 0, 10, {{"w", "second"}});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Read("s/0/10")->at("w"), "first");
  // No staging leftovers after the failed attempt.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(root_ / "s/0")) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(CheckpointStoreTest, IdsCannotEscapeTheRoot) {
  for (const char* id : {"../etc/1/2", "s/../../1/2", "/etc/passwd", "s/1/2/3",
                         "s/1", "s/-1/2", "s/1/-2", "s/01/2", "s/1/x", "./1/2",
                         "../1/2", "s//1", "", "a b/1/2"}) {
    auto path = store_->PathOf(id);
    EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(store_->Read(id).status().code(),
              absl::StatusCode::kInvalidArgument)
        << id;
    // Delete also takes a command trial's own path (any path inside a
    // trial's directory): those that are not there are NOT_FOUND.
    const std::string text = id;
    const bool trial_path =
        text == "s/1/2/3" || text == "s/1/-2" || text == "s/1/x";
    EXPECT_EQ(store_->Delete(id).code(),
              trial_path ? absl::StatusCode::kNotFound
                         : absl::StatusCode::kInvalidArgument)
        << id;
  }
  EXPECT_EQ(*store_->PathOf("my-study/4/800"),
            (root_ / "my-study/4/800").string());
  EXPECT_EQ(store_->Write("..", 0, 1, {{"w", "x"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Write("s", 0, 1, {{"../w", "x"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A staging directory from elsewhere is refused.
  fs::create_directories(root_ / "other");
  EXPECT_EQ(
      store_->Commit((root_ / "other").string(), "s", 0, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(root_ / "other"));
}

TEST_F(CheckpointStoreTest, DeleteRemovesWholeCheckpoint) {
  ASSERT_TRUE(store_->Write("s", 2, 1, {{"w", "1"}}).ok());
  ASSERT_TRUE(store_->Write("s", 2, 2, {{"w", "2"}}).ok());
  ASSERT_TRUE(store_->Delete("s/2/1").ok());
  EXPECT_EQ(*store_->ListSteps("s", 2), (std::vector<int64_t>{2}));
  EXPECT_EQ(store_->Delete("s/2/1").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Verify("s/2/2").ok());
}

// Security round two, H2: a trial on a shared root replaced its trial
// directory (or a path in it) with a link. Retention's delete, PBT's
// copies and reads must not act through it.
TEST_F(CheckpointStoreTest, LinkedTrialDirectoriesAndPathsAreNeverFollowed) {
  const fs::path outside = root_.string() + "-outside";
  fs::create_directories(outside / "7");
  std::ofstream(outside / "7/MANIFEST") << "precious";
  std::ofstream(outside / "secret") << "key";
  fs::create_directories(root_ / "s");
  fs::create_directory_symlink(outside, root_ / "s/3");
  EXPECT_EQ(store_->Delete("s/3/7").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(outside / "7/MANIFEST")) << "deleted through a link";
  EXPECT_FALSE(store_->Verify("s/3/7").ok());
  EXPECT_FALSE(store_->BeginWrite("s", 3, 9).ok());
  // A link inside a trial's own directory is not a source for PBT copies.
  fs::create_directories(root_ / "s/2");
  fs::create_directory_symlink(outside, root_ / "s/2/r");
  auto copied = store_->CopyPathInto("s/2/r/secret", 2, 4, "s", 1);
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kInvalidArgument)
      << copied.status();
  EXPECT_FALSE(fs::exists(root_ / "s/1/from-2-4"));
  fs::remove_all(outside);
}

// The one parser of checkpoint ids: a trial's own and a copy's, and
// nothing else.
TEST(CheckpointIdTest, ParseIdTakesIdsApart) {
  auto own = CheckpointStore::ParseId("study/3/200");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->study, "study");
  EXPECT_EQ(own->trial, 3);
  EXPECT_EQ(own->step, 200);
  EXPECT_FALSE(own->is_copy());
  EXPECT_EQ(CheckpointStore::MakeId(own->study, own->trial, own->step),
            "study/3/200");

  auto copy = CheckpointStore::ParseId("study/4/from-3-200");
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->trial, 4);
  EXPECT_EQ(copy->step, 200);
  EXPECT_EQ(copy->source_trial, 3);
  EXPECT_TRUE(copy->is_copy());

  for (const char* bad :
       {"", "study", "study/3", "study/3/200/x", "study/-1/2", "study/3/-2",
        "study/03/2", "study/3/2.5", "study/x/2", "study/3/from-3",
        "study/3/to-1-2", "study/3/from--1-2"}) {
    EXPECT_EQ(CheckpointStore::ParseId(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace dial::storage
