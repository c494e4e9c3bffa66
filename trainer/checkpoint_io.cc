#include "trainer/checkpoint_io.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "storage/checkpoint_store.h"

namespace dial::trainer {
namespace {

std::string Serialize(const std::function<void(std::ostream&)>& save) {
  std::ostringstream out;
  save(out);
  return out.str();
}

// LibTorch loads a tensor of another shape without a word: the trainer
// compares.
std::map<std::string, std::vector<int64_t>> Shapes(torch::nn::Module& net) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : net.named_parameters()) {
    out[p.key()] = p.value().sizes().vec();
  }
  for (const auto& b : net.named_buffers()) {
    out[b.key()] = b.value().sizes().vec();
  }
  return out;
}

}  // namespace

absl::StatusOr<RestoredCheckpoint> ReadCheckpoint(
    const storage::CheckpointStore& store, const std::string& study,
    int64_t trial, const std::string& id) {
  RestoredCheckpoint restored;
  restored.id = id;
  auto read = store.Read(id);
  if (absl::IsDataLoss(read.status())) {
    // A damaged checkpoint (checksum mismatch): fall back to the newest
    // earlier one of this trial that verifies. The steps in between are
    // trained again; the scheduler ignores the reports it already has.
    std::fprintf(stderr, "dial-train: checkpoint %s is damaged (%s)\n",
                 id.c_str(), std::string(read.status().message()).c_str());
    int64_t bad_step = std::numeric_limits<int64_t>::max();
    (void)absl::SimpleAtoi(id.substr(id.rfind('/') + 1), &bad_step);
    auto steps = store.ListSteps(study, trial);
    if (steps.ok()) {
      for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
        if (*it >= bad_step) continue;
        const std::string earlier =
            storage::CheckpointStore::MakeId(study, trial, *it);
        read = store.Read(earlier);
        if (read.ok()) {
          std::fprintf(stderr, "dial-train: falling back to checkpoint %s\n",
                       earlier.c_str());
          restored.id = earlier;
          break;
        }
      }
    }
    if (!read.ok()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", id, " is damaged and no earlier checkpoint of trial ",
          trial, " verifies"));
    }
  }
  if (!read.ok()) return read.status();
  restored.files = std::move(*read);
  const auto& files = restored.files;
  if (!files.count("step") || !files.count("rng.pt")) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", restored.id, " has no step or rng state"));
  }
  std::istringstream rng(files.at("rng.pt"));
  torch::load(restored.rng, rng);
  return restored;
}

bool CpuStreams(const TrainerConfig& c, const std::vector<torch::Tensor>& rng) {
  static const int64_t cpu_state =
      at::detail::createCPUGenerator().get_state().numel();
  const int64_t n = static_cast<int64_t>(rng.size());
  if (n == 0 || CpuReplicas(c, static_cast<int>(n)) != n) return false;
  return std::all_of(rng.begin(), rng.end(), [](const torch::Tensor& t) {
    return t.numel() == cpu_state;
  });
}

absl::Status LoadModel(const std::map<std::string, std::string>& files,
                       const std::string& id, std::vector<Replica>& replicas) {
  if (!files.count("model.pt") || !files.count("optimizer.pt")) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", id, " has no model or optimizer"));
  }
  // Other model knobs, or a CNN saved before Dial fused its block tail.
  auto misfit = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", id,
        " does not fit this trial's model and optimizer (written with other "
        "model knobs or by an older Dial?): ",
        why));
  };
  const auto expected = Shapes(*replicas[0].net);
  try {
    for (auto& rep : replicas) {
      std::istringstream model(files.at("model.pt"));
      torch::load(rep.net, model, rep.device);
      for (const auto& [name, sizes] : Shapes(*rep.net)) {
        if (sizes != expected.at(name)) {
          return misfit(absl::StrCat(
              name, " has shape [", absl::StrJoin(sizes, ", "), "] there, [",
              absl::StrJoin(expected.at(name), ", "), "] here"));
        }
      }
      std::istringstream optim(files.at("optimizer.pt"));
      torch::load(*rep.optimizer, optim, rep.device);
    }
  } catch (const c10::Error& e) {
    return misfit(e.what_without_backtrace());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RestoreCheckpoint(const RestoredCheckpoint& restored,
                                          bool streams,
                                          std::vector<Replica>& replicas,
                                          LossScaler& scaler) {
  const auto& files = restored.files;
  const std::string& id = restored.id;
  DIAL_RETURN_IF_ERROR(LoadModel(files, id, replicas));
  const auto& states = restored.rng;
  if (streams && states.size() != replicas.size()) {
    std::fprintf(stderr,
                 "dial-train: checkpoint %s has %zu replicas' dropout "
                 "streams, this run %zu: dropout starts fresh streams\n",
                 id.c_str(), states.size(), replicas.size());
  } else if (streams) {
    try {
      for (size_t r = 0; r < states.size(); ++r) {
        auto& gen = replicas[r].generator;
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(states[r]);
      }
    } catch (const c10::Error&) {  // e.g. a GPU run's streams on the CPU
      std::fprintf(stderr,
                   "dial-train: checkpoint %s has another device's dropout "
                   "streams: dropout starts fresh streams\n",
                   id.c_str());
    }
  }
  if (files.count("scaler")) {
    DIAL_RETURN_IF_ERROR(scaler.Load(files.at("scaler")));
  }
  int64_t step = 0;
  if (!files.count("step") || !absl::SimpleAtoi(files.at("step"), &step)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id, ": bad step"));
  }
  return step;
}

absl::StatusOr<std::string> WriteCheckpoint(storage::CheckpointStore& store,
                                            const std::string& study,
                                            int64_t trial, int64_t step,
                                            std::vector<Replica>& replicas,
                                            const LossScaler& scaler,
                                            const std::string& predictions) {
  Replica& lead = replicas[0];
  std::map<std::string, std::string> files;
  files["model.pt"] =
      Serialize([&](std::ostream& out) { torch::save(lead.net, out); });
  files["optimizer.pt"] =
      Serialize([&](std::ostream& out) { torch::save(*lead.optimizer, out); });
  std::vector<torch::Tensor> states;
  for (auto& rep : replicas) {
    std::lock_guard<std::mutex> lock(rep.generator.mutex());
    states.push_back(rep.generator.get_state());
  }
  files["rng.pt"] =
      Serialize([&](std::ostream& out) { torch::save(states, out); });
  if (scaler.enabled()) files["scaler"] = scaler.Save();
  if (!predictions.empty()) files["predictions.csv"] = predictions;
  files["step"] = std::to_string(step);
  auto info = store.Write(study, trial, step, files);
  if (absl::IsAlreadyExists(info.status())) {
    // Written by an earlier attempt that got this far: the same state,
    // unless it was damaged since; then this one replaces it.
    const std::string id = storage::CheckpointStore::MakeId(study, trial, step);
    if (!absl::IsDataLoss(store.Verify(id).status())) return id;
    DIAL_RETURN_IF_ERROR(store.Delete(id));
    info = store.Write(study, trial, step, files);
  }
  if (!info.ok()) return info.status();
  return info->id;
}

}  // namespace dial::trainer
