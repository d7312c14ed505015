#include "train_config.hpp"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <iterator>

#include <nlohmann/json.hpp>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/model_folder.hpp"
#include "stoker/training/run_identity.hpp"

namespace stoker::app {

void TrainConfig::add_to(CLI::App& cmd) {
  cmd.fallthrough();  // --config belongs to the main app (see main.cpp) but is written after "train"
  loader.add_to(cmd);
  cmd.add_option("--val", val, "separate validation set: a folder with one sub-folder per class, or tar shards")
      ->check([](const std::string& v) {
        std::error_code ec;
        if (std::filesystem::is_directory(v, ec) || is_shard_spec(v)) return std::string();
        return "Directory does not exist: " + v + " (nor is it tar shards)";
      });
  cmd.add_option("--validation-split", validation_split, "fraction of each class held out for validation")
      ->capture_default_str();
  // --data (or --data-csv), --model and --out are required unless --resume brings them (run_train
  // checks).
  cmd.add_option("--model", model, "Keras .h5 or TF.js model.json of the backbone");
  cmd.add_option("--cut-at", cut_at, "layer (or nested model) whose output are the features");
  cmd.add_option("--preprocess", preprocess, "input normalisation: tf ([-1,1]) | caffe | torch | none")
      ->capture_default_str();
  cmd.add_option("--epochs", epochs, "epochs")->capture_default_str();
  cmd.add_option("--learning-rate", learning_rate, "Adam learning rate")->capture_default_str();
  cmd.add_option("--monitor", monitor,
                 "val_loss | val_accuracy: which epoch is kept, and what early stopping and the plateau watch")
      ->capture_default_str();
  cmd.add_option("--class-weight", class_weight,
                 "Keras' class_weight: auto (sklearn's 'balanced': n / (classes x count)) or class:weight,... for "
                 "every class, by name or index (cat:1,dog:2.5)");
  cmd.add_option("--label-smoothing", label_smoothing, "Keras' cross-entropy label_smoothing, in [0, 1)")
      ->capture_default_str();
  cmd.add_option("--early-stopping-patience", early_stopping_patience,
                 "stop after N epochs without improvement of --monitor (Keras' EarlyStopping; the saved head is "
                 "the best epoch's)");
  cmd.add_option("--reduce-lr-on-plateau", reduce_lr_on_plateau,
                 "FACTOR,PATIENCE: Keras' ReduceLROnPlateau on --monitor (min_delta 1e-4, cooldown 0)")
      ->delimiter(',')
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  cmd.add_flag("--cosine-decay", cosine_decay,
               "Keras' CosineDecay from --learning-rate to 0 over every step of the run (alpha 0)");
  cmd.add_option("--device", device,
                 "auto | cpu | cuda[:N] | cuda:N,M,... or cuda:all: one rank per listed GPU on this machine (started "
                 "under mpirun); under a launcher, auto and cuda take the rank's own GPU (its local rank)")
      ->capture_default_str();
  cmd.add_option("--out", out, "folder for the model, the JSON log, the plots and the checkpoint");
  cmd.add_option("--cpu-budget", cpu_budget,
                 "without --threads: the most decode threads the calibration may choose (default: all cores)");
  cmd.add_option("--ram-budget", ram_budget, "without --threads: RAM for prefetched batches, e.g. 2GiB");
  cmd.add_option("--checkpoint-every", checkpoint_every,
                 "also checkpoint every N training batches of an augmenting epoch (one is written at each epoch end)");
  cmd.add_option("--resume", resume,
                 "continue the killed or finished run in this --out folder with its recorded settings "
                 "(--epochs, --threads, --prefetch, --device, --cache* and --checkpoint-every may change)");
  cmd.add_option("--fine-tune-from", fine_tune_from,
                 "after --epochs, unfreeze the backbone from this layer up (see `stoker inspect`) and train it with "
                 "the head (Keras' fine-tuning; BatchNormalization stays in inference mode)");
  cmd.add_option("--fine-tune-epochs", fine_tune_epochs, "epochs of the fine-tuning phase")->capture_default_str();
  cmd.add_option("--fine-tune-learning-rate", fine_tune_learning_rate, "learning rate of the fine-tuning phase")
      ->capture_default_str();
  cmd.add_option("--fine-tune-optimizer", fine_tune_optimizer, "adam | sgd (for the fine-tuning phase)")
      ->capture_default_str();
  cmd.add_option("--fine-tune-momentum", fine_tune_momentum, "SGD momentum of the fine-tuning phase")
      ->capture_default_str();
  cmd.add_flag("--fine-tune-dropout", fine_tune_dropout,
               "the unfrozen layers' Dropout drops while fine-tuning (Keras' training=True); by default it does "
               "not, as inside a backbone called with training=False");
  cmd.add_option("--rotation-range", rotation_range, "degrees");
  cmd.add_option("--width-shift-range", width_shift_range, "fraction of the width (< 1) or pixels");
  cmd.add_option("--height-shift-range", height_shift_range, "fraction of the height (< 1) or pixels");
  cmd.add_option("--shear-range", shear_range, "degrees");
  cmd.add_option("--zoom-range", zoom_range, "z: zoom factors in [1-z, 1+z]; or two values: lower upper")
      ->delimiter(',')
      ->expected(1, 2)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  cmd.add_flag("--horizontal-flip", horizontal_flip);
  cmd.add_flag("--vertical-flip", vertical_flip);
  cmd.add_option("--brightness-range", brightness_range, "two factors, e.g. 0.5 1.5 (or 0.5,1.5)")
      ->delimiter(',')
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  cmd.add_option("--channel-shift-range", channel_shift_range);
  cmd.add_option("--fill-mode", fill_mode, "constant | nearest | reflect | wrap")->capture_default_str();
  cmd.add_option("--cval", cval, "fill value for --fill-mode constant");
  cmd.add_option("--rescale", rescale, "multiply every pixel by this (Keras' rescale), e.g. 1/255");
  cmd.add_flag("--samplewise-center", samplewise_center, "subtract each image's mean (Keras)");
  cmd.add_flag("--samplewise-std-normalization", samplewise_std_normalization, "divide each image by its std (Keras)");
  cmd.add_flag("--featurewise-center", featurewise_center,
               "subtract the training set's per-channel mean (Keras; fitted on the training images)");
  cmd.add_flag("--featurewise-std-normalization", featurewise_std_normalization,
               "divide by the training set's per-channel std (Keras; fitted on the training images)");
  cmd.add_option("--center-crop", center_crop,
                 "keep this fraction of each side around the centre before resizing, for every image "
                 "(torchvision's Resize + CenterCrop; with --keep-aspect-ratio of the centred square)")
      ->capture_default_str();
  cmd.add_option("--random-resized-crop", random_resized_crop,
                 "torchvision's RandomResizedCrop when training: area scale LO,HI[,aspect RATIO_LO,RATIO_HI] "
                 "(default ratio 3/4,4/3); validation and predict take the centre crop")
      ->delimiter(',')
      ->expected(2, 4)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  cmd.add_option("--contrast", contrast, "random contrast factor in [1-c, 1+c]");
  cmd.add_option("--saturation", saturation, "random saturation factor in [1-s, 1+s]");
  cmd.add_option("--hue", hue, "random hue shift in [-h, h] turns (h <= 0.5)");
}

bool TrainConfig::augments() const {
  return rotation_range != 0 || width_shift_range != 0 || height_shift_range != 0 || shear_range != 0 ||
         !zoom_range.empty() || horizontal_flip || vertical_flip || !brightness_range.empty() ||
         channel_shift_range != 0 || !random_resized_crop.empty() || contrast != 0 || saturation != 0 || hue != 0;
}

namespace {

// A flag of several values holds one of the counts it takes: CLI11 refuses too many on the command
// line (the options' Throw policy), but a config file or a flag given twice can bring another.
void check_count(const char* flag, const std::vector<double>& values, std::initializer_list<std::size_t> counts,
                 const char* form) {
  if (values.empty() || std::find(counts.begin(), counts.end(), values.size()) != counts.end()) return;
  throw InvalidArgument(std::string(flag) + " takes " + form + ", received " + std::to_string(values.size()) +
                        " value" + (values.size() == 1 ? "" : "s"));
}

// "0.5" or "1/255".
double parse_fraction(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const double a = std::stod(text, &used);
    if (used == text.size()) return a;
    if (text[used] == '/') {
      std::size_t more = 0;
      const double b = std::stod(text.substr(used + 1), &more);
      if (used + 1 + more == text.size() && b != 0) return a / b;
    }
  } catch (const std::exception&) {}
  throw InvalidArgument(flag + " takes a number or a fraction like 1/255, received '" + text + "'");
}

}  // namespace

