// libFuzzer target for study spec loading (common/spec.h). Each input is
// read two ways, as the scheduler meets specs:
//  - as YAML/JSON text, through ParseStudySpec (dialctl, spec files);
//  - as a binary dial.v1.StudySpec (what a gRPC CreateStudy carries).
// Whatever the input, parsing and validation must return (no crash, no
// sanitizer report, no input taking seconds) with OK or INVALID_ARGUMENT.
// A spec that validates must stay valid once defaults are filled in, and
// its JSON form (which is YAML) must parse back to the same spec.
// Build and run with deploy/fuzz.sh; see docs/testing.md.
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/spec.h"

namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "spec_fuzz: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void CheckRefusal(const char* what, const absl::Status& status) {
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
    Fail(what, status);
  }
}

// Validation, defaults and the JSON round trip of a parsed spec.
void CheckSpec(dial::v1::StudySpec spec) {
  absl::Status valid = dial::ValidateStudySpec(spec);
  CheckRefusal("ValidateStudySpec", valid);
  if (!valid.ok()) return;
  dial::FillSpecDefaults(/*seed=*/7, spec);
  // The size cap is on the spec as given; the defaults add a few bytes
  // (seeds, fifo, max_parallel_trials).
  dial::SpecLimits filled;
  filled.max_spec_bytes += 64;
  valid = dial::ValidateStudySpec(spec, filled);
  if (!valid.ok()) Fail("valid spec invalid after FillSpecDefaults", valid);

  // The JSON that protobuf prints is YAML that ParseStudySpec must read
  // back unchanged (unknown fields of binary input are not printed).
  spec.DiscardUnknownFields();
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  auto printed =
      google::protobuf::util::MessageToJsonString(spec, &json, options);
  if (!printed.ok()) return;  // e.g. a NaN in a condition value
  auto again = dial::ParseStudySpec(json);
  if (!again.ok()) Fail("JSON of a valid spec does not parse", again.status());
  // EQUIVALENT: -0.0 (set) and 0.0 (unset) are the same number; the JSON
  // "-0" comes back as 0.
  google::protobuf::util::MessageDifferencer same;
  same.set_message_field_comparison(
      google::protobuf::util::MessageDifferencer::EQUIVALENT);
  if (!same.Compare(*again, spec)) {
    std::fprintf(stderr, "spec_fuzz: JSON round trip changed the spec\n%s\n",
                 json.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Binary inputs with invalid UTF-8 strings are refused with a log line
  // each; the refusal is the point, the lines are noise.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = dial::ParseStudySpec(text);
  CheckRefusal("ParseStudySpec", parsed.status());
  if (parsed.ok()) CheckSpec(*std::move(parsed));

  dial::v1::StudySpec binary;
  if (binary.ParseFromArray(data, static_cast<int>(size))) {
    CheckSpec(std::move(binary));
  }
  return 0;
}
