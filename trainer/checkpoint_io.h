// Checkpoint I/O of the trainer (checkpoint_io.cc): what a checkpoint holds
// (model.pt, optimizer.pt, rng.pt with every replica's dropout stream,
// scaler for fp16, step, and predictions.csv when asked), writing it
// through a CheckpointStore, and reading it back into the replicas for an
// exact resume or a PBT exploit. Includes LibTorch (through
// trainer/internal.h): for trainer/ and tests/trainer only. Not
// thread-safe: called from the step loop, between steps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/trainer_knobs.h"
#include "trainer/internal.h"
#include "trainer/replicas.h"

namespace dial::storage {
class CheckpointStore;
}  // namespace dial::storage

namespace dial::trainer {

// A checkpoint's files, with its dropout streams read ahead of building the
// replicas (their count decides how many CPU replicas a resume builds).
struct RestoredCheckpoint {
  std::string id;  // the checkpoint read: an earlier one if the asked was bad
  std::map<std::string, std::string> files;
  std::vector<torch::Tensor> rng;
};

// Reads checkpoint `id` of (study, trial) from `store`, or the newest earlier
// checkpoint of that trial that verifies when `id` is damaged (the steps in
// between are trained again). NOT_FOUND for a missing checkpoint, DATA_LOSS
// when it is damaged with no earlier one to fall back to or lacks its step
// or dropout streams.
absl::StatusOr<RestoredCheckpoint> ReadCheckpoint(
    const storage::CheckpointStore& store, const std::string& study,
    int64_t trial, const std::string& id);

// Whether `rng` holds the streams of as many CPU replicas as `replicas: 0`
// gives this model on that many threads: a count a resume can take over.
bool CpuStreams(const TrainerConfig& c, const std::vector<torch::Tensor>& rng);

// Loads the weights and optimiser state of checkpoint `id` (its `files`)
// into every replica. DATA_LOSS when they are missing; FAILED_PRECONDITION,
// naming the first tensor whose shape differs, when they do not fit this
// model and optimiser.
absl::Status LoadModel(const std::map<std::string, std::string>& files,
                       const std::string& id, std::vector<Replica>& replicas);

// Puts a read checkpoint into the replicas and the loss scaler (the dropout
// streams too when `streams`, if the checkpoint has one for each replica
// and this device's kind) and returns its step. Errors as LoadModel's;
// DATA_LOSS for a bad step or scaler state.
absl::StatusOr<int64_t> RestoreCheckpoint(const RestoredCheckpoint& restored,
                                          bool streams,
                                          std::vector<Replica>& replicas,
                                          LossScaler& scaler);

// Writes checkpoint (study, trial, step) from replica 0's model and
// optimiser, every replica's dropout stream and `scaler`, with
// `predictions` as predictions.csv unless empty; returns its id. When an
// earlier attempt wrote that step already, keeps it, or replaces it if it
// no longer verifies. Errors are the store's.
absl::StatusOr<std::string> WriteCheckpoint(storage::CheckpointStore& store,
                                            const std::string& study,
                                            int64_t trial, int64_t step,
                                            std::vector<Replica>& replicas,
                                            const LossScaler& scaler,
                                            const std::string& predictions);

}  // namespace dial::trainer
