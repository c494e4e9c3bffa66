// The limits outside the scheduler core (docs/limits.md): report checks,
// events without the spec, and bounded WatchStudy queues against a real
// gRPC server on 127.0.0.1 with a client that does not read.
#include "scheduler/limits.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/spec.h"
#include "dial/v1/service.grpc.pb.h"
#include "scheduler/event_hub.h"
#include "scheduler/request_checks.h"
#include "scheduler/server.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

searchers::Metrics Loss(double value) {
  searchers::Metrics metrics;
  metrics["loss"] = value;
  return metrics;
}

searchers::Metrics ManyMetrics(int count, size_t name_length = 8) {
  searchers::Metrics metrics;
  for (int i = 0; i < count; ++i) {
    std::string name = "m" + std::to_string(i);
    name.resize(std::max(name.size(), name_length), 'x');
    metrics[name] = i;
  }
  return metrics;
}

// Finding: 100k metrics per report pushed GetTrial answers (its history)
// over gRPC's 64 MiB message limit. Reports are capped in metric count and
// name length, and a step must be an integer a double holds exactly.
TEST(RequestChecksTest, ReportsAreCappedByTheLimits) {
  const Limits limits;
  EXPECT_TRUE(CheckReport(3, ManyMetrics(1000), "", limits).ok());
  const absl::Status many = CheckReport(3, ManyMetrics(1001), "", limits);
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(many.message(),
              HasSubstr("metrics: at most 1000 metrics per report, got 1001"));
  // The default-limits overloads the core calls agree.
  EXPECT_EQ(CheckReport(3, ManyMetrics(1001), "").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckMetrics(ManyMetrics(1001), "final_metrics").code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(CheckMetrics(ManyMetrics(1, 128), "m", limits).ok());
  EXPECT_THAT(
      CheckMetrics(ManyMetrics(1, 129), "final_metrics", limits).message(),
      HasSubstr("final_metrics: metric names must be 1-128"));

  EXPECT_TRUE(CheckReport(kMaxStep, ManyMetrics(1), "", limits).ok());
  EXPECT_THAT(CheckReport(kMaxStep + 1, ManyMetrics(1), "", limits).message(),
              HasSubstr("step: must be an integer in [0, 2^53"));
  EXPECT_THAT(CheckReport(-1, ManyMetrics(1), "", limits).message(),
              HasSubstr("step: must be an integer in [0, 2^53"));

  // The scheduler's configured limits, not constants.
  Limits small;
  small.max_metrics_per_report = 2;
  small.max_metric_name_bytes = 4;
  EXPECT_FALSE(CheckReport(1, ManyMetrics(3, 2), "", small).ok());
  EXPECT_THAT(CheckMetrics(ManyMetrics(1, 5), "metrics", small).message(),
              HasSubstr("metric names must be 1-4 characters"));
}

class WatchLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = storage::MemoryStudyStore::Create();
    SchedulerServerOptions options;
    options.store = store_.get();
    options.listen = "127.0.0.1:0";
    auto server = SchedulerServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::StudyService::NewStub(channel_);
  }
  void TearDown() override {
    stub_.reset();
    channel_.reset();
    server_.reset();
    store_.reset();
  }

  // An ask/tell study and its one RUNNING trial.
  int64_t StartStudy(const v1::StudySpec& spec) {
    auto study = server_->core()->CreateStudy(spec);
    EXPECT_TRUE(study.ok()) << study.status();
    auto suggestion = server_->core()->SuggestTrials(spec.name(), 1, "c");
    EXPECT_TRUE(suggestion.ok()) << suggestion.status();
    EXPECT_EQ(suggestion->trials.size(), 1u);
    return suggestion->trials.empty() ? -1 : suggestion->trials[0].number();
  }

  std::unique_ptr<storage::MemoryStudyStore> store_;
  std::unique_ptr<SchedulerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StudyService::Stub> stub_;
};

