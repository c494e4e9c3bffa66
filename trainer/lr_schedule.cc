#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace dial::trainer {

double LearningRate(const TrainerConfig& c, int64_t step) {
  const int64_t warmup = c.warmup_steps;
  if (warmup > 0 && step <= warmup) {
    return c.lr * static_cast<double>(step) / static_cast<double>(warmup);
  }
  const int64_t after = step - warmup;  // >= 1
  if (c.lr_schedule == "step") {
    const int64_t size = std::max<int64_t>(1, c.lr_step_size);
    return c.lr * std::pow(c.lr_gamma, static_cast<double>((after - 1) / size));
  }
  if (c.lr_schedule == "cosine") {
    const double span =
        static_cast<double>(std::max<int64_t>(1, c.steps - warmup));
    const double t = std::min(1.0, static_cast<double>(after) / span);
    return c.lr * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  return c.lr;
}

}  // namespace dial::trainer
