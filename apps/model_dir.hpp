// The folder `stoker train --out` writes and `evaluate` / `predict` read:
//   head.stkh          the trained head (best epoch) with a reference to its backbone
//   stoker_model.json  what is needed to prepare new images the same way (size, preprocessing, classes)
//   history.json       every epoch's metrics, throughput and utilisation
//   metrics.png, throughput.png
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "stoker/augment/augmenter.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/trainer/model.hpp"
#include "train_config.hpp"

namespace stoker::app {

struct TrainedModel {
  std::filesystem::path dir;
  trainer::BackboneRef backbone;
  trainer::Model backbone_model;
  trainer::Head head = trainer::Head::sigmoid(1);  // replaced by the loaded head
  std::vector<std::string> class_names;
  AugmentSpec validation_spec;  // how images are prepared for the model
};

void write_model_info(const std::filesystem::path& dir, const TrainConfig& config,
                      const std::vector<std::string>& class_names);
TrainedModel load_trained_model(const std::filesystem::path& dir);

}  // namespace stoker::app
