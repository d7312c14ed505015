#include "train_config.hpp"

#include "stoker/core/error.hpp"

namespace stoker::app {

void TrainConfig::add_to(CLI::App& cmd) {
  cmd.fallthrough();  // --config belongs to the main app (see main.cpp) but is written after "train"
  loader.add_to(cmd);
  cmd.add_option("--val", val, "separate validation folder (one sub-folder per class)")->check(CLI::ExistingDirectory);
  cmd.add_option("--validation-split", validation_split, "fraction of each class held out for validation")
      ->capture_default_str();
  cmd.add_option("--model", model, "Keras .h5 or TF.js model.json of the backbone")->required();
  cmd.add_option("--cut-at", cut_at, "layer (or nested model) whose output are the features");
  cmd.add_option("--preprocess", preprocess, "input normalisation: tf ([-1,1]) | caffe | torch | none")
      ->capture_default_str();
  cmd.add_option("--epochs", epochs, "epochs")->capture_default_str();
  cmd.add_option("--learning-rate", learning_rate, "Adam learning rate")->capture_default_str();
  cmd.add_option("--monitor", monitor, "val_loss | val_accuracy: which epoch is kept")->capture_default_str();
  cmd.add_option("--device", device, "auto | cpu | cuda[:N]")->capture_default_str();
  cmd.add_option("--out", out, "folder for the model, the JSON log and the plots")->required();
  cmd.add_option("--rotation-range", rotation_range, "degrees");
  cmd.add_option("--width-shift-range", width_shift_range, "fraction of the width (< 1) or pixels");
  cmd.add_option("--height-shift-range", height_shift_range, "fraction of the height (< 1) or pixels");
  cmd.add_option("--shear-range", shear_range, "degrees");
  cmd.add_option("--zoom-range", zoom_range, "z: zoom factors in [1-z, 1+z]");
  cmd.add_flag("--horizontal-flip", horizontal_flip);
  cmd.add_flag("--vertical-flip", vertical_flip);
  cmd.add_option("--brightness-range", brightness_range, "two factors, e.g. 0.5 1.5")->expected(2);
  cmd.add_option("--channel-shift-range", channel_shift_range);
  cmd.add_option("--fill-mode", fill_mode, "constant | nearest | reflect | wrap")->capture_default_str();
  cmd.add_option("--cval", cval, "fill value for --fill-mode constant");
}

bool TrainConfig::augments() const {
  return rotation_range != 0 || width_shift_range != 0 || height_shift_range != 0 || shear_range != 0 ||
         zoom_range != 0 || horizontal_flip || vertical_flip || !brightness_range.empty() || channel_shift_range != 0;
}

training::TrainOptions TrainConfig::options() const {
  training::TrainOptions o;
  o.backbone = {model, cut_at, {}};  // train() records `prepare`'s preprocessing in the head file
  o.prepare = {loader.image_size, parse_interpolation(loader.interpolation), loader.keep_aspect_ratio, preprocess};
  if (augments()) {
    AugmentSpec s;
    s.rotation_range = rotation_range;
    if (width_shift_range != 0) s.width_shift_range = ShiftRange::uniform(width_shift_range);
    if (height_shift_range != 0) s.height_shift_range = ShiftRange::uniform(height_shift_range);
    s.shear_range = shear_range;
    if (zoom_range != 0) s.zoom_range = AugmentSpec::zoom(zoom_range);
    s.horizontal_flip = horizontal_flip;
    s.vertical_flip = vertical_flip;
    if (!brightness_range.empty()) s.brightness_range = Range{brightness_range[0], brightness_range[1]};
    s.channel_shift_range = channel_shift_range;
    s.fill_mode = fill_mode_from_string(fill_mode);
    s.cval = cval;
    o.augmentation = s;
  }
  o.loader = loader.options();
  o.epochs = epochs;
  o.adam.learning_rate = static_cast<float>(learning_rate);
  o.monitor = trainer::parse_monitor(monitor);
  o.device = device;
  o.out = out;
  return o;
}

}  // namespace stoker::app
