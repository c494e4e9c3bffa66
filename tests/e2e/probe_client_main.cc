// e2e_probe_client: one call (or one bounded poll) against a dial-scheduler,
// as a given principal, for tests that run clients where the test process
// itself cannot: netns_security_test starts it with `ip netns exec NS` as
// the legitimate user (alice), as an admin observer and as the attacker.
// It prints what it got as lines a test can parse:
//   JSON <the response, or the trial/study polled for, as one JSON line>
//   RESULT <grpc status code number> <code name> <message>
// and exits 0 once RESULT is printed (2 on a usage error). Every call has a
// deadline of --call_timeout_s; the polls end after --timeout_s.
//
//   e2e_probe_client --target=10.0.0.1:7443 --tls_ca=ca.crt
//       --tls_cert=user.crt --tls_key=user.key --token_file=alice.token
//       --action=get-study --study=s
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/spec.h"
#include "dial/v1/service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, target, "", "scheduler host:port");
ABSL_FLAG(std::string, tls_ca, "", "CA (PEM); empty: plaintext");
ABSL_FLAG(std::string, tls_cert, "", "client certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "client key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "", "name checked in the server's");
ABSL_FLAG(std::string, token_file, "", "bearer token file; empty: none");
ABSL_FLAG(std::string, token, "", "bearer token (instead of --token_file)");
ABSL_FLAG(std::string, action, "",
          "create-study | get-study | update-study | stop-study | "
          "delete-study | list-trials | get-trial | suggest | "
          "report-intermediate | complete-trial | register-acquire | "
          "report-progress | finish-trial | backup | wait-running | "
          "wait-done");
ABSL_FLAG(std::string, spec, "", "create-study: YAML or JSON spec file");
ABSL_FLAG(std::string, study, "", "study name");
ABSL_FLAG(int64_t, trial, 0, "trial number");
ABSL_FLAG(int64_t, step, 1, "report step");
ABSL_FLAG(double, loss, 0.5, "the `loss` metric of a report or completion");
ABSL_FLAG(std::string, checkpoint, "", "checkpoint id of a report");
ABSL_FLAG(std::string, worker_id, "", "report-progress, finish-trial");
ABSL_FLAG(int32_t, attempt, 0, "report-progress, finish-trial");
ABSL_FLAG(std::string, lease_token, "", "report-progress, finish-trial");
ABSL_FLAG(bool, requeue, false, "finish-trial: ask for a requeue");
ABSL_FLAG(int32_t, max_trials, 1000, "update-study: new max_trials");
ABSL_FLAG(std::string, path, "", "backup: file name in --backup-dir");
ABSL_FLAG(double, call_timeout_s, 10, "deadline of each call");
ABSL_FLAG(double, timeout_s, 60, "wait-running, wait-done: give up after");

namespace dial::testing {
namespace {

using Clock = std::chrono::steady_clock;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "?";
  }
}

int Result(const grpc::Status& status) {
  std::string message = status.error_message();
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  std::printf("RESULT %d %s %s\n", static_cast<int>(status.error_code()),
              CodeName(status.error_code()), message.c_str());
  return 0;
}

void PrintJson(const google::protobuf::Message& message) {
  std::string json;
  if (google::protobuf::util::MessageToJsonString(message, &json).ok()) {
    std::printf("JSON %s\n", json.c_str());
  }
}

class Probe {
 public:
  Probe(std::shared_ptr<grpc::Channel> channel, std::string token)
      : study_(v1::StudyService::NewStub(channel)),
        worker_(v1::WorkerService::NewStub(channel)),
        token_(std::move(token)) {}

