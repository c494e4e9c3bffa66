// DialClient: the C++ client library for StudyService. Every call has a
// deadline and returns absl::Status codes as the server sent them. One
// channel per client, reused by all calls; thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dial/v1/service.grpc.pb.h"

namespace dial::client {

struct DialClientOptions {
  std::string target = "127.0.0.1:7070";
  absl::Duration timeout = absl::Seconds(30);  // per call
};

class DialClient {
 public:
  static absl::StatusOr<std::unique_ptr<DialClient>> Create(
      const DialClientOptions& options);

  // Waits until the channel is connected; UNAVAILABLE after `timeout`.
  absl::Status WaitForReady(absl::Duration timeout);

  absl::StatusOr<v1::Study> CreateStudy(const v1::StudySpec& spec);
  absl::StatusOr<v1::Study> GetStudy(const std::string& study);
  absl::StatusOr<std::vector<v1::Study>> ListStudies();
  absl::StatusOr<v1::Study> UpdateStudy(const std::string& study,
                                        int32_t max_trials,
                                        int32_t max_parallel_trials);
  absl::StatusOr<v1::Study> StopStudy(const std::string& study);
  absl::Status DeleteStudy(const std::string& study);

  absl::StatusOr<v1::ListTrialsResponse> ListTrials(
      const std::string& study, const std::vector<v1::TrialState>& states,
      int32_t page_size, const std::string& page_token);
  // Every page.
  absl::StatusOr<std::vector<v1::Trial>> ListAllTrials(
      const std::string& study, const std::vector<v1::TrialState>& states);
  absl::StatusOr<v1::Trial> GetTrial(const std::string& study, int64_t trial);
  absl::StatusOr<std::vector<v1::Trial>> GetBestTrials(const std::string& study,
                                                       int32_t count);

  absl::StatusOr<v1::SuggestTrialsResponse> SuggestTrials(
      const std::string& study, int32_t count, const std::string& client_id);
  absl::StatusOr<v1::Decision> ReportIntermediate(
      const std::string& study, int64_t trial, int64_t step,
      const std::map<std::string, double>& metrics,
      const std::string& checkpoint = "");
  absl::StatusOr<v1::Trial> CompleteTrial(
      const std::string& study, int64_t trial,
      const std::map<std::string, double>& final_metrics,
      const std::string& error = "");

  // Copies the scheduler's database, while it runs, to `path` on the
  // scheduler's machine (absolute). The call's deadline must cover the copy;
  // if it passes first, the copy still completes.
  absl::StatusOr<v1::BackupDatabaseResponse> BackupDatabase(
      const std::string& path);

  // Streams events to `on_event` until the study finishes, the callback
  // returns false, or the stream breaks. No deadline: a watch may be long.
  absl::Status WatchStudy(
      const std::string& study,
      const std::function<bool(const v1::StudyEvent&)>& on_event);

 private:
  DialClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);
  void SetDeadline(grpc::ClientContext& ctx) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StudyService::Stub> stub_;
  absl::Duration timeout_;
};

}  // namespace dial::client
