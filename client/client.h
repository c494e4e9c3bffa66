// DialClient: the C++ client library for StudyService. Every call has a
// deadline, carries the bearer token (if any) and returns absl::Status codes
// as the server sent them: UNAUTHENTICATED for a missing or unknown token,
// PERMISSION_DENIED for a call the token's principal may not make. One
// channel per client (plaintext, or TLS with a CA), reused by all calls;
// thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dial/v1/service.grpc.pb.h"
#include "transfer/transfer_client.h"

namespace dial {
class LeaderChannels;
}  // namespace dial

namespace dial::client {

// Every field has a default member initializer, so `{target, timeout}`
// aggregate initialisation stays warning-free as fields are added.
struct DialClientOptions {
  // "host:port", or several ("a:7070,b:7070"): a leader and its standbys,
  // followed as docs/ha.md says.
  std::string target = "127.0.0.1:7070";
  absl::Duration timeout = absl::Seconds(30);  // per call
  // PEM files, as dial::ConnectOptions: with tls_ca the channel uses TLS and
  // checks the scheduler's certificate; tls_cert + tls_key add a client
  // certificate (mTLS). Without tls_ca the channel is plaintext.
  std::string tls_ca = {};
  std::string tls_cert = {};
  std::string tls_key = {};
  // The name checked in the scheduler's certificate instead of the target's
  // host.
  std::string tls_server_name = {};
  // Sent with every call as "authorization: Bearer <token>"; empty sends
  // none.
  std::string token = {};
  // Allow the token in plaintext to a non-loopback target (dialctl
  // --insecure); otherwise Create refuses it without tls_ca.
  bool insecure = false;
};

class DialClient {
 public:
  ~DialClient();
  // INVALID_ARGUMENT for an empty target, a certificate without its key (or
  // the reverse) or a client certificate without a CA; NOT_FOUND naming a
  // PEM file that cannot be read. Does not connect.
  static absl::StatusOr<std::unique_ptr<DialClient>> Create(
      const DialClientOptions& options);

  // Waits until the channel is connected; UNAVAILABLE after `timeout`.
  absl::Status WaitForReady(absl::Duration timeout);

  absl::StatusOr<v1::Study> CreateStudy(const v1::StudySpec& spec);
  absl::StatusOr<v1::Study> GetStudy(const std::string& study);
  // Every study the caller may read, oldest first (all pages).
  absl::StatusOr<std::vector<v1::Study>> ListStudies();
  // `priority`: unchanged when nullopt.
  absl::StatusOr<v1::Study> UpdateStudy(
      const std::string& study, int32_t max_trials, int32_t max_parallel_trials,
      std::optional<int32_t> priority = std::nullopt);
  absl::StatusOr<v1::Study> StopStudy(const std::string& study);
  // Sets (empty: clears) the study's note, or trial `trial`'s.
  absl::StatusOr<v1::SetNoteResponse> SetNote(const std::string& study,
                                              std::optional<int64_t> trial,
                                              const std::string& note);
  absl::Status DeleteStudy(const std::string& study);

  absl::StatusOr<v1::ListTrialsResponse> ListTrials(
      const std::string& study, const std::vector<v1::TrialState>& states,
      int32_t page_size, const std::string& page_token);
  // Every page.
  absl::StatusOr<std::vector<v1::Trial>> ListAllTrials(
      const std::string& study, const std::vector<v1::TrialState>& states);
  // The trial with its whole metric history: the server sends the history
  // in pages, fetched here one after another. The trial's other fields are
  // the last page's, so they are at least as new as the history.
  absl::StatusOr<v1::Trial> GetTrial(const std::string& study, int64_t trial);
  absl::StatusOr<v1::GetParameterImportanceResponse> GetParameterImportance(
      const std::string& study, double top_quantile = 0);
  // The whole answer: with several objectives, also the front's
  // hypervolume, reference point and size.
  absl::StatusOr<v1::GetBestTrialsResponse> GetFront(const std::string& study,
                                                     int32_t count = 0);
  absl::StatusOr<std::vector<v1::Trial>> GetBestTrials(const std::string& study,
                                                       int32_t count);
  absl::StatusOr<v1::EnqueueTrialsResponse> EnqueueTrials(
      const std::string& study, const std::vector<v1::QueuedTrial>& trials);
  absl::StatusOr<v1::ReevaluateTrialsResponse> ReevaluateTrials(
      const std::string& study, int32_t top, int32_t seeds);

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

  // Admin only. Copies the scheduler's database, while it runs, to a new
  // file `name` (letters, digits, '.', '-', '_', no leading '.') in the
  // scheduler's --backup-dir; the response holds the copy's absolute path
  // on the scheduler's machine and its size. INVALID_ARGUMENT for a bad
  // name, ALREADY_EXISTS if the file exists, FAILED_PRECONDITION when the
  // scheduler has no --backup-dir. The call's deadline must cover the copy;
  // if it passes first, the copy still completes.
  absl::StatusOr<v1::BackupDatabaseResponse> BackupDatabase(
      const std::string& name);

  // Admin only. One page of the audit log, newest first; `study` empty for
  // every study and the actions on none. page_size 0 is the server's
  // default (100); pass next_page_token back for the next page.
  absl::StatusOr<v1::ListAuditEventsResponse> ListAuditEvents(
      const std::string& study, int32_t page_size,
      const std::string& page_token);

  // Admins and viewers: the registered workers and their running trials.
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers();
  // `by`: "owner" or "study"; `since`: InfinitePast for all.
  absl::StatusOr<v1::GetUsageResponse> GetUsage(const std::string& by,
                                                absl::Time since);

  // Downloads checkpoint `id` of `study` (CheckpointService) to `dest`, a
  // file or directory path replaced atomically; chunks are checked, and a
  // broken stream resumes where it stopped (docs/checkpoint-transfer.md).
  // For whoever may read the study.
  absl::StatusOr<transfer::TransferStats> DownloadCheckpoint(
      const std::string& study, const std::string& id, const std::string& dest);

  // The scheduler's gRPC health (grpc.health.v1 Check) for `service` (""
  // for the server): OK when it serves, UNAVAILABLE with the status it
  // gave otherwise. Needs no token.
  absl::Status CheckHealth(const std::string& service);

  // Streams events to `on_event` until the study finishes, the callback
  // returns false, or the stream breaks. No deadline: a watch may be long.
  absl::Status WatchStudy(
      const std::string& study,
      const std::function<bool(const v1::StudyEvent&)>& on_event);

 private:
  DialClient(std::unique_ptr<LeaderChannels> channels, absl::Duration timeout,
             std::string token);
  // The deadline and the token of one unary call.
  void Prepare(grpc::ClientContext& ctx) const;

  std::unique_ptr<LeaderChannels> channels_;
  absl::Duration timeout_;
  std::string token_;
};

}  // namespace dial::client