  int Run(const std::string& action) {
    const std::string study = absl::GetFlag(FLAGS_study);
    if (action == "create-study") {
      auto spec = LoadStudySpecFile(absl::GetFlag(FLAGS_spec));
      if (!spec.ok()) {
        std::fprintf(stderr, "--spec: %s\n", spec.status().ToString().c_str());
        return 2;
      }
      v1::CreateStudyRequest req;
      *req.mutable_spec() = *spec;
      return Unary(&v1::StudyService::Stub::CreateStudy, *study_, req);
    }
    if (action == "get-study") {
      v1::GetStudyRequest req;
      req.set_study(study);
      return Unary(&v1::StudyService::Stub::GetStudy, *study_, req);
    }
    if (action == "update-study") {
      v1::UpdateStudyRequest req;
      req.set_study(study);
      req.set_max_trials(absl::GetFlag(FLAGS_max_trials));
      return Unary(&v1::StudyService::Stub::UpdateStudy, *study_, req);
    }
    if (action == "stop-study") {
      v1::StopStudyRequest req;
      req.set_study(study);
      return Unary(&v1::StudyService::Stub::StopStudy, *study_, req);
    }
    if (action == "delete-study") {
      v1::DeleteStudyRequest req;
      req.set_study(study);
      return Unary(&v1::StudyService::Stub::DeleteStudy, *study_, req);
    }
    if (action == "list-trials") {
      v1::ListTrialsRequest req;
      req.set_study(study);
      req.set_page_size(1000);
      return Unary(&v1::StudyService::Stub::ListTrials, *study_, req);
    }
    if (action == "get-trial") {
      v1::GetTrialRequest req;
      req.set_study(study);
      req.set_trial(absl::GetFlag(FLAGS_trial));
      return Unary(&v1::StudyService::Stub::GetTrial, *study_, req);
    }
    if (action == "suggest") {
      v1::SuggestTrialsRequest req;
      req.set_study(study);
      req.set_count(1);
      req.set_client_id("probe");
      return Unary(&v1::StudyService::Stub::SuggestTrials, *study_, req);
    }
    if (action == "report-intermediate") {
      v1::ReportIntermediateRequest req;
      req.set_study(study);
      req.set_trial(absl::GetFlag(FLAGS_trial));
      req.set_step(absl::GetFlag(FLAGS_step));
      (*req.mutable_metrics())["loss"] = absl::GetFlag(FLAGS_loss);
      req.set_checkpoint(absl::GetFlag(FLAGS_checkpoint));
      return Unary(&v1::StudyService::Stub::ReportIntermediate, *study_, req);
    }
    if (action == "complete-trial") {
      v1::CompleteTrialRequest req;
      req.set_study(study);
      req.set_trial(absl::GetFlag(FLAGS_trial));
      (*req.mutable_final_metrics())["loss"] = absl::GetFlag(FLAGS_loss);
      return Unary(&v1::StudyService::Stub::CompleteTrial, *study_, req);
    }
    if (action == "register-acquire") return RegisterAndAcquire();
    if (action == "report-progress") {
      v1::ReportProgressRequest req;
      req.set_worker_id(absl::GetFlag(FLAGS_worker_id));
      req.set_study(study);
      req.set_trial(absl::GetFlag(FLAGS_trial));
      req.set_attempt(absl::GetFlag(FLAGS_attempt));
      req.set_step(absl::GetFlag(FLAGS_step));
      (*req.mutable_metrics())["loss"] = absl::GetFlag(FLAGS_loss);
      req.set_checkpoint(absl::GetFlag(FLAGS_checkpoint));
      req.set_lease_token(absl::GetFlag(FLAGS_lease_token));
      return Unary(&v1::WorkerService::Stub::ReportProgress, *worker_, req);
    }
    if (action == "finish-trial") {
      v1::FinishTrialRequest req;
      req.set_worker_id(absl::GetFlag(FLAGS_worker_id));
      req.set_study(study);
      req.set_trial(absl::GetFlag(FLAGS_trial));
      req.set_attempt(absl::GetFlag(FLAGS_attempt));
      req.set_requeue(absl::GetFlag(FLAGS_requeue));
      (*req.mutable_final_metrics())["loss"] = absl::GetFlag(FLAGS_loss);
      req.set_lease_token(absl::GetFlag(FLAGS_lease_token));
      return Unary(&v1::WorkerService::Stub::FinishTrial, *worker_, req);
    }
    if (action == "backup") {
      v1::BackupDatabaseRequest req;
      req.set_path(absl::GetFlag(FLAGS_path));
      return Unary(&v1::StudyService::Stub::BackupDatabase, *study_, req);
    }
    if (action == "wait-running") return WaitRunning(study);
    if (action == "wait-done") return WaitDone(study);
    std::fprintf(stderr, "--action: unknown '%s'\n", action.c_str());
    return 2;
  }

