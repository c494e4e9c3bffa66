// Limits: every cap the scheduler puts on what one request, one principal
// or one watcher may make it hold, with its documented default
// (docs/limits.md). A plain value: SchedulerCoreOptions holds one, the
// scheduler's flags override fields, and the checks take it (or the part
// they need) as a parameter. Thread-safe to share once built (read only).
//
// Why: each of these was a finding where a few bytes of request bought
// unbounded memory, rows or response size; the defaults keep every answer
// well under gRPC's 64 MiB message limit (docs/limits.md has the sums).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/spec.h"

namespace dial::scheduler {

struct Limits {
  // Caps on a study spec at CreateStudy and UpdateStudy: its serialized
  // size, labels, and the default and cap of budget.max_parallel_trials
  // (common/spec.h).
  SpecLimits spec;

  // Reports (ReportIntermediate, ReportProgress, CompleteTrial and
  // FinishTrial's final metrics; request_checks.h): metrics per report and
  // the length of a metric name. 1000 metrics of 128-byte names are about
  // 140 KiB per report.
  int max_metrics_per_report = 1000;
  size_t max_metric_name_bytes = 128;

  // Bytes of checkpoints one owner's studies may hold on the scheduler's
  // checkpoint root (what retention keeps; checkpoint_quota.h); 0: no
  // quota. A report or upload that would exceed it is refused, naming it.
  int64_t max_checkpoint_bytes_per_owner = 0;

  // Studies one principal may own (CreateStudy answers RESOURCE_EXHAUSTED
  // beyond it).
  int32_t max_studies_per_owner = 1000;

  // Events queued for one WatchStudy stream that its client has not read.
  // A watcher that reaches it is dropped with RESOURCE_EXHAUSTED ("watcher
  // too slow"); events carry no spec, so this is at most a few MiB.
  size_t max_watcher_queue = 1024;
  // And at most this many bytes of them: a trial's params can be large (a
  // long categorical value), and each event carries one or two trials.
  size_t max_watcher_queue_bytes = 16 << 20;

  // Workers one principal may have registered at a time.
  int32_t max_workers_per_principal = 1000;
  // AcquireTrial long polls one principal may have parked at a time (a
  // worker parks at most one per free slot).
  int32_t max_parked_polls_per_principal = 4096;
  // PENDING trials a worker-run study keeps queued ahead of its running
  // ones (besides budget.max_parallel_trials, which bounds open trials).
  int32_t max_pending_ahead = 64;

  // GetTrial's metric history, in pages: points per page when the request
  // asks for 0, at most this many points, and at most this many bytes of
  // points (a page ends early, after at least one point, once it holds
  // that much). 16 MiB of history keeps GetTrial under 64 MiB with room for
  // the trial itself.
  int32_t default_history_page = 1000;
  int32_t max_history_page = 10000;
  size_t max_history_page_bytes = 16 << 20;

  // Answers that list trials or studies (ListTrials, ListStudies,
  // GetBestTrials, SuggestTrials) end their page early once it holds this
  // many bytes: a trial can carry up to ~140 KiB of final metrics and
  // params in proportion to its spec, so 1000 of them could exceed 64 MiB.
  size_t max_page_bytes = 16 << 20;
};

}  // namespace dial::scheduler
