#include "worker/report_buffer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace dial::worker {

ReportBuffer::ReportBuffer(std::string spill_path, size_t memory_limit)
    : spill_path_(std::move(spill_path)),
      memory_limit_(std::max<size_t>(1, memory_limit)) {
  std::remove(spill_path_.c_str());  // a previous attempt's leftovers
}

ReportBuffer::~ReportBuffer() { std::remove(spill_path_.c_str()); }

absl::Status ReportBuffer::Push(const v1::ReportProgressRequest& report) {
  // Once reports spill, newer ones follow them into the file: order holds.
  if (spilled_ == 0 && memory_.size() < memory_limit_) {
    memory_.push_back(report);
    return absl::OkStatus();
  }
  std::string bytes = report.SerializeAsString();
  const uint32_t size = static_cast<uint32_t>(bytes.size());
  // The worker's alone (0600): a trial under another user reads no report.
  // An older file keeps its mode through O_CREAT: fchmod it.
  const int fd = open(spill_path_.c_str(),
                      O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot spill a report to ", spill_path_));
  }
  close(fd);
  std::ofstream out(spill_path_, std::ios::binary | std::ios::app);
  out.write(reinterpret_cast<const char*>(&size), sizeof(size));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    return absl::UnavailableError(
        absl::StrCat("cannot spill a report to ", spill_path_));
  }
  ++spilled_;
  return absl::OkStatus();
}

void ReportBuffer::Pop() {
  memory_.pop_front();
  if (memory_.empty() && spilled_ > 0) Refill();
}

void ReportBuffer::Refill() {
  std::ifstream in(spill_path_, std::ios::binary);
  in.seekg(read_offset_);
  while (spilled_ > 0 && memory_.size() < memory_limit_) {
    uint32_t size = 0;
    std::string bytes;
    if (!in.read(reinterpret_cast<char*>(&size), sizeof(size)) ||
        size > (64u << 20)) {
      break;
    }
    bytes.resize(size);
    if (!in.read(bytes.data(), size)) break;
    v1::ReportProgressRequest report;
    if (report.ParseFromString(bytes)) memory_.push_back(std::move(report));
    --spilled_;
    read_offset_ += sizeof(size) + size;
  }
  if (spilled_ == 0 || !in) {
    // Drained (or unreadable, which the next Push starts over from).
    spilled_ = 0;
    read_offset_ = 0;
    std::remove(spill_path_.c_str());
  }
}

}  // namespace dial::worker
