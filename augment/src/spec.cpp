// Checks an AugmentSpec and turns it into the executors' plan.
#include <cmath>
#include <sstream>
#include <string>

#include "stoker/augment/spec.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace {

[[noreturn]] void fail(const std::string& parameter, const std::string& message) {
  throw InvalidArgument("augmentation: " + parameter + ": " + message);
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require_finite(const std::string& parameter, double v) {
  if (!std::isfinite(v)) fail(parameter, "must be finite, received " + num(v));
}

void require_non_negative(const std::string& parameter, double v) {
  require_finite(parameter, v);
  if (v < 0) fail(parameter, "must not be negative, received " + num(v));
}

// Keeps fixed-point source coordinates (32 fractional bits in 64) far from overflow.
constexpr double kMaxMagnitude = 1e6;
void require_bounded(const std::string& parameter, double v) {
  if (std::abs(v) > kMaxMagnitude) fail(parameter, "must be within +-1e6, received " + num(v));
}

augment::ShiftPlan shift_plan(const std::string& parameter, const ShiftRange& r) {
  augment::ShiftPlan s;
  s.kind = r.kind;
  switch (r.kind) {
    case augment::ShiftKind::None: break;
    case augment::ShiftKind::Uniform:
      require_non_negative(parameter, r.range);
      require_bounded(parameter, r.range);
      if (r.range == 0) s.kind = augment::ShiftKind::None;  // Keras: a falsy range means no shift
      s.range = static_cast<float>(r.range);
      s.fraction = r.range < 1.0;
      break;
    case augment::ShiftKind::Integer:
      if (r.pixels < 0) fail(parameter, "must not be negative, received " + std::to_string(r.pixels));
      require_bounded(parameter, r.pixels);
      if (r.pixels == 0) s.kind = augment::ShiftKind::None;
      s.count = r.pixels;
      s.fraction = false;
      break;
    case augment::ShiftKind::Choices: {
      if (r.values.empty()) fail(parameter, "the list of choices is empty");
      if (r.values.size() > static_cast<std::size_t>(augment::kMaxShiftChoices)) {
        fail(parameter, "at most " + std::to_string(augment::kMaxShiftChoices) + " choices, received " +
                            std::to_string(r.values.size()));
      }
      double mx = r.values[0];
      for (std::size_t i = 0; i < r.values.size(); ++i) {
        require_finite(parameter, r.values[i]);
        require_bounded(parameter, r.values[i]);
        s.choices[i] = static_cast<float>(r.values[i]);
        mx = std::max(mx, r.values[i]);
      }
      s.count = static_cast<int>(r.values.size());
      s.fraction = mx < 1.0;  // Keras: np.max(range) < 1 means fractions of the size
      break;
    }
  }
  return s;
}

void check_center(const std::string& parameter, const CenterCrop& c) {
  require_finite(parameter + ".fraction", c.fraction);
  if (c.fraction <= 0) fail(parameter + ".fraction", "must be in (0, 1], received " + num(c.fraction));
  if (c.fraction > 1) {
    fail(parameter + ".fraction", num(c.fraction) + " would crop a box larger than the image (at most 1)");
  }
}

}  // namespace

FillMode fill_mode_from_string(std::string_view name) {
  if (name == "constant") return FillMode::Constant;
  if (name == "nearest") return FillMode::Nearest;
  if (name == "reflect") return FillMode::Reflect;
  if (name == "wrap") return FillMode::Wrap;
  fail("fill_mode", "unknown fill mode '" + std::string(name) + "' (constant, nearest, reflect or wrap)");
}

const char* to_string(FillMode mode) noexcept {
  switch (mode) {
    case FillMode::Constant: return "constant";
    case FillMode::Nearest: return "nearest";
    case FillMode::Reflect: return "reflect";
    case FillMode::Wrap: return "wrap";
  }
  return "?";
}

ChannelNormalization ChannelNormalization::minus_one_to_one() {
  return {{127.5f, 127.5f, 127.5f, 127.5f}, {127.5f, 127.5f, 127.5f, 127.5f}, false};
}
ChannelNormalization ChannelNormalization::caffe() { return {{103.939f, 116.779f, 123.68f, 0.0f}, {1, 1, 1, 1}, true}; }
ChannelNormalization ChannelNormalization::torch() {
  return {{0.485f * 255, 0.456f * 255, 0.406f * 255, 0.0f}, {0.229f * 255, 0.224f * 255, 0.225f * 255, 1.0f}, false};
}

