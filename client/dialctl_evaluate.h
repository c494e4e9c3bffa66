// `dialctl trials evaluate STUDY N` and `dialctl study ensemble STUDY
// --top=K`: the final, explicit evaluation of trained models. dial-train
// runs here, loads the trials' checkpoints and evaluates them on the
// held-out test split (or `val`), so studies never see the test split.
// Checkpoints are read from `checkpoint_root` (or $DIAL_CHECKPOINT_ROOT)
// when it holds them all; otherwise the scheduler's copies are downloaded
// into a temporary root, removed afterwards.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "absl/status/status.h"
#include "client/client.h"

namespace dial::cli {

struct EvaluateOptions {
  std::string split = "test";   // test or val
  std::string trainer;          // dial-train; empty: the default path
  std::string checkpoint_root;  // empty: $DIAL_CHECKPOINT_ROOT
  std::string predictions;      // trials evaluate: per-example CSV
  bool json = false;
};

// One trial's latest checkpoint. Prints the metrics (a table, or JSON).
absl::Status EvaluateTrial(client::DialClient& client, const std::string& study,
                           int64_t number, const EvaluateOptions& options,
                           std::ostream& out);

// The best `top` completed trials with a checkpoint (at least 2), their
// predictions averaged.
absl::Status EvaluateEnsemble(client::DialClient& client,
                              const std::string& study, int32_t top,
                              const EvaluateOptions& options,
                              std::ostream& out);

}  // namespace dial::cli
