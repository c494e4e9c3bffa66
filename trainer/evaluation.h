// Evaluation of a model on a split (evaluation.cc): mean loss, accuracy and,
// when asked, per-example predictions. Includes LibTorch (through
// trainer/internal.h): for trainer/ and tests/trainer only. Not
// thread-safe: one call per model at a time.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/internal.h"

namespace dial::trainer {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t examples = 0;
  std::string predictions_csv;  // when asked for
};

// Mean loss and accuracy of `net` over every example of `s`, in batches of
// `batch` on `device` at `precision`. Sums stay on the device and are read
// once; a short last batch counts for what it holds. With `predictions`,
// also one CSV row per example (index, label, prediction, confidence).
// Leaves `net` in training mode. LibTorch errors throw (the trainer's entry
// points catch them).
EvalResult Evaluate(torch::nn::Sequential& net, const Split& s, int64_t batch,
                    torch::Device device, Precision precision,
                    bool predictions);

// Softmax class probabilities of `net` for every example of `s` (float,
// [N, classes], on the CPU), for averaging an ensemble.
torch::Tensor Probabilities(torch::nn::Sequential& net, const Split& s,
                            int64_t batch, torch::Device device,
                            Precision precision);

}  // namespace dial::trainer
