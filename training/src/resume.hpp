// A resumed run (TrainOptions::resume): the checkpoint read and checked against this run once,
// then its state given back to the run and its first phase (the second phase takes its own,
// FineTuneProgress, in fine_tune_phase()).
#pragma once

#include <optional>
#include <string>

#include "phase.hpp"
#include "stoker/trainer/fine_tune.hpp"

namespace stoker::training {

// The checkpoint in o.out when o.resume, refused when it is from another run (run_settings.hpp)
// or cannot continue with these epochs. A checkpoint inside the second phase rebuilds `top` from
// the fine-tuned backbone it names. IoError when there is no checkpoint or its backbone is missing.
std::optional<Checkpoint> resume_point(const TrainOptions& o, const std::string& settings, const LoaderState& loader,
                                       std::optional<trainer::TrainableTop>& top);

// The run's history, callbacks and best epoch as `c` left them, and the first phase's saved
// features (those of `train_images` images, `dim` each). Tells the observer where the run resumes.
void restore_run(RunState& run, Phase& first, const Checkpoint& c, std::size_t train_images, int dim,
                 TrainObserver& observer);

}  // namespace stoker::training