training::TrainOptions TrainConfig::options() const {
  training::TrainOptions o;
  o.backbone = {model, cut_at, {}};  // train() records `prepare`'s preprocessing in the head file
  o.prepare.image_size = loader.image_size;
  o.prepare.interpolation = parse_interpolation(loader.interpolation);
  o.prepare.keep_aspect_ratio = loader.keep_aspect_ratio;
  o.prepare.center_crop = center_crop;
  o.prepare.preprocess = preprocess;
  if (!rescale.empty()) o.prepare.rescale = parse_fraction("--rescale", rescale);
  o.prepare.samplewise_center = samplewise_center;
  o.prepare.samplewise_std_normalization = samplewise_std_normalization;
  o.prepare.featurewise_center = featurewise_center;
  o.prepare.featurewise_std_normalization = featurewise_std_normalization;
  check_count("--zoom-range", zoom_range, {1, 2}, "Z or LOWER,UPPER");
  check_count("--brightness-range", brightness_range, {2}, "LOWER,UPPER");
  check_count("--random-resized-crop", random_resized_crop, {2, 4}, "SCALE_LO,SCALE_HI[,RATIO_LO,RATIO_HI]");
  check_count("--reduce-lr-on-plateau", reduce_lr_on_plateau, {2}, "FACTOR,PATIENCE");
  if (augments()) {
    AugmentSpec s;
    s.rotation_range = rotation_range;
    if (width_shift_range != 0) s.width_shift_range = ShiftRange::uniform(width_shift_range);
    if (height_shift_range != 0) s.height_shift_range = ShiftRange::uniform(height_shift_range);
    s.shear_range = shear_range;
    if (zoom_range.size() == 1) s.zoom_range = AugmentSpec::zoom(zoom_range[0]);
    if (zoom_range.size() == 2) s.zoom_range = Range{zoom_range[0], zoom_range[1]};
    s.horizontal_flip = horizontal_flip;
    s.vertical_flip = vertical_flip;
    if (!brightness_range.empty()) s.brightness_range = Range{brightness_range[0], brightness_range[1]};
    s.channel_shift_range = channel_shift_range;
    s.fill_mode = fill_mode_from_string(fill_mode);
    s.cval = cval;
    if (!random_resized_crop.empty()) {
      RandomResizedCrop crop;
      crop.scale = {random_resized_crop[0], random_resized_crop[1]};
      if (random_resized_crop.size() == 4) crop.ratio = {random_resized_crop[2], random_resized_crop[3]};
      s.random_resized_crop = crop;  // its centre crop for validation comes from the preparation
    }
    s.contrast = contrast;
    s.saturation = saturation;
    s.hue = hue;
    o.augmentation = s;
  }
  o.loader = loader.options();
  o.epochs = epochs;
  o.adam.learning_rate = static_cast<float>(learning_rate);
  o.monitor = trainer::parse_monitor(monitor);
  o.loss.label_smoothing = label_smoothing;
  o.early_stopping.patience = early_stopping_patience;
  if (!reduce_lr_on_plateau.empty()) {
    o.reduce_lr_on_plateau.factor = reduce_lr_on_plateau[0];
    o.reduce_lr_on_plateau.patience = static_cast<int>(reduce_lr_on_plateau[1]);
    if (reduce_lr_on_plateau[1] != o.reduce_lr_on_plateau.patience || !(reduce_lr_on_plateau[0] > 0))
      throw InvalidArgument("--reduce-lr-on-plateau takes FACTOR,PATIENCE: a factor in (0, 1) and whole epochs");
  }
  o.cosine_decay = cosine_decay;
  o.device = device;
  o.out = out;
  o.checkpoint_every_batches = checkpoint_every;
  o.tune_loader = loader.threads == 0;  // --threads not given: calibrated for this backbone
  o.tune_prefetch = loader.prefetch == 0;
  o.tune_max_threads = cpu_budget;
  o.tune_ram_budget_bytes = ram_budget.empty() ? 0 : parse_byte_size(ram_budget);
  o.resume = !resume.empty();
  o.fine_tune.from_layer = fine_tune_from;
  o.fine_tune.epochs = fine_tune_epochs;
  o.fine_tune.optimizer.kind = trainer::parse_optimizer(fine_tune_optimizer);
  o.fine_tune.optimizer.learning_rate = static_cast<float>(fine_tune_learning_rate);
  o.fine_tune.optimizer.momentum = static_cast<float>(fine_tune_momentum);
  o.fine_tune.dropout = fine_tune_dropout;
  return o;
}

