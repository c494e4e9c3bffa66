// The trial protocol between a worker and a trial process (any language):
// the process writes one JSON line per report on the fd named by
// DIAL_REPORT_FD, {"step": N, "metrics": {...}, "checkpoint": "id"}, and reads
// one JSON line back on DIAL_DECISION_FD, {"action": "CONTINUE"|"STOP"|...}.
// Encoding and parsing live here so both sides agree. Thread-safe: free
// functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/struct.pb.h"

namespace dial {

// Environment variables set by the worker for a trial process.
inline constexpr char kEnvTrialParams[] = "DIAL_TRIAL_PARAMS";    // JSON object
inline constexpr char kEnvTrainerKnobs[] = "DIAL_TRAINER_KNOBS";  // JSON object
inline constexpr char kEnvStudy[] = "DIAL_STUDY";
inline constexpr char kEnvTrial[] = "DIAL_TRIAL";
inline constexpr char kEnvAttempt[] = "DIAL_ATTEMPT";
inline constexpr char kEnvCheckpointRoot[] = "DIAL_CHECKPOINT_ROOT";
inline constexpr char kEnvCheckpointDir[] = "DIAL_CHECKPOINT_DIR";
inline constexpr char kEnvRestoreCheckpoint[] = "DIAL_RESTORE_CHECKPOINT";
inline constexpr char kEnvStartStep[] = "DIAL_START_STEP";
inline constexpr char kEnvReportFd[] = "DIAL_REPORT_FD";
inline constexpr char kEnvDecisionFd[] = "DIAL_DECISION_FD";
inline constexpr char kEnvCpuThreads[] = "DIAL_CPU_THREADS";
// A re-evaluation's seed (Trial.seed), when it has one: the trainer's
// `seed` knob takes it; command trials seed their own randomness with it.
inline constexpr char kEnvSeed[] = "DIAL_SEED";

// The largest step a report may carry: 2^53, past which JSON numbers (as
// doubles) skip integers.
inline constexpr double kMaxReportStep = 9007199254740992.0;

struct TrialReport {
  int64_t step = 0;
  std::map<std::string, double> metrics;
  std::string checkpoint;  // optional checkpoint id taken at this step
};

// The checkpoint id of what a trial reported: a report may name the
// absolute path it wrote, inside its own DIAL_CHECKPOINT_DIR (`root`/
// `study`/`trial`), for which this is the id relative to `root`; anything
// else comes back as it was (ids are checked where they are used).
std::string CheckpointIdOf(const std::string& checkpoint,
                           const std::string& root, const std::string& study,
                           int64_t trial);

std::string EncodeReport(const TrialReport& report);
// INVALID_ARGUMENT with the reason for a malformed line.
absl::StatusOr<TrialReport> ParseReport(const std::string& line);

// A decision as the trial process sees it. Actions as the proto names
// them: CONTINUE, STOP, PAUSE, EXPLOIT. EXPLOIT also names the checkpoint
// to load (a copy in the trial's own directory) and the new params as a
// JSON object.
struct TrialDecision {
  std::string action;
  std::string reason;
  std::string checkpoint;
  std::string params_json;  // "{}" when absent
};

std::string EncodeDecision(const TrialDecision& decision);
absl::StatusOr<TrialDecision> ParseDecision(const std::string& line);

// The trial's end of the protocol: a report line out, a decision line back.
class TrialPipe {
 public:
  TrialPipe(int report_fd, int decision_fd)
      : out_(report_fd), in_(decision_fd) {}
  // The pipes DIAL_REPORT_FD and DIAL_DECISION_FD name; nullopt outside a
  // worker.
  static std::optional<TrialPipe> FromEnv();
  // UNAVAILABLE once the worker has closed a pipe.
  absl::StatusOr<TrialDecision> Send(const TrialReport& report);

 private:
  int out_, in_;
};

// A trial's parameters as the JSON object of DIAL_TRIAL_PARAMS.
std::string ParamsJson(
    const google::protobuf::Map<std::string, v1::ParamValue>& params);

}  // namespace dial
