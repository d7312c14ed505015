// The epoch loop of train(), one for both phases (the head on the frozen backbone's features, then
// fine-tuning): run_phase() trains, validates, keeps the best epoch, stops early and checkpoints;
// a Phase says what trains, on what values, and how it is saved.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data_parallel.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/train.hpp"

namespace stoker::training {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Where train() stands, for checkpoints: the head, the best epoch, the history, and (for runs
// without augmentation) whether the training features are saved.
struct RunState {
  const TrainOptions& options;
  std::string settings;
  trainer::Head& head;
  trainer::BestEpoch& best;
  std::vector<EpochReport>& history;
  EarlyStopping early_stopping;
  ReduceLrOnPlateau reduce_lr_on_plateau;
  std::int64_t decay_steps = 0;  // of the cosine schedule; 0 without it
  bool features_saved = false;
  // Only rank 0 of a data-parallel run writes the model folder: save() does nothing elsewhere.
  bool writes = true;
  // With more than one rank: the ranks, whose gradients the phases sum every step.
  Collective* collective = nullptr;

  // Before each optimizer step of the head: the cosine schedule's rate for it.
  void before_step(trainer::Head& h) const;

  // In the fine-tuning phase `fine_tune` is where it stands and `phase_best` its best epoch (that
  // phase's BestEpoch, whose head refers to the fine-tuned backbone).
  void save(int epoch, const LoaderState& loader, const EpochProgress& progress = {},
            const FineTuneProgress* fine_tune = nullptr, const trainer::BestEpoch* phase_best = nullptr) const;
};

// The training source's position for a checkpoint: where it stands inside an epoch (`progress`
// set), or at the start of `epoch`.
LoaderState checkpoint_position(FeatureSource& source, int epoch, const EpochProgress* progress);

// Thrown by run_phase() once TrainOptions::should_stop said so and the checkpoint where the run
// stands is saved; train() returns with it as TrainResult::stopped.
struct StopRequested {
  StopPoint at;
};

// One phase of a run, as run_phase() drives it.
class Phase {
 public:
  virtual ~Phase() = default;

  // Without augmentation: the values the phase trains on, computed in its first epoch (or restored).
  std::optional<Features> values;
  // The validation set's values where the phase's trainable part starts, computed once.
  Features validation;

  // The values' name for the observer, and whether an epoch on them reports its batches.
  virtual std::string values_name() const = 0;
  virtual bool reports_value_batches() const = 0;
  // Once the values are computed (the first phase saves them for a resume).
  virtual void values_computed(const Features&) {}
  // One optimizer step on a batch of an augmenting epoch; an epoch over `values`.
  virtual trainer::StepResult step(const float* x, const int* y, int n) = 0;
  virtual trainer::EpochStats train_on_values(const Features& values, int epoch) = 0;
  // With more than one rank, an augmenting epoch: the epoch's features of every rank, in the order
  // one process's loader gave them, trained on in that order.
  virtual trainer::EpochStats train_in_order(const Features& values) = 0;
  // The phase's part of the epoch's report (timings, the phase), before validation.
  virtual void complete(EpochReport& e) = 0;
  virtual trainer::EpochStats validate() = 0;  // on `validation`
  virtual trainer::BestEpoch& best() = 0;
  virtual const trainer::Head& head() const = 0;
  virtual void improved() {}  // the epoch is the best so far (its head is saved)
  virtual double learning_rate() const = 0;
  virtual void after_epoch(double /*monitored*/) {}  // the plateau reduction, where the phase has it
  virtual EarlyStopping& early_stopping() = 0;
  // Saves the run after `done` of the phase's epochs: inside epoch `epoch` after `progress`'s
  // batches, or (progress null) at an epoch's end, the run then resuming with `epoch`.
  virtual void checkpoint(int done, int epoch, const EpochProgress* progress) = 0;
};

// What the phases share: the options, the training source, the observer and the history (which
// spans both phases and numbers their epochs).
struct PhaseLoop {
  const TrainOptions& options;
  std::size_t train_images;  // listed, for the error when none could be read
  FeatureSource& source;
  TrainObserver& observer;
  std::vector<EpochReport>& history;
  // With more than one rank: the values this rank computed in the loader's epoch `epoch` become
  // every rank's, in the order one process's loader gives that epoch (gather_features).
  std::function<Features(Features, std::uint64_t epoch)> gather = {};
};

// The phase's epochs from `done` (those a resumed run had finished) to `epochs`, or until early
// stopping. `resumed`: the checkpoint when the run resumed inside this phase, whose epoch in
// progress continues at its next batch with its running sums; else null. Each epoch ends with a
// checkpoint, and an augmenting one has more every TrainOptions::checkpoint_every_batches. Throws
// StopRequested when TrainOptions::should_stop asks, after a batch or an epoch's end (not after
// the phase's last epoch), its checkpoint saved; during the pass that computes the values of an
// epoch without augmentation, the run stops at that epoch's start (the checkpoint there).
void run_phase(Phase& phase, const PhaseLoop& loop, int epochs, int done, const Checkpoint* resumed);

// One training step of `images` samples added to its epoch's running sums, reported to `observer`.
void add_step(EpochProgress& sums, const trainer::StepResult& r, int images, TrainObserver& observer);
// An epoch's mean loss and accuracy from its sums.
trainer::EpochStats epoch_stats(const EpochProgress& sums);

}  // namespace stoker::training
