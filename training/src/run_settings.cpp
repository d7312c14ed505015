#include "run_settings.hpp"

#include "stoker/core/error.hpp"

namespace stoker::training {
namespace {

// The augmentation as a number: its output for a few samples of a synthetic image (geometry,
// photometric steps and normalisation all show in it, and a resumed run must draw the same).
std::string augmentation_fingerprint(const Augmenter& augmenter) {
  const int channels = augmenter.plan().channels;
  const int height = 37, width = 53;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(height) * width * channels);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
  const ImageView src{pixels.data(), height, width, channels, static_cast<std::size_t>(width) * channels};
  std::vector<std::byte> out(augmenter.output_shape().bytes());
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the outputs
  for (std::int64_t id = 0; id < 4; ++id) {
    augmenter.apply(src, {7, 1, id}, out.data());
    for (std::byte b : out) h = (h ^ static_cast<std::uint8_t>(b)) * 0x100000001b3ull;
  }
  return std::to_string(h);
}

}  // namespace

nlohmann::json run_settings(const TrainOptions& o, const trainer::BackboneRef& backbone, const Augmenter& augmentation,
                            const std::vector<std::string>& classes, std::int64_t decay_steps) {
  return {{"backbone", backbone.model},
          {"cut_at", backbone.cut_at},
          {"preprocess", o.prepare.preprocess},
          {"image_size", o.prepare.image_size},
          {"interpolation", to_string(o.prepare.interpolation)},
          {"keep_aspect_ratio", o.prepare.keep_aspect_ratio},
          {"center_crop", o.prepare.center_crop},
          {"rescale", o.prepare.rescale ? nlohmann::json(*o.prepare.rescale) : nlohmann::json(nullptr)},
          {"standardisation",
           {o.prepare.samplewise_center, o.prepare.samplewise_std_normalization, o.prepare.featurewise_center,
            o.prepare.featurewise_std_normalization}},
          {"augmentation", o.augmentation ? augmentation_fingerprint(augmentation) : std::string("none")},
          {"learning_rate", o.adam.learning_rate},
          {"label_smoothing", o.loss.label_smoothing},
          {"class_weight", o.loss.class_weight},
          {"early_stopping_patience", o.early_stopping.patience},
          {"reduce_lr_on_plateau", {o.reduce_lr_on_plateau.factor, o.reduce_lr_on_plateau.patience}},
          {"cosine_decay_steps", decay_steps},
          {"beta_1", o.adam.beta_1},
          {"beta_2", o.adam.beta_2},
          {"epsilon", o.adam.epsilon},
          {"monitor", o.monitor == trainer::Monitor::ValLoss ? "val_loss" : "val_accuracy"},
          {"seed", o.loader.seed},
          {"batch_size", o.loader.batch_size},
          {"classes", classes},
          {"fine_tune", o.fine_tune.enabled()
                            ? nlohmann::json{{"from", o.fine_tune.from_layer},
                                             {"optimizer", trainer::to_string(o.fine_tune.optimizer.kind)},
                                             {"learning_rate", o.fine_tune.optimizer.learning_rate},
                                             {"momentum", o.fine_tune.optimizer.momentum},
                                             {"nesterov", o.fine_tune.optimizer.nesterov},
                                             {"dropout", o.fine_tune.dropout}}
                            : nlohmann::json(nullptr)}};
}

void check_same_run(const Checkpoint& c, const nlohmann::json& settings, const LoaderState& loader,
                    const std::filesystem::path& file) {
  const std::string why = file.string() + ": cannot resume: ";
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(c.settings);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(why + "malformed settings: " + e.what());
  }
  for (const auto& [key, value] : settings.items()) {
    if (!saved.contains(key) || saved[key] != value) {
      throw InvalidArgument(why + "the checkpoint's run has " + key + " = " +
                            (saved.contains(key) ? saved[key].dump() : std::string("(none)")) + ", this one " +
                            value.dump());
    }
  }
  if (c.loader.digest != loader.digest || c.loader.seed != loader.seed) {
    throw InvalidArgument(why + "the checkpoint's run trained on other data (another set of files, labels or split)");
  }
}

}  // namespace stoker::training
