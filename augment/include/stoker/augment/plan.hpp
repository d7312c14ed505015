// The augmentation description in the form the executors use: plain numbers, trivially copyable,
// so the CUDA executor can pass it to its kernel by value. Built (and checked) from an AugmentSpec
// by Augmenter; see spec.hpp for what each field means.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/core/host_device.hpp"
#include "stoker/core/image.hpp"

namespace stoker::augment {

inline constexpr int kMaxChannels = 4;
inline constexpr int kMaxShiftChoices = 16;

// Points outside the image: constant (cval), nearest (edge pixel), reflect (d c b a | a b c d |
// d c b a) or wrap (scipy's "wrap": period n - 1, the first and last pixel overlap), as Keras.
enum class FillMode : std::uint8_t { Constant, Nearest, Reflect, Wrap };

// How a width/height shift is drawn, following Keras' get_random_transform:
//  Uniform  r: uniform in [-r, r); a fraction of the image size when r < 1, else pixels
//  Integer  n: an integer k in [0, n) times a random sign (numpy's choice(n) * choice([-1, 1]))
//  Choices   : one of the values times a random sign; fractions when every value is < 1
enum class ShiftKind : std::uint8_t { None, Uniform, Integer, Choices };

struct ShiftPlan {
  ShiftKind kind = ShiftKind::None;
  bool fraction = false;  // multiply the drawn value by the image size
  float range = 0.0f;     // Uniform
  int count = 0;          // Integer: n; Choices: number of values
  float choices[kMaxShiftChoices] = {};
};

enum class CropKind : std::uint8_t { None, Center, RandomResized };

struct AugmentPlan {
  // ---- output
  int out_height = 0;
  int out_width = 0;
  int channels = 3;

  // ---- random geometry (Keras ImageDataGenerator)
  bool training = true;         // false: only the deterministic part (crop, resize, normalisation)
  float rotation_range = 0.0f;  // degrees
  ShiftPlan width_shift;
  ShiftPlan height_shift;
  float shear_range = 0.0f;  // degrees
  float zoom_lo = 1.0f, zoom_hi = 1.0f;
  bool horizontal_flip = false;
  bool vertical_flip = false;
  // Keras' own axis conventions: the matrix centre is (h/2 - 0.5, w/2 - 0.5) taken as (x, y),
  // and height_shift_range moves along x. False: the geometric centre, height_shift moves rows.
  bool keras_axes = true;

  // ---- sampling
  FillMode fill_mode = FillMode::Nearest;
  float cval = 0.0f;
  int interpolation_order = 1;  // 0 nearest, 1 bilinear

  // ---- crop of the source before the resize to the output size
  CropKind crop = CropKind::None;
  float center_fraction = 1.0f;                              // Center: side fraction of the box kept
  bool keep_aspect_ratio = false;                            // Center: box of the output's aspect ratio first
  float crop_scale_lo = 0.08f, crop_scale_hi = 1.0f;         // RandomResized: area fraction
  float crop_ratio_lo = 0.75f, crop_ratio_hi = 4.0f / 3.0f;  // RandomResized: aspect w/h

  // ---- photometric (0..255 scale)
  bool brightness = false;
  float brightness_lo = 1.0f, brightness_hi = 1.0f;  // factor (PIL ImageEnhance.Brightness)
  float channel_shift_range = 0.0f;
  float contrast = 0.0f;    // factor in [max(0, 1 - c), 1 + c] (PIL ImageEnhance.Contrast)
  float saturation = 0.0f;  // factor in [max(0, 1 - s), 1 + s] (PIL ImageEnhance.Color)
  float hue = 0.0f;         // shift in turns, [-h, h], h <= 0.5

  // ---- standardisation and output: value = ((((v * rescale) - sample mean) / (sample std +
  // 1e-6) - feature mean) / (feature std + 1e-6) - mean) / std, each step only when enabled
  float rescale = 1.0f;
  bool samplewise_center = false;
  bool samplewise_std = false;
  bool featurewise_center = false;
  bool featurewise_std = false;
  float feature_mean[kMaxChannels] = {0, 0, 0, 0};
  float feature_std[kMaxChannels] = {1, 1, 1, 1};
  float norm_mean[kMaxChannels] = {0, 0, 0, 0};
  float norm_std[kMaxChannels] = {1, 1, 1, 1};
  bool swap_rb = false;            // output BGR (caffe)
  bool float_output = false;       // the output holds float values: f32, f16 or bf16 (output_dtype)
  DType output_dtype = DType::U8;  // f16/bf16: each float rounded as it is stored (core/half.hpp)
  bool nchw = false;
};

// Parameters of one sample, drawn by draw_params (params.hpp).
struct SampleParams {
  float theta = 0.0f;  // degrees
  float tx = 0.0f;     // Keras' tx and ty: matrix translation along x and y, output pixels
  float ty = 0.0f;
  float shear = 0.0f;  // degrees
  float zx = 1.0f, zy = 1.0f;
  bool flip_horizontal = false;
  bool flip_vertical = false;
  // crop box in source pixels (the whole image when there is no crop)
  float crop_x = 0.0f, crop_y = 0.0f, crop_w = 0.0f, crop_h = 0.0f;
  bool has_channel_shift = false;
  float channel_shift = 0.0f;
  bool has_brightness = false;
  float brightness = 1.0f;
  bool has_contrast = false;
  float contrast = 1.0f;
  bool has_saturation = false;
  float saturation = 1.0f;
  bool has_hue = false;
  float hue = 0.0f;

  STOKER_HOST_DEVICE bool photometric() const {
    return has_channel_shift || has_brightness || has_contrast || has_saturation || has_hue;
  }
  STOKER_HOST_DEVICE bool neutral_geometry() const {
    return theta == 0.0f && tx == 0.0f && ty == 0.0f && shear == 0.0f && zx == 1.0f && zy == 1.0f;
  }
};

// The output->source mapping: src = (m[0] x + m[1] y + m[2], m[3] x + m[4] y + m[5]).
struct Affine {
  double m[6] = {1, 0, 0, 0, 1, 0};
};

// What the executor writes: the plan's layout and channel count, in `dtype`.
struct BatchOutput {
  DType dtype = DType::F32;
  std::size_t sample_elements = 0;  // out_height * out_width * channels
};

}  // namespace stoker::augment
