// Reply: what a SchedulerCore call answers, with the write ticket the
// answer needs. Durability is a value here, not a side channel: the core's
// state runs ahead of the disk under group commit, so an answer may be sent
// only once every write it could reflect is durable. The ticket is the
// store's write sequence number when the call released the core's lock
// (its own writes and every write it could have read); the caller passes it
// to SchedulerCore::WhenDurable before answering. Plain values: copy freely.
#pragma once

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dial::scheduler {

// The store's write sequence number an answer waits for; 0: nothing.
struct WriteTicket {
  uint64_t seq = 0;
};

// A StatusOr<T> that also carries its ticket. It converts to StatusOr<T>
// (dropping the ticket) for callers that do not answer a client.
template <typename T>
class Reply : public absl::StatusOr<T> {
 public:
  Reply(absl::StatusOr<T> result, WriteTicket ticket = {})
      : absl::StatusOr<T>(std::move(result)), ticket_(ticket) {}
  Reply(T value, WriteTicket ticket = {})
      : absl::StatusOr<T>(std::move(value)), ticket_(ticket) {}
  Reply(absl::Status status, WriteTicket ticket = {})
      : absl::StatusOr<T>(std::move(status)), ticket_(ticket) {}

  WriteTicket ticket() const { return ticket_; }

 private:
  WriteTicket ticket_;
};

// The same for calls that answer with a status only (absl::Status is
// final, so this holds one and converts to it).
class StatusReply {
 public:
  StatusReply(absl::Status status, WriteTicket ticket = {})
      : status_(std::move(status)), ticket_(ticket) {}

  bool ok() const { return status_.ok(); }
  absl::StatusCode code() const { return status_.code(); }
  const absl::Status& status() const { return status_; }
  operator const absl::Status&() const { return status_; }
  WriteTicket ticket() const { return ticket_; }

 private:
  absl::Status status_;
  WriteTicket ticket_;
};

}  // namespace dial::scheduler
