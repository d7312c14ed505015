// The table of run_identity.hpp: for each setting of a run, whether it defines the run or may
// change on resume, the flags that set it and, for a defining one, its value as the checkpoint
// records it (run_settings.hpp). A new training option is one row here.
#include "stoker/training/run_identity.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

#include "run_settings.hpp"

namespace stoker::training {
namespace {

using nlohmann::json;

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

json fine_tune_of(const TrainOptions& o) {
  if (!o.fine_tune.enabled()) return nullptr;
  return {{"from", o.fine_tune.from_layer},
          {"optimizer", trainer::to_string(o.fine_tune.optimizer.kind)},
          {"learning_rate", o.fine_tune.optimizer.learning_rate},
          {"momentum", o.fine_tune.optimizer.momentum},
          {"nesterov", o.fine_tune.optimizer.nesterov},
          {"dropout", o.fine_tune.dropout}};
}

struct Row {
  RunSetting setting;
  json (*value)(const RunInputs& r);  // null for a setting that may change
};

constexpr const char* kAugmentationFlags =
    "rotation-range width-shift-range height-shift-range shear-range zoom-range horizontal-flip vertical-flip "
    "brightness-range channel-shift-range fill-mode cval random-resized-crop contrast saturation hue";
constexpr const char* kStandardisationFlags =
    "samplewise-center samplewise-std-normalization featurewise-center featurewise-std-normalization";
constexpr const char* kFineTuneFlags =
    "fine-tune-from fine-tune-optimizer fine-tune-learning-rate fine-tune-momentum fine-tune-dropout";

const Row kRows[] = {
    // What a run's results depend on besides its data (the loader state's digest covers that).
    {{"backbone", "model", false}, [](const RunInputs& r) -> json { return r.backbone.model; }},
    {{"cut_at", "cut-at", false}, [](const RunInputs& r) -> json { return r.backbone.cut_at; }},
    {{"preprocess", "preprocess", false}, [](const RunInputs& r) -> json { return r.options.prepare.preprocess; }},
    {{"image_size", "image-size", false}, [](const RunInputs& r) -> json { return r.options.prepare.image_size; }},
    {{"interpolation", "interpolation", false},
     [](const RunInputs& r) -> json { return to_string(r.options.prepare.interpolation); }},
    {{"keep_aspect_ratio", "keep-aspect-ratio", false},
     [](const RunInputs& r) -> json { return r.options.prepare.keep_aspect_ratio; }},
    {{"center_crop", "center-crop", false}, [](const RunInputs& r) -> json { return r.options.prepare.center_crop; }},
    {{"rescale", "rescale", false},
     [](const RunInputs& r) -> json { return r.options.prepare.rescale ? json(*r.options.prepare.rescale) : json(); }},
    {{"standardisation", kStandardisationFlags, false},
     [](const RunInputs& r) -> json {
       const ImagePreparation& p = r.options.prepare;
       return {p.samplewise_center, p.samplewise_std_normalization, p.featurewise_center,
               p.featurewise_std_normalization};
     }},
    {{"augmentation", kAugmentationFlags, false},
     [](const RunInputs& r) -> json {
       return r.options.augmentation ? augmentation_fingerprint(r.augmentation) : std::string("none");
     }},
    {{"learning_rate", "learning-rate", false},
     [](const RunInputs& r) -> json { return r.options.adam.learning_rate; }},
    {{"label_smoothing", "label-smoothing", false},
     [](const RunInputs& r) -> json { return r.options.loss.label_smoothing; }},
    {{"class_weight", "class-weight", false}, [](const RunInputs& r) -> json { return r.options.loss.class_weight; }},
    {{"early_stopping_patience", "early-stopping-patience", false},
     [](const RunInputs& r) -> json { return r.options.early_stopping.patience; }},
    {{"reduce_lr_on_plateau", "reduce-lr-on-plateau", false},
     [](const RunInputs& r) -> json {
       return {r.options.reduce_lr_on_plateau.factor, r.options.reduce_lr_on_plateau.patience};
     }},
    // epochs x batches per epoch: with --cosine-decay, more epochs are another schedule.
    {{"cosine_decay_steps", "cosine-decay", false}, [](const RunInputs& r) -> json { return r.decay_steps; }},
    {{"beta_1", "", false}, [](const RunInputs& r) -> json { return r.options.adam.beta_1; }},
    {{"beta_2", "", false}, [](const RunInputs& r) -> json { return r.options.adam.beta_2; }},
    {{"epsilon", "", false}, [](const RunInputs& r) -> json { return r.options.adam.epsilon; }},
    {{"monitor", "monitor", false},
     [](const RunInputs& r) -> json {
       return r.options.monitor == trainer::Monitor::ValLoss ? "val_loss" : "val_accuracy";
     }},
    {{"seed", "seed", false}, [](const RunInputs& r) -> json { return r.options.loader.seed; }},
    {{"batch_size", "batch-size", false}, [](const RunInputs& r) -> json { return r.options.loader.batch_size; }},
    {{"classes", "", false}, [](const RunInputs& r) -> json { return r.classes; }},
    {{"fine_tune", kFineTuneFlags, false}, [](const RunInputs& r) -> json { return fine_tune_of(r.options); }},
    // What may change: how long the run goes on, and where and how fast it runs.
    {{"epochs", "epochs", true}, nullptr},
    {{"threads", "threads", true}, nullptr},
    {{"prefetch", "prefetch", true}, nullptr},
    {{"device", "device", true}, nullptr},
    {{"cache", "cache", true}, nullptr},
    {{"cache-budget", "cache-budget", true}, nullptr},
    {{"cache-file", "cache-file", true}, nullptr},
    {{"checkpoint-every", "checkpoint-every", true}, nullptr},
    {{"cpu-budget", "cpu-budget", true}, nullptr},
    {{"ram-budget", "ram-budget", true}, nullptr},
    {{"fine-tune-epochs", "fine-tune-epochs", true}, nullptr},
};

// Whether the space-separated `flags` hold `flag`.
bool lists(std::string_view flags, std::string_view flag) {
  while (!flags.empty()) {
    const std::size_t end = std::min(flags.find(' '), flags.size());
    if (flags.substr(0, end) == flag) return true;
    flags.remove_prefix(std::min(end + 1, flags.size()));
  }
  return false;
}

}  // namespace

std::span<const RunSetting> run_identity() {
  static const std::vector<RunSetting> settings = [] {
    std::vector<RunSetting> s;
    for (const Row& row : kRows) s.push_back(row.setting);
    return s;
  }();
  return settings;
}

bool may_change_on_resume(std::string_view flag) {
  return std::any_of(std::begin(kRows), std::end(kRows),
                     [&](const Row& row) { return row.setting.may_change && lists(row.setting.flags, flag); });
}

std::string flags_that_may_change_on_resume() {
  std::vector<std::string> flags;
  for (const Row& row : kRows)
    if (row.setting.may_change) flags.push_back(std::string("--") + row.setting.flags);
  std::string list;
  for (std::size_t i = 0; i < flags.size(); ++i)
    list += (i == 0 ? "" : i + 1 == flags.size() ? " and " : ", ") + flags[i];
  return list;
}

std::string flags_of_setting(std::string_view name) {
  for (const Row& row : kRows) {
    if (row.setting.may_change || row.setting.name != name) continue;
    std::string list;
    std::string_view flags = row.setting.flags;
    while (!flags.empty()) {
      const std::size_t end = std::min(flags.find(' '), flags.size());
      list += (list.empty() ? "--" : ", --") + std::string(flags.substr(0, end));
      flags.remove_prefix(std::min(end + 1, flags.size()));
    }
    return list;
  }
  return {};
}

nlohmann::json run_settings(const RunInputs& r) {
  json settings = json::object();
  for (const Row& row : kRows)
    if (row.value) settings[row.setting.name] = row.value(r);
  return settings;
}

}  // namespace stoker::training
