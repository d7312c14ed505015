#include "phase.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "sources.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/schedules.hpp"

namespace stoker::training {
namespace {

// Keras' TerminateOnNaN, always on: the run stops at the first loss that is not finite, before a
// checkpoint or the best epoch can take anything of it.
void check_finite(double loss, const char* which, int epoch, const std::string& where, double learning_rate) {
  if (std::isfinite(loss)) return;
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", learning_rate);
  throw NonFiniteLoss("epoch " + std::to_string(epoch + 1) + ": the " + which + " loss is " +
                      (std::isnan(loss) ? "nan" : "infinite") + where + " (learning rate " + rate +
                      "): training stopped; nothing of this epoch was saved (the best epoch and the checkpoint "
                      "are the last finite ones): lower the learning rate and train again");
}

// One epoch that augments: decode, augment and run the backbone (in the second phase its frozen
// part) again, the phase's step training on each batch. Every `checkpoint_every` batches (0: never) but the
// last, `checkpoint` saves the run with the epoch's sums so far. A resumed epoch starts at
// `resume`'s next batch with the sums the checkpoint kept. When `should_stop` asks after a batch
// but the last, the run is saved there and StopRequested thrown.
EpochReport augmented_epoch(Phase& phase, int epoch, FeatureSource& source, int checkpoint_every,
                            const std::function<bool()>& should_stop, TrainObserver& observer,
                            const LoaderState* resume, EpochProgress sums,
                            const std::function<void(const EpochProgress&)>& checkpoint) {
  EpochReport e;
  e.epoch = epoch;
  const std::size_t total = source.batches_per_epoch();
  const std::size_t images_before = sums.images;  // trained on by the process that was stopped
  const auto t0 = Clock::now();
  // The unreadable samples of the whole epoch: those the stopped process met, then this one's.
  auto skipped_so_far = [&] {
    std::vector<SkippedSample> all = sums.skipped;
    for (SkippedSample& s : source.skipped()) all.push_back(std::move(s));
    return all;
  };
  e.times = source.run_epoch(
      static_cast<std::uint64_t>(epoch),
      [&](const float* x, const int* y, const std::int64_t*, int n, int) {
        const trainer::StepResult r = phase.step(x, y, n);
        check_finite(r.loss, "training", epoch, " at batch " + std::to_string(sums.batches + 1), phase.learning_rate());
        add_step(sums, r, n, observer);
        if (sums.batches >= total) return;  // the epoch's end saves the run
        const bool due = checkpoint_every > 0 && sums.batches % static_cast<std::size_t>(checkpoint_every) == 0;
        const bool stop = should_stop && should_stop();
        if (due || stop) {
          EpochProgress progress = sums;
          progress.skipped = skipped_so_far();
          checkpoint(progress);
        }
        if (stop) throw StopRequested{{epoch, sums.batches}};
      },
      resume);
  e.seconds = since(t0);
  e.skipped = skipped_so_far();
  e.train = epoch_stats(sums);
  e.images_per_second = static_cast<double>(sums.images - images_before) / std::max(1e-9, e.seconds);
  return e;
}

// One epoch on the values held in memory (computed in the phase's first epoch).
EpochReport values_epoch(Phase& phase, const PhaseLoop& loop, int epoch) {
  const auto t0 = Clock::now();
  EpochReport e;
  e.epoch = epoch;
  e.features_cached = phase.values.has_value();
  if (!phase.values) {
    // A stop asked during the pass: the run resumes from this epoch's start (its checkpoint).
    const std::function<bool()>& should_stop = loop.options.should_stop;
    phase.values = extract(loop.source, phase.values_name(), loop.observer, [&] {
      if (should_stop && should_stop()) throw StopRequested{{epoch, 0}};
    });
    if (loop.gather) phase.values = loop.gather(std::move(*phase.values), 0);  // extract() reads epoch 0
    if (phase.values->n == 0)
      throw DatasetError("none of the " + std::to_string(loop.train_images) + " training images could be read");
    e.times = phase.values->times;
    phase.values_computed(*phase.values);
  }
  e.train = phase.train_on_values(*phase.values, epoch);
  e.skipped = phase.values->skipped;
  e.seconds = since(t0);
  e.images_per_second = phase.values->n / std::max(1e-9, e.seconds);
  return e;
}

// An augmenting epoch across ranks: each rank decodes, augments and runs the backbone on its share
// of the loader's epoch; the features are gathered in the order one process's loader gives that
// epoch and trained on in that order, in the global batches one process would step through (the
// augmentation of a sample is drawn from the seed, the epoch and the sample alone).
EpochReport gathered_augmented_epoch(Phase& phase, const PhaseLoop& loop, int epoch) {
  const auto t0 = Clock::now();
  EpochReport e;
  e.epoch = epoch;
  loop.observer.on_features_begin("this rank's augmented features", loop.source.batches_per_epoch());
  Features local = collect_features(loop.source, static_cast<std::uint64_t>(epoch),
                                    [&](std::size_t batches, std::size_t, std::size_t images) {
                                      loop.observer.on_features_progress(batches, images);
                                    });
  loop.observer.on_features_end(local.skipped);
  const Features all = loop.gather(std::move(local), static_cast<std::uint64_t>(epoch));
  if (all.n == 0)
    throw DatasetError("none of the " + std::to_string(loop.train_images) + " training images could be read");
  e.times = all.times;
  e.train = phase.train_in_order(all);
  e.skipped = all.skipped;
  e.seconds = since(t0);
  e.images_per_second = all.n / std::max(1e-9, e.seconds);
  return e;
}

// After an epoch's training: validation, the best epoch, and Keras' callbacks on the monitored
// value (lower is better, as BestEpoch).
void end_epoch(Phase& phase, EpochReport& e, trainer::Monitor monitor) {
  phase.complete(e);
  check_finite(e.train.loss, "training", e.epoch, "", phase.learning_rate());
  e.validation = phase.validate();
  check_finite(e.validation.loss, "validation", e.epoch, "", phase.learning_rate());
  e.improved = phase.best().offer(e.epoch, e.validation, phase.head());
  if (e.improved) phase.improved();
  e.learning_rate = phase.learning_rate();
  const double monitored = monitor == trainer::Monitor::ValLoss ? e.validation.loss : -e.validation.accuracy;
  phase.after_epoch(monitored);
  e.stopped_early = phase.early_stopping().on_epoch_end(e.epoch, monitored);
}

}  // namespace

void RunState::before_step(trainer::Head& h) const {
  if (decay_steps > 0) h.set_learning_rate(cosine_decay(options.adam.learning_rate, h.steps(), decay_steps));
}

void RunState::save(int epoch, const LoaderState& loader, const EpochProgress& progress,
                    const FineTuneProgress* fine_tune, const trainer::BestEpoch* phase_best) const {
  if (!writes) return;
  const trainer::BestEpoch& b = phase_best ? *phase_best : best;
  Checkpoint c;
  c.settings = settings;
  c.epoch = epoch;
  c.loader = loader;
  c.progress = progress;
  c.history = history;
  c.best_epoch = b.epoch();
  c.best_value = b.value();
  c.head = head;
  if (b.head()) c.best_head = *b.head();
  if (fine_tune) c.fine_tune = *fine_tune;
  c.has_features = features_saved;
  c.early_stopping = early_stopping;
  c.reduce_lr_on_plateau = reduce_lr_on_plateau;
  save_checkpoint(options.out / kCheckpointFile, c);
}

LoaderState checkpoint_position(FeatureSource& source, int epoch, const EpochProgress* progress) {
  LoaderState loader = source.state();
  if (!progress) {
    loader.epoch = static_cast<std::uint64_t>(epoch);
    loader.next_batch = 0;
  }
  return loader;
}

void run_phase(Phase& phase, const PhaseLoop& loop, int epochs, int done, const Checkpoint* resumed) {
  const TrainOptions& o = loop.options;
  for (int k = done; k < epochs && !phase.early_stopping().stopped; ++k) {
    const int epoch = static_cast<int>(loop.history.size());
    const bool counted = o.augmentation || phase.reports_value_batches();
    loop.observer.on_epoch_begin(epoch, counted ? loop.source.batches_per_epoch() : 0);
    const double exchanged = o.collective ? o.collective->seconds_exchanging() : 0;
    EpochReport e;
    if (o.augmentation && loop.gather) {
      e = gathered_augmented_epoch(phase, loop, epoch);
    } else if (o.augmentation) {
      const bool mid_epoch = resumed && k == done && resumed->loader.next_batch > 0;
      e = augmented_epoch(phase, epoch, loop.source, o.checkpoint_every_batches, o.should_stop, loop.observer,
                          mid_epoch ? &resumed->loader : nullptr, mid_epoch ? resumed->progress : EpochProgress{},
                          [&](const EpochProgress& progress) { phase.checkpoint(k, epoch, &progress); });
    } else {
      e = values_epoch(phase, loop, epoch);
    }
    if (o.collective) e.seconds_exchanging = o.collective->seconds_exchanging() - exchanged;
    end_epoch(phase, e, o.monitor);
    loop.history.push_back(e);
    phase.checkpoint(k + 1, epoch + 1, nullptr);
    loop.observer.on_epoch_end(e);
    if (k + 1 < epochs && !phase.early_stopping().stopped && o.should_stop && o.should_stop())
      throw StopRequested{{epoch + 1, 0}};
  }
}

void add_step(EpochProgress& sums, const trainer::StepResult& r, int images, TrainObserver& observer) {
  sums.loss_sum += r.loss * r.samples;
  sums.correct += r.correct;
  sums.images += static_cast<std::size_t>(images);
  ++sums.batches;
  observer.on_train_batch(sums.batches, sums.images, sums.loss_sum / static_cast<double>(sums.images),
                          sums.correct / static_cast<double>(sums.images));
}

trainer::EpochStats epoch_stats(const EpochProgress& sums) {
  const double seen = std::max<double>(1, static_cast<double>(sums.images));
  return {sums.loss_sum / seen, sums.correct / seen, static_cast<int>(sums.images)};
}

}  // namespace stoker::training
