// SchedulerCore's WorkerService side: registration and leases, long-poll
// dispatch, reports and finishes of worker trials, lost workers.
#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "common/status.h"
#include "common/text.h"
#include "google/protobuf/util/time_util.h"
#include "scheduler/access_checks.h"
#include "scheduler/core.h"
#include "scheduler/request_checks.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {

absl::Status SchedulerCore::CheckWorker(const auth::Principal& who,
                                        const std::string& worker_id) {
  if (who.role != auth::Role::kWorker && !who.is_admin()) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not call WorkerService (workers may)"));
  }
  if (worker_id.empty()) return absl::OkStatus();
  return workers_.CheckOwner(worker_id, who.name, who.is_admin());
}

namespace {

// What a worker says of itself that people read (ListWorkers, the logs):
// a host name of printable ASCII, GPU models and its isolation's words
// without control characters. INVALID_ARGUMENT naming the field.
absl::Status CheckWorkerText(const std::string& host,
                             const v1::WorkerResources& resources) {
  for (char c : host) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host: '", absl::CHexEscape(host),
          "' has a character that is not printable ASCII (a space, a "
          "control character or a byte above 0x7e)"));
    }
  }
  auto check = [](const std::string& field, const std::string& text,
                  size_t max) -> absl::Status {
    if (text.size() > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at most ", max, " bytes"));
    }
    if (auto bad = FindUnsafe(text, /*strict=*/true)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", *bad));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < resources.gpus_size(); ++i) {
    DIAL_RETURN_IF_ERROR(check(absl::StrCat("resources.gpus[", i, "].model"),
                               resources.gpus(i).model(), 256));
  }
  const v1::WorkerIsolation& iso = resources.isolation();
  DIAL_RETURN_IF_ERROR(check("resources.isolation.method", iso.method(), 64));
  DIAL_RETURN_IF_ERROR(check("resources.isolation.reason", iso.reason(), 1024));
  if (iso.enforced_limits_size() + iso.unenforced_limits_size() > 16 ||
      resources.commands().allowed_size() > 256) {
    return absl::InvalidArgumentError(
        "resources: at most 16 limits and 256 commands");
  }
  for (const auto& limit : iso.enforced_limits()) {
    DIAL_RETURN_IF_ERROR(
        check("resources.isolation.enforced_limits", limit, 64));
  }
  for (const auto& limit : iso.unenforced_limits()) {
    DIAL_RETURN_IF_ERROR(
        check("resources.isolation.unenforced_limits", limit, 64));
  }
  for (const auto& glob : resources.commands().allowed()) {
    DIAL_RETURN_IF_ERROR(check("resources.commands.allowed", glob, 4096));
  }
  return absl::OkStatus();
}

}  // namespace

Reply<v1::RegisterWorkerResponse> SchedulerCore::RegisterWorker(
    const std::string& host, const v1::WorkerResources& resources,
    const auth::Principal& who) {
  if (host.empty() || host.size() > 255) {
    return absl::InvalidArgumentError("host: must be 1-255 characters");
  }
  DIAL_RETURN_IF_ERROR(CheckWorkerText(host, resources));
  if (resources.slots() < 1 || resources.slots() > 1024) {
    return absl::InvalidArgumentError(
        "resources.slots: must be between 1 and 1024");
  }
  if (resources.labels_size() > 32) {
    return absl::InvalidArgumentError("resources.labels: at most 32 labels");
  }
  for (const auto& [key, value] : resources.labels()) {
    DIAL_RETURN_IF_ERROR(ValidateWorkerLabel(
        "resources.labels." + absl::CHexEscape(key), key, value));
  }
  return Locked<v1::RegisterWorkerResponse>(
      [&]() -> absl::StatusOr<v1::RegisterWorkerResponse> {
        DIAL_RETURN_IF_ERROR(CheckWorker(who, ""));
        if (!who.anonymous && workers_.CountOf(who.name) >=
                                  options_.limits.max_workers_per_principal) {
          return absl::ResourceExhaustedError(
              absl::StrCat("'", who.name, "' has ",
                           options_.limits.max_workers_per_principal,
                           " registered workers, the most allowed "
                           "(--max-workers-per-principal)"));
        }
        v1::Worker worker = workers_.Make(host, resources);
        worker.set_principal(who.name);
        DIAL_RETURN_IF_ERROR(store_->PutWorker(worker));
        workers_.Add(worker);
        v1::RegisterWorkerResponse response;
        response.set_worker_id(worker.id());
        response.set_lease_ms(absl::ToInt64Milliseconds(workers_.lease()));
        return response;
      });
}

