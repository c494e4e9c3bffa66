#include "scheduler/warm_start.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "searchers/pareto.h"
#include "searchers/searcher.h"
#include "searchers/space.h"

namespace dial::scheduler {

absl::StatusOr<WarmStartPlan> PlanWarmStart(
    const v1::StudySpec& spec,
    const std::function<absl::StatusOr<const StudyEntry*>(const std::string&)>&
        source) {
  DIAL_ASSIGN_OR_RETURN(auto space, searchers::SearchSpace::Create(spec));
  std::vector<v1::Trial> usable;
  const auto& ws = spec.warm_start();
  for (int s = 0; s < ws.studies_size(); ++s) {
    const std::string where = absl::StrCat("warm_start.studies[", s, "]");
    DIAL_ASSIGN_OR_RETURN(const StudyEntry* earlier, source(ws.studies(s)));
    const v1::StudySpec& old = earlier->study().spec();
    for (const auto& p : spec.search_space()) {
      const v1::ParameterSpec* match = nullptr;
      for (const auto& q : old.search_space()) {
        if (q.name() == p.name()) match = &q;
      }
      if (!match || match->domain_case() != p.domain_case()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": study '", ws.studies(s), "' ",
            match ? "gives parameter '" + p.name() + "' another kind"
                  : "has no parameter '" + p.name() + "'"));
      }
    }
    for (const auto& [number, trial] : earlier->trials()) {
      if (trial.state() != v1::COMPLETED) continue;
      auto params = space.Project(trial.params());
      if (!params) continue;
      v1::Trial t;
      t.set_study(ws.studies(s));
      t.set_number(number);
      t.set_state(v1::COMPLETED);
      *t.mutable_params() = std::move(*params);
      *t.mutable_final_metrics() = trial.final_metrics();
      *t.mutable_end_time() = trial.end_time();
      if (searchers::SetObjectiveValues(spec, t)) continue;  // lacks one
      usable.push_back(std::move(t));
    }
  }
  if (usable.empty()) {
    return absl::InvalidArgumentError(
        "warm_start.studies: no COMPLETED trial of them has this study's "
        "objective metrics and parameters within this search space");
  }
  std::vector<searchers::Point> points;
  std::vector<double> violation;
  for (const auto& t : usable) {
    points.push_back(*searchers::MinimizedObjectives(spec, t));
    violation.push_back(
        searchers::ConstraintViolation(spec, t.final_metrics()));
  }
  WarmStartPlan plan;
  const int top_k = ws.top_k() == 0 ? 5 : std::max(0, ws.top_k());
  std::set<std::string> queued;
  for (int i : searchers::ParetoOrder(points, &violation)) {
    if (int(queued.size()) < top_k && violation[i] == 0 &&
        queued.insert(searchers::ParamsKey(usable[i].params())).second) {
      *plan.queue.emplace_back().mutable_params() = usable[i].params();
    }
    if (int(plan.priors.size()) < kMaxPriorTrials) {
      plan.priors.push_back(usable[i]);
    }
  }
  return plan;
}

}  // namespace dial::scheduler
