#include "run_settings.hpp"

#include "stoker/core/error.hpp"
#include "stoker/training/model_folder.hpp"
#include "stoker/training/run_identity.hpp"

namespace stoker::training {

nlohmann::json run_settings(const TrainOptions& o, const trainer::BackboneRef& backbone, const Augmenter& augmentation,
                            const std::vector<std::string>& classes, std::int64_t decay_steps) {
  return run_settings(RunInputs{o, backbone, augmentation, classes, decay_steps});
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
  if (saved.contains("interpolation") && saved["interpolation"].is_string()) {  // the filter that ran, by its name
    try {
      saved["interpolation"] = to_string(recorded_interpolation(saved["interpolation"].get<std::string>()));
    } catch (const InvalidArgument&) {}  // not a filter: differs from this run's below
  }
  for (const auto& [key, value] : settings.items()) {
    if (!saved.contains(key) || saved[key] != value) {
      const std::string flags = flags_of_setting(key);
      throw InvalidArgument(why + "the checkpoint's run has " + key + " = " +
                            (saved.contains(key) ? saved[key].dump() : std::string("(none)")) + ", this one " +
                            value.dump() + (flags.empty() ? "" : " (" + flags + ")"));
    }
  }
  if (c.loader.digest != loader.digest || c.loader.seed != loader.seed) {
    throw InvalidArgument(why + "the checkpoint's run trained on other data (another set of files, labels or split)");
  }
}

}  // namespace stoker::training
