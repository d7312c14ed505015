// What makes a resumed run the same run: the settings its results depend on (the defining rows of
// run_identity.cpp's table), and the check of a checkpoint against them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/train.hpp"

namespace stoker::training {

// What a run's settings are read from.
struct RunInputs {
  const TrainOptions& options;
  const trainer::BackboneRef& backbone;
  const Augmenter& augmentation;
  const std::vector<std::string>& classes;
  std::int64_t decay_steps;
};

// What a run's results depend on besides its data (the loader state's digest covers that): every
// defining setting of run_identity() by its name.
nlohmann::json run_settings(const RunInputs& inputs);
nlohmann::json run_settings(const TrainOptions& o, const trainer::BackboneRef& backbone, const Augmenter& augmentation,
                            const std::vector<std::string>& classes, std::int64_t decay_steps);

// Refuses a checkpoint from another run, naming the first setting that differs and its flags.
void check_same_run(const Checkpoint& c, const nlohmann::json& settings, const LoaderState& loader,
                    const std::filesystem::path& file);

}  // namespace stoker::training
