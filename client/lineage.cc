#include "client/lineage.h"

#include "absl/strings/str_cat.h"
#include "common/knob_schedule.h"
#include "google/protobuf/struct.pb.h"

namespace dial::client {
namespace {

constexpr int kMaxDepth = 1000;

// Appends the segments that produced the weights of `trial` (number
// `number`) at its step `until`.
absl::Status AppendSchedule(const v1::Trial& trial, int64_t number,
                            int64_t until, int depth, const TrialLookup& lookup,
                            std::vector<ScheduleSegment>* out) {
  if (depth > kMaxDepth) return absl::InternalError("lineage has a cycle");
  const v1::LineageEntry* last = nullptr;
  for (const auto& e : trial.lineage()) {
    if (e.step() <= until) last = &e;
  }
  if (last == nullptr) {
    out->push_back({0, until, number,
                    trial.lineage().empty() ? trial.params()
                                            : trial.lineage(0).old_params()});
    return absl::OkStatus();
  }
  auto source = lookup(last->source_trial());
  if (!source.ok()) return source.status();
  auto status = AppendSchedule(*source, last->source_trial(),
                               last->source_step(), depth + 1, lookup, out);
  if (!status.ok()) return status;
  // The copied weights had trained `start` steps (in their own lineage);
  // this trial then trained them until - step more with its new params.
  const int64_t start = out->back().to;
  out->push_back(
      {start, start + (until - last->step()), number, last->new_params()});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ScheduleSegment>> PbtSchedule(
    const v1::Trial& trial, const TrialLookup& lookup) {
  std::vector<ScheduleSegment> segments;
  auto status = AppendSchedule(trial, trial.number(), trial.last_step(), 0,
                               lookup, &segments);
  if (!status.ok()) return status;
  return segments;
}

std::string KnobSchedule(const std::vector<ScheduleSegment>& segments) {
  dial::KnobSchedule schedule;
  for (const auto& s : segments) {
    // An empty segment shares its start with the next: the later one wins,
    // as dial-train always read it.
    google::protobuf::Struct& knobs = schedule[s.from];
    knobs.Clear();
    for (const auto& [k, v] : s.params) {
      if (v.has_string_value()) {
        (*knobs.mutable_fields())[k].set_string_value(v.string_value());
      } else {
        (*knobs.mutable_fields())[k].set_number_value(
            v.has_double_value() ? v.double_value() : double(v.int_value()));
      }
    }
  }
  // Encoding fails only for a negative step or a non-finite number, which a
  // lineage cannot hold (steps count up from 0; params lie within the
  // spec's finite bounds). Should it ever, the reason stands in for the
  // schedule, so dial-train refuses the replay naming it instead of
  // training some other schedule.
  auto text = EncodeKnobSchedule(schedule);
  return text.ok() ? *text : std::string(text.status().message());
}

absl::StatusOr<v1::StudySpec> ReplaySpec(
    const std::string& study, int64_t number, const v1::StudySpec& spec,
    const std::vector<ScheduleSegment>& segments) {
  if (!spec.trial().has_trainer()) {
    return absl::FailedPreconditionError(
        "study replay needs a study whose trials run the built-in trainer");
  }
  if (segments.empty()) {
    return absl::InvalidArgumentError("study replay needs a schedule");
  }
  v1::StudySpec replay = spec;
  replay.set_name(absl::StrCat(study, "-replay-", number).substr(0, 64));
  replay.clear_search_space();
  auto* p = replay.add_search_space();
  p->set_name("schedule");
  p->mutable_categorical()->add_values(KnobSchedule(segments));
  replay.mutable_scheduler()->Clear();
  replay.mutable_scheduler()->mutable_fifo();
  replay.mutable_searcher()->Clear();
  replay.mutable_searcher()->mutable_grid();
  replay.mutable_budget()->set_max_trials(1);
  replay.mutable_budget()->set_max_parallel_trials(1);
  (*replay.mutable_trial()->mutable_trainer()->mutable_fields())["steps"]
      .set_number_value(static_cast<double>(segments.back().to));
  return replay;
}

}  // namespace dial::client
