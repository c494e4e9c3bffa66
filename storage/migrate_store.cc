#include "storage/migrate_store.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"

namespace dial::storage {
namespace {

constexpr int kPage = 1000;

// Every trial of `study`, in number order, a page at a time.
absl::Status ForEachTrial(StudyStore& store, const std::string& study,
                          const std::function<absl::Status(v1::Trial&)>& fn) {
  TrialQuery query;
  query.limit = kPage;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(std::vector<v1::Trial> page,
                          store.ListTrials(study, query));
    for (v1::Trial& t : page) DIAL_RETURN_IF_ERROR(fn(t));
    if (page.size() < static_cast<size_t>(kPage)) return absl::OkStatus();
    query.after_number = page.back().number();
  }
}

// The audit log, oldest first.
absl::StatusOr<std::vector<v1::AuditEvent>> AllAudit(StudyStore& store) {
  std::vector<v1::AuditEvent> all;
  int64_t before = 0;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(std::vector<v1::AuditEvent> page,
                          store.ListAudit("", before, kPage));
    for (v1::AuditEvent& e : page) all.push_back(std::move(e));
    if (page.size() < static_cast<size_t>(kPage)) break;
    before = all.back().id();
  }
  std::reverse(all.begin(), all.end());
  return all;
}

absl::Status WaitDurable(StudyStore& store) {
  Durability* durability = store.durability();
  if (durability == nullptr) return absl::OkStatus();
  absl::Notification done;
  absl::Status result;
  durability->WhenDurable(durability->WrittenSeq(), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace

absl::StatusOr<StoreCounts> CountStore(StudyStore& store) {
  StoreCounts counts;
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::Study> studies, store.ListStudies());
  for (const v1::Study& study : studies) {
    StoreCounts::Study& c = counts.studies[study.name()];
    DIAL_RETURN_IF_ERROR(ForEachTrial(store, study.name(), [&](v1::Trial&) {
      ++c.trials;
      return absl::OkStatus();
    }));
    DIAL_RETURN_IF_ERROR(store.ForEachReport(
        study.name(), {}, "",
        [&](int64_t, const v1::MetricPoint&) { ++c.reports; }));
    DIAL_ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints,
                          store.ListCheckpoints(study.name()));
    c.checkpoints = static_cast<int64_t>(checkpoints.size());
  }
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::AuditEvent> audit, AllAudit(store));
  counts.audit_events = static_cast<int64_t>(audit.size());
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::UsageRecord> usage, store.ListUsage(0));
  counts.usage_records = static_cast<int64_t>(usage.size());
  return counts;
}

absl::StatusOr<StoreCounts> CopyStore(
    StudyStore& from, StudyStore& to,
    const std::function<void(const std::string& study,
                             const StoreCounts::Study& copied)>& progress) {
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::Study> existing, to.ListStudies());
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::AuditEvent> audit_there,
                        to.ListAudit("", 0, 1));
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::UsageRecord> usage_there,
                        to.ListUsage(0));
  if (!existing.empty() || !audit_there.empty() || !usage_there.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--to: the target database is not empty (", existing.size(), " studies",
        existing.empty() ? "" : ", first '",
        existing.empty() ? "" : existing[0].name(), existing.empty() ? "" : "'",
        audit_there.empty() ? "" : ", audit events",
        usage_there.empty() ? "" : ", usage records",
        "); migrate into a new, empty database: nothing was written"));
  }

  DIAL_ASSIGN_OR_RETURN(std::vector<v1::Study> studies, from.ListStudies());
  for (const v1::Study& study : studies) {
    DIAL_RETURN_IF_ERROR(to.CreateStudy(study));
    StoreCounts::Study copied;
    // Trials first, then their reports: a report carries its trial's
    // progress as stored (last step, checkpoint).
    std::map<int64_t, v1::Trial> trials;
    DIAL_RETURN_IF_ERROR(
        ForEachTrial(from, study.name(), [&](v1::Trial& t) -> absl::Status {
          DIAL_RETURN_IF_ERROR(to.PutTrial(t));
          ++copied.trials;
          trials.emplace(t.number(), std::move(t));
          return absl::OkStatus();
        }));
    absl::Status failed;
    DIAL_RETURN_IF_ERROR(from.ForEachReport(
        study.name(), {}, "",
        [&](int64_t number, const v1::MetricPoint& point) {
          if (!failed.ok()) return;
          auto it = trials.find(number);
          failed = it == trials.end()
                       ? absl::DataLossError(absl::StrCat(
                             "a report of trial ", number, " of study '",
                             study.name(), "', which has no such trial"))
                       : to.RecordReport(it->second, point);
          ++copied.reports;
        }));
    DIAL_RETURN_IF_ERROR(failed);
    DIAL_ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints,
                          from.ListCheckpoints(study.name()));
    for (const CheckpointRecord& c : checkpoints) {
      DIAL_RETURN_IF_ERROR(to.PutCheckpoint(c));
      ++copied.checkpoints;
    }
    if (progress) progress(study.name(), copied);
  }
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::AuditEvent> audit, AllAudit(from));
  for (const v1::AuditEvent& e : audit) DIAL_RETURN_IF_ERROR(to.AppendAudit(e));
  DIAL_ASSIGN_OR_RETURN(std::vector<v1::UsageRecord> usage, from.ListUsage(0));
  for (const v1::UsageRecord& r : usage)
    DIAL_RETURN_IF_ERROR(to.AppendUsage(r));
  DIAL_RETURN_IF_ERROR(WaitDurable(to));

  DIAL_ASSIGN_OR_RETURN(StoreCounts source, CountStore(from));
  DIAL_ASSIGN_OR_RETURN(StoreCounts target, CountStore(to));
  if (source == target) return target;
  for (const auto& [name, c] : source.studies) {
    auto it = target.studies.find(name);
    if (it == target.studies.end()) {
      return absl::InternalError(
          absl::StrCat("verify: study '", name, "' is not in the target"));
    }
    if (!(it->second == c)) {
      return absl::InternalError(absl::StrCat(
          "verify: study '", name, "' has ", c.trials, " trials, ", c.reports,
          " reports and ", c.checkpoints, " checkpoints in the source but ",
          it->second.trials, ", ", it->second.reports, " and ",
          it->second.checkpoints, " in the target"));
    }
  }
  return absl::InternalError(absl::StrCat(
      "verify: the source has ", source.studies.size(), " studies, ",
      source.audit_events, " audit events and ", source.usage_records,
      " usage records; the target ", target.studies.size(), ", ",
      target.audit_events, " and ", target.usage_records));
}

}  // namespace dial::storage
