#include "common/knob_schedule.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace dial {
namespace {

// Long entries are cut in messages: the schedule can hold many knobs.
std::string Quote(absl::string_view entry) {
  constexpr size_t kMax = 80;
  if (entry.size() <= kMax) return absl::StrCat("'", entry, "'");
  return absl::StrCat("'", entry.substr(0, kMax), "...'");
}

// Protobuf 3.21 writes a non-finite number as the string "NaN" or
// "Infinity", which would come back as a string: refuse it instead.
bool Finite(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return std::isfinite(value.number_value());
    case google::protobuf::Value::kStructValue:
      for (const auto& [name, field] : value.struct_value().fields()) {
        if (!Finite(field)) return false;
      }
      return true;
    case google::protobuf::Value::kListValue:
      for (const auto& item : value.list_value().values()) {
        if (!Finite(item)) return false;
      }
      return true;
    default:
      return true;
  }
}

}  // namespace

absl::StatusOr<std::string> EncodeKnobSchedule(const KnobSchedule& schedule) {
  std::string text;
  for (const auto& [step, knobs] : schedule) {
    if (step < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule: step ", step, " is negative"));
    }
    for (const auto& [name, value] : knobs.fields()) {
      if (!Finite(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("schedule: knob ", name, " of step ", step,
                         " is not a finite number"));
      }
    }
    std::string json;
    auto status = google::protobuf::util::MessageToJsonString(knobs, &json);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule: the knobs of step ", step,
                       " have no JSON form: ", std::string(status.message())));
    }
    // ';' occurs in JSON only inside strings, where \u003b means the same.
    absl::StrAppend(&text, text.empty() ? "" : ";", step, ":",
                    absl::StrReplaceAll(json, {{";", "\\u003b"}}));
  }
  return text;
}

absl::StatusOr<KnobSchedule> DecodeKnobSchedule(absl::string_view text) {
  KnobSchedule schedule;
  int position = 0;
  for (absl::string_view entry : absl::StrSplit(text, ';')) {
    ++position;
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule entry ", position, " ", Quote(entry), ": ",
                       why, " (expected STEP:{json}, e.g. 100:{\"lr\":0.01})"));
    };
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) return bad("has no ':'");
    const absl::string_view step_text =
        absl::StripAsciiWhitespace(entry.substr(0, colon));
    int64_t step = -1;
    if (step_text.empty() || !absl::SimpleAtoi(step_text, &step) || step < 0) {
      return bad(
          absl::StrCat("step '", step_text, "' is not a non-negative integer"));
    }
    google::protobuf::Struct knobs;
    auto status = google::protobuf::util::JsonStringToMessage(
        std::string(entry.substr(colon + 1)), &knobs);
    if (!status.ok()) {
      return bad(absl::StrCat("knobs are not a JSON object: ",
                              std::string(status.message())));
    }
    schedule[step] = std::move(knobs);
  }
  return schedule;
}

}  // namespace dial
