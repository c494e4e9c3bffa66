#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/knob_schedule.h"
#include "common/status.h"
#include "storage/checkpoint_store.h"
#include "trainer/checkpoint_io.h"
#include "trainer/evaluation.h"
#include "trainer/internal.h"
#include "trainer/lr_schedule.h"
#include "trainer/replicas.h"

namespace dial::trainer {
namespace {

// Sets the live learning rate, momentum and weight decay whatever the
// optimiser.
void SetOptimizerKnobs(torch::optim::Optimizer& optimizer,
                       const std::string& kind, double lr, double momentum,
                       double weight_decay) {
  for (auto& group : optimizer.param_groups()) {
    if (kind == "sgd") {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(lr).momentum(momentum).weight_decay(weight_decay);
    } else if (kind == "adamw") {
      auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
      o.lr(lr).weight_decay(weight_decay);
    } else if (kind == "rmsprop") {
      auto& o = static_cast<torch::optim::RMSpropOptions&>(group.options());
      o.lr(lr).momentum(momentum).weight_decay(weight_decay);
    } else {
      auto& o = static_cast<torch::optim::AdamOptions&>(group.options());
      o.lr(lr).weight_decay(weight_decay);
    }
  }
}

// Scales gradients to a global norm of at most max_norm, as
// torch::nn::utils::clip_grad_norm_ does, without reading the norm back to
// the host.
void ClipGradNorm(const std::vector<torch::Tensor>& grads, double max_norm) {
  std::vector<torch::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.norm(2));
  if (norms.empty()) return;
  auto coef = (max_norm / (torch::stack(norms).norm(2) + 1e-6)).clamp_max(1.0);
  for (const auto& g : grads) g.mul_(coef);
}

std::vector<torch::Tensor> Grads(torch::nn::Module& net) {
  std::vector<torch::Tensor> grads;
  for (auto& p : net.parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

class Run {
 public:
  Run(const TrainerConfig& c, const RunContext& ctx, ReportSink* sink)
      : c_(c),
        ctx_(ctx),
        sink_(sink),
        precision_(ParsePrecision(c.precision)) {}

  // Data, replicas, checkpoint store and (when asked) the restored state.
  // An evaluation builds one replica: it never steps.
  absl::StatusOr<int64_t> Setup(bool evaluate, bool with_test) {
    const int64_t gpus =
        torch::cuda::is_available() ? torch::cuda::device_count() : 0;
    if (!ctx_.checkpoint_root.empty()) {
      DIAL_ASSIGN_OR_RETURN(
          store_, storage::FileCheckpointStore::Create({ctx_.checkpoint_root}));
    }
    RestoredCheckpoint restored;
    if (!ctx_.restore_checkpoint.empty()) {
      if (!store_) {
        return absl::InvalidArgumentError(
            "restoring a checkpoint needs a checkpoint root");
      }
      DIAL_ASSIGN_OR_RETURN(restored,
                            ReadCheckpoint(*store_, ctx_.study, ctx_.trial,
                                           ctx_.restore_checkpoint));
      restored_id_ = restored.id;
    }
    int64_t n = c_.replicas > 0 ? c_.replicas
                : gpus > 0      ? gpus
                                : CpuReplicas(c_, ctx_.threads);
    if (c_.replicas == 0 && gpus == 0 && CpuStreams(c_, restored.rng)) {
      // A resume keeps the CPU replica count it was trained with (it follows
      // the thread count), so every dropout stream goes on where it stopped.
      // Even on fewer threads: then replicas share them.
      n = static_cast<int64_t>(restored.rng.size());
    }
    if (evaluate) n = 1;
#ifdef DIAL_WITH_NCCL
    if (gpus > 0 && n > 1 && n <= gpus) {
      auto nccl = MakeNcclAllReduce(static_cast<int>(n));
      if (nccl.ok()) {
        all_reduce_ = std::move(*nccl);
      } else {
        std::fprintf(stderr,
                     "dial-train: %s; summing gradients with device copies\n",
                     std::string(nccl.status().message()).c_str());
      }
    }
#endif
    if (gpus > 0 && n > gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replicas ", n, " needs as many GPUs; ", gpus, " are visible"));
    }
    if (precision_ == Precision::kFp16 && gpus == 0) {
      return absl::InvalidArgumentError(
          "precision fp16 needs a CUDA device (autocast on the CPU supports "
          "bf16 only); use bf16 or fp32");
    }
    if (c_.batch_size < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_size ", c_.batch_size, " is smaller than replicas ", n));
    }
    threads_per_replica_ = std::max<int>(1, ctx_.threads / static_cast<int>(n));
    torch::set_num_threads(threads_per_replica_);
    DIAL_ASSIGN_OR_RETURN(data_, LoadData(c_, with_test));
    if (c_.batch_size > data_.train.x.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_size ", c_.batch_size, " is larger than the training set (",
          data_.train.x.size(0), ")"));
    }
    DIAL_ASSIGN_OR_RETURN(replicas_, BuildReplicas(c_, data_.train.x.size(1),
                                                   data_.classes, n, gpus));
    scaler_ = std::make_unique<LossScaler>(precision_ == Precision::kFp16,
                                           LossScaler::Options{});
    DIAL_ASSIGN_OR_RETURN(schedule_, DecodeKnobSchedule(c_.schedule));
    if (ctx_.restore_checkpoint.empty()) return 0;
    DIAL_ASSIGN_OR_RETURN(last_checkpoint_step_,
                          RestoreCheckpoint(restored, /*streams=*/!evaluate,
                                            replicas_, *scaler_));
    return last_checkpoint_step_;
  }

  absl::StatusOr<RunResult> Train() {
    DIAL_ASSIGN_OR_RETURN(int64_t step,
                          Setup(/*evaluate=*/false, /*with_test=*/false));
    if (step > 0) {
      std::fprintf(stderr,
                   "dial-train: resuming from checkpoint %s at step %lld\n",
                   restored_id_.c_str(), static_cast<long long>(step));
      // A resumed run takes the scheduled knobs in force at its step.
      if (auto it = schedule_.upper_bound(step); it != schedule_.begin()) {
        DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(std::prev(it)->second));
      }
    } else {
      std::fprintf(stderr,
                   "dial-train: starting at step 0 (%zu replica%s, %s)\n",
                   replicas_.size(), replicas_.size() == 1 ? "" : "s",
                   replicas_[0].device.str().c_str());
    }
    return Loop(step);
  }

  absl::StatusOr<std::map<std::string, double>> EvaluateOnly(
      const std::string& split, const std::string& predictions_path) {
    if (ctx_.restore_checkpoint.empty()) {
      return absl::InvalidArgumentError("evaluation needs a checkpoint id");
    }
    DIAL_RETURN_IF_ERROR(
        Setup(/*evaluate=*/true, /*with_test=*/split == "test").status());
    const Split& s = split == "test" ? data_.test : data_.val;
    EvalResult r = EvaluateLead(s, !predictions_path.empty());
    if (!predictions_path.empty()) {
      std::ofstream out(predictions_path, std::ios::trunc);
      out << r.predictions_csv;
      if (!out.flush()) {
        return absl::InvalidArgumentError("cannot write " + predictions_path);
      }
    }
    return std::map<std::string, double>{
        {split + "_loss", r.loss},
        {split + "_accuracy", r.accuracy},
        {split + "_examples", static_cast<double>(r.examples)}};
  }

  // The loaded checkpoint's class probabilities on `split`, and its labels.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> PredictOnly(
      const std::string& split) {
    if (ctx_.restore_checkpoint.empty()) {
      return absl::InvalidArgumentError("evaluation needs a checkpoint id");
    }
    DIAL_RETURN_IF_ERROR(
        Setup(/*evaluate=*/true, /*with_test=*/split == "test").status());
    const Split& s = split == "test" ? data_.test : data_.val;
    at::set_num_threads(ctx_.threads);
    torch::Tensor p = Probabilities(replicas_[0].net, s,
                                    std::max(c_.eval_batch_size, c_.batch_size),
                                    replicas_[0].device, precision_);
    return std::make_pair(p, s.y.cpu());
  }

