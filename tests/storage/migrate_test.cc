// Copying a study database between stores (dialctl admin migrate): a
// SQLite database with studies, prior trials, trials in several states,
// reports, checkpoints, audit events and usage records is copied into a
// fresh PostgreSQL database on a real server; everything reads back the
// same, the counts agree, and a target that is not empty is refused with
// nothing written.
#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "storage/migrate_store.h"
#include "storage/pg_study_store.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/pg_server.h"
#include "storage/testing/temp_dir.h"

namespace dial::storage {
namespace {

using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;
using ::testing::HasSubstr;

// Two studies (one with a prior trial), trials with reports and
// checkpoints, a deleted study, audit events and usage records.
void Fill(StudyStore& s) {
  for (const char* name : {"alpha", "beta", "gone"}) {
    v1::Study study;
    study.set_name(name);
    study.mutable_spec()->set_name(name);
    study.set_state(v1::STUDY_ACTIVE);
    study.set_owner("ann");
    if (std::string(name) == "alpha") {
      v1::Trial* prior = study.add_prior_trials();
      (*prior->mutable_final_metrics())["loss"] = 0.5;
    }
    ASSERT_TRUE(s.CreateStudy(study).ok());
  }
  for (int n = 0; n < 5; ++n) {
    v1::Trial t;
    t.set_study(n < 3 ? "alpha" : "beta");
    t.set_number(n);
    t.set_state(n % 2 ? v1::COMPLETED : v1::RUNNING);
    (*t.mutable_params())["lr"].set_double_value(0.1 * n);
    ASSERT_TRUE(s.PutTrial(t).ok());
    for (int step = 1; step <= 3 + n; ++step) {
      v1::MetricPoint p;
      p.set_step(step);
      (*p.mutable_metrics())["loss"] = 1.0 / step;
      *p.mutable_time() = TimeUtil::MillisecondsToTimestamp(1000 * step);
      t.set_last_step(step);
      t.set_checkpoint(absl::StrCat(t.study(), "/", n, "/", step));
      t.set_checkpoint_step(step);
      ASSERT_TRUE(s.RecordReport(t, p).ok());
    }
    ASSERT_TRUE(s.PutCheckpoint({t.study(), n, 3 + n, t.checkpoint(), 100,
                                 "sha256:00", 0.25})
                    .ok());
  }
  ASSERT_TRUE(s.DeleteStudy("gone").ok());
  for (int i = 0; i < 3; ++i) {
    v1::AuditEvent e;
    e.set_study(i ? "alpha" : "");
    e.set_action(absl::StrCat("action", i));
    ASSERT_TRUE(s.AppendAudit(e).ok());
    v1::UsageRecord u;
    u.set_study("beta");
    u.set_trial(i);
    *u.mutable_end_time() = TimeUtil::MillisecondsToTimestamp(5000 + i);
    ASSERT_TRUE(s.AppendUsage(u).ok());
  }
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto source = SqliteStudyStore::Create({dir_.File("dial.db")});
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = std::move(*source);
    Fill(*source_);
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto url = server_->NewDatabase("target");
    ASSERT_TRUE(url.ok()) << url.status();
    auto target = PgStudyStore::Create({*url, ""}, {/*group_commit=*/true});
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = std::move(*target);
  }
  testing::ScopedTempDir dir_{"migrate"};
  std::unique_ptr<SqliteStudyStore> source_;
  std::unique_ptr<testing::PgServer> server_;
  std::unique_ptr<PgStudyStore> target_;
};

TEST_F(MigrateTest, EverythingReadsBackTheSameAndTheCountsAgree) {
  std::vector<std::string> told;
  auto counts =
      CopyStore(*source_, *target_,
                [&](const std::string& study, const StoreCounts::Study&) {
                  told.push_back(study);
                });
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(told, (std::vector<std::string>{"alpha", "beta"}));
  ASSERT_EQ(counts->studies.size(), 2u);
  EXPECT_EQ(counts->studies["alpha"].trials, 3);
  EXPECT_EQ(counts->studies["alpha"].reports, 3 + 4 + 5);
  EXPECT_EQ(counts->studies["beta"].checkpoints, 2);
  EXPECT_EQ(counts->audit_events, 3);
  EXPECT_EQ(counts->usage_records, 3);

  for (const char* name : {"alpha", "beta"}) {
    auto a = source_->GetStudy(name);
    auto b = target_->GetStudy(name);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(MessageDifferencer::Equals(*a, *b)) << name;
    auto ta = source_->ListTrials(name, {});
    auto tb = target_->ListTrials(name, {});
    ASSERT_TRUE(ta.ok() && tb.ok());
    ASSERT_EQ(ta->size(), tb->size());
    for (size_t i = 0; i < ta->size(); ++i) {
      EXPECT_TRUE(MessageDifferencer::Equals((*ta)[i], (*tb)[i]))
          << (*ta)[i].DebugString() << " vs " << (*tb)[i].DebugString();
      auto ha = source_->GetMetricHistory(name, (*ta)[i].number());
      auto hb = target_->GetMetricHistory(name, (*ta)[i].number());
      ASSERT_TRUE(ha.ok() && hb.ok());
      ASSERT_EQ(ha->size(), hb->size());
      for (size_t k = 0; k < ha->size(); ++k) {
        EXPECT_TRUE(MessageDifferencer::Equals((*ha)[k], (*hb)[k]));
      }
    }
  }
  EXPECT_EQ(target_->GetStudy("gone").status().code(),
            absl::StatusCode::kNotFound);
  auto audit = target_->ListAudit("", 0, 10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 3u);
  EXPECT_EQ((*audit)[0].action(), "action2");  // newest first, as before
}

TEST_F(MigrateTest, ATargetThatIsNotEmptyIsRefusedWithNothingWritten) {
  v1::Study there;
  there.set_name("already-here");
  ASSERT_TRUE(target_->CreateStudy(there).ok());
  auto counts = CopyStore(*source_, *target_, nullptr);
  EXPECT_EQ(counts.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(counts.status().message(), HasSubstr("not empty"));
  EXPECT_THAT(counts.status().message(), HasSubstr("already-here"));
  auto studies = target_->ListStudies();
  ASSERT_TRUE(studies.ok());
  EXPECT_EQ(studies->size(), 1u);
  EXPECT_TRUE(target_->ListAudit("", 0, 10)->empty());
}

}  // namespace
}  // namespace dial::storage
