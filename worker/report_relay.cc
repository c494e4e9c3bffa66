#include "worker/report_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace dial::worker {
namespace {

// One line appended with O_APPEND: whole lines even with several writers.
void AppendLine(const std::string& path, const std::string& line) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string data = line + "\n";
  (void)!write(fd, data.data(), data.size());
  close(fd);
}

}  // namespace

bool IsRetryable(const absl::Status& s) {
  if (IsCheckpointQuotaRefusal(s)) return false;  // final: the trial fails
  // CANCELLED: a scheduler shutting its server down (a standby becoming
  // the leader, a leader ending its term) cancels the calls in flight,
  // having done nothing with them. The worker never cancels its own.
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsResourceExhausted(s) || absl::IsAborted(s) ||
         absl::IsCancelled(s);
}

bool IsFence(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsNotFound(s);
}

ReportRelay::ReportRelay(const ReportRelayOptions& options)
    : options_(options), pending_(options.spill_path, options.memory_limit) {}

ReportRelay::~ReportRelay() {
  if (options_.buffered) options_.buffered->Add(-static_cast<double>(counted_));
}

void ReportRelay::Account() {
  if (!options_.buffered) return;
  options_.buffered->Add(static_cast<double>(pending_.size()) -
                         static_cast<double>(counted_));
  counted_ = pending_.size();
}

absl::Status ReportRelay::Drain(v1::Decision* newest) {
  while (!pending_.empty()) {
    auto response = options_.client->Report(pending_.Front());
    if (!response.ok()) {
      if (IsRetryable(response.status())) {
        return absl::UnavailableError(response.status().message());
      }
      // Sending it again would be refused again.
      if (!IsFence(response.status())) pending_.Pop();
      return response.status();
    }
    if (!options_.ack_log.empty()) {
      const auto& r = pending_.Front();
      AppendLine(options_.ack_log,
                 absl::StrCat(r.worker_id(), " ", r.study(), " ", r.trial(),
                              " ", r.attempt(), " ", r.step()));
    }
    pending_.Pop();
    const v1::Decision& d = response->decision();
    if (pending_.empty()) {
      *newest = d;
    } else if (d.action() != v1::Decision::CONTINUE && !held_) {
      held_ = d;
      if (d.action() != v1::Decision::EXPLOIT) {
        // Stopped or paused at a replayed step: later ones are moot.
        while (!pending_.empty()) pending_.Pop();
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Decision> ReportRelay::Send(
    const v1::ReportProgressRequest& report) {
  absl::Status buffered = pending_.Push(report);
  if (!buffered.ok()) return absl::ResourceExhaustedError(buffered.message());
  v1::Decision decision;
  absl::Status sent = Drain(&decision);
  Account();
  if (absl::IsUnavailable(sent)) {
    spdlog::warn(
        "{}: scheduler unreachable ({}); {} report(s) buffered, training "
        "goes on",
        options_.name, std::string(sent.message()), pending_.size());
    decision.set_action(v1::Decision::CONTINUE);
    decision.set_reason("scheduler unreachable; report buffered");
  } else if (!sent.ok() && IsFence(sent)) {
    // Stale attempt or lost lease: the trial is someone else's now.
    return absl::FailedPreconditionError(sent.ToString());
  } else if (!sent.ok()) {
    return sent;  // rejected
  }
  if (held_) {
    decision = *held_;
    held_.reset();
  }
  return decision;
}

absl::Status ReportRelay::Flush(absl::Duration outage_limit) {
  // The trial stays in the heartbeat's running list meanwhile (the caller
  // keeps it there), so a restarted scheduler keeps it attached.
  absl::Duration backoff = absl::Milliseconds(200);
  const absl::Time give_up = options_.clock->Now() + outage_limit;
  absl::Time next_log = options_.clock->Now();
  absl::Status rejected;
  while (!pending_.empty()) {
    v1::Decision ignored;
    absl::Status sent = Drain(&ignored);
    Account();
    if (sent.ok()) break;
    if (!absl::IsUnavailable(sent) && !IsFence(sent)) {
      spdlog::warn("{}: a report was rejected: {}", options_.name,
                   sent.ToString());
      if (rejected.ok()) rejected = sent;
      continue;  // dropped; the rest still goes
    }
    if (!absl::IsUnavailable(sent) || options_.clock->Now() > give_up) {
      spdlog::warn("{}: {} buffered report(s) dropped: {}", options_.name,
                   pending_.size(), sent.ToString());
      return sent;
    }
    if (options_.clock->Now() >= next_log) {
      // Once in a while, so an operator sees why the attempt is not over.
      spdlog::warn("{}: {} report(s) still buffered: {}; retrying",
                   options_.name, pending_.size(), sent.ToString());
      next_log = options_.clock->Now() + absl::Seconds(30);
    }
    options_.sleeper->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
  return rejected;
}

}  // namespace dial::worker