 private:
  // Evaluates replica 0's model with every thread of the run (training
  // gives this thread only its replica's share).
  EvalResult EvaluateLead(const Split& s, bool predictions) {
    at::set_num_threads(ctx_.threads);
    struct Back {
      int threads;
      ~Back() { at::set_num_threads(threads); }
    } back{threads_per_replica_};
    return Evaluate(replicas_[0].net, s,
                    std::max(c_.eval_batch_size, c_.batch_size),
                    replicas_[0].device, precision_, predictions);
  }

  // Takes a better trial's weights and optimiser state, then the new
  // optimiser hyperparameters, and goes on from the current step.
  absl::Status Exploit(const Decision& decision) {
    if (!store_) {
      return absl::FailedPreconditionError("EXPLOIT needs a checkpoint root");
    }
    DIAL_ASSIGN_OR_RETURN(auto files, store_->Read(decision.checkpoint));
    DIAL_RETURN_IF_ERROR(LoadModel(files, decision.checkpoint, replicas_));
    DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(decision.params));
    std::fprintf(stderr, "dial-train: exploited checkpoint %s (lr %g)\n",
                 decision.checkpoint.c_str(), c_.lr);
    return absl::OkStatus();
  }

  // Changes lr, momentum and weight_decay of the live optimisers.
  absl::Status ApplyOptimizerKnobs(const google::protobuf::Struct& params) {
    for (const auto& [name, value] : params.fields()) {
      DIAL_RETURN_IF_ERROR(CheckKnob("params." + name, name, value));
      if (name == "lr") c_.lr = value.number_value();
      if (name == "momentum") c_.momentum = value.number_value();
      if (name == "weight_decay") c_.weight_decay = value.number_value();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Checkpoint(int64_t step,
                                         const std::string& predictions) {
    if (!store_) return std::string();
    if (step == last_checkpoint_step_) {
      return storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, step);
    }
    DIAL_ASSIGN_OR_RETURN(std::string id,
                          WriteCheckpoint(*store_, ctx_.study, ctx_.trial, step,
                                          replicas_, *scaler_, predictions));
    last_checkpoint_step_ = step;
    return id;
  }

  // One optimisation step over the global batch: each replica takes its
  // share, gradients are summed across replicas (each replica's loss is
  // weighted by its share, so the sum is the gradient of the global mean),
  // then every replica unscales, clips and steps identically.
  absl::Status Step(int64_t step, const Batch& batch) {
    const int64_t n = static_cast<int64_t>(replicas_.size());
    const int64_t per = c_.batch_size / n, extra = c_.batch_size % n;
    const double lr = LearningRate(c_, step);
    DIAL_RETURN_IF_ERROR(pool_->Run([&](int r) {
      Replica& rep = replicas_[r];
      const int64_t from = r * per + std::min<int64_t>(r, extra);
      const int64_t size = per + (r < extra ? 1 : 0);
      auto x = batch.x.slice(0, from, from + size).to(rep.device, true);
      auto y = batch.y.slice(0, from, from + size).to(rep.device, true);
      rep.optimizer->zero_grad();
      torch::Tensor out;
      {
        AutocastScope autocast(rep.device, precision_);
        out = rep.net->forward(x);
      }
      auto loss = torch::nn::functional::cross_entropy(
          out.to(torch::kFloat32), y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
              c_.label_smoothing));
      if (n > 1) loss = loss * (double(size) / double(c_.batch_size));
      scaler_->Scale(loss).backward();
      rep.loss_sum += loss.detach().to(torch::kFloat64);
    }));
    if (n > 1) {
      std::vector<std::vector<torch::Tensor>> grads;
      for (auto& rep : replicas_) grads.push_back(Grads(*rep.net));
      DIAL_RETURN_IF_ERROR(SumAcross(all_reduce_.get(), grads));
    }
    DIAL_RETURN_IF_ERROR(pool_->Run([&](int r) {
      Replica& rep = replicas_[r];
      auto grads = Grads(*rep.net);
      rep.finite = scaler_->Unscale(grads);
      if (!rep.finite) return;  // fp16 overflow: skip this step
      if (c_.grad_clip > 0) ClipGradNorm(grads, c_.grad_clip);
      // The schedule is a function of the step, so resumes continue exactly.
      SetOptimizerKnobs(*rep.optimizer, c_.optimizer, lr, c_.momentum,
                        c_.weight_decay);
      rep.optimizer->step();
    }));
    scaler_->Update(replicas_[0].finite);
    return absl::OkStatus();
  }

  double TakeTrainLoss(int64_t steps) {
    double sum = 0;
    for (auto& rep : replicas_) {
      sum += rep.loss_sum.item<double>();
      rep.loss_sum.zero_();
    }
    return steps > 0 ? sum / double(steps) : NAN;
  }

  absl::StatusOr<RunResult> Loop(int64_t step) {
    RunResult result;
    result.last_step = step;
    pool_ = std::make_unique<ReplicaPool>(static_cast<int>(replicas_.size()),
                                          threads_per_replica_);
    Prefetcher input(data_.train, c_.seed, c_.batch_size, step + 1, c_.steps,
                     static_cast<int>(c_.prefetch),
                     !replicas_[0].device.is_cpu());
    const int64_t per_epoch =
        std::max<int64_t>(1, data_.train.x.size(0) / c_.batch_size);
    int64_t loss_steps = 0;
    double train_seconds = 0;
    auto started = std::chrono::steady_clock::now();
    for (auto& rep : replicas_) rep.net->train();
    while (step < c_.steps) {
      if (auto it = schedule_.find(step); it != schedule_.end()) {
        DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(it->second));
      }
      if (ctx_.interrupt && ctx_.interrupt->load()) {
        // Asked to stop (e.g. the worker shuts down): save and report.
        DIAL_RETURN_IF_ERROR(AverageBuffers(replicas_, all_reduce_.get()));
        DIAL_ASSIGN_OR_RETURN(std::string id, Checkpoint(step, ""));
        Report report;
        report.step = step;
        report.checkpoint = id;
        report.metrics["train_loss"] = TakeTrainLoss(loss_steps);
        if (step > 0) (void)sink_->OnReport(report);
        result.interrupted = true;
        return result;
      }
      ++step;
      DIAL_ASSIGN_OR_RETURN(Batch batch, input.Next());
      DIAL_RETURN_IF_ERROR(Step(step, batch));
      ++loss_steps;

      if (step % c_.eval_every != 0 && step != c_.steps) continue;
      train_seconds += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      Report report;
      report.step = step;
      report.metrics["train_loss"] = TakeTrainLoss(loss_steps);
      DIAL_RETURN_IF_ERROR(AverageBuffers(replicas_, all_reduce_.get()));
      const bool checkpoint = c_.checkpoint_every == 0 ||
                              step % c_.checkpoint_every == 0 ||
                              step == c_.steps;
      EvalResult val =
          EvaluateLead(data_.val, checkpoint && store_ && c_.save_predictions);
      report.metrics["val_loss"] = val.loss;
      report.metrics["val_accuracy"] = val.accuracy;
      report.metrics["epoch"] = static_cast<double>(step) / double(per_epoch);
      report.metrics["lr"] = LearningRate(c_, step);
      report.metrics["samples_per_s"] =
          train_seconds > 0 ? double(loss_steps * c_.batch_size) / train_seconds
                            : 0;
      report.metrics["input_wait"] =
          train_seconds > 0 ? input.TakeWaitSeconds() / train_seconds : 0;
      // The model's size: a second objective or a constraint to tune by.
      int64_t weights = 0;
      for (const auto& p : replicas_[0].net->parameters()) weights += p.numel();
      report.metrics["model_params"] = static_cast<double>(weights);
      if (scaler_->enabled()) {
        report.metrics["loss_scale"] = scaler_->scale();
        report.metrics["skipped_steps"] = double(scaler_->skipped_steps());
      }
      if (checkpoint) {
        DIAL_ASSIGN_OR_RETURN(report.checkpoint,
                              Checkpoint(step, val.predictions_csv));
      }
      result.last_step = step;
      result.final_metrics = report.metrics;
      DIAL_ASSIGN_OR_RETURN(Decision decision, sink_->OnReport(report));
      if (decision.action == Action::kExploit) {
        DIAL_RETURN_IF_ERROR(Exploit(decision));
        ++result.exploits;
      } else if (decision.action != Action::kContinue) {
        result.stopped = true;
        return result;
      }
      loss_steps = 0;
      train_seconds = 0;
      started = std::chrono::steady_clock::now();
    }
    if (result.final_metrics.empty()) {
      // Resumed at the last step (e.g. requeued right after finishing): the
      // final evaluation is all that is left.
      Report report;
      report.step = step;
      EvalResult val = EvaluateLead(data_.val, false);
      report.metrics["val_loss"] = val.loss;
      report.metrics["val_accuracy"] = val.accuracy;
      DIAL_ASSIGN_OR_RETURN(report.checkpoint, Checkpoint(step, ""));
      result.final_metrics = report.metrics;
      DIAL_RETURN_IF_ERROR(sink_->OnReport(report).status());
    }
    return result;
  }

  TrainerConfig c_;  // a copy: EXPLOIT changes optimiser knobs in place
  const RunContext& ctx_;
  ReportSink* sink_;
  const Precision precision_;
  int threads_per_replica_ = 1;
  Data data_;
  std::vector<Replica> replicas_;
  std::unique_ptr<ReplicaPool> pool_;
  std::unique_ptr<AllReduce> all_reduce_;  // NCCL, multi-GPU builds only
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<storage::FileCheckpointStore> store_;
  int64_t last_checkpoint_step_ = -1;
  std::string restored_id_;  // the checkpoint actually resumed from
  KnobSchedule schedule_;
};

}  // namespace

