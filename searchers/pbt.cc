#include "searchers/pbt.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status.h"

namespace dial::searchers {

absl::StatusOr<std::unique_ptr<PbtScheduler>> PbtScheduler::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  return std::unique_ptr<PbtScheduler>(
      new PbtScheduler(spec, std::move(space)));
}

Params PbtScheduler::Perturb(const Params& params, std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Params out = params;
  for (int i = 0; i < space_.size(); ++i) {
    const auto& p = space_.param(i);
    auto it = out.find(p.name());
    if (it == out.end()) continue;
    const double resample = unit(rng);
    const bool up = unit(rng) < 0.5;
    if (resample < options_.resample_probability()) {
      it->second = space_.FromUnit(i, unit(rng));
      continue;
    }
    v1::ParamValue& v = it->second;
    const double factor = up ? 1.2 : 0.8;
    switch (p.domain_case()) {
      case v1::ParameterSpec::kFloat:
        v.set_double_value(std::clamp(v.double_value() * factor,
                                      p.float_().min(), p.float_().max()));
        break;
      case v1::ParameterSpec::kInt: {
        int64_t x = std::llround(static_cast<double>(v.int_value()) * factor);
        if (x == v.int_value()) x += up ? 1 : -1;  // always move
        v.set_int_value(std::clamp(x, p.int_().min(), p.int_().max()));
        break;
      }
      case v1::ParameterSpec::kDiscrete: {
        const auto& values = p.discrete().values();
        int idx = static_cast<int>(
            std::find(values.begin(), values.end(), v.double_value()) -
            values.begin());
        idx = std::clamp(idx + (up ? 1 : -1), 0, values.size() - 1);
        v.set_double_value(values[idx]);
        break;
      }
      default:  // categoricals change only by resampling
        break;
    }
  }
  return out;
}

void PbtScheduler::OnCheckpoint(const v1::Trial& trial) {
  auto it = members_.find(trial.number());
  if (it == members_.end() || trial.checkpoint().empty()) return;
  it->second.checkpoint = trial.checkpoint();
  it->second.checkpoint_step = trial.checkpoint_step();
}

bool PbtScheduler::Update(const v1::Trial& trial, int64_t step,
                          const Metrics& metrics) {
  Member& me = members_[trial.number()];
  me.params = trial.params();
  if (!trial.checkpoint().empty()) {
    me.checkpoint = trial.checkpoint();
    me.checkpoint_step = trial.checkpoint_step();
  }
  auto score = objective_.Score(metrics);
  if (!score) return false;
  me.score = *score;
  me.scored = true;
  if (step - me.last_perturbation < options_.perturbation_interval()) {
    return false;
  }
  me.last_perturbation = step;
  return true;
}

void PbtScheduler::Replay(const v1::Trial& trial, int64_t step,
                          const Metrics& metrics) {
  Update(trial, step, metrics);
}

v1::Decision PbtScheduler::OnReport(const v1::Trial& trial, int64_t step,
                                    const Metrics& metrics) {
  v1::Decision decision;
  decision.set_action(v1::Decision::CONTINUE);
  if (!Update(trial, step, metrics)) return decision;
  const double score = members_[trial.number()].score;
  // Rank the population by latest value.
  std::vector<std::pair<double, int64_t>> ranked;
  for (const auto& [number, m] : members_) {
    if (m.scored) ranked.push_back({m.score, number});
  }
  const size_t n = ranked.size();
  const size_t cut = std::max<size_t>(
      1, static_cast<size_t>(std::floor(n * options_.quantile())));
  if (n < 2 || 2 * cut > n) return decision;
  std::sort(ranked.begin(), ranked.end());  // worst first
  bool bottom = false;
  for (size_t i = 0; i < cut; ++i) bottom |= ranked[i].second == trial.number();
  if (!bottom) return decision;
  std::vector<int64_t> donors;
  for (size_t i = n - cut; i < n; ++i) {
    const Member& m = members_[ranked[i].second];
    if (!m.checkpoint.empty() && ranked[i].second != trial.number()) {
      donors.push_back(ranked[i].second);
    }
  }
  if (donors.empty()) return decision;  // nobody to copy from yet
  std::mt19937_64 rng(SplitMix64(options_.seed()) ^
                      SplitMix64(static_cast<uint64_t>(trial.number()) << 20 ^
                                 static_cast<uint64_t>(step)));
  const int64_t source = donors[rng() % donors.size()];
  const Member& donor = members_[source];
  decision.set_action(v1::Decision::EXPLOIT);
  decision.set_source_trial(source);
  decision.set_source_checkpoint(donor.checkpoint);
  decision.set_source_step(donor.checkpoint_step);
  *decision.mutable_new_params() = Perturb(donor.params, rng);
  decision.set_reason(absl::StrCat(
      objective_.metric(), " ", objective_.Value(score), " is in the bottom ",
      options_.quantile(), " of ", n, "; copying trial ", source, " at step ",
      donor.checkpoint_step));
  return decision;
}

}  // namespace dial::searchers
