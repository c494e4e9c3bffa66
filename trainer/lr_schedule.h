// Learning-rate schedules of the built-in trainer, as a pure function of the
// step so that a resumed run continues exactly. Torch-free; thread-safe.
#pragma once

#include <cstdint>

#include "common/trainer_knobs.h"

namespace dial::trainer {

// The learning rate for training step `step` (1-based: the first update is
// step 1): lr times a linear warm-up over `warmup_steps`, then
//   constant: 1;
//   step:     lr_gamma ^ floor((step - warmup - 1) / lr_step_size);
//   cosine:   (1 + cos(pi * (step - warmup) / (steps - warmup))) / 2.
double LearningRate(const TrainerConfig& config, int64_t step);

}  // namespace dial::trainer