absl::StatusOr<RunResult> Train(const TrainerConfig& config,
                                const RunContext& context, ReportSink& sink) {
  try {
    Run run(config, context, &sink);
    return run.Train();
  } catch (const std::exception& e) {  // c10::Error and std::runtime_error
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, double>> EvaluateEnsemble(
    const std::vector<TrainerConfig>& configs,
    const std::vector<RunContext>& contexts, const std::string& split) {
  if (split != "test" && split != "val") {
    return absl::InvalidArgumentError("split must be test or val, got '" +
                                      split + "'");
  }
  if (configs.empty() || configs.size() != contexts.size()) {
    return absl::InvalidArgumentError("an ensemble needs members");
  }
  try {
    std::map<std::string, double> out;
    torch::Tensor sum, labels;
    for (size_t i = 0; i < configs.size(); ++i) {
      Run run(configs[i], contexts[i], nullptr);
      DIAL_ASSIGN_OR_RETURN(auto predicted, run.PredictOnly(split));
      auto& [p, y] = predicted;
      if (labels.defined() && (!y.equal(labels) || p.sizes() != sum.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "member ", i, " (", contexts[i].restore_checkpoint,
            ") sees other labels or classes on the ", split,
            " split than member 0; ensemble on test, with one dataset"));
      }
      out[absl::StrCat("member_", i, "_accuracy")] =
          p.argmax(1).eq(y).to(torch::kFloat64).mean().item<double>();
      sum = sum.defined() ? sum + p : p;
      labels = y;
    }
    const torch::Tensor mean = sum / double(configs.size());
    out[split + "_accuracy"] =
        mean.argmax(1).eq(labels).to(torch::kFloat64).mean().item<double>();
    out[split + "_loss"] =
        torch::nn::functional::nll_loss(mean.clamp_min(1e-12).log(), labels)
            .item<double>();
    out[split + "_examples"] = static_cast<double>(labels.size(0));
    out["members"] = static_cast<double>(configs.size());
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, double>> EvaluateCheckpoint(
    const TrainerConfig& config, const RunContext& context,
    const std::string& split, const std::string& predictions_path) {
  if (split != "test" && split != "val") {
    return absl::InvalidArgumentError("split must be test or val, got '" +
                                      split + "'");
  }
  try {
    Run run(config, context, nullptr);
    return run.EvaluateOnly(split, predictions_path);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

}  // namespace dial::trainer
