// The second phase of train() (FineTuneOptions): the head and the backbone's top train together
// on the frozen part's output.
#pragma once

#include <optional>

#include "phase.hpp"
#include "sources.hpp"
#include "stoker/trainer/fine_tune.hpp"

namespace stoker::training {

// What the second phase continues from.
struct SecondPhase {
  const TrainingData& data;
  Sources& sources;
  const trainer::Model& backbone;  // the whole backbone of the first phase
  trainer::TrainableTop& top;      // split from it (or from the checkpoint's backbone file)
  const trainer::BackboneRef& ref;
  const DeviceChoice* gpu;  // the GPU the first phase ran on, or null
};

// Runs the phase after the first one. The head goes on from the first phase's best epoch, with a
// new optimizer over every trainable weight as Keras' recompile gives, and early stopping counts
// again (a second fit()). When an epoch of this phase is the best, `run.best` becomes this phase's
// record, the folder's backbone the fine-tuned one (kFineTunedBackboneFile) and that backbone is
// returned. `resumed`: the checkpoint when the run resumed inside this phase, else null.
std::optional<trainer::Graph> fine_tune_phase(const SecondPhase& in, RunState& run, const Checkpoint* resumed,
                                              TrainObserver& observer);

}  // namespace stoker::training