std::vector<double> TrainConfig::class_weights(const Dataset& train) const {
  if (class_weight.empty()) return {};
  if (class_weight == "auto") return training::balanced_class_weight(train);
  const std::vector<std::string>& names = train.class_names;
  std::vector<double> weights(names.size());
  std::vector<bool> given(names.size(), false);
  const std::string why = "--class-weight " + class_weight + ": ";
  std::size_t start = 0;
  while (start <= class_weight.size()) {
    const std::size_t end = std::min(class_weight.find(',', start), class_weight.size());
    const std::string item = class_weight.substr(start, end - start);
    const std::size_t colon = item.rfind(':');
    if (colon == std::string::npos) throw InvalidArgument(why + "'" + item + "' is not class:weight");
    const std::string key = item.substr(0, colon);
    std::size_t c = std::find(names.begin(), names.end(), key) - names.begin();
    if (c == names.size() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos)
      c = std::stoul(key);  // an index, as Keras' dict keys
    if (c >= names.size()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw InvalidArgument(why + "no class '" + key + "' (classes: " + known + ")");
    }
    try {
      std::size_t used = 0;
      weights[c] = std::stod(item.substr(colon + 1), &used);
      given[c] = true;
      if (used != item.size() - colon - 1) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw InvalidArgument(why + "'" + item.substr(colon + 1) + "' is not a number");
    }
    start = end + 1;
  }
  for (std::size_t c = 0; c < names.size(); ++c)
    if (!given[c]) throw InvalidArgument(why + "give a weight for every class; '" + names[c] + "' has none");
  return weights;
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LoaderFlags, data, image_size, batch_size, threads, prefetch, seed,
                                                interpolation, label_mode, on_bad_sample, keep_aspect_ratio, cache,
                                                cache_budget, cache_file, rank, world_size, shard_mode, shard_remainder,
                                                dct_scaling, shuffle, drop_last, drop_remainder, label_field,
                                                shard_index, data_csv, x_col, y_col, directory, extensions)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    TrainConfig, loader, val, validation_split, model, cut_at, preprocess, epochs, learning_rate, monitor, class_weight,
    label_smoothing, early_stopping_patience, reduce_lr_on_plateau, cosine_decay, device, out, checkpoint_every,
    cpu_budget, ram_budget, fine_tune_from, fine_tune_epochs, fine_tune_learning_rate, fine_tune_optimizer,
    fine_tune_momentum, fine_tune_dropout, rotation_range, width_shift_range, height_shift_range, shear_range,
    zoom_range, horizontal_flip, vertical_flip, brightness_range, channel_shift_range, fill_mode, cval, rescale,
    samplewise_center, samplewise_std_normalization, featurewise_center, featurewise_std_normalization, center_crop,
    random_resized_crop, contrast, saturation, hue)

