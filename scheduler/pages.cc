#include "scheduler/pages.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"

namespace dial::scheduler {
namespace {

constexpr int32_t kDefaultPageSize = 100;

// A study's place in ListStudies' order: (create time, name).
using StudyKey = std::pair<int64_t, std::string>;
StudyKey KeyOf(const v1::Study& s) {
  return StudyKey(google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                      s.create_time()),
                  s.name());
}

}  // namespace

absl::Status CheckPageSize(int32_t& page_size) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 (default ", kDefaultPageSize,
                     ") and ", kMaxPageSize));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  return absl::OkStatus();
}

absl::StatusOr<StudyPage> PageStudies(const StudyRegistry& studies,
                                      const auth::Principal& who,
                                      int32_t page_size,
                                      const std::string& page_token,
                                      size_t max_bytes) {
  DIAL_RETURN_IF_ERROR(CheckPageSize(page_size));
  StudyKey after(INT64_MIN, "");
  if (!page_token.empty()) {
    const size_t slash = page_token.find('/');
    if (slash == std::string::npos ||
        !absl::SimpleAtoi(page_token.substr(0, slash), &after.first)) {
      return absl::InvalidArgumentError(
          "page_token: not a token returned by ListStudies");
    }
    after.second = page_token.substr(slash + 1);
  }
  std::vector<std::pair<StudyKey, const StudyEntry*>> readable;
  for (const auto& [name, entry] : studies.all()) {
    if (!who.can_read(entry->study().owner())) continue;
    StudyKey key = KeyOf(entry->study());
    if (key > after) readable.emplace_back(std::move(key), entry.get());
  }
  std::sort(readable.begin(), readable.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  StudyPage page;
  size_t bytes = 0;
  for (const auto& [key, entry] : readable) {
    if (int32_t(page.studies.size()) == page_size || bytes >= max_bytes) {
      const StudyKey last = KeyOf(page.studies.back());
      page.next_page_token = absl::StrCat(last.first, "/", last.second);
      break;
    }
    page.studies.push_back(entry->WithCounts());
    bytes += page.studies.back().ByteSizeLong();
  }
  return page;
}

absl::StatusOr<int64_t> ParseTrialToken(const std::string& page_token) {
  int64_t after = -1;
  if (!page_token.empty() &&
      (!absl::SimpleAtoi(page_token, &after) || after < 0)) {
    return absl::InvalidArgumentError(
        "page_token: not a token returned by ListTrials");
  }
  return after;
}

TrialPage PageTrials(const StudyEntry& entry,
                     const std::vector<v1::TrialState>& states,
                     int32_t page_size, int64_t after, size_t max_bytes) {
  TrialPage page;
  size_t bytes = 0;
  for (auto it = entry.trials().upper_bound(after); it != entry.trials().end();
       ++it) {
    if (!states.empty() && std::find(states.begin(), states.end(),
                                     it->second.state()) == states.end()) {
      continue;
    }
    if (int32_t(page.trials.size()) == page_size || bytes >= max_bytes) {
      page.next_page_token = std::to_string(page.trials.back().number());
      break;
    }
    bytes += it->second.ByteSizeLong();
    page.trials.push_back(it->second);
  }
  return page;
}

absl::Status CheckHistoryPage(const Limits& limits, int32_t& page_size,
                              const std::string& page_token,
                              int64_t& after_step) {
  if (page_size < 0 || page_size > limits.max_history_page) {
    return absl::InvalidArgumentError(absl::StrCat(
        "history_page_size: must be between 0 (default ",
        limits.default_history_page, ") and ", limits.max_history_page));
  }
  if (page_size == 0) page_size = limits.default_history_page;
  after_step = -1;
  if (!page_token.empty() &&
      (!absl::SimpleAtoi(page_token, &after_step) || after_step < 0)) {
    return absl::InvalidArgumentError(
        "history_page_token: not a token returned by GetTrial");
  }
  return absl::OkStatus();
}

absl::Status AddHistoryPage(storage::StudyStore& store, const Limits& limits,
                            int32_t page_size, int64_t after_step,
                            v1::Trial& trial, std::string* next) {
  // It may hold a report newer than `trial`; that report is on record
  // either way. One point more than the page tells whether another page
  // follows.
  storage::HistoryQuery query;
  query.after_step = after_step;
  query.limit = page_size + 1;
  query.max_bytes = limits.max_history_page_bytes;
  DIAL_ASSIGN_OR_RETURN(
      auto history,
      store.GetMetricHistory(trial.study(), trial.number(), query));
  auto last_step = [&] {
    return std::to_string(
        trial.metric_history(trial.metric_history_size() - 1).step());
  };
  size_t bytes = 0;
  for (auto& point : history) {
    if (trial.metric_history_size() == page_size ||
        (trial.metric_history_size() > 0 &&
         bytes >= limits.max_history_page_bytes)) {
      if (next) *next = last_step();
      break;
    }
    bytes += point.ByteSizeLong();
    *trial.add_metric_history() = std::move(point);
  }
  // The store may have ended the page at its byte bound: more may follow.
  if (next && next->empty() && bytes >= limits.max_history_page_bytes &&
      trial.metric_history_size() == int(history.size())) {
    *next = last_step();
  }
  return absl::OkStatus();
}

absl::StatusOr<AuditPage> PageAudit(storage::StudyStore& store,
                                    const std::string& study, int32_t page_size,
                                    const std::string& page_token) {
  DIAL_RETURN_IF_ERROR(CheckPageSize(page_size));
  int64_t before = 0;
  if (!page_token.empty() &&
      (!absl::SimpleAtoi(page_token, &before) || before <= 0)) {
    return absl::InvalidArgumentError(
        "page_token: not a token returned by ListAuditEvents");
  }
  DIAL_ASSIGN_OR_RETURN(auto events,
                        store.ListAudit(study, before, page_size + 1));
  AuditPage page;
  page.events = std::move(events);
  if (int32_t(page.events.size()) > page_size) {
    page.events.resize(page_size);
    page.next_page_token = std::to_string(page.events.back().id());
  }
  return page;
}

}  // namespace dial::scheduler
