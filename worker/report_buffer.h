// ReportBuffer: one trial attempt's reports that the scheduler has not
// acknowledged yet, oldest first. While the scheduler is unreachable the
// trial keeps training and its reports wait here; they are replayed in
// order on reconnect. The first `memory_limit` stay in memory; the rest
// spill to a file (length-prefixed serialised requests), so a long outage
// costs disk, not memory. Not thread-safe: one trial's relay thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "dial/v1/service.pb.h"

namespace dial::worker {

class ReportBuffer {
 public:
  ReportBuffer(std::string spill_path, size_t memory_limit);
  ~ReportBuffer();  // removes the spill file
  ReportBuffer(const ReportBuffer&) = delete;
  ReportBuffer& operator=(const ReportBuffer&) = delete;

  // UNAVAILABLE when the spill file cannot be written (nothing is lost
  // from what was already buffered).
  absl::Status Push(const v1::ReportProgressRequest& report);
  // The oldest report; empty() must be false.
  const v1::ReportProgressRequest& Front() const { return memory_.front(); }
  void Pop();
  bool empty() const { return memory_.empty(); }
  size_t size() const { return memory_.size() + spilled_; }
  size_t spilled() const { return spilled_; }

 private:
  void Refill();  // moves spilled reports back into memory, oldest first

  const std::string spill_path_;
  const size_t memory_limit_;
  std::deque<v1::ReportProgressRequest> memory_;
  size_t spilled_ = 0;       // reports in the file not yet read back
  int64_t read_offset_ = 0;  // where the next unread one starts
};

}  // namespace dial::worker
