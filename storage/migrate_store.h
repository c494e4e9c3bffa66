// Copying a study database from one store to another, offline (`dialctl
// admin migrate`, e.g. SQLite to PostgreSQL): studies with their prior
// trials, trials, every report, the checkpoint index, the audit log and the
// usage records. Workers are not copied: they register again at their next
// heartbeat. The target must be empty; the copy is verified by counting
// both sides.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "storage/study_store.h"

namespace dial::storage {

// What a store holds, counted.
struct StoreCounts {
  struct Study {
    int64_t trials = 0;
    int64_t reports = 0;
    int64_t checkpoints = 0;
    bool operator==(const Study&) const = default;
  };
  std::map<std::string, Study> studies;
  int64_t audit_events = 0;
  int64_t usage_records = 0;
  bool operator==(const StoreCounts&) const = default;
};

absl::StatusOr<StoreCounts> CountStore(StudyStore& store);

// Copies `from` into `to`, waits until `to` holds it durably, and checks
// that both count the same (INTERNAL naming the first difference if not).
// FAILED_PRECONDITION, with nothing written, when `to` holds a study, an
// audit event or a usage record. `progress` is told of each study copied.
absl::StatusOr<StoreCounts> CopyStore(
    StudyStore& from, StudyStore& to,
    const std::function<void(const std::string& study,
                             const StoreCounts::Study& copied)>& progress);

}  // namespace dial::storage
