// CheckpointRetention on its own: which checkpoints of a trial it keeps
// (the latest, the restore point, the best keep_best, what a pending
// exploit copies, a path while any kept step names it).
#include "scheduler/retention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace dial::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::Study StudyKeeping(int keep_best) {
  v1::Study study;
  study.set_name("s");
  study.mutable_spec()->mutable_checkpoints()->set_keep_best(keep_best);
  return study;
}

std::vector<int64_t> Steps(const std::vector<DoomedCheckpoint>& doomed) {
  std::vector<int64_t> steps;
  for (const auto& d : doomed) steps.push_back(d.step);
  return steps;
}

TEST(CheckpointRetentionTest, KeepsTheLatestAndTheBestTwoByDefault) {
  CheckpointRetention retention;
  const v1::Study study = StudyKeeping(0);  // 0: the default, 2
  std::vector<int64_t> doomed;
  const double scores[] = {5, 1, 4, 2, 3};  // higher is better
  for (int step = 1; step <= 5; ++step) {
    for (const auto& d : retention.Record(study, 0, step, scores[step - 1],
                                          "s/0/" + std::to_string(step))) {
      EXPECT_EQ(d.study, "s");
      EXPECT_EQ(d.trial, 0);
      EXPECT_EQ(d.id, "s/0/" + std::to_string(d.step));
      EXPECT_TRUE(d.remove);
      doomed.push_back(d.step);
    }
  }
  // Kept: 1 (score 5) and 3 (score 4), the best two, and 5, the latest.
  std::sort(doomed.begin(), doomed.end());
  EXPECT_THAT(doomed, ElementsAre(2, 4));
}

TEST(CheckpointRetentionTest, KeepBestMinusOneKeepsEverything) {
  CheckpointRetention retention;
  const v1::Study study = StudyKeeping(-1);
  for (int step = 1; step <= 20; ++step) {
    EXPECT_THAT(retention.Record(study, 0, step, -step, "s/0/x"), IsEmpty());
  }
}

// A command trial reports one path at every step: the steps leave the
// index, but the file stays while a kept step names it.
TEST(CheckpointRetentionTest, APathSeveralStepsNameStaysWhileOneIsKept) {
  CheckpointRetention retention;
  const v1::Study study = StudyKeeping(1);
  std::vector<DoomedCheckpoint> doomed;
  for (int step = 1; step <= 4; ++step) {
    for (auto& d : retention.Record(study, 0, step, step, "s/0/model.pt")) {
      doomed.push_back(d);
    }
  }
  ASSERT_FALSE(doomed.empty());
  for (const auto& d : doomed) {
    EXPECT_EQ(d.id, "s/0/model.pt");
    EXPECT_FALSE(d.remove) << "step " << d.step << " deleted a kept file";
  }
  // A new path at the next step: the old one goes with the steps that named
  // it, since none of them is kept any more (the best and latest is 5).
  std::vector<DoomedCheckpoint> later =
      retention.Record(study, 0, 5, 10, "s/0/model-5.pt");
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].id, "s/0/model.pt");
  EXPECT_TRUE(later[0].remove);
}

// PBT: trial 1 copies trial 0's step-2 checkpoint; it stays until trial 1
// reports again (its copy is done), whatever trial 0 reports meanwhile.
TEST(CheckpointRetentionTest, ACheckpointAnExploitCopiesStaysUntilReleased) {
  CheckpointRetention retention;
  const v1::Study study = StudyKeeping(1);
  EXPECT_THAT(retention.Record(study, 0, 1, 1, "s/0/1"), IsEmpty());
  EXPECT_THAT(Steps(retention.Record(study, 0, 2, 2, "s/0/2")), ElementsAre(1));
  retention.Pin("s", "s/0/2", 1);
  EXPECT_THAT(retention.Record(study, 0, 3, 3, "s/0/3"), IsEmpty());
  // Step 3 goes once 4 is the best and latest; the pinned step 2 stays.
  EXPECT_THAT(Steps(retention.Record(study, 0, 4, 4, "s/0/4")), ElementsAre(3));
  std::vector<DoomedCheckpoint> released = retention.Release(study, 1);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].id, "s/0/2");
  EXPECT_TRUE(released[0].remove);
  EXPECT_THAT(retention.Release(study, 1), IsEmpty());
}

}  // namespace
}  // namespace dial::scheduler