void save_run_settings(const TrainConfig& config) {
  namespace fs = std::filesystem;
  TrainConfig c = config;
  auto absolute = [](std::string& path) {
    if (!path.empty()) path = fs::absolute(path).lexically_normal().string();
  };
  absolute(c.loader.data);
  absolute(c.loader.data_csv);
  absolute(c.loader.directory);
  absolute(c.loader.cache_file);
  absolute(c.loader.shard_index);
  absolute(c.val);
  absolute(c.model);
  absolute(c.out);
  c.resume.clear();
  const nlohmann::json j = {{"format", "stoker-train-settings"}, {"version", 1}, {"settings", c}};
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const nlohmann::json::type_error& e) {  // a path or value that is not UTF-8 (JSON holds text only)
    throw InvalidArgument(
        "a setting holds bytes that are not UTF-8 text, which the run's settings file (for --resume) cannot keep: " +
        std::string(e.what()) + "; rename the path or give the value as UTF-8");
  }
  write_file_atomically(fs::path(config.out) / kRunSettingsFile, text);
}

TrainConfig load_run_settings(const std::string& out) {
  const std::filesystem::path file = std::filesystem::path(out) / kRunSettingsFile;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw IoError(file.string() + ": not found: --resume takes the --out folder of an earlier stoker train run");
  try {
    const nlohmann::json j = nlohmann::json::parse(read_whole_file(file));
    if (j.at("format") != "stoker-train-settings" || j.at("version") != 1)
      throw IoError(file.string() + ": not stoker train settings (format " + j.at("format").dump() + ")");
    TrainConfig c = j.at("settings").get<TrainConfig>();
    c.out = out;
    // Runs recorded before each filter had one name: the name of the filter that ran.
    c.loader.interpolation = to_string(training::recorded_interpolation(c.loader.interpolation));
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw IoError(file.string() + ": malformed: " + e.what());
  }
}

