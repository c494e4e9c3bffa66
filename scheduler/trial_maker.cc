#include "scheduler/trial_maker.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "scheduler/study_registry.h"
#include "searchers/registry.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {

TrialMaker::TrialMaker(Parts parts)
    : p_(std::move(parts)),
      suggestions_(p_.threads > 0
                       ? p_.threads
                       : static_cast<int>(
                             std::max(1u, std::thread::hardware_concurrency())),
                   /*nice=*/10) {}

TrialMaker::~TrialMaker() { Stop(); }

void TrialMaker::Stop() {
  suggestions_.Stop();
  housekeeping_.Stop();
}

void TrialMaker::WaitIdle() {
  // Suggestion work may queue deletions: until both are idle at once.
  for (int round = 0; round < 1000; ++round) {
    suggestions_.WaitIdle();
    housekeeping_.WaitIdle();
    if (suggestions_.Idle() && housekeeping_.Idle()) return;
  }
}

void TrialMaker::Fitted(absl::Time start) const {
  if (p_.fit_seconds != nullptr) {
    p_.fit_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
}

std::function<void()> TrialMaker::Suggest(std::shared_ptr<StudyEntry> entry,
                                          int32_t count,
                                          const std::string& client_id,
                                          SuggestCallback done) {
  const std::string name = entry->name();
  const searchers::SearcherKind* kind =
      searchers::FindSearcherKind(entry->study().spec().searcher());
  std::function<void()> run = [this, entry = std::move(entry), count, client_id,
                               done] {
    RunSuggest(entry, count, client_id, done);
  };
  if (kind != nullptr && !kind->fits_model && suggestions_.Claim(name)) {
    return [this, name, run = std::move(run)] {
      suggestions_.RunClaimed(name, run);
    };
  }
  std::function<void()> stopped = [done] {
    done(absl::UnavailableError("the scheduler is shutting down"));
  };
  // Once stopped, the answer too comes after the lock.
  if (!suggestions_.Enqueue(name, {std::move(run), stopped})) return stopped;
  return nullptr;
}

void TrialMaker::Fill(std::shared_ptr<StudyEntry> entry) {
  if (!entry || !entry->QueueFill()) return;
  const std::string name = entry->name();
  suggestions_.Enqueue(
      name,
      {[this, entry = std::move(entry)] { FillPending(entry); }, nullptr});
}

void TrialMaker::RebuildSearcher(std::shared_ptr<StudyEntry> entry,
                                 v1::StudySpec spec) {
  const std::string name = entry->name();
  suggestions_.Enqueue(
      name, {[this, entry = std::move(entry), spec = std::move(spec)] {
               std::map<int64_t, v1::Trial> trials;
               google::protobuf::RepeatedPtrField<v1::Trial> priors;
               const bool gone = Locked(nullptr, [&] {
                 if (!StudyRegistry::Gone(*entry).ok()) return true;
                 trials = entry->trials();
                 priors = entry->priors();
                 // In the copy: the new searcher sees them. What finishes from
                 // now on waits for it as observations.
                 entry->TakeObservations();
                 return false;
               });
               if (gone) return;
               // The store is read without the core's lock.
               const absl::Time start = absl::Now();
               auto searcher = p_.loader->RebuildSearcher(spec, trials, priors);
               Fitted(start);
               if (!searcher.ok()) {
                 spdlog::error("study {}: cannot rebuild its searcher: {}",
                               spec.name(), searcher.status().ToString());
                 return;
               }
               Locked(nullptr, [&] {
                 entry->ReplaceSearcher(std::move(*searcher));
                 return true;
               });
             },
             nullptr});
}

void TrialMaker::RunSuggest(const std::shared_ptr<StudyEntry>& entry,
                            int32_t count, const std::string& client_id,
                            const SuggestCallback& done) {
  Suggestion result;
  WriteTicket ticket;
  // A client with open trials gets those back, not new ones.
  const auto [gone, reuse] = Locked(&ticket, [&] {
    absl::Status status = StudyRegistry::Gone(*entry);
    auto it = entry->open_by_client().find(client_id);
    if (!status.ok() || client_id.empty() ||
        it == entry->open_by_client().end() || it->second.empty()) {
      return std::make_pair(status, false);
    }
    for (int64_t number : it->second) {
      result.trials.push_back(entry->trials().at(number));
    }
    result.study_state = entry->study().state();
    return std::make_pair(status, true);
  });
  if (!gone.ok()) return done(Reply<Suggestion>(gone, ticket));
  if (reuse) return done(Reply<Suggestion>(std::move(result), ticket));
  size_t bytes = 0;  // an answer stays under Limits::max_page_bytes
  while (int32_t(result.trials.size()) < count &&
         bytes < p_.limits->max_page_bytes) {
    auto trial = NewTrial(entry, v1::RUNNING, client_id, &ticket);
    if (!trial.ok() && result.trials.empty()) {
      return done(Reply<Suggestion>(trial.status(), ticket));
    }
    // The trials created before a store error are this client's: hand
    // them over rather than orphan them.
    if (!trial.ok() || !trial->has_value()) break;
    bytes += (*trial)->ByteSizeLong();
    result.trials.push_back(std::move(**trial));
  }
  absl::Status status = Locked(&ticket, [&] {
    // A reload meanwhile dropped this entry (and maybe the trials just
    // created): it must not write any more.
    absl::Status s = StudyRegistry::Gone(*entry);
    if (s.ok()) s = p_.lifecycle->MaybeFinish(*entry);
    result.study_state = entry->study().state();
    result.done = entry->study().state() != v1::STUDY_ACTIVE ||
                  (result.trials.empty() && entry->open_trials() == 0);
    return s;
  });
  if (!status.ok()) return done(Reply<Suggestion>(status, ticket));
  done(Reply<Suggestion>(std::move(result), ticket));
}

absl::StatusOr<std::optional<v1::Trial>> TrialMaker::NewTrial(
    const std::shared_ptr<StudyEntry>& entry, v1::TrialState state,
    const std::string& client_id, WriteTicket* ticket) {
  using Result = absl::StatusOr<std::optional<v1::Trial>>;
  int64_t number = 0;
  std::vector<searchers::Params> pending;
  StudyEntry::Observations seen;
  // A queued configuration goes before the searcher's own.
  std::optional<v1::QueuedTrial> queued;
  // Worker-run studies queue only a few PENDING trials ahead of demand.
  auto may_create = [&] {
    return entry->CanCreate() &&
           !(state == v1::PENDING &&
             int64_t(entry->pending().size()) >= p_.limits->max_pending_ahead);
  };
  const bool go = Locked(ticket, [&] {
    if (!may_create()) return false;
    seen = entry->TakeObservations();
    number = static_cast<int64_t>(entry->trials().size());
    if (entry->searcher().UsesPending()) {
      for (int64_t n : entry->open()) {
        pending.push_back(entry->trials().at(n).params());
      }
    }
    if (!entry->study().queue().empty()) queued = entry->study().queue(0);
    return true;
  });
  if (!go) return std::optional<v1::Trial>();
  // Only this study's executor creates its trials and uses its searcher,
  // so `number` stays free meanwhile.
  searchers::Searcher& searcher = entry->searcher();
  const absl::Time start = absl::Now();
  for (const auto& r : seen.reports) {
    searcher.ObserveReport(r.trial, r.step, r.metrics);
  }
  for (const auto& t : seen.trials) searcher.Observe(t);
  auto params = queued ? absl::StatusOr<searchers::Params>(queued->params())
                       : searcher.Suggest(number, pending);
  if (!queued) Fitted(start);
  Result made = Locked(ticket, [&]() -> Result {
    if (absl::IsOutOfRange(params.status())) {
      entry->MarkExhausted();
      return std::optional<v1::Trial>();
    }
    if (!params.ok()) return params.status();
    // The study may have been stopped, deleted or shrunk while we searched.
    if (!may_create()) return std::optional<v1::Trial>();
    v1::Trial trial;
    trial.set_study(entry->name());
    trial.set_number(number);
    trial.set_state(state);
    *trial.mutable_params() = std::move(*params);
    trial.set_client_id(client_id);
    trial.set_last_step(-1);
    *trial.mutable_create_time() = p_.lifecycle->Now();
    if (state == v1::RUNNING) {
      trial.set_attempt(1);
      *trial.mutable_start_time() = trial.create_time();
    }
    if (queued) {
      trial.set_queue_id(queued->id());
      if (queued->has_origin()) trial.set_origin(queued->origin());
      if (queued->has_seed()) trial.set_seed(queued->seed());
    }
    DIAL_RETURN_IF_ERROR(p_.lifecycle->SaveTrial(*entry, trial));
    if (queued) entry->Dequeue(queued->id());
    p_.lifecycle->Emit(*entry, v1::StudyEvent::TRIAL_CREATED, &trial);
    if (state == v1::PENDING) p_.outbox->dispatch = true;
    return std::optional<v1::Trial>(std::move(trial));
  });
  // Still this study's executor: nothing else uses the searcher.
  if (made.ok() && made->has_value()) searcher.Made((*made)->params());
  return made;
}

void TrialMaker::FillPending(const std::shared_ptr<StudyEntry>& entry) {
  Locked(nullptr, [&] {
    entry->FillStarted();
    return true;
  });
  while (true) {
    // Paused trials the trial scheduler promotes go first (ASHA).
    const bool promoted = Locked(nullptr, [&] {
      if (entry->deleted() || entry->study().state() != v1::STUDY_ACTIVE ||
          entry->active_trials() >=
              entry->study().spec().budget().max_parallel_trials()) {
        return false;
      }
      auto number = entry->trial_scheduler().NextPromotion();
      if (!number) return false;
      auto it = entry->trials().find(*number);
      if (it == entry->trials().end() || it->second.state() != v1::PAUSED) {
        return false;
      }
      absl::Status status = p_.lifecycle->Promote(*entry, it->second);
      if (!status.ok()) spdlog::error("{}", status.ToString());
      return true;
    });
    if (promoted) continue;
    auto trial = NewTrial(entry, v1::PENDING, "", nullptr);
    const bool more = Locked(nullptr, [&] {
      if (!trial.ok()) {
        // E.g. the disk is full: the next AcquireTrial asks again.
        spdlog::error("study {}: cannot queue a trial: {}", entry->name(),
                      trial.status().ToString());
        entry->FillFailed();
        return false;
      }
      if (!trial->has_value()) {
        // Not for an entry that DeleteStudy or a reload dropped meanwhile.
        if (!entry->deleted()) p_.lifecycle->FinishIfDone(*entry);
        return false;
      }
      return true;
    });
    if (!more) return;
  }
}

void TrialMaker::DeleteWhenDurable(std::vector<DoomedCheckpoint> doomed,
                                   WriteTicket ticket) {
  if (p_.checkpoints == nullptr) return;
  // Not on a study's executor: waiting for the commit must not hold up
  // suggestion work.
  housekeeping_.Enqueue("", {[this, doomed = std::move(doomed), ticket] {
                               DeleteCheckpoints(doomed, ticket);
                             },
                             nullptr});
}

void TrialMaker::DeleteCheckpoints(const std::vector<DoomedCheckpoint>& doomed,
                                   WriteTicket ticket) {
  absl::Notification answered;
  absl::Status durable;
  p_.when_durable(ticket, [&](absl::Status s) {
    durable = s;
    answered.Notify();
  });
  answered.WaitForNotification();
  if (!durable.ok()) return;
  for (const auto& d : doomed) {
    absl::Status status =
        d.remove ? p_.checkpoints->Delete(d.id) : absl::OkStatus();
    if (!status.ok() && !absl::IsNotFound(status)) {
      spdlog::warn("retention: {}", status.ToString());
      continue;
    }
    if (d.remove) {
      Locked(nullptr, [&] {
        p_.quota->Remove(d.study, d.id);
        return true;
      });
    }
    // Out of the index too (were this write lost, a later restart would
    // only try the deletion again).
    status = p_.store->DeleteCheckpoint(d.study, d.trial, d.step);
    if (!status.ok() && !absl::IsNotFound(status)) {
      spdlog::warn("retention: {}", status.ToString());
    }
  }
}

void TrialMaker::PurgeLater(std::shared_ptr<StudyEntry> entry) {
  housekeeping_.Enqueue(
      "", {[this, entry = std::move(entry)]() mutable {
             entry.reset();
             if (p_.checkpoints) p_.checkpoints->PurgeRetired();
             absl::Status status = p_.store->PurgeDeleted();
             if (!status.ok()) {
               spdlog::warn(
                   "deleted studies' rows stay until the next delete or "
                   "restart: {}",
                   status.ToString());
             }
           },
           nullptr});
}

}  // namespace dial::scheduler
