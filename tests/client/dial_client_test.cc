// DialClient against a fake StudyService on 127.0.0.1:0: the token travels
// with every call (the WatchStudy stream included), pages are joined, a
// server that repeats a page token cannot make the client loop, a call the
// server cancelled is UNAVAILABLE, and bad TLS options fail at Create.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

namespace dial::client {
namespace {

class FakeStudyService final : public v1::StudyService::Service {
 public:
  int studies = 0;
  int history_points = 0;
  bool repeat_token = false;

  // The authorization metadata of each call, in order ("" when none).
  std::vector<std::string> Authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  std::vector<std::string> Methods() {
    absl::MutexLock lock(&mu_);
    return methods_;
  }

  // As a scheduler's server shutting down with the call in flight.
  grpc::Status GetStudy(grpc::ServerContext* ctx,
                        const v1::GetStudyRequest* request,
                        v1::GetStudyResponse* response) override {
    Record(ctx, "GetStudy");
    return {grpc::StatusCode::CANCELLED, "Cancelled"};
  }

  grpc::Status ListStudies(grpc::ServerContext* ctx,
                           const v1::ListStudiesRequest* request,
                           v1::ListStudiesResponse* response) override {
    Record(ctx, "ListStudies");
    int start = 0;
    if (!request->page_token().empty() &&
        !absl::SimpleAtoi(request->page_token(), &start)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "page_token"};
    }
    const int end = std::min(studies, start + request->page_size());
    for (int i = start; i < end; ++i) {
      response->add_studies()->set_name(absl::StrCat("s", i));
    }
    if (repeat_token) {
      response->set_next_page_token(
          request->page_token().empty() ? "0" : request->page_token());
    } else if (end < studies) {
      response->set_next_page_token(std::to_string(end));
    }
    return grpc::Status::OK;
  }

  // History in pages of 1000, as the scheduler's default; the trial's
  // last_step says which page answered, so the test sees whose fields won.
  grpc::Status GetTrial(grpc::ServerContext* ctx,
                        const v1::GetTrialRequest* request,
                        v1::GetTrialResponse* response) override {
    Record(ctx, "GetTrial");
    int start = 0;
    if (!request->history_page_token().empty() &&
        !absl::SimpleAtoi(request->history_page_token(), &start)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "history_page_token"};
    }
    const int end = std::min(history_points, start + 1000);
    v1::Trial* trial = response->mutable_trial();
    trial->set_study(request->study());
    trial->set_number(request->trial());
    trial->set_last_step(end);
    for (int i = start; i < end; ++i) {
      trial->add_metric_history()->set_step(i);
    }
    if (repeat_token) {
      response->set_next_history_page_token("7");
    } else if (end < history_points) {
      response->set_next_history_page_token(std::to_string(end));
    }
    return grpc::Status::OK;
  }

  grpc::Status ListAuditEvents(grpc::ServerContext* ctx,
                               const v1::ListAuditEventsRequest* request,
                               v1::ListAuditEventsResponse* response) override {
    Record(ctx, "ListAuditEvents");
    v1::AuditEvent* event = response->add_events();
    event->set_study(request->study());
    event->set_detail(
        absl::StrCat(request->page_size(), "/", request->page_token()));
    response->set_next_page_token("next");
    return grpc::Status::OK;
  }

  grpc::Status BackupDatabase(grpc::ServerContext* ctx,
                              const v1::BackupDatabaseRequest* request,
                              v1::BackupDatabaseResponse* response) override {
    Record(ctx, "BackupDatabase");
    response->set_path("/backups/" + request->path());
    response->set_bytes(4096);
    return grpc::Status::OK;
  }

  grpc::Status WatchStudy(
      grpc::ServerContext* ctx, const v1::WatchStudyRequest* request,
      grpc::ServerWriter<v1::WatchStudyResponse>* writer) override {
    Record(ctx, "WatchStudy");
    v1::WatchStudyResponse response;
    response.mutable_event()->mutable_study()->set_name(request->study());
    writer->Write(response);
    return grpc::Status::OK;
  }

 private:
  void Record(grpc::ServerContext* ctx, const char* method) {
    const auto& metadata = ctx->client_metadata();
    auto it = metadata.find("authorization");
    absl::MutexLock lock(&mu_);
    authorizations_.push_back(
        it == metadata.end()
            ? ""
            : std::string(it->second.data(), it->second.size()));
    methods_.push_back(method);
  }

  absl::Mutex mu_;
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> methods_ ABSL_GUARDED_BY(mu_);
};

class DialClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<DialClient> Connect(const std::string& token) {
    DialClientOptions options;
    options.target = address_;
    options.timeout = absl::Seconds(10);
    options.token = token;
    auto client = DialClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  FakeStudyService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(DialClientTest, ListStudiesJoinsEveryPageAndSendsTheTokenEachTime) {
  service_.studies = 2500;
  auto client = Connect("tok");
  auto studies = client->ListStudies();
  ASSERT_TRUE(studies.ok()) << studies.status();
  ASSERT_EQ(studies->size(), 2500u);
  for (int i = 0; i < 2500; ++i) {
    ASSERT_EQ((*studies)[i].name(), absl::StrCat("s", i));
  }
  EXPECT_EQ(service_.Authorizations(),
            std::vector<std::string>(3, "Bearer tok"));
}

// FailoverE2eTest's ask/tell client gave up on a CANCELLED call: a server
// that shuts down cancels the calls in flight. It is UNAVAILABLE to the
// caller, who retries it as any failover.
TEST_F(DialClientTest, ACallTheSchedulerCancelledIsUnavailable) {
  auto client = Connect("");
  auto study = client->GetStudy("s");
  EXPECT_EQ(study.status().code(), absl::StatusCode::kUnavailable)
      << study.status();
  EXPECT_THAT(std::string(study.status().message()),
              ::testing::HasSubstr("cancelled the call"));
}

TEST_F(DialClientTest, GetTrialJoinsTheHistoryWithTheLastPagesFields) {
  service_.history_points = 2345;
  auto client = Connect("tok");
  auto trial = client->GetTrial("q", 4);
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->number(), 4);
  EXPECT_EQ(trial->last_step(), 2345);  // the third page's
  ASSERT_EQ(trial->metric_history_size(), 2345);
  for (int i = 0; i < 2345; ++i) {
    ASSERT_EQ(trial->metric_history(i).step(), i);
  }
  EXPECT_EQ(service_.Methods().size(), 3u);
}

TEST_F(DialClientTest, AShortHistoryIsOneCall) {
  service_.history_points = 2;
  auto client = Connect("");
  auto trial = client->GetTrial("q", 0);
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->metric_history_size(), 2);
  // No token: no authorization metadata at all.
  EXPECT_EQ(service_.Authorizations(), std::vector<std::string>{""});
}

TEST_F(DialClientTest, ARepeatedPageTokenIsAnErrorNotALoop) {
  service_.studies = 10;
  service_.history_points = 5000;
  service_.repeat_token = true;
  auto client = Connect("tok");
  EXPECT_EQ(client->ListStudies().status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(client->GetTrial("q", 0).status().code(),
            absl::StatusCode::kInternal);
  // Each stops at its second call, which answers the token it was given.
  EXPECT_EQ(service_.Methods(),
            (std::vector<std::string>{"ListStudies", "ListStudies", "GetTrial",
                                      "GetTrial"}));
}

TEST_F(DialClientTest, WatchStudyCarriesTheToken) {
  auto client = Connect("tok");
  std::vector<std::string> seen;
  auto status = client->WatchStudy("q", [&](const v1::StudyEvent& event) {
    seen.push_back(event.study().name());
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, std::vector<std::string>{"q"});
  EXPECT_EQ(service_.Authorizations(), std::vector<std::string>{"Bearer tok"});
}

TEST_F(DialClientTest, AdminCallsPassTheirArgumentsThrough) {
  auto client = Connect("admin-token");
  auto backup = client->BackupDatabase("b1.db");
  ASSERT_TRUE(backup.ok()) << backup.status();
  EXPECT_EQ(backup->path(), "/backups/b1.db");
  auto audit = client->ListAuditEvents("q", 25, "tok9");
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_EQ(audit->events_size(), 1);
  EXPECT_EQ(audit->events(0).study(), "q");
  EXPECT_EQ(audit->events(0).detail(), "25/tok9");
  EXPECT_EQ(audit->next_page_token(), "next");
  EXPECT_EQ(service_.Authorizations(),
            std::vector<std::string>(2, "Bearer admin-token"));
}

TEST(DialClientCreateTest, BadTlsOptionsFailBeforeAnyCall) {
  DialClientOptions options;
  options.tls_ca = "/nonexistent/ca.crt";
  auto missing = DialClient::Create(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/ca.crt"),
            std::string::npos);

  options.tls_cert = "/nonexistent/user.crt";  // without --tls-key
  EXPECT_EQ(DialClient::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);

  DialClientOptions no_ca;
  no_ca.tls_cert = "user.crt";
  no_ca.tls_key = "user.key";
  EXPECT_EQ(DialClient::Create(no_ca).status().code(),
            absl::StatusCode::kInvalidArgument);

  DialClientOptions empty;
  empty.target = "";
  EXPECT_EQ(DialClient::Create(empty).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dial::client
