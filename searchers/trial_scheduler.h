// Trial schedulers decide, on every report of a running trial, whether it
// goes on. Driven by the scheduler core, which serialises calls per study;
// implementations are not thread-safe on their own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/map.h"

namespace dial::searchers {

using Metrics = google::protobuf::Map<std::string, double>;

class TrialScheduler {
 public:
  virtual ~TrialScheduler() = default;

  // The decision for `trial` reporting `metrics` at `step`. Also called when
  // a restarted scheduler replays stored history, so it must depend only on
  // the reports seen (and the seed).
  virtual v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                                const Metrics& metrics) = 0;

  // A stored report replayed by a restarted scheduler, trial by trial (in
  // number order, steps in order), to rebuild the state OnReport builds;
  // no decision is wanted. Schedulers whose state depends on the order of
  // reports across trials must not rely on it. Default: OnReport.
  virtual void Replay(const v1::Trial& trial, int64_t step,
                      const Metrics& metrics) {
    OnReport(trial, step, metrics);
  }

  // Non-empty: Replay reads nothing of a trial's history but reports with a
  // finite value of the objective, and of those only the first at or after
  // each of these steps and the last, so a restart may replay just those (a
  // few per trial instead of every one).
  virtual std::vector<int64_t> ReplaySteps() const { return {}; }

  // `trial` reached a final state.
  virtual void OnTrialFinished(const v1::Trial& trial) {}

  // `trial`'s restore point (checkpoint, checkpoint_step) changed outside a
  // report: an uploaded checkpoint became durable.
  virtual void OnCheckpoint(const v1::Trial& trial) {}

  // Whether a restarted scheduler must replay stored reports through
  // OnReport to rebuild this scheduler's state.
  virtual bool NeedsHistory() const { return true; }

  // Schedulers that PAUSE trials: the paused trial to resume next (it is
  // then counted as promoted), or nullopt. HasPromotion asks without
  // taking one.
  virtual std::optional<int64_t> NextPromotion() { return std::nullopt; }
  virtual bool HasPromotion() const { return false; }
};

// Every trial runs to its own end.
class FifoScheduler : public TrialScheduler {
 public:
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  bool NeedsHistory() const override { return false; }
};

// The trial scheduler named by spec.scheduler. UNIMPLEMENTED for schedulers
// not built yet.
absl::StatusOr<std::unique_ptr<TrialScheduler>> CreateTrialScheduler(
    const v1::StudySpec& spec);

}  // namespace dial::searchers