Reply<v1::HeartbeatResponse> SchedulerCore::Heartbeat(
    const v1::HeartbeatRequest& request, const auth::Principal& who) {
  return Locked<v1::HeartbeatResponse>(
      [&]() -> absl::StatusOr<v1::HeartbeatResponse> {
        DIAL_RETURN_IF_ERROR(CheckWorker(who, request.worker_id()));
        DIAL_RETURN_IF_ERROR(workers_.Touch(request.worker_id()));
        std::set<WorkerRegistry::TrialKey> running;
        for (const auto& r : request.running()) {
          running.insert({r.study(), r.trial()});
        }
        // Trials handed to this worker that it does not run (e.g. the
        // reply to its long poll was lost) go back to the queue after a
        // lease of grace.
        std::vector<std::pair<StudyEntry*, v1::Trial>> lost;
        for (const auto& [study, number] :
             workers_.Unacknowledged(request.worker_id(), running)) {
          auto entry = studies_.Shared(study);
          if (!entry) continue;
          auto trial = entry->trials().find(number);
          if (trial != entry->trials().end() &&
              trial->second.state() == v1::RUNNING &&
              trial->second.worker_id() == request.worker_id()) {
            lost.push_back({entry.get(), trial->second});
          }
        }
        for (auto& [entry, trial] : lost) {
          DIAL_RETURN_IF_ERROR(lifecycle_.Requeue(*entry, trial));
        }
        v1::HeartbeatResponse response;
        response.set_lease_ms(absl::ToInt64Milliseconds(workers_.lease()));
        return response;
      });
}

absl::StatusOr<std::optional<Assignment>> SchedulerCore::AssignTo(
    const std::string& worker_id, int32_t free_gpus) {
  auto [entry, trial] = placer_.Choose(worker_id, free_gpus);
  if (entry == nullptr) return std::optional<Assignment>();
  DIAL_ASSIGN_OR_RETURN(Assignment a,
                        lifecycle_.Start(*entry, *trial, worker_id));
  preemptions_.Started({a.trial.study(), a.trial.number()}, clock_->Now());
  preemptions_.Placed(a.trial.study());
  return std::optional<Assignment>(std::move(a));
}

void SchedulerCore::AcquireTrial(const std::string& worker_id,
                                 int32_t free_gpus, absl::Duration wait,
                                 std::function<bool()> alive,
                                 AcquireCallback done,
                                 const auth::Principal& who) {
  Lock lock(this);
  absl::Status touched = CheckWorker(who, worker_id);
  if (touched.ok()) touched = workers_.Touch(worker_id);
  if (!touched.ok()) {
    return Dispatcher::Answer(outbox_, std::move(done), touched);
  }
  // Top-ups that failed on the store (a full disk) are retried while
  // workers ask for work, so the studies move again once the store heals.
  for (const auto& [name, entry] : studies_.all()) {
    if (entry->TakeFillFailed()) outbox_.fills.insert(name);
  }
  auto assignment = AssignTo(worker_id, free_gpus);
  if (!assignment.ok() || assignment->has_value() ||
      wait <= absl::ZeroDuration() || stopping_) {
    return Dispatcher::Answer(outbox_, std::move(done), std::move(assignment));
  }
  if (!who.anonymous && dispatcher_.ParkedBy(who.name) >=
                            options_.limits.max_parked_polls_per_principal) {
    return Dispatcher::Answer(
        outbox_, std::move(done),
        absl::ResourceExhaustedError(absl::StrCat(
            "'", who.name, "' has ",
            options_.limits.max_parked_polls_per_principal,
            " AcquireTrial calls waiting, the most allowed; retry later")));
  }
  dispatcher_.Park({worker_id, free_gpus,
                    clock_->Now() + std::min(wait, absl::Seconds(30)),
                    std::move(alive), std::move(done), who.name,
                    placer_.ShapeOf(worker_id, free_gpus)});
}

