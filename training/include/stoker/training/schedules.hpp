// Keras' fit() callbacks that steer a run from its validation metric, and its cosine schedule:
// EarlyStopping, ReduceLROnPlateau (tf-keras 2.x semantics) and CosineDecay. Their state is plain
// data so that a checkpoint can keep it and a resumed run continues them where they stood.
//
// Monitored values follow BestEpoch's convention: lower is better (val_accuracy enters negated),
// which makes Keras' 'min' and 'max' modes one comparison.
#pragma once

#include <cstdint>
#include <limits>

namespace stoker::training {

// EarlyStopping(monitor, patience, min_delta=0): stops once `patience` epochs in a row failed to
// improve on the best value seen (Keras never stops after the first epoch).
struct EarlyStopping {
  int patience = 0;  // 0: off
  // State.
  double best = std::numeric_limits<double>::infinity();
  int wait = 0;
  bool stopped = false;

  bool enabled() const { return patience > 0; }
  // After epoch `epoch` (from 0) with its monitored value; returns whether training stops now.
  bool on_epoch_end(int epoch, double value);
};

// ReduceLROnPlateau(monitor, factor, patience, min_delta=1e-4, cooldown=0, min_lr=0): after
// `patience` epochs without an improvement of more than min_delta, the rate is multiplied by
// `factor`, and counting starts again.
struct ReduceLrOnPlateau {
  double factor = 0;  // 0: off; else in (0, 1)
  int patience = 0;
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0;
  // State.
  double best = std::numeric_limits<double>::infinity();
  int wait = 0;
  int cooldown_counter = 0;

  bool enabled() const { return factor > 0; }
  // After an epoch with its monitored value, given the rate it trained with: the rate for the next
  // (float32, as Keras stores it).
  float on_epoch_end(double value, float learning_rate);
};

// CosineDecay(initial, decay_steps, alpha=0) at an optimizer step (the steps taken before it):
// initial * ((1 - alpha) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2 + alpha).
float cosine_decay(float initial, std::int64_t step, std::int64_t decay_steps, double alpha = 0);

}  // namespace stoker::training
