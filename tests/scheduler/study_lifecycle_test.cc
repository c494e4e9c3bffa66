// StudyLifecycle over the memory store (and the fault store) with a fake
// clock: creating, updating, stopping, deleting, enqueueing and
// re-evaluating studies, each written before memory follows and audited,
// and a failed write that changes nothing.
#include "scheduler/study_lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "google/protobuf/util/message_differencer.h"
#include "storage/memory_study_store.h"
#include "storage/testing/faulty_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

auth::Principal User(const std::string& name) {
  auth::Principal p;
  p.name = name;
  p.role = auth::Role::kUser;
  p.anonymous = false;
  return p;
}

class StudyLifecycleTest : public ::testing::Test {
 protected:
  // A fresh study `name` made through Prepare and Create, as the core does.
  absl::StatusOr<v1::Study> Create(const v1::StudySpec& spec,
                                   const auth::Principal& who) {
    auto draft = studies_.Prepare(spec, who);
    if (!draft.ok()) return draft.status();
    return studies_.Create(
        std::move(*draft), who,
        [&](const std::string& source) -> absl::StatusOr<const StudyEntry*> {
          return parts_.studies.Find(source);
        });
  }
  StudyEntry& Entry(const std::string& name) {
    return **parts_.studies.Find(name);
  }
  // Saves trial `number` of study `name` RUNNING (as an ask would), then
  // completes it with `loss`.
  void RunAndComplete(const std::string& name, int64_t number, double loss) {
    v1::Trial t;
    t.set_study(name);
    t.set_number(number);
    t.set_state(v1::RUNNING);
    (*t.mutable_params())["x"].set_double_value(0.5);
    ASSERT_TRUE(parts_.lifecycle.SaveTrial(Entry(name), t).ok());
    t.set_state(v1::COMPLETED);
    (*t.mutable_final_metrics())["loss"] = loss;
    t.set_objective_value(loss);
    ASSERT_TRUE(parts_.lifecycle.Finalize(Entry(name), t).ok());
  }
  std::vector<v1::AuditEvent> Audit() {
    auto events = store_->ListAudit("", 0, 100);  // newest first
    EXPECT_TRUE(events.ok());
    return events.value_or(std::vector<v1::AuditEvent>());
  }

  std::unique_ptr<storage::testing::FaultyStudyStore> store_ =
      storage::testing::FaultyStudyStore::Create();
  CoreParts parts_{store_.get()};
  Limits limits_;
  TrialMaker maker_{
      {store_.get(), nullptr, &parts_.quota, &parts_.lifecycle, &parts_.outbox,
       &parts_.loader, &limits_, nullptr,
       [](WriteTicket*, const std::function<void()>& body) { body(); },
       [](WriteTicket, std::function<void(absl::Status)> done) {
         done(absl::OkStatus());
       },
       1}};
  StudyLifecycle studies_{{store_.get(), &parts_.studies, &parts_.lifecycle,
                           &maker_, &parts_.outbox, &parts_.loader, &limits_,
                           nullptr, &parts_.retention, &parts_.quota}};
};