Reply<v1::Decision> SchedulerCore::ReportProgress(
    const v1::ReportProgressRequest& request, const auth::Principal& who) {
  absl::Status valid = CheckReport(request.step(), request.metrics(),
                                   request.checkpoint(), options_.limits);
  if (valid.ok()) {
    valid = CheckCheckpointId(request.checkpoint(), request.study(),
                              request.trial());
  }
  if (!valid.ok()) return valid;
  return Locked<v1::Decision>([&]() -> absl::StatusOr<v1::Decision> {
    DIAL_RETURN_IF_ERROR(CheckWorker(who, request.worker_id()));
    DIAL_RETURN_IF_ERROR(workers_.Touch(request.worker_id()));
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(request.study()));
    DIAL_ASSIGN_OR_RETURN(
        const v1::Trial* stored,
        lifecycle_.Fence(*entry, request.worker_id(), request.trial(),
                         request.attempt(), request.lease_token()));
    // A retry of the report just answered (its reply was lost), or a
    // resumed attempt replaying steps an earlier one reported.
    if (std::optional<v1::Decision> repeated =
            lifecycle_.RepeatedStep(*entry, *stored, request.step())) {
      return *repeated;
    }
    if (stored->state() != v1::RUNNING) {
      return NotRunning(*stored, "reports are taken only while RUNNING");
    }
    return lifecycle_.RecordReport(*entry, *stored, request.step(),
                                   request.metrics(), request.checkpoint(),
                                   request.checkpoint_uploading());
  });
}