augment::AugmentPlan make_plan(const AugmentSpec& s) {
  augment::AugmentPlan p;
  if (s.height <= 0) fail("height", "must be positive, received " + std::to_string(s.height));
  if (s.width <= 0) fail("width", "must be positive, received " + std::to_string(s.width));
  if (s.channels != 1 && s.channels != 3 && s.channels != 4) {
    fail("channels", "must be 1, 3 or 4, received " + std::to_string(s.channels));
  }
  if (s.dtype != DType::U8 && s.dtype != DType::F32 && s.dtype != DType::F16 && s.dtype != DType::BF16) {
    fail("dtype", std::string("must be u8, f32, f16 or bf16, received ") + to_string(s.dtype));
  }
  p.out_height = s.height;
  p.out_width = s.width;
  p.channels = s.channels;
  p.training = s.training;
  p.float_output = s.dtype != DType::U8;
  p.output_dtype = s.dtype;
  p.nchw = s.layout == Layout::NCHW;
  p.keras_axes = s.keras_axis_conventions;

  require_non_negative("rotation_range", s.rotation_range);
  p.rotation_range = static_cast<float>(s.rotation_range);
  p.width_shift = shift_plan("width_shift_range", s.width_shift_range);
  p.height_shift = shift_plan("height_shift_range", s.height_shift_range);
  require_non_negative("shear_range", s.shear_range);
  p.shear_range = static_cast<float>(s.shear_range);
  require_finite("zoom_range", s.zoom_range.lo);
  require_finite("zoom_range", s.zoom_range.hi);
  if (s.zoom_range.lo <= 0 || s.zoom_range.hi <= 0) {
    fail("zoom_range",
         "zoom factors must be positive, received [" + num(s.zoom_range.lo) + ", " + num(s.zoom_range.hi) + "]");
  }
  require_bounded("zoom_range", s.zoom_range.hi);
  if (s.zoom_range.lo < 1e-6)
    fail("zoom_range", "zoom factors must be at least 1e-6, received " + num(s.zoom_range.lo));
  if (s.zoom_range.lo > s.zoom_range.hi) {
    fail("zoom_range", "lower bound above upper bound: [" + num(s.zoom_range.lo) + ", " + num(s.zoom_range.hi) + "]");
  }
  p.zoom_lo = static_cast<float>(s.zoom_range.lo);
  p.zoom_hi = static_cast<float>(s.zoom_range.hi);
  p.horizontal_flip = s.horizontal_flip;
  p.vertical_flip = s.vertical_flip;

  if (s.brightness_range) {
    const Range& b = *s.brightness_range;
    require_non_negative("brightness_range", b.lo);
    require_non_negative("brightness_range", b.hi);
    if (b.lo > b.hi) fail("brightness_range", "lower bound above upper bound: [" + num(b.lo) + ", " + num(b.hi) + "]");
    p.brightness = true;
    p.brightness_lo = static_cast<float>(b.lo);
    p.brightness_hi = static_cast<float>(b.hi);
  }
  require_non_negative("channel_shift_range", s.channel_shift_range);
  p.channel_shift_range = static_cast<float>(s.channel_shift_range);
  p.fill_mode = s.fill_mode;
  if (static_cast<int>(s.fill_mode) > static_cast<int>(FillMode::Wrap)) {
    fail("fill_mode", "unknown fill mode " + std::to_string(static_cast<int>(s.fill_mode)));
  }
  require_finite("cval", s.cval);
  p.cval = static_cast<float>(s.cval);
  if (s.interpolation_order != 0 && s.interpolation_order != 1) {
    fail("interpolation_order",
         "must be 0 (nearest) or 1 (bilinear), received " + std::to_string(s.interpolation_order));
  }
  p.interpolation_order = s.interpolation_order;

  if (s.center_crop && s.random_resized_crop) {
    fail("center_crop", "cannot be combined with random_resized_crop (which has its own centre crop for validation)");
  }
  if (s.center_crop) {
    check_center("center_crop", *s.center_crop);
    p.crop = augment::CropKind::Center;
    p.center_fraction = static_cast<float>(s.center_crop->fraction);
    p.keep_aspect_ratio = s.center_crop->keep_aspect_ratio;
  }
  if (s.random_resized_crop) {
    const RandomResizedCrop& r = *s.random_resized_crop;
    require_finite("random_resized_crop.scale", r.scale.lo);
    require_finite("random_resized_crop.scale", r.scale.hi);
    if (!(r.scale.lo > 0 && r.scale.lo <= r.scale.hi)) {
      fail("random_resized_crop.scale",
           "needs 0 < lo <= hi, received [" + num(r.scale.lo) + ", " + num(r.scale.hi) + "]");
    }
    if (r.scale.hi > 1) {
      fail("random_resized_crop.scale", num(r.scale.hi) + " would crop a box larger than the image (at most 1)");
    }
    require_finite("random_resized_crop.ratio", r.ratio.lo);
    require_finite("random_resized_crop.ratio", r.ratio.hi);
    if (!(r.ratio.lo > 0 && r.ratio.lo <= r.ratio.hi)) {
      fail("random_resized_crop.ratio",
           "needs 0 < lo <= hi, received [" + num(r.ratio.lo) + ", " + num(r.ratio.hi) + "]");
    }
    check_center("random_resized_crop.center", r.center);
    p.crop = augment::CropKind::RandomResized;
    p.crop_scale_lo = static_cast<float>(r.scale.lo);
    p.crop_scale_hi = static_cast<float>(r.scale.hi);
    p.crop_ratio_lo = static_cast<float>(r.ratio.lo);
    p.crop_ratio_hi = static_cast<float>(r.ratio.hi);
    p.center_fraction = static_cast<float>(r.center.fraction);
    p.keep_aspect_ratio = r.center.keep_aspect_ratio;
  }

  require_non_negative("contrast", s.contrast);
  require_non_negative("saturation", s.saturation);
  require_non_negative("hue", s.hue);
  if (s.hue > 0.5) fail("hue", "must be in [0, 0.5] turns, received " + num(s.hue));
  if (s.channels < 3 && (s.saturation > 0 || s.hue > 0)) {
    fail(s.saturation > 0 ? "saturation" : "hue", "needs 3 or 4 channels, received " + std::to_string(s.channels));
  }
  p.contrast = static_cast<float>(s.contrast);
  p.saturation = static_cast<float>(s.saturation);
  p.hue = static_cast<float>(s.hue);

  if (s.rescale) {
    require_finite("rescale", *s.rescale);
    if (*s.rescale == 0) fail("rescale", "must not be 0 (leave it unset for no rescaling)");
    p.rescale = static_cast<float>(*s.rescale);
  }
  // Keras: std normalisation implies centring.
  p.samplewise_std = s.samplewise_std_normalization;
  p.samplewise_center = s.samplewise_center || s.samplewise_std_normalization;
  p.featurewise_std = s.featurewise_std_normalization;
  p.featurewise_center = s.featurewise_center || s.featurewise_std_normalization;
  if (p.featurewise_center) {
    if (!s.featurewise) {
      fail(s.featurewise_std_normalization ? "featurewise_std_normalization" : "featurewise_center",
           "needs featurewise statistics: set AugmentSpec::featurewise from fit_featurewise()");
    }
    for (int c = 0; c < s.channels; ++c) {
      require_finite("featurewise.mean", s.featurewise->mean[c]);
      require_non_negative("featurewise.std", s.featurewise->std[c]);
      p.feature_mean[c] = s.featurewise->mean[c];
      p.feature_std[c] = s.featurewise->std[c];
    }
  }
  if (s.normalization) {
    for (int c = 0; c < s.channels; ++c) {
      require_finite("normalization.mean", s.normalization->mean[c]);
      require_finite("normalization.std", s.normalization->std[c]);
      if (s.normalization->std[c] == 0) fail("normalization.std", "must not be 0 (channel " + std::to_string(c) + ")");
      p.norm_mean[c] = s.normalization->mean[c];
      p.norm_std[c] = s.normalization->std[c];
    }
    p.swap_rb = s.normalization->bgr;
    if (p.swap_rb && s.channels < 3) fail("normalization.bgr", "needs 3 or 4 channels");
  }
  const bool standardises = s.rescale || p.samplewise_center || p.featurewise_center || s.normalization.has_value();
  if (standardises && !p.float_output) {
    fail("dtype", "u8 output cannot hold rescaled or normalised values; use f32 (or normalise on the GPU)");
  }
  return p;
}

AugmentSpec keras_example_augmentation(int height, int width) {
  AugmentSpec s;
  s.height = height;
  s.width = width;
  s.rotation_range = 30;
  s.width_shift_range = ShiftRange::uniform(0.4);
  s.height_shift_range = ShiftRange::uniform(0.4);
  s.shear_range = 0.4;
  s.zoom_range = AugmentSpec::zoom(0.25);
  s.horizontal_flip = true;
  s.brightness_range = Range{0.5, 1.5};
  return s;
}

}  // namespace stoker
