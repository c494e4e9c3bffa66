// The scheduler's gRPC services in-process on 127.0.0.1:0, driven by the C++
// client library over real sockets, with a real SQLite file.
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_split.h"
#include "client/client.h"
#include "common/export.h"
#include "common/message_limits.h"
#include "common/spec.h"
#include "scheduler/server.h"
#include "storage/sqlite_study_store.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;
using client::DialClient;
using ::testing::HasSubstr;

constexpr char kSpec[] = R"(
name: quad
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: x, float: {min: -3, max: 3}}
  - {name: kind, categorical: {values: [a, b]}}
  - {name: z, int: {min: 1, max: 4}, when: {kind: [b]}}
searcher: {random: {seed: 5}}
budget: {max_trials: 6, max_parallel_trials: 3}
)";

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-it-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto store =
        storage::SqliteStudyStore::Create({(dir_ / "dial.db").string()});
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    auto server = SchedulerServer::Create({store_.get(), "127.0.0.1:0"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto client = DialClient::Create({server_->address(), absl::Seconds(10)});
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  v1::StudySpec Spec() {
    auto spec = ParseStudySpec(kSpec);
    EXPECT_TRUE(spec.ok());
    return *spec;
  }
  fs::path dir_;
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<DialClient> client_;
};

double Objective(const v1::Trial& t) {
  double x = t.params().at("x").double_value();
  double z = t.params().count("z") ? t.params().at("z").int_value() : 0;
  return (x - 1) * (x - 1) + z;
}

TEST_F(IntegrationTest, FullAskTellStudyOverGrpc) {
  auto study = client_->CreateStudy(Spec());
  ASSERT_TRUE(study.ok()) << study.status();
  int rounds = 0;
  while (true) {
    auto s = client_->SuggestTrials("quad", 3, "worker-1");
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->done()) break;
    ASSERT_FALSE(s->trials().empty());
    for (const auto& t : s->trials()) {
      EXPECT_EQ(t.params().count("z"),
                t.params().at("kind").string_value() == "b");
      for (int step = 1; step <= 3; ++step) {
        auto d = client_->ReportIntermediate(
            "quad", t.number(), step, {{"loss", Objective(t) + 1.0 / step}});
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_EQ(d->action(), v1::Decision::CONTINUE);
      }
      auto done = client_->CompleteTrial("quad", t.number(),
                                         {{"loss", Objective(t)}, {"aux", 1}});
      ASSERT_TRUE(done.ok()) << done.status();
      EXPECT_EQ(done->state(), v1::COMPLETED);
    }
    ASSERT_LT(++rounds, 10);
  }
  auto got = client_->GetStudy("quad");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(got->trial_counts().at("COMPLETED"), 6);

  auto trials = client_->ListAllTrials("quad", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 6u);
  double best_value = 1e9;
  for (const auto& t : *trials) best_value = std::min(best_value, Objective(t));
  auto best = client_->GetBestTrials("quad", 2);
  ASSERT_TRUE(best.ok());
  ASSERT_EQ(best->size(), 2u);
  EXPECT_DOUBLE_EQ((*best)[0].objective_value(), best_value);
  EXPECT_LE((*best)[0].objective_value(), (*best)[1].objective_value());

  auto trial = client_->GetTrial("quad", 2);
  ASSERT_TRUE(trial.ok());
  ASSERT_EQ(trial->metric_history_size(), 3);
  EXPECT_DOUBLE_EQ(trial->metric_history(2).metrics().at("loss"),
                   Objective(*trial) + 1.0 / 3);
  EXPECT_DOUBLE_EQ(trial->final_metrics().at("aux"), 1);

  auto page = client_->ListTrials("quad", {v1::COMPLETED}, 4, "");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->trials_size(), 4);
  EXPECT_FALSE(page->next_page_token().empty());
  auto rest =
      client_->ListTrials("quad", {v1::COMPLETED}, 4, page->next_page_token());
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->trials_size(), 2);
  EXPECT_TRUE(rest->next_page_token().empty());
}