StatusReply SchedulerCore::FinishTrial(const v1::FinishTrialRequest& request,
                                       const auth::Principal& who) {
  absl::Status valid =
      CheckMetrics(request.final_metrics(), "final_metrics", options_.limits);
  if (!valid.ok()) return valid;
  Reply<bool> reply = Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_RETURN_IF_ERROR(CheckWorker(who, request.worker_id()));
    DIAL_RETURN_IF_ERROR(workers_.Touch(request.worker_id()));
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(request.study()));
    // The worker finishes an attempt after its uploads (or gave up on
    // them): nothing more of it will come, even for a trial promoted since.
    if (entry->Uploading(request.trial()) &&
        lifecycle_
            .FenceUpload(*entry, request.worker_id(), request.trial(),
                         request.attempt(), request.lease_token())
            .ok()) {
      entry->ForgetUploads(request.trial());
      outbox_.dispatch = true;
    }
    DIAL_ASSIGN_OR_RETURN(
        const v1::Trial* stored,
        lifecycle_.Fence(*entry, request.worker_id(), request.trial(),
                         request.attempt(), request.lease_token()));
    v1::Trial trial = *stored;
    if (request.has_cpu_seconds()) {
      const v1::Worker* worker = workers_.Find(request.worker_id());
      using google::protobuf::util::TimeUtil;
      const double wall = TimeUtil::DurationToMilliseconds(
                              lifecycle_.Now() - stored->attempt_start_time()) /
                          1e3;
      absl::Status cpu =
          CheckCpuSeconds(request.cpu_seconds(), wall,
                          worker == nullptr ? 0 : worker->resources().cpus());
      if (cpu.ok()) {
        trial.set_attempt_cpu_seconds(request.cpu_seconds());
      } else {
        // The figure is dropped, not the finish: the trial's outcome is
        // the study's, and usage shows no CPU time rather than a false one.
        spdlog::warn("worker {} ({}): {}/{} attempt {}: {}; not recorded",
                     request.worker_id(), who.name, request.study(),
                     request.trial(), request.attempt(),
                     std::string(cpu.message()));
        trial.clear_attempt_cpu_seconds();
      }
    }
    if (stored->state() == v1::PENDING && stored->preemptions_size() > 0 &&
        stored->preemptions().rbegin()->attempt() == request.attempt()) {
      return true;  // preempted: it resumes from its checkpoint later
    }
    if (stored->state() == v1::STOPPED || stored->state() == v1::PAUSED) {
      // Stopped or paused by a decision; the process has now exited.
      *trial.mutable_final_metrics() = request.final_metrics();
      workers_.Undispatched({trial.study(), trial.number()});
      DIAL_RETURN_IF_ERROR(lifecycle_.SaveTrial(*entry, trial));
      return true;
    }
    if (stored->state() != v1::RUNNING) {
      return NotRunning(*stored, "it cannot be finished again");
    }
    if (request.requeue()) {
      DIAL_RETURN_IF_ERROR(lifecycle_.Requeue(*entry, trial));
      return true;
    }
    if (request.refused()) {
      // The worker's own policy refused it: the worker is unsuitable for
      // the study, and the trial waits for another, at no failure.
      entry->RefusedBy(request.worker_id(),
                       Printable(request.error().substr(0, 512)));
      DIAL_RETURN_IF_ERROR(lifecycle_.Requeue(*entry, trial));
      return true;
    }
    std::string error = request.error();
    *trial.mutable_final_metrics() = request.final_metrics();
    if (error.empty()) {
      if (auto missing =
              searchers::SetObjectiveValues(entry->study().spec(), trial)) {
        error = absl::StrCat(
            "the trial finished without a finite value of the objective "
            "metric '",
            missing->metric, "'");
      }
    }
    if (error.empty()) {
      trial.set_state(v1::COMPLETED);
      trial.clear_error();  // an earlier attempt's failure is history now
      *trial.mutable_end_time() = lifecycle_.Now();
      DIAL_RETURN_IF_ERROR(lifecycle_.Finalize(*entry, trial));
      return true;
    }
    if (!request.stderr_tail().empty()) {
      absl::StrAppend(&error, "\n--- last lines of stderr ---\n",
                      request.stderr_tail());
    }
    trial.set_error(error.substr(0, 16384));
    trial.set_failures(trial.failures() + 1);
    if (trial.failures() <=
        entry->study().spec().budget().max_failures_per_trial()) {
      DIAL_RETURN_IF_ERROR(lifecycle_.Requeue(*entry, trial));
      return true;
    }
    trial.set_state(v1::FAILED);
    *trial.mutable_end_time() = lifecycle_.Now();
    DIAL_RETURN_IF_ERROR(lifecycle_.Finalize(*entry, trial));
    return true;
  });
  return StatusReply(reply.status(), reply.ticket());
}

absl::Status SchedulerCore::CheckUploader(const v1::TrialLease& lease,
                                          const std::string& id,
                                          const auth::Principal& who,
                                          int64_t bytes) {
  DIAL_RETURN_IF_ERROR(CheckCheckpointId(id, lease.study(), lease.trial()));
  if (id.empty()) return absl::InvalidArgumentError("checkpoint: empty");
  Reply<bool> reply = Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_RETURN_IF_ERROR(CheckWorker(who, lease.worker_id()));
    DIAL_RETURN_IF_ERROR(workers_.Touch(lease.worker_id()));
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(lease.study()));
    DIAL_RETURN_IF_ERROR(lifecycle_
                             .FenceUpload(*entry, lease.worker_id(),
                                          lease.trial(), lease.attempt(),
                                          lease.lease_token())
                             .status());
    if (bytes >= 0) {
      DIAL_RETURN_IF_ERROR(
          quota_.Check(entry->study().owner(), entry->name(), id, bytes));
    }
    return true;
  });
  return reply.status();
}

