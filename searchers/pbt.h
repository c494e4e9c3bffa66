// PbtScheduler: Population Based Training decisions. Every
// `perturbation_interval` steps of a trial, the population is ranked by each
// member's latest objective value; a member in the bottom `quantile` gets
// EXPLOIT: the latest checkpoint of a random member of the top quantile
// (only members with a persisted checkpoint qualify) and that member's
// params perturbed: floats and ints scaled by 0.8 or 1.2 within bounds,
// discrete values moved to a neighbour, categoricals kept, and any parameter
// resampled with `resample_probability`. Deterministic for (seed, trial,
// step). Not thread-safe (see trial_scheduler.h).
// The core records each EXPLOIT in the trial's lineage and params; the
// worker copies the source checkpoint into the trial's own directory and
// the trial process loads it.
#pragma once

#include <map>
#include <random>

#include "searchers/early_stopping.h"
#include "searchers/space.h"

namespace dial::searchers {

class PbtScheduler : public TrialScheduler {
 public:
  static absl::StatusOr<std::unique_ptr<PbtScheduler>> Create(
      const v1::StudySpec& spec);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  // Donors' checkpoints follow the restore point (uploads that became
  // durable), which retention keeps.
  void OnCheckpoint(const v1::Trial& trial) override;
  // Updates the member (params, checkpoint, latest score) without ranking.
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;

  // Records the report in the trial's member; true when it is due for a
  // perturbation check (the interval has passed since the last one).
  bool Update(const v1::Trial& trial, int64_t step, const Metrics& metrics);

  // Perturbed copy of `params` (exposed for tests).
  Params Perturb(const Params& params, std::mt19937_64& rng) const;

 private:
  struct Member {
    double score = 0;
    bool scored = false;
    int64_t last_perturbation = 0;
    std::string checkpoint;
    int64_t checkpoint_step = 0;
    Params params;
  };
  PbtScheduler(const v1::StudySpec& spec, SearchSpace space)
      : objective_(spec),
        space_(std::move(space)),
        options_(spec.scheduler().pbt()) {}

  ObjectiveReader objective_;
  SearchSpace space_;
  v1::PbtSchedule options_;
  std::map<int64_t, Member> members_;
};

}  // namespace dial::searchers