// Finding: the queue of a WatchStudy stream whose client does not read had
// no bound. A watcher that reaches Limits::max_watcher_queue unread events
// is dropped with RESOURCE_EXHAUSTED. Events here are made large (a 10 KB
// parameter value in each trial) so that far more than the queue and the
// transport's buffers are produced while the client sleeps on the stream.
TEST_F(WatchLimitsTest, AWatcherThatDoesNotReadIsDropped) {
  auto spec = ParseStudySpec(R"(
name: slow
objective: {metric: loss, goal: MINIMIZE}
budget: {max_trials: 10, max_parallel_trials: 1}
)");
  ASSERT_TRUE(spec.ok());
  auto* p = spec->add_search_space();
  p->set_name("c");
  p->mutable_categorical()->add_values(std::string(10000, 'v'));
  const int64_t trial = StartStudy(*spec);
  ASSERT_GE(trial, 0);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchStudyRequest request;
  request.set_study("slow");
  auto reader = stub_->WatchStudy(&ctx, request);
  v1::WatchStudyResponse response;
  // The snapshot: the watcher is registered. Then the client stops reading.
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_EQ(response.event().kind(), v1::StudyEvent::SNAPSHOT);

  const int reports = 3 * static_cast<int>(Limits{}.max_watcher_queue);
  for (int step = 1; step <= reports; ++step) {
    auto decision = server_->core()->ReportIntermediate("slow", trial, step,
                                                        Loss(1.0 / step), "");
    ASSERT_TRUE(decision.ok()) << decision.status();
  }
  ASSERT_TRUE(server_->core()->StopStudy("slow").ok());

  int received = 0;
  bool finished_event = false;
  while (reader->Read(&response)) {
    ++received;
    finished_event |= response.event().kind() == v1::StudyEvent::STUDY_FINISHED;
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message() << " after " << received << " events";
  EXPECT_THAT(status.error_message(), HasSubstr("watcher too slow"));
  EXPECT_LT(received, reports);
  EXPECT_FALSE(finished_event);

  // A watcher that keeps up is not dropped: a fresh one sees the end.
  grpc::ClientContext again;
  auto second = stub_->WatchStudy(&again, request);
  std::vector<v1::StudyEvent::Kind> kinds;
  while (second->Read(&response)) kinds.push_back(response.event().kind());
  EXPECT_TRUE(second->Finish().ok());
  EXPECT_EQ(kinds,
            (std::vector<v1::StudyEvent::Kind>{
                v1::StudyEvent::SNAPSHOT, v1::StudyEvent::STUDY_FINISHED}));
}

// The same finding with few, large events: a 150 KB parameter value makes
// each event ~150 KB, so 1024 of them would be 150 MB. The queue is also
// bounded in bytes (Limits::max_watcher_queue_bytes, 16 MiB): 400 unread
// events, under the count limit, are enough to drop the watcher.
TEST_F(WatchLimitsTest, AWatcherIsAlsoDroppedByQueuedBytes) {
  auto spec = ParseStudySpec(R"(
name: wide
objective: {metric: loss, goal: MINIMIZE}
budget: {max_trials: 10, max_parallel_trials: 1}
)");
  ASSERT_TRUE(spec.ok());
  auto* p = spec->add_search_space();
  p->set_name("c");
  p->mutable_categorical()->add_values(std::string(150000, 'v'));
  const int64_t trial = StartStudy(*spec);
  ASSERT_GE(trial, 0);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchStudyRequest request;
  request.set_study("wide");
  auto reader = stub_->WatchStudy(&ctx, request);
  v1::WatchStudyResponse response;
  ASSERT_TRUE(reader->Read(&response));

  const int reports = 400;
  ASSERT_LT(reports, static_cast<int>(Limits{}.max_watcher_queue));
  ASSERT_GT(reports * 150000u, 2 * Limits{}.max_watcher_queue_bytes);
  for (int step = 1; step <= reports; ++step) {
    ASSERT_TRUE(server_->core()
                    ->ReportIntermediate("wide", trial, step, Loss(1.0), "")
                    .ok());
  }
  ASSERT_TRUE(server_->core()->StopStudy("wide").ok());
  int received = 0;
  while (reader->Read(&response)) ++received;
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message() << " after " << received << " events";
  EXPECT_THAT(status.error_message(), HasSubstr("watcher too slow"));
  EXPECT_LT(received, reports);
}

// Finding 1 end to end: over the wire, events of a study with a 200 KB
// spec are small; GetStudy still has the whole spec.
TEST_F(WatchLimitsTest, WatchedEventsCarryNoSpec) {
  const v1::StudySpec spec = BigSpec(200000);
  ASSERT_GT(spec.ByteSizeLong(), 200000u);
  const int64_t trial = StartStudy(spec);
  ASSERT_GE(trial, 0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchStudyRequest request;
  request.set_study("big");
  auto reader = stub_->WatchStudy(&ctx, request);
  v1::WatchStudyResponse response;
  ASSERT_TRUE(reader->Read(&response));
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE(server_->core()
                    ->ReportIntermediate("big", trial, step, Loss(1.0), "")
                    .ok());
  }
  ASSERT_TRUE(server_->core()->StopStudy("big").ok());
  int events = 1;
  do {
    EXPECT_LT(response.ByteSizeLong(), 2000u) << response.event().kind();
    EXPECT_EQ(response.event().study().spec().objective().metric(), "loss");
    EXPECT_EQ(response.event().study().spec().budget().max_trials(), 1000);
  } while (reader->Read(&response) && ++events);
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_GE(events, 7);  // snapshot, 5 reports, the stop
  auto study = server_->core()->GetStudy("big");
  ASSERT_TRUE(study.ok());
  EXPECT_GT(study->spec().ByteSizeLong(), 200000u);
}

// Through the service: a report over the cap is refused before the core
// takes its lock.
TEST_F(WatchLimitsTest, ReportsOverTheCapAreRefused) {
  const int64_t trial = StartStudy(BigSpec(10));
  grpc::ClientContext ctx;
  v1::ReportIntermediateRequest request;
  request.set_study("big");
  request.set_trial(trial);
  request.set_step(1);
  *request.mutable_metrics() = ManyMetrics(1001);
  v1::ReportIntermediateResponse response;
  const grpc::Status status =
      stub_->ReportIntermediate(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("at most 1000 metrics"));
}

}  // namespace
}  // namespace dial::scheduler