Reply<bool> SchedulerCore::CheckpointUploaded(const v1::TrialLease& lease,
                                              int64_t step,
                                              const std::string& id,
                                              const auth::Principal& who) {
  return Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_RETURN_IF_ERROR(CheckWorker(who, lease.worker_id()));
    DIAL_RETURN_IF_ERROR(workers_.Touch(lease.worker_id()));
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(lease.study()));
    DIAL_ASSIGN_OR_RETURN(
        const v1::Trial* stored,
        lifecycle_.FenceUpload(*entry, lease.worker_id(), lease.trial(),
                               lease.attempt(), lease.lease_token()));
    return lifecycle_.CheckpointUploaded(*entry, *stored, step, id);
  });
}

absl::Status SchedulerCore::CheckCheckpointReader(const std::string& study,
                                                  const auth::Principal& who) {
  Reply<bool> reply = Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(study));
    if (who.can_read(entry->study().owner())) return true;
    if (who.role == auth::Role::kWorker) {
      for (const auto& [number, trial] : entry->trials()) {
        if (trial.state() == v1::RUNNING &&
            workers_.CheckOwner(trial.worker_id(), who.name, false).ok()) {
          return true;
        }
      }
    }
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not read checkpoints of study '", study,
                     "' (its readers may, and workers running its trials)"));
  });
  return reply.status();
}

absl::Status SchedulerCore::LoseWorker(const std::string& worker_id) {
  std::vector<std::pair<StudyEntry*, v1::Trial>> lost;
  for (const auto& [name, entry] : studies_.all()) {
    for (const auto& [number, trial] : entry->trials()) {
      if (trial.state() == v1::RUNNING && trial.worker_id() == worker_id) {
        lost.push_back({entry.get(), trial});
      }
    }
  }
  for (auto& [entry, trial] : lost) {
    DIAL_RETURN_IF_ERROR(lifecycle_.Requeue(*entry, trial));
  }
  // Uploads it still had for trials that paused meanwhile never come.
  for (const auto& [name, entry] : studies_.all()) {
    entry->ForgetUploadsOf(worker_id);
    entry->ForgetRefusalsOf(worker_id);
  }
  outbox_.dispatch = true;
  workers_.Forget(worker_id);
  // Its parked long polls must not be handed the trials just requeued.
  dispatcher_.DropWorker(worker_id, outbox_);
  return absl::OkStatus();
}

void SchedulerCore::Tick() {
  Lock lock(this);
  if (studies_.reload_needed()) Reload();
  for (const auto& id : workers_.Expired()) {
    spdlog::warn("worker {} missed its lease; requeueing its trials", id);
    absl::Status status = LoseWorker(id);
    if (!status.ok()) spdlog::error("requeue failed: {}", status.ToString());
  }
  DispatchNow();
  dispatcher_.Expire(clock_->Now(), outbox_);
  PreemptNow();
}

void SchedulerCore::PreemptNow() {
  // Those not paused in time are fenced and requeued.
  for (const Preemptions::Key& key : placer_.Overdue()) {
    auto entry = studies_.Shared(key.first);
    const v1::Trial* trial = nullptr;
    if (entry) {
      auto it = entry->trials().find(key.second);
      if (it != entry->trials().end()) trial = &it->second;
    }
    const Preemptions::Mark* mark =
        trial != nullptr && trial->state() == v1::RUNNING
            ? preemptions_.Find(key, trial->attempt())
            : nullptr;
    if (mark == nullptr) {
      preemptions_.Ended(key);
      continue;
    }
    const std::string by = mark->by_study;
    absl::Status s = lifecycle_.Preempt(*entry, *trial, by, true);
    if (!s.ok()) spdlog::error("preemption failed: {}", s.ToString());
  }
  placer_.MarkPreemptions();
}

}  // namespace dial::scheduler
