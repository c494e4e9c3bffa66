// ReportRelay: the scheduler side of one trial attempt. It delivers the
// attempt's reports to the scheduler in order, each once, and turns the
// answers into the decisions the trial gets. While the scheduler is
// unreachable the trial goes on with a provisional CONTINUE and its reports
// wait in a ReportBuffer (spilling to a file); they are replayed, oldest
// first, on the next report or by Flush once the process has ended. A
// fencing refusal (IsFence) means the attempt is stale (its lease is gone,
// or a newer attempt runs) and must be killed, not finished; any other
// refusal that is not retryable rejects the report (e.g. a metric name the
// scheduler does not take): the report is dropped and the attempt must
// fail with the scheduler's reason, never be retried as it is. Not
// thread-safe: one attempt's thread owns it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "dial/v1/service.pb.h"
#include "worker/report_buffer.h"
#include "worker/scheduler_client.h"
#include "worker/sleeper.h"

namespace dial::worker {

// Whether a failed call to the scheduler is worth repeating (the scheduler
// is unreachable, overloaded, timed out, or cancelled the call while its
// server shut down), as opposed to refused.
bool IsRetryable(const absl::Status& status);
// Whether a refusal fences the attempt: it is stale (FAILED_PRECONDITION)
// or its worker is unknown (NOT_FOUND); the trial belongs to someone else
// now and the attempt is killed, not finished. Any other refusal rejects
// the report itself.
bool IsFence(const absl::Status& status);

struct ReportRelayOptions {
  SchedulerClient* client = nullptr;  // required, not owned
  const Clock* clock = nullptr;       // required, not owned
  Sleeper* sleeper = nullptr;         // required, not owned
  std::string name;                   // for log lines: "study/3 attempt 1"
  std::string spill_path;             // ReportBuffer's spill file
  size_t memory_limit = 256;          // reports kept in memory
  // Audit log of acknowledged reports (one line each); empty: none.
  std::string ack_log;
  // Reports waiting for the scheduler, summed over every relay of the
  // worker (dial_worker_buffered_reports); null: not counted. Not owned.
  metrics::Gauge* buffered = nullptr;
};

class ReportRelay {
 public:
  explicit ReportRelay(const ReportRelayOptions& options);
  ReportRelay(const ReportRelay&) = delete;
  ReportRelay& operator=(const ReportRelay&) = delete;
  ~ReportRelay();

  // Buffers `report` and sends everything pending, oldest first. Returns
  // the decision for the trial: the scheduler's answer to `report`, or a
  // STOP, PAUSE or EXPLOIT it gave a replayed earlier report (a STOP or
  // PAUSE there drops the later reports), or a provisional CONTINUE when
  // the scheduler is unreachable (the reports stay buffered). Errors end
  // the attempt:
  //   FAILED_PRECONDITION: fenced; the scheduler refused this attempt
  //     (stale attempt, lost lease, unknown worker or trial): kill its
  //     process and do not finish it. The message carries the scheduler's
  //     status.
  //   RESOURCE_EXHAUSTED: the report cannot be buffered (spill file).
  //   anything else (INVALID_ARGUMENT, PERMISSION_DENIED, ...): the
  //     scheduler rejected a report (this one or a buffered earlier one),
  //     which is dropped; the status is the scheduler's. Kill the process
  //     and fail the attempt with it.
  absl::StatusOr<v1::Decision> Send(const v1::ReportProgressRequest& report);

  // Once the process has ended: delivers what is still pending, retrying
  // with backoff (200 ms, doubling, at most 5 s between tries) for up to
  // `outage_limit` of the clock's time. OK when everything was delivered.
  // UNAVAILABLE when the scheduler stayed unreachable, or a fencing
  // refusal (IsFence): the rest is given up (and logged as dropped), and
  // the attempt must not be finished. A rejected report is dropped and
  // the rest still delivered; the first rejection is returned: the
  // attempt fails with it.
  absl::Status Flush(absl::Duration outage_limit);

  // Reports not acknowledged yet.
  size_t pending() const { return pending_.size(); }

 private:
  // Sends what is pending, oldest first. OK: all acknowledged, `*newest`
  // is the newest report's decision. UNAVAILABLE: the scheduler is not
  // reachable now (the rest stays pending). Anything else: a refusal (a
  // rejected report is dropped from the pending ones).
  absl::Status Drain(v1::Decision* newest);
  // Brings options_.buffered in line with pending().
  void Account();

  const ReportRelayOptions options_;
  ReportBuffer pending_;
  // A replayed report's STOP, PAUSE or EXPLOIT, for the trial's next
  // decision.
  std::optional<v1::Decision> held_;
  size_t counted_ = 0;  // what this relay added to options_.buffered
};

}  // namespace dial::worker
