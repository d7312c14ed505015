// What makes a resumed run the same run: the settings its results depend on, and the check of a
// checkpoint against them.
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

// What a run's results depend on besides its data (the loader state's digest covers that).
nlohmann::json run_settings(const TrainOptions& o, const trainer::BackboneRef& backbone, const Augmenter& augmentation,
                            const std::vector<std::string>& classes, std::int64_t decay_steps);

// Refuses a checkpoint from another run, naming the first setting that differs.
void check_same_run(const Checkpoint& c, const nlohmann::json& settings, const LoaderState& loader,
                    const std::filesystem::path& file);

}  // namespace stoker::training