TEST_F(IntegrationTest, ParameterImportanceFindsWhatTheObjectiveDependsOn) {
  // x decides the loss; "noise" does not. Too few trials first.
  auto spec = ParseStudySpec(R"(
name: imp
objective: {metric: loss, goal: MAXIMIZE}
search_space:
  - {name: x, float: {min: -3, max: 3}}
  - {name: noise, float: {min: 0, max: 1}}
searcher: {random: {seed: 9}}
budget: {max_trials: 300, max_parallel_trials: 100}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  EXPECT_EQ(client_->GetParameterImportance("imp").status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (int round = 0; round < 3; ++round) {
    auto s = client_->SuggestTrials("imp", 100, "c");
    ASSERT_TRUE(s.ok()) << s.status();
    for (const auto& t : s->trials()) {
      const double x = t.params().at("x").double_value();
      // Maximised: the best trials have x near 1.
      ASSERT_TRUE(
          client_
              ->CompleteTrial("imp", t.number(), {{"loss", -(x - 1) * (x - 1)}})
              .ok());
    }
  }
  auto r = client_->GetParameterImportance("imp");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method(), "ped-anova");
  EXPECT_EQ(r->trials(), 300);
  EXPECT_EQ(r->top_trials(), 30);
  ASSERT_EQ(r->params_size(), 2);
  EXPECT_EQ(r->params(0).name(), "x");
  EXPECT_GT(r->params(0).importance(), 0.8);
  EXPECT_NEAR(r->params(0).importance() + r->params(1).importance(), 1, 1e-9);
  EXPECT_EQ(client_->GetParameterImportance("imp", 1.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetParameterImportance("nope").status().code(),
            absl::StatusCode::kNotFound);
}

// RFC 4180 rows (quoted cells with "" for a quote), for the export test.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        rows.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        rows.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      rows.back().back() += c;
    }
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

TEST_F(IntegrationTest, ExportsRoundTripEveryTrialAndStepOnce) {
  auto spec = ParseStudySpec(R"(
name: exp
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: lr, float: {min: 1.0e-5, max: 1, scale: LOG}}
  - {name: units, int: {min: 1, max: 512}}
  - {name: "opt", categorical: {values: ["sgd", "a \"quoted\", value"]}}
  - {name: momentum, float: {min: 0, max: 1}, when: {"opt": [sgd]}}
searcher: {random: {seed: 3}}
budget: {max_trials: 12, max_parallel_trials: 12}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  auto s = client_->SuggestTrials("exp", 12, "c");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->trials_size(), 12);
  for (const auto& t : s->trials()) {
    // Trial n reports n steps; every third stays RUNNING.
    for (int step = 1; step <= t.number(); ++step) {
      ASSERT_TRUE(client_
                      ->ReportIntermediate("exp", t.number(), step * 10,
                                           {{"loss", 1.0 / (step + t.number())},
                                            {"acc", step / 3.0}})
                      .ok());
    }
    if (t.number() % 3 == 2) continue;
    ASSERT_TRUE(client_
                    ->CompleteTrial("exp", t.number(),
                                    {{"loss", std::sqrt(t.number() + 0.5)},
                                     {"acc", 1.0 / 7}})
                    .ok());
  }
  auto listed = client_->ListAllTrials("exp", {});
  ASSERT_TRUE(listed.ok());
  std::vector<v1::Trial> trials;
  for (const auto& t : *listed) {
    auto full = client_->GetTrial("exp", t.number());
    ASSERT_TRUE(full.ok());
    trials.push_back(*full);
  }
  auto study = client_->GetStudy("exp");
  ASSERT_TRUE(study.ok());
  using ::dial::ExportFormat;

  // CSV, a row per trial.
  auto rows =
      ParseCsv(ExportTrials(study->spec(), trials, ExportFormat::kCsv, false));
  ASSERT_EQ(rows.size(), trials.size() + 1);
  EXPECT_THAT(rows[0], ::testing::ElementsAre(
                           "number", "state", "value", "start_time", "end_time",
                           "param.lr", "param.units", "param.opt",
                           "param.momentum", "metric.acc", "metric.loss"));
  for (size_t i = 0; i < trials.size(); ++i) {
    const v1::Trial& t = trials[i];
    const auto& row = rows[i + 1];
    ASSERT_EQ(row.size(), rows[0].size());
    EXPECT_EQ(std::stoll(row[0]), t.number());
    EXPECT_EQ(row[1], v1::TrialState_Name(t.state()));
    if (t.has_objective_value()) {
      EXPECT_EQ(std::stod(row[2]), t.objective_value());
    } else {
      EXPECT_EQ(row[2], "");
    }
    EXPECT_EQ(std::stod(row[5]), t.params().at("lr").double_value());
    EXPECT_EQ(std::stoll(row[6]), t.params().at("units").int_value());
    EXPECT_EQ(row[7], t.params().at("opt").string_value());
    if (t.params().count("momentum")) {
      EXPECT_EQ(std::stod(row[8]), t.params().at("momentum").double_value());
    } else {
      EXPECT_EQ(row[8], "");
    }
    if (t.state() == v1::COMPLETED) {
      EXPECT_EQ(std::stod(row[9]), t.final_metrics().at("acc"));
      EXPECT_EQ(std::stod(row[10]), t.final_metrics().at("loss"));
    }
  }

  // CSV history and JSON lines history: every reported step once.
  std::set<std::pair<int64_t, int64_t>> want;
  for (const auto& t : trials) {
    for (const auto& p : t.metric_history())
      want.insert({t.number(), p.step()});
  }
  ASSERT_EQ(want.size(), 66u);  // 0 + 1 + ... + 11
  auto history =
      ParseCsv(ExportTrials(study->spec(), trials, ExportFormat::kCsv, true));
  EXPECT_THAT(history[0], ::testing::ElementsAre("number", "step", "metric.acc",
                                                 "metric.loss"));
  std::set<std::pair<int64_t, int64_t>> got;
  for (size_t i = 1; i < history.size(); ++i) {
    const int64_t n = std::stoll(history[i][0]),
                  step = std::stoll(history[i][1]);
    EXPECT_TRUE(got.insert({n, step}).second) << n << "/" << step;
    const auto& point = trials[n].metric_history(step / 10 - 1);
    EXPECT_EQ(std::stod(history[i][2]), point.metrics().at("acc"));
    EXPECT_EQ(std::stod(history[i][3]), point.metrics().at("loss"));
  }
  EXPECT_EQ(got, want);
  got.clear();
  const std::string jsonl =
      ExportTrials(study->spec(), trials, ExportFormat::kJsonl, true);
  for (absl::string_view line :
       absl::StrSplit(jsonl, '\n', absl::SkipEmpty())) {
    google::protobuf::Struct row;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(std::string(line), &row)
            .ok())
        << line;
    const int64_t n = row.fields().at("number").number_value();
    const int64_t step = row.fields().at("step").number_value();
    EXPECT_TRUE(got.insert({n, step}).second);
    const auto& m = row.fields().at("metrics").struct_value().fields();
    EXPECT_EQ(m.at("loss").number_value(),
              trials[n].metric_history(step / 10 - 1).metrics().at("loss"));
  }
  EXPECT_EQ(got, want);

  // JSON lines, a line per trial.
  const std::string lines =
      ExportTrials(study->spec(), trials, ExportFormat::kJsonl, false);
  size_t i = 0;
  for (absl::string_view line :
       absl::StrSplit(lines, '\n', absl::SkipEmpty())) {
    google::protobuf::Struct row;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(std::string(line), &row)
            .ok())
        << line;
    ASSERT_LT(i, trials.size());
    const v1::Trial& t = trials[i++];
    const auto& f = row.fields();
    EXPECT_EQ(f.at("number").number_value(), t.number());
    EXPECT_EQ(f.at("state").string_value(), v1::TrialState_Name(t.state()));
    const auto& params = f.at("params").struct_value().fields();
    EXPECT_EQ(params.at("lr").number_value(),
              t.params().at("lr").double_value());
    EXPECT_EQ(params.at("units").number_value(),
              t.params().at("units").int_value());
    EXPECT_EQ(params.at("opt").string_value(),
              t.params().at("opt").string_value());
    EXPECT_EQ(params.count("momentum"), t.params().count("momentum"));
    if (t.has_objective_value()) {
      EXPECT_EQ(f.at("value").number_value(), t.objective_value());
    } else {
      EXPECT_TRUE(f.at("value").has_null_value());
    }
  }
  EXPECT_EQ(i, trials.size());
}

