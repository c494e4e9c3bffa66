#include "scheduler/study_loader.h"

#include <algorithm>
#include <vector>

#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {
namespace {

int64_t EndMs(const v1::Trial& t) {
  return google::protobuf::util::TimeUtil::TimestampToMilliseconds(
      t.end_time());
}

}  // namespace

absl::StatusOr<std::shared_ptr<StudyEntry>> StudyLoader::Load(
    v1::Study study) const {
  const absl::Time start = absl::Now();
  DIAL_ASSIGN_OR_RETURN(auto searcher, searchers_(study.spec()));
  DIAL_ASSIGN_OR_RETURN(auto trial_scheduler, trial_schedulers_(study.spec()));
  DIAL_ASSIGN_OR_RETURN(auto trials, store_->ListTrials(study.name(), {}));
  // Queued configurations that became trials before the queue's own
  // update reached the store (a crash in between) are gone from it.
  int64_t dequeued = 0;
  for (const auto& trial : trials) {
    dequeued = std::max(dequeued, trial.queue_id());
  }
  auto* queue = study.mutable_queue();
  while (!queue->empty() && queue->begin()->id() <= dequeued) {
    queue->erase(queue->begin());
  }
  auto entry = std::make_shared<StudyEntry>(Stored<v1::Study>(std::move(study)),
                                            std::move(searcher),
                                            std::move(trial_scheduler));
  for (const auto& t : entry->priors()) entry->searcher().ObservePrior(t);
  for (auto& trial : trials) entry->Mirror(Stored<v1::Trial>(std::move(trial)));
  trials.clear();
  DIAL_ASSIGN_OR_RETURN(int64_t replayed,
                        Replay(entry->study(), entry->trials(),
                               entry->searcher(), &entry->trial_scheduler()));
  spdlog::info("study {}: {} trials, {} reports replayed, loaded in {:.2f} s",
               entry->name(), entry->trials().size(), replayed,
               absl::ToDoubleSeconds(absl::Now() - start));
  return entry;
}

absl::StatusOr<std::unique_ptr<searchers::Searcher>>
StudyLoader::RebuildSearcher(
    const v1::StudySpec& spec, const std::map<int64_t, v1::Trial>& trials,
    const google::protobuf::RepeatedPtrField<v1::Trial>& priors) const {
  DIAL_ASSIGN_OR_RETURN(auto searcher, searchers_(spec));
  for (const auto& t : priors) searcher->ObservePrior(t);
  if (trials.empty()) return searcher;
  v1::Study study;
  study.set_name(trials.begin()->second.study());
  *study.mutable_spec() = spec;
  DIAL_RETURN_IF_ERROR(Replay(study, trials, *searcher, nullptr).status());
  return searcher;
}

absl::StatusOr<int64_t> StudyLoader::Replay(
    const v1::Study& study, const std::map<int64_t, v1::Trial>& trials,
    searchers::Searcher& searcher,
    searchers::TrialScheduler* trial_scheduler) const {
  int64_t replayed = 0;
  const bool schedule = trial_scheduler && trial_scheduler->NeedsHistory();
  const bool search = searcher.WantsReports();
  if (schedule || search) {
    // Every stored report, trial by trial, streamed from the store (a study
    // of 100,000 trials has millions). The trial schedulers' state depends
    // on each trial's own reports only, so this rebuilds it as it was (see
    // TrialScheduler::Replay). Schedulers that read a few reports per
    // trial get only those.
    const std::vector<int64_t> steps =
        search ? std::vector<int64_t>() : trial_scheduler->ReplaySteps();
    auto replay = [&, it = trials.end()](int64_t number,
                                         const v1::MetricPoint& point) mutable {
      ++replayed;
      // Rows come trial by trial: look each trial up once.
      if (it == trials.end() || it->first != number) {
        it = trials.find(number);
        if (it == trials.end()) return;
      }
      if (schedule) {
        trial_scheduler->Replay(it->second, point.step(), point.metrics());
      }
      if (search) {
        searcher.ObserveReport(it->second, point.step(), point.metrics());
      }
    };
    DIAL_RETURN_IF_ERROR(store_->ForEachReport(
        study.name(), steps, study.spec().objective().metric(), replay));
  }
  std::vector<const v1::Trial*> finished;
  for (const auto& [number, trial] : trials) {
    if (IsFinal(trial.state())) finished.push_back(&trial);
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const v1::Trial* a, const v1::Trial* b) {
                     return EndMs(*a) < EndMs(*b);
                   });
  for (const v1::Trial* trial : finished) {
    searcher.Observe(*trial);
    if (trial_scheduler) trial_scheduler->OnTrialFinished(*trial);
  }
  return replayed;
}

}  // namespace dial::scheduler
