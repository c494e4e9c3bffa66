// The text form of a knob schedule: optimiser knobs that change during a
// run, as "STEP:{json};STEP:{json}" (the trainer's `schedule` knob). From
// step STEP on, the JSON object's knobs override the trial's (see
// common/trainer_knobs.cc for which knobs a trainer accepts; this codec
// checks the format only). `dialctl study replay` writes it from a PBT
// lineage with EncodeKnobSchedule; dial-train reads it with
// DecodeKnobSchedule. Torch-free. Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace dial {

// Step -> the knobs that take effect before that step trains; ascending.
using KnobSchedule = std::map<int64_t, google::protobuf::Struct>;

// "STEP:{json};..." in ascending step order, with no separator after the
// last entry; "" for an empty schedule. A ';' inside a JSON string is
// written as \u003b, so the separators are the only ';' in the text.
// INVALID_ARGUMENT for a negative step or knobs JSON cannot hold (NaN or
// an infinity), naming the step.
absl::StatusOr<std::string> EncodeKnobSchedule(const KnobSchedule& schedule);

// Parses what EncodeKnobSchedule writes. Entries may come in any order;
// empty entries (";;", a trailing ';') are skipped; a step given twice takes
// the later entry's knobs (older dialctl wrote both ends of an empty
// segment). INVALID_ARGUMENT naming the entry (its 1-based position and
// text) when it has no ':', its step is not a non-negative integer, or its
// knobs are not a JSON object.
absl::StatusOr<KnobSchedule> DecodeKnobSchedule(absl::string_view text);

}  // namespace dial
