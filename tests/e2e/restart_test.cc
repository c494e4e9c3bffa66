// End to end with the real dial-scheduler binary: SIGKILL it halfway through
// an ask/tell study, restart it on the same database, and check that nothing
// acknowledged was lost and the study finishes. On SQLite and on a real
// PostgreSQL server (--db=postgresql://...).
#include <gtest/gtest.h>

#include <filesystem>

#include "client/client.h"
#include "common/params.h"
#include "searchers/searcher.h"
#include "searchers/space.h"
#include "storage/testing/pg_server.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using client::DialClient;

std::string Key(const searchers::Params& p) {
  std::map<std::string, std::string> sorted;
  for (const auto& [k, v] : p) sorted[k] = ParamValueToString(v);
  std::string key;
  for (const auto& [k, v] : sorted) key += k + "=" + v + ";";
  return key;
}

// The parameter: whether the database is PostgreSQL (else SQLite).
class RestartTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-e2e-restart-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "dial.db").string();
    if (GetParam()) {
      auto server = storage::testing::PgServer::Start();
      ASSERT_TRUE(server.ok()) << server.status();
      pg_ = std::move(*server);
      auto url = pg_->NewDatabase("restart");
      ASSERT_TRUE(url.ok()) << url.status();
      db_ = *url;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts the scheduler and connects a client to it.
  std::unique_ptr<DialClient> Start(testing::Subprocess& proc) {
    EXPECT_TRUE(proc.Start({DIAL_SCHEDULER_BIN, "--db=" + db_,
                            "--checkpoint-root=" + (dir_ / "ckpt").string(),
                            "--listen=127.0.0.1:0"},
                           (dir_ / "scheduler.log").string()));
    auto address =
        proc.WaitFor("dial-scheduler listening on ", std::chrono::seconds(30));
    EXPECT_TRUE(address.has_value()) << "scheduler did not start";
    if (!address) return nullptr;
    auto client = DialClient::Create({*address, absl::Seconds(10)});
    return client.ok() ? std::move(*client) : nullptr;
  }
  fs::path dir_;
  std::string db_;
  std::unique_ptr<storage::testing::PgServer> pg_;
};

TEST_P(RestartTest, SigkillLosesNothingAcknowledged) {
  v1::StudySpec spec;
  spec.set_name("restart");
  spec.mutable_objective()->set_metric("loss");
  spec.mutable_objective()->set_goal(v1::MINIMIZE);
  auto* x = spec.add_search_space();
  x->set_name("x");
  x->mutable_float_()->set_min(-1);
  x->mutable_float_()->set_max(1);
  auto* opt = spec.add_search_space();
  opt->set_name("opt");
  opt->mutable_categorical()->add_values("sgd");
  opt->mutable_categorical()->add_values("adam");
  spec.mutable_searcher()->mutable_random()->set_seed(2024);
  spec.mutable_budget()->set_max_trials(10);
  spec.mutable_budget()->set_max_parallel_trials(3);

  // Acknowledged reports, by trial: step -> loss.
  std::map<int64_t, std::map<int64_t, double>> acked;
  std::map<int64_t, std::string> params_before;
  std::set<int64_t> completed;
  {
    testing::Subprocess scheduler;
    auto client = Start(scheduler);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->CreateStudy(spec).ok());
    while (completed.size() < 5) {
      auto s = client->SuggestTrials("restart", 1, "me");
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_EQ(s->trials_size(), 1);
      const auto& t = s->trials(0);
      params_before[t.number()] = Key(t.params());
      for (int step = 1; step <= 4; ++step) {
        double loss = 10.0 * t.number() + 1.0 / step;
        ASSERT_TRUE(client
                        ->ReportIntermediate("restart", t.number(), step,
                                             {{"loss", loss}})
                        .ok());
        acked[t.number()][step] = loss;
      }
      ASSERT_TRUE(client
                      ->CompleteTrial("restart", t.number(),
                                      {{"loss", 10.0 * t.number()}})
                      .ok());
      completed.insert(t.number());
    }
    // One trial left half-way: two acknowledged reports.
    auto s = client->SuggestTrials("restart", 1, "me");
    ASSERT_TRUE(s.ok());
    const int64_t open = s->trials(0).number();
    params_before[open] = Key(s->trials(0).params());
    for (int step = 1; step <= 2; ++step) {
      ASSERT_TRUE(client
                      ->ReportIntermediate("restart", open, step,
                                           {{"loss", 99.0 + step}})
                      .ok());
      acked[open][step] = 99.0 + step;
    }
    int status = scheduler.Kill(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(status));
  }

  testing::Subprocess scheduler;
  auto client = Start(scheduler);
  ASSERT_NE(client, nullptr);
  auto study = client->GetStudy("restart");
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(study->trial_counts().at("COMPLETED"), 5);
  EXPECT_EQ(study->trial_counts().at("RUNNING"), 1);
  for (const auto& [number, steps] : acked) {
    auto trial = client->GetTrial("restart", number);
    ASSERT_TRUE(trial.ok());
    EXPECT_EQ(Key(trial->params()), params_before[number]);
    ASSERT_EQ(trial->metric_history_size(), int(steps.size())) << number;
    for (const auto& point : trial->metric_history()) {
      EXPECT_DOUBLE_EQ(point.metrics().at("loss"), steps.at(point.step()));
    }
    EXPECT_EQ(trial->state(),
              completed.count(number) ? v1::COMPLETED : v1::RUNNING);
  }

  // Finish: the client gets its open trial back, then new ones that follow
  // the seeded sequence as if the scheduler had never stopped.
  auto reference = searchers::RandomSearcher::Create(study->spec());
  ASSERT_TRUE(reference.ok());
  int rounds = 0;
  while (true) {
    auto s = client->SuggestTrials("restart", 1, "me");
    ASSERT_TRUE(s.ok());
    if (s->done()) break;
    const auto& t = s->trials(0);
    EXPECT_EQ(Key(t.params()), Key(*(*reference)->Suggest(t.number())));
    ASSERT_TRUE(
        client->ReportIntermediate("restart", t.number(), 3, {{"loss", 1.0}})
            .ok());
    ASSERT_TRUE(
        client->CompleteTrial("restart", t.number(), {{"loss", 1.0}}).ok());
    ASSERT_LT(++rounds, 20);
  }
  study = client->GetStudy("restart");
  ASSERT_TRUE(study.ok());
  EXPECT_EQ(study->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(study->trial_counts().at("COMPLETED"), 10);
  int status = scheduler.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

INSTANTIATE_TEST_SUITE_P(Databases, RestartTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Postgres" : "Sqlite";
                         });

}  // namespace
}  // namespace dial