TEST_F(StudyLifecycleTest, CreateWritesAuditsAndAsksForATopUp) {
  auto created = Create(SmallSpec("s", 4), User("ann"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->owner(), "ann");
  EXPECT_EQ(created->state(), v1::STUDY_ACTIVE);
  EXPECT_TRUE(store_->inner().GetStudy("s").ok());
  EXPECT_TRUE(parts_.studies.Contains("s"));
  EXPECT_TRUE(parts_.outbox.fills.count("s"));
  ASSERT_EQ(Audit().size(), 1u);
  EXPECT_EQ(Audit().front().action(), "CreateStudy");
  EXPECT_EQ(Audit().front().principal(), "ann");

  EXPECT_EQ(Create(SmallSpec("s", 4), User("ann")).status().code(),
            absl::StatusCode::kAlreadyExists);
  auth::Principal worker = User("w");
  worker.role = auth::Role::kWorker;
  EXPECT_EQ(Create(SmallSpec("t", 4), worker).status().code(),
            absl::StatusCode::kPermissionDenied);
  v1::StudySpec no_space = SmallSpec("u", 4);
  no_space.clear_search_space();
  auto bad = Create(no_space, User("ann"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("search_space"));
}

TEST_F(StudyLifecycleTest, AnOwnerHasAtMostTheStudiesAllowed) {
  limits_.max_studies_per_owner = 2;
  ASSERT_TRUE(Create(SmallSpec("a", 4), User("ann")).ok());
  ASSERT_TRUE(Create(SmallSpec("b", 4), User("ann")).ok());
  auto third = Create(SmallSpec("c", 4), User("ann"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("--max-studies-per-owner"));
  EXPECT_TRUE(Create(SmallSpec("c", 4), User("bob")).ok());
}

TEST_F(StudyLifecycleTest, WarmStartQueuesTheSourcesBestAndKeepsPriors) {
  ASSERT_TRUE(Create(SmallSpec("old", 4), User("ann")).ok());
  RunAndComplete("old", 0, 0.3);
  auto created =
      Create(SmallSpec("new", 4, "warm_start: {studies: [old], top_k: 1}\n"),
             User("ann"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->queue_size(), 1);
  EXPECT_EQ(created->prior_trials_size(), 0);  // not in answers
  EXPECT_EQ(Entry("new").priors().size(), 1);
  // In the store since creation, so a restart has them.
  EXPECT_EQ(store_->inner().GetStudy("new")->prior_trials_size(), 1);
  auto missing =
      Create(SmallSpec("x", 4, "warm_start: {studies: [nope]}\n"), User("ann"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StudyLifecycleTest, UpdateRaisesTheBudgetAndReopensAFinishedStudy) {
  ASSERT_TRUE(Create(SmallSpec("s", 1), User("ann")).ok());
  RunAndComplete("s", 0, 0.5);
  ASSERT_EQ(Entry("s").study().state(), v1::STUDY_COMPLETED);

  EXPECT_EQ(studies_.Update(Entry("s"), StudyChange{0, 0, {}}, User("ann"))
                .value()
                .state(),
            v1::STUDY_COMPLETED);
  auto reopened =
      studies_.Update(Entry("s"), StudyChange{3, 2, {}}, User("ann"));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(reopened->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(reopened->spec().budget().max_trials(), 3);
  EXPECT_EQ(store_->inner().GetStudy("s")->spec().budget().max_trials(), 3);
  EXPECT_EQ(Audit().front().action(), "UpdateStudy");
  maker_.WaitIdle();  // the searcher's rebuild

  ASSERT_TRUE(studies_.Stop(Entry("s"), User("ann")).ok());
  EXPECT_EQ(studies_.Update(Entry("s"), StudyChange{5, 0, {}}, User("ann"))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StudyLifecycleTest, StopEndsWaitingTrialsAndTellsWatchers) {
  ASSERT_TRUE(Create(SmallSpec("s", 4), User("ann")).ok());
  v1::Trial t;
  t.set_study("s");
  t.set_number(0);
  t.set_state(v1::PENDING);
  ASSERT_TRUE(parts_.lifecycle.SaveTrial(Entry("s"), t).ok());
  std::vector<v1::StudyEvent> seen;
  parts_.events.Add(
      "s", [&](const v1::StudyEvent& e) { seen.push_back(e); },
      v1::StudyEvent());
  auto stopped = studies_.Stop(Entry("s"), User("ann"));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->state(), v1::STUDY_STOPPED);
  EXPECT_EQ(store_->inner().GetTrial("s", 0)->state(), v1::STOPPED);
  EXPECT_EQ(store_->inner().GetStudy("s")->state(), v1::STUDY_STOPPED);
  parts_.events.Deliver();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().kind(), v1::StudyEvent::STUDY_FINISHED);
}

TEST_F(StudyLifecycleTest, DeleteDropsTheStudyAndItsWork) {
  ASSERT_TRUE(Create(SmallSpec("s", 4), User("ann")).ok());
  std::shared_ptr<StudyEntry> held = parts_.studies.Shared("s");
  ASSERT_TRUE(studies_.Delete(*held, User("ann")).ok());
  EXPECT_FALSE(parts_.studies.Contains("s"));
  EXPECT_TRUE(held->deleted());
  EXPECT_EQ(store_->inner().GetStudy("s").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Audit().front().action(), "DeleteStudy");
}

TEST_F(StudyLifecycleTest, EnqueueChecksTheSpaceAndNumbersTheQueue) {
  ASSERT_TRUE(Create(SmallSpec("s", 4), User("ann")).ok());
  std::vector<v1::QueuedTrial> bad(1);
  (*bad[0].mutable_params())["x"].set_double_value(7);
  auto refused = studies_.Enqueue(Entry("s"), bad, User("ann"), nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("trials[0].params"));

  std::vector<v1::QueuedTrial> good(2);
  for (auto& q : good) (*q.mutable_params())["x"].set_double_value(0.5);
  int32_t waiting = 0;
  auto queued = studies_.Enqueue(Entry("s"), good, User("ann"), &waiting);
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ((*queued)[0].id(), 1);
  EXPECT_EQ((*queued)[1].id(), 2);
  EXPECT_EQ(waiting, 2);
  EXPECT_EQ(store_->inner().GetStudy("s")->queue_size(), 2);
}

TEST_F(StudyLifecycleTest, ReevaluationQueuesNewSeedsOfTheBest) {
  ASSERT_TRUE(Create(SmallSpec("s", 2), User("ann")).ok());
  for (int n = 0; n < 2; ++n) {
    RunAndComplete("s", n, n == 0 ? 0.9 : 0.1);
  }
  ASSERT_EQ(Entry("s").study().state(), v1::STUDY_COMPLETED);
  int32_t max_trials = 0;
  auto queued = studies_.Reevaluate(Entry("s"), 1, 3, User("ann"), &max_trials);
  ASSERT_TRUE(queued.ok()) << queued.status();
  ASSERT_EQ(queued->size(), 3u);
  for (const auto& q : *queued) EXPECT_EQ(q.origin(), 1);  // the best
  EXPECT_NE((*queued)[0].seed(), (*queued)[1].seed());
  EXPECT_EQ(max_trials, 5);
  EXPECT_EQ(Entry("s").study().state(), v1::STUDY_ACTIVE);
}

// Issue 33: a study-level change whose write fails leaves memory exactly
// as it was, and the same call works once the store does.
// Issue 37: notes are written before memory follows, audited without their
// text, and checked.
TEST_F(StudyLifecycleTest, NotesAreStoredAuditedAndChecked) {
  ASSERT_TRUE(Create(SmallSpec("s", 4), User("ann")).ok());
  RunAndComplete("s", 0, 0.5);
  auto study =
      studies_.SetNote(Entry("s"), std::nullopt, "wider lr\tnext", User("ann"));
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(study->study().note(), "wider lr\tnext");
  EXPECT_FALSE(study->has_trial());
  EXPECT_EQ(store_->inner().GetStudy("s")->note(), "wider lr\tnext");
  EXPECT_EQ(Audit().front().action(), "SetNote");
  EXPECT_EQ(Audit().front().detail(), "study, 13 bytes");

  // 2,000 characters of 3 bytes each are within the limit.
  std::string long_note;
  for (int i = 0; i < 2000; ++i) long_note += "\xe2\x82\xac";  // U+20AC
  auto trial = studies_.SetNote(Entry("s"), 0, long_note, User("ann"));
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->trial().note(), long_note);
  EXPECT_EQ(trial->trial().state(), v1::COMPLETED);
  EXPECT_EQ(Entry("s").trials().at(0).note(), long_note);
  EXPECT_EQ(store_->inner().GetTrial("s", 0)->note(), long_note);
  EXPECT_EQ(Audit().front().detail(), "trial 0, 6000 bytes");

  auto too_long = studies_.SetNote(Entry("s"), 0, long_note + "x", User("ann"));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(),
              HasSubstr("note: must be at most 2000 characters, got 2001"));
  auto control =
      studies_.SetNote(Entry("s"), std::nullopt, "a\x1b[31mred", User("ann"));
  EXPECT_EQ(control.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(control.status().message(),
              HasSubstr("note: control character U+001B at byte 1"));
  EXPECT_EQ(studies_.SetNote(Entry("s"), 7, "x", User("ann")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Entry("s").study().note(), "wider lr\tnext");

  store_->FailWrites();
  EXPECT_FALSE(
      studies_.SetNote(Entry("s"), std::nullopt, "lost", User("ann")).ok());
  EXPECT_FALSE(studies_.SetNote(Entry("s"), 0, "lost", User("ann")).ok());
  EXPECT_EQ(Entry("s").study().note(), "wider lr\tnext");
  EXPECT_EQ(Entry("s").trials().at(0).note(), long_note);
  store_->Heal();
  auto cleared = studies_.SetNote(Entry("s"), std::nullopt, "", User("ann"));
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(store_->inner().GetStudy("s")->note(), "");
}

TEST_F(StudyLifecycleTest, AFailedWriteChangesNothing) {
  ASSERT_TRUE(Create(SmallSpec("s", 1), User("ann")).ok());
  RunAndComplete("s", 0, 0.5);
  parts_.outbox.fills.clear();
  const v1::Study before = Entry("s").study();

  store_->FailWrites();
  std::vector<v1::QueuedTrial> one(1);
  (*one[0].mutable_params())["x"].set_double_value(0.5);
  EXPECT_FALSE(
      studies_.Update(Entry("s"), StudyChange{4, 0, {}}, User("ann")).ok());
  EXPECT_FALSE(
      studies_.Reevaluate(Entry("s"), 1, 2, User("ann"), nullptr).ok());
  EXPECT_FALSE(studies_.Delete(Entry("s"), User("ann")).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(Entry("s").study(), before))
      << Entry("s").study().DebugString();
  EXPECT_TRUE(parts_.outbox.fills.empty());
  EXPECT_TRUE(parts_.studies.Contains("s"));

  store_->Heal();
  auto queued = studies_.Reevaluate(Entry("s"), 1, 2, User("ann"), nullptr);
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(Entry("s").study().spec().budget().max_trials(), 3);
  EXPECT_EQ(Entry("s").study().state(), v1::STUDY_ACTIVE);
}

}  // namespace
}  // namespace dial::scheduler