 private:
  void Prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(
                         1000 * absl::GetFlag(FLAGS_call_timeout_s))));
    Authorize(ctx, token_);
  }

  template <typename Stub, typename Req, typename Resp>
  grpc::Status Call(grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                 const Req&, Resp*),
                    Stub& stub, const Req& req, Resp* resp) const {
    grpc::ClientContext ctx;
    Prepare(ctx);
    return (stub.*method)(&ctx, req, resp);
  }

  template <typename Stub, typename Req, typename Resp>
  int Unary(grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&,
                                         Resp*),
            Stub& stub, const Req& req) const {
    Resp resp;
    grpc::Status status = Call(method, stub, req, &resp);
    if (status.ok()) PrintJson(resp);
    return Result(status);
  }

  int RegisterAndAcquire() const {
    v1::RegisterWorkerRequest reg;
    reg.set_host("probe");
    reg.mutable_resources()->set_slots(1);
    v1::RegisterWorkerResponse registered;
    grpc::Status status = Call(&v1::WorkerService::Stub::RegisterWorker,
                               *worker_, reg, &registered);
    std::printf("REGISTER %d %s\n", static_cast<int>(status.error_code()),
                CodeName(status.error_code()));
    // Acquire under the returned id, or a made-up one when refused: both
    // must be refused to a non-worker.
    v1::AcquireTrialRequest req;
    req.set_worker_id(status.ok() ? registered.worker_id() : "probe-0");
    req.set_free_slots(1);
    req.set_wait_ms(200);
    v1::AcquireTrialResponse acquired;
    grpc::Status acquire =
        Call(&v1::WorkerService::Stub::AcquireTrial, *worker_, req, &acquired);
    if (acquire.ok()) PrintJson(acquired);
    std::printf("ACQUIRE %d %s\n", static_cast<int>(acquire.error_code()),
                CodeName(acquire.error_code()));
    // RESULT: the first success, else the registration's refusal.
    if (!status.ok() && !acquire.ok()) return Result(status);
    return Result(grpc::Status::OK);
  }

  // Polls (every 50 ms, at most --timeout_s) until `done` holds for an
  // answer; prints it.
  template <typename Stub, typename Req, typename Resp, typename Done>
  int Poll(grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&,
                                        Resp*),
           Stub& stub, const Req& req, Done done) const {
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                           1000 * absl::GetFlag(FLAGS_timeout_s)));
    grpc::Status last;
    while (Clock::now() < deadline) {
      Resp resp;
      last = Call(method, stub, req, &resp);
      if (last.ok() && done(resp)) {
        PrintJson(resp);
        return Result(last);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Result(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("still waiting after --timeout_s; last call: ",
                     CodeName(last.error_code()), " ", last.error_message())));
  }

  // Until a trial of `study` runs on a worker (needs a principal that sees
  // worker ids: an admin); prints ListTrials' answer.
  int WaitRunning(const std::string& study) const {
    v1::ListTrialsRequest req;
    req.set_study(study);
    req.add_states(v1::RUNNING);
    return Poll(&v1::StudyService::Stub::ListTrials, *study_, req,
                [](const v1::ListTrialsResponse& r) {
                  for (const auto& t : r.trials()) {
                    if (!t.worker_id().empty() && t.last_step() >= 1) {
                      return true;
                    }
                  }
                  return false;
                });
  }

  // Until `study` is no longer ACTIVE; prints GetStudy's answer.
  int WaitDone(const std::string& study) const {
    v1::GetStudyRequest req;
    req.set_study(study);
    return Poll(&v1::StudyService::Stub::GetStudy, *study_, req,
                [](const v1::GetStudyResponse& r) {
                  return r.study().state() != v1::STUDY_ACTIVE;
                });
  }

  std::unique_ptr<v1::StudyService::Stub> study_;
  std::unique_ptr<v1::WorkerService::Stub> worker_;
  const std::string token_;
};

int Main() {
  ConnectOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.token = absl::GetFlag(FLAGS_token);
  // An attacker's tool: it sends its token wherever it is told.
  options.insecure = true;
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    auto token = ReadSmallFile(file);
    if (!token.ok()) {
      std::fprintf(stderr, "%s\n", token.status().ToString().c_str());
      return 2;
    }
    options.token = std::string(absl::StripAsciiWhitespace(*token));
  }
  auto channel = MakeChannel(options, grpc::ChannelArguments());
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", channel.status().ToString().c_str());
    return 2;
  }
  Probe probe(*channel, options.token);
  const int rc = probe.Run(absl::GetFlag(FLAGS_action));
  std::fflush(stdout);
  return rc;
}

}  // namespace
}  // namespace dial::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dial::testing::Main();
}