bool resumable_override(const std::string& flag) { return flag == "resume" || training::may_change_on_resume(flag); }

std::string resumable_flags() { return training::flags_that_may_change_on_resume(); }

void apply_override(TrainConfig& saved, const TrainConfig& given, const std::string& flag) {
  if (flag == "epochs") saved.epochs = given.epochs;
  else if (flag == "threads") saved.loader.threads = given.loader.threads;
  else if (flag == "prefetch") saved.loader.prefetch = given.loader.prefetch;
  else if (flag == "device") saved.device = given.device;
  else if (flag == "cache") saved.loader.cache = given.loader.cache;
  else if (flag == "cache-budget") saved.loader.cache_budget = given.loader.cache_budget;
  else if (flag == "cache-file") saved.loader.cache_file = given.loader.cache_file;
  else if (flag == "checkpoint-every") saved.checkpoint_every = given.checkpoint_every;
  else if (flag == "cpu-budget") saved.cpu_budget = given.cpu_budget;
  else if (flag == "ram-budget") saved.ram_budget = given.ram_budget;
  else if (flag == "fine-tune-epochs") saved.fine_tune_epochs = given.fine_tune_epochs;
  else if (flag != "resume") throw InvalidArgument("--" + flag + " cannot change when a run resumes");
}

}  // namespace stoker::app
