// Pages: the read side's paging: studies, trials, a trial's metric history
// and the audit log, each with its page-token format and size bounds
// (docs/limits.md). Pure functions over what they are given: the caller
// holds the core's lock where an argument needs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/principal.h"
#include "dial/v1/service.pb.h"
#include "scheduler/limits.h"
#include "scheduler/study_entry.h"
#include "scheduler/study_registry.h"
#include "storage/study_store.h"

namespace dial::scheduler {

struct AuditPage {
  std::vector<v1::AuditEvent> events;
  std::string next_page_token;
};

struct StudyPage {
  std::vector<v1::Study> studies;
  std::string next_page_token;
};

struct TrialPage {
  std::vector<v1::Trial> trials;
  std::string next_page_token;
};

// The most items one page (or GetBestTrials) holds.
constexpr int32_t kMaxPageSize = 1000;

// A page_size: 0 becomes the default (100); INVALID_ARGUMENT past 1000.
absl::Status CheckPageSize(int32_t& page_size);

// The studies `who` may read, oldest first, after `page_token`.
absl::StatusOr<StudyPage> PageStudies(const StudyRegistry& studies,
                                      const auth::Principal& who,
                                      int32_t page_size,
                                      const std::string& page_token,
                                      size_t max_bytes);

// The trial number after which a ListTrials page starts (-1: the first).
absl::StatusOr<int64_t> ParseTrialToken(const std::string& page_token);
// Trials in number order after `after`, in `states` (all if empty).
TrialPage PageTrials(const StudyEntry& entry,
                     const std::vector<v1::TrialState>& states,
                     int32_t page_size, int64_t after, size_t max_bytes);

// GetTrial's history arguments: the page size (0: the default) and the
// step after which the page starts (-1: the first).
absl::Status CheckHistoryPage(const Limits& limits, int32_t& page_size,
                              const std::string& page_token,
                              int64_t& after_step);
// Reads a page of `trial`'s history from the store (without the core's
// lock: a long history holds up no report) into it; the next token in
// *next (if given; empty on the last page).
absl::Status AddHistoryPage(storage::StudyStore& store, const Limits& limits,
                            int32_t page_size, int64_t after_step,
                            v1::Trial& trial, std::string* next);

// The audit log, newest first (the store has its own lock).
absl::StatusOr<AuditPage> PageAudit(storage::StudyStore& store,
                                    const std::string& study, int32_t page_size,
                                    const std::string& page_token);

}  // namespace dial::scheduler
