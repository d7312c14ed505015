#include "stoker/training/schedules.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace stoker::training {

bool EarlyStopping::on_epoch_end(int epoch, double value) {
  if (!enabled() || stopped) return stopped;
  ++wait;
  if (value < best) {  // Keras' monitor_op(current - min_delta, best) with min_delta 0
    best = value;
    wait = 0;
    return false;
  }
  stopped = wait >= patience && epoch > 0;
  return stopped;
}

float ReduceLrOnPlateau::on_epoch_end(double value, float learning_rate) {
  if (!enabled()) return learning_rate;
  // In Keras' order: the cooldown counts down first, and "in cooldown" is asked again after it.
  if (cooldown_counter > 0) {
    --cooldown_counter;
    wait = 0;
  }
  if (value < best - min_delta) {
    best = value;
    wait = 0;
  } else if (cooldown_counter == 0 && ++wait >= patience && learning_rate > static_cast<float>(min_lr)) {
    wait = 0;
    cooldown_counter = cooldown;
    // Keras reads the float32 rate as a Python float, scales it and stores it as float32 again.
    return static_cast<float>(std::max(static_cast<double>(learning_rate) * factor, min_lr));
  }
  return learning_rate;
}

float cosine_decay(float initial, std::int64_t step, std::int64_t decay_steps, double alpha) {
  if (decay_steps <= 0) return initial;
  const double done = static_cast<double>(std::min(step, decay_steps)) / static_cast<double>(decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * done));
  return static_cast<float>(initial * ((1.0 - alpha) * cosine + alpha));
}

}  // namespace stoker::training
