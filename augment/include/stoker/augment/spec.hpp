// What users write: Keras ImageDataGenerator's parameters and semantics, plus crops, colour
// jitter and the output format. An Augmenter (augmenter.hpp) checks it and runs it.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/augment/plan.hpp"
#include "stoker/core/image.hpp"
#include "stoker/pipeline/transform.hpp"

namespace stoker {

using augment::FillMode;

// "constant", "nearest", "reflect", "wrap"; anything else throws InvalidArgument naming fill_mode.
FillMode fill_mode_from_string(std::string_view name);
const char* to_string(FillMode mode) noexcept;

// Keras' width_shift_range / height_shift_range.
struct ShiftRange {
  augment::ShiftKind kind = augment::ShiftKind::None;
  double range = 0.0;          // Uniform: [-range, range), a fraction of the size when < 1, else pixels
  int pixels = 0;              // Integer: k in [0, pixels) with a random sign
  std::vector<double> values;  // Choices: one of them with a random sign; fractions if all < 1

  static ShiftRange none() { return {}; }
  // Keras' float: fraction of the size when < 1, else pixels.
  static ShiftRange uniform(double range) { return {augment::ShiftKind::Uniform, range, 0, {}}; }
  // Keras' int n: an integer number of pixels, drawn as numpy's choice(n) * choice([-1, 1]).
  static ShiftRange integer(int pixels) { return {augment::ShiftKind::Integer, 0.0, pixels, {}}; }
  // Keras' 1-D array-like.
  static ShiftRange choices(std::vector<double> values) {
    return {augment::ShiftKind::Choices, 0.0, 0, std::move(values)};
  }
};

struct Range {
  double lo = 0.0;
  double hi = 0.0;
};

// Central crop before the resize: the largest centred box of the output's aspect ratio when
// keep_aspect_ratio (Keras' keep_aspect_ratio), else the whole image; then `fraction` of each
// side of it (torchvision's Resize(256) + CenterCrop(224) is fraction 224/256 on a square output).
struct CenterCrop {
  double fraction = 1.0;
  bool keep_aspect_ratio = true;
};

// torchvision's RandomResizedCrop: area fraction in `scale`, aspect ratio (w/h) log-uniform in
// `ratio`; validation mode uses the centre crop of `center` instead.
struct RandomResizedCrop {
  Range scale{0.08, 1.0};
  Range ratio{3.0 / 4.0, 4.0 / 3.0};
  CenterCrop center{1.0, true};
};

// Per-channel (value - mean) / std on the output, after Keras' standardisation; in output
// channel order (BGR when bgr). The presets assume values on the 0..255 scale (no rescale).
struct ChannelNormalization {
  std::array<float, 4> mean{0, 0, 0, 0};
  std::array<float, 4> std{1, 1, 1, 1};
  bool bgr = false;

  // x / 127.5 - 1 (Keras' "tf" mode: MobileNet, Inception, Xception, EfficientNetV2...).
  static ChannelNormalization minus_one_to_one();
  // RGB -> BGR, minus the ImageNet mean [103.939, 116.779, 123.68] (Keras' "caffe": VGG, ResNet50).
  static ChannelNormalization caffe();
  // x / 255, minus [0.485, 0.456, 0.406], over [0.229, 0.224, 0.225] (Keras' "torch", torchvision).
  static ChannelNormalization torch();
};

// Featurewise statistics (Keras' ImageDataGenerator.fit): per channel, on rescaled values.
struct FeaturewiseStats {
  std::array<float, 4> mean{0, 0, 0, 0};
  std::array<float, 4> std{1, 1, 1, 1};
};

// Keras' preprocessing_function: runs on each augmented image (float, HWC, 0..255 scale, before
// rescale) and changes it in place. Called concurrently for different samples: must be
// thread-safe; must be deterministic in its arguments if runs are to be reproducible.
using PreprocessingFunction =
    std::function<void(float* pixels, int height, int width, int channels, const SampleContext& ctx)>;

struct AugmentSpec {
  // ---- output
  int height = 0;
  int width = 0;
  int channels = 3;         // of the decoded input and of the output (1, 3 or 4)
  DType dtype = DType::U8;  // U8, F32, or F16/BF16 (the F32 values rounded as they are stored)
  Layout layout = Layout::NHWC;

  // ---- Keras ImageDataGenerator
  double rotation_range = 0.0;  // degrees, uniform in [-r, r)
  ShiftRange width_shift_range;
  ShiftRange height_shift_range;
  double shear_range = 0.0;    // degrees (Keras 2 semantics), uniform in [-s, s)
  Range zoom_range{1.0, 1.0};  // zx and zy drawn independently; see zoom()
  bool horizontal_flip = false;
  bool vertical_flip = false;
  std::optional<Range> brightness_range;  // factor, PIL ImageEnhance.Brightness
  double channel_shift_range = 0.0;       // added to every channel, clipped to the image's range
  FillMode fill_mode = FillMode::Nearest;
  double cval = 0.0;
  int interpolation_order = 1;  // 0 nearest, 1 bilinear (Keras' default)
  std::optional<double> rescale;
  bool featurewise_center = false;
  bool samplewise_center = false;
  bool featurewise_std_normalization = false;
  bool samplewise_std_normalization = false;
  std::optional<FeaturewiseStats> featurewise;  // from fit_featurewise(); required by featurewise_*
  PreprocessingFunction preprocessing_function;

  // ---- beyond Keras
  std::optional<CenterCrop> center_crop;
  std::optional<RandomResizedCrop> random_resized_crop;
  double contrast = 0.0;    // factor in [max(0, 1 - c), 1 + c]
  double saturation = 0.0;  // factor in [max(0, 1 - s), 1 + s]
  double hue = 0.0;         // shift in turns in [-h, h], h <= 0.5
  std::optional<ChannelNormalization> normalization;

  // false: validation/test pipeline, only the deterministic part (crop, resize, standardisation).
  bool training = true;
  // Keras' exact axis conventions (see plan.hpp); false for the geometric ones.
  bool keras_axis_conventions = true;

  // Keras' zoom_range given as a float z: [1 - z, 1 + z].
  static Range zoom(double z) { return {1.0 - z, 1.0 + z}; }

  // The same description in validation mode.
  AugmentSpec validation() const {
    AugmentSpec s = *this;
    s.training = false;
    return s;
  }
  SampleShape output_shape() const { return {height, width, channels, dtype, layout}; }
};

// The augmentation of the typical Keras cats-vs-dogs script that stoker is measured against:
// ImageDataGenerator(rotation_range=30, width_shift_range=0.4, height_shift_range=0.4,
// shear_range=0.4, zoom_range=0.25, horizontal_flip=True, brightness_range=[0.5, 1.5]), uint8 NHWC.
AugmentSpec keras_example_augmentation(int height, int width);

// Checks every setting and returns the executors' plan. Throws InvalidArgument naming the first
// parameter that cannot work and the value received.
augment::AugmentPlan make_plan(const AugmentSpec& spec);

}  // namespace stoker
