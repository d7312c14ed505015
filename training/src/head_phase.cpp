#include "head_phase.hpp"

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
  const auto e = static_cast<std::uint64_t>(epoch);
  if (run_.collective) return train_rows(values, trainer::epoch_rows(values.n, o.loader.seed, e));
  return run_.head.train_epoch(values.x.data(), values.y.data(), values.n, o.loader.batch_size, e, o.loader.seed,
                               o.loss, [this](trainer::Head& h) { run_.before_step(h); });
}

trainer::EpochStats HeadPhase::train_in_order(const Features& values) {
  return train_rows(values, rows_in_order(values.n));
}

// Every global batch: this rank's slice's gradients summed over the ranks, then the same step of
// the head's own Adam on every rank (so a checkpoint of the head is the run's, whatever the ranks).
trainer::EpochStats HeadPhase::train_rows(const Features& values, const std::vector<int>& order) {
  trainer::Head& head = run_.head;
  trainer::HeadGradients g;
  g.kernel.assign(head.kernel().size(), 0.0f);
  g.bias.assign(head.bias().size(), 0.0f);
  double loss_sum = 0, correct = 0;
  for_each_global_batch(
      values, order, run_.options.loader.batch_size, run_.collective, [&](const float* x, const int* y, int m, int nb) {
        run_.before_step(head);
        const trainer::StepResult local = m > 0 ? head.backward(x, y, m, run_.options.loss, g) : trainer::StepResult{};
        trainer::StepResult r = local;
        if (run_.collective) {
          r = sum_step_over_ranks(*run_.collective, m, nb, local, [&g](const auto& f) {
            f(g.kernel);
            f(g.bias);
          });
        }
        head.apply_gradients(g);
        loss_sum += r.loss * nb;
        correct += r.correct;
      });
  return {loss_sum / values.n, correct / values.n, values.n};
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