TEST_F(IntegrationTest, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  v1::StudySpec bad = Spec();
  bad.mutable_search_space(0)->mutable_float_()->set_min(10);
  auto created = client_->CreateStudy(bad);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      created.status().message(),
      HasSubstr("search_space[0].float: min (10) must be less than max"));

  EXPECT_EQ(client_->GetStudy("missing").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(client_->GetStudy("missing").status().message(),
              HasSubstr("study 'missing' not found"));
  EXPECT_EQ(client_->GetStudy("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->SuggestTrials("missing", 1, "c").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->CreateStudy(Spec()).ok());
  EXPECT_EQ(client_->SuggestTrials("quad", -4, "c").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client_->ReportIntermediate("quad", 0, 1, {{"loss", 1}}).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetTrial("quad", 77).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ListTrials("quad", {}, 10, "%%%").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->CreateStudy(Spec()).status().code(),
            absl::StatusCode::kAlreadyExists);

  // Worker RPCs check their input too.
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  auto worker = v1::WorkerService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::RegisterWorkerRequest req;
  v1::RegisterWorkerResponse resp;
  auto status = worker->RegisterWorker(&ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("host"));

  // Still serving.
  auto s = client_->SuggestTrials("quad", 1, "c");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->trials_size(), 1);
}

TEST_F(IntegrationTest, OversizedRequestsAreRefusedAndTheServerKeepsServing) {
  // A channel without Dial's send limit, so that the server itself must
  // refuse what is too big.
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(
      server_->address(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::StudyService::NewStub(channel);
  auto call = [&](const v1::CreateStudyRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    v1::CreateStudyResponse response;
    return stub->CreateStudy(&ctx, request, &response);
  };
  v1::CreateStudyRequest request;
  *request.mutable_spec() = Spec();

  // Over the limit: refused before any handler runs.
  request.mutable_spec()->set_name(std::string(kMaxRequestBytes, 'a'));
  grpc::Status status = call(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("larger than max"));
  // Just under it: it reaches the handler, whose spec size cap
  // (docs/limits.md) refuses it before any other check.
  request.mutable_spec()->set_name(std::string(kMaxRequestBytes - 4096, 'a'));
  status = call(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("spec: must be at most 262144 bytes"));

  // Dial's own client refuses to send it in the first place, same code.
  v1::StudySpec big = Spec();
  big.set_name(std::string(kMaxRequestBytes, 'a'));
  absl::Status refused = client_->CreateStudy(big).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;

  // The same connection and the server go on serving.
  request.mutable_spec()->set_name("quad");
  status = call(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto got = client_->GetStudy("quad");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), v1::STUDY_ACTIVE);
}

TEST_F(IntegrationTest, HealthCheckingIsServed) {
  // grpc.health.v1: the whole server and each of Dial's services by name
  // (what `dialctl scheduler health [--service=NAME]` asks).
  EXPECT_TRUE(client_->CheckHealth("").ok());
  for (const char* service :
       {"dial.v1.StudyService", "dial.v1.WorkerService"}) {
    EXPECT_TRUE(client_->CheckHealth(service).ok()) << service;
  }
  EXPECT_EQ(client_->CheckHealth("dial.v1.NoSuchService").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(IntegrationTest, WatchStreamsProgressUntilTheStudyEnds) {
  v1::StudySpec spec = Spec();
  spec.mutable_budget()->set_max_trials(2);
  spec.mutable_budget()->set_max_parallel_trials(2);
  ASSERT_TRUE(client_->CreateStudy(spec).ok());

  std::promise<void> subscribed;
  auto watcher = std::async(std::launch::async, [&] {
    std::vector<v1::StudyEvent> events;
    bool first = true;
    absl::Status status =
        client_->WatchStudy("quad", [&](const v1::StudyEvent& e) {
          events.push_back(e);
          if (first) {
            first = false;
            subscribed.set_value();
          }
          return true;
        });
    EXPECT_TRUE(status.ok()) << status;
    return events;
  });
  ASSERT_EQ(subscribed.get_future().wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  auto s = client_->SuggestTrials("quad", 2, "c");
  ASSERT_TRUE(s.ok());
  for (const auto& t : s->trials()) {
    ASSERT_TRUE(
        client_->ReportIntermediate("quad", t.number(), 1, {{"loss", 2}}).ok());
    ASSERT_TRUE(client_->CompleteTrial("quad", t.number(), {{"loss", 1}}).ok());
  }
  ASSERT_EQ(watcher.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  auto events = watcher.get();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().kind(), v1::StudyEvent::SNAPSHOT);
  EXPECT_EQ(events.back().kind(), v1::StudyEvent::STUDY_FINISHED);
  EXPECT_EQ(events.back().study().trial_counts().at("COMPLETED"), 2);
  int created = 0, finished = 0;
  for (const auto& e : events) {
    created += e.kind() == v1::StudyEvent::TRIAL_CREATED;
    finished += e.kind() == v1::StudyEvent::TRIAL_FINISHED;
  }
  EXPECT_EQ(created, 2);
  EXPECT_EQ(finished, 2);

  // Watching a finished study gives its snapshot and ends at once.
  std::vector<v1::StudyEvent> after;
  ASSERT_TRUE(client_
                  ->WatchStudy("quad",
                               [&](const v1::StudyEvent& e) {
                                 after.push_back(e);
                                 return true;
                               })
                  .ok());
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[1].kind(), v1::StudyEvent::STUDY_FINISHED);
  EXPECT_EQ(
      client_->WatchStudy("nope", [](const v1::StudyEvent&) { return true; })
          .code(),
      absl::StatusCode::kNotFound);
}

TEST_F(IntegrationTest, ConcurrentClientsNeverShareATrial) {
  v1::StudySpec spec = Spec();
  spec.mutable_budget()->set_max_trials(40);
  spec.mutable_budget()->set_max_parallel_trials(8);
  ASSERT_TRUE(client_->CreateStudy(spec).ok());
  std::vector<std::future<std::vector<int64_t>>> clients;
  for (int c = 0; c < 4; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      std::vector<int64_t> mine;
      const std::string id = "client-" + std::to_string(c);
      for (int round = 0; round < 200; ++round) {
        auto s = client_->SuggestTrials("quad", 2, id);
        if (!s.ok() || s->done()) break;
        for (const auto& t : s->trials()) {
          EXPECT_EQ(t.client_id(), id);
          if (client_->CompleteTrial("quad", t.number(), {{"loss", 1.0}})
                  .ok()) {
            mine.push_back(t.number());
          }
        }
      }
      return mine;
    }));
  }
  std::set<int64_t> all;
  size_t total = 0;
  for (auto& f : clients) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    auto mine = f.get();
    total += mine.size();
    all.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(total, 40u);
  EXPECT_EQ(all.size(), 40u);
  EXPECT_EQ(client_->GetStudy("quad")->state(), v1::STUDY_COMPLETED);
}

TEST(ServerTest, RemoteAddressesNeedTokensAndTls) {
  // Loopback needs nothing (the quickstart runs without tokens).
  EXPECT_TRUE(CheckListenAddress("127.0.0.1:7070", false, false, false).ok());
  EXPECT_TRUE(CheckListenAddress("localhost:0", false, false, false).ok());
  EXPECT_TRUE(CheckListenAddress("[::1]:7070", false, false, false).ok());
  // Beyond this machine: never without tokens, even with TLS or the
  // insecure flag.
  for (bool tls : {false, true}) {
    for (bool insecure : {false, true}) {
      auto status = CheckListenAddress("0.0.0.0:7070", false, tls, insecure);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr("--auth-tokens"));
    }
  }
  // With tokens: TLS, or plaintext only when asked for by name.
  auto plaintext = CheckListenAddress("10.0.0.1:7070", true, false, false);
  EXPECT_EQ(plaintext.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plaintext.message(), HasSubstr("--insecure-allow-remote"));
  EXPECT_TRUE(CheckListenAddress("10.0.0.1:7070", true, true, false).ok());
  EXPECT_TRUE(CheckListenAddress("10.0.0.1:7070", true, false, true).ok());
  EXPECT_FALSE(CheckListenAddress("nonsense", false, false, false).ok());
}

}  // namespace
}  // namespace dial::scheduler
