#include "head_phase.hpp"

#include "stoker/core/error.hpp"

namespace stoker::training {

void HeadPhase::values_computed(const Features& values) {
  if (!run_.writes) return;
  save_features(run_.options.out / kCheckpointFeaturesFile, values);
  run_.features_saved = true;
}

trainer::StepResult HeadPhase::step(const float* x, const int* y, int n) {
  run_.before_step(run_.head);
  return run_.head.train_step(x, y, n, run_.options.loss);
}

trainer::EpochStats HeadPhase::train_on_values(const Features& values, int epoch) {
  const TrainOptions& o = run_.options;
  if (run_.exchange)
    return run_.exchange->train_epoch(run_.head, values, o.loader.batch_size, static_cast<std::uint64_t>(epoch),
                                      o.loader.seed, o.loss,
                                      [this](trainer::Head& h, std::int64_t steps) { run_.before_step(h, steps); });
  return run_.head.train_epoch(values.x.data(), values.y.data(), values.n, o.loader.batch_size,
                               static_cast<std::uint64_t>(epoch), o.loader.seed, o.loss,
                               [this](trainer::Head& h) { run_.before_step(h); });
}

trainer::EpochStats HeadPhase::train_in_order(const Features& values) {
  if (!run_.exchange) throw Error("HeadPhase::train_in_order: only across ranks");
  return run_.exchange->train_in_order(run_.head, values, run_.options.loader.batch_size, run_.options.loss,
                                       [this](trainer::Head& h, std::int64_t steps) { run_.before_step(h, steps); });
}

void HeadPhase::complete(EpochReport& e) {
  if (e.features_cached) e.times.compute_seconds = e.seconds;  // the head alone
}

trainer::EpochStats HeadPhase::validate() {
  return run_.head.evaluate(validation.x.data(), validation.y.data(), validation.n,
                            {run_.options.loss.label_smoothing, {}});
}

void HeadPhase::after_epoch(double monitored) {
  trainer::Head& head = run_.head;
  head.set_learning_rate(run_.reduce_lr_on_plateau.on_epoch_end(monitored, head.adam().learning_rate));
}

void HeadPhase::checkpoint(int, int epoch, const EpochProgress* progress) {
  run_.save(epoch, checkpoint_position(source_, epoch, progress), progress ? *progress : EpochProgress{});
}

}  // namespace stoker::training
