// Shared by the GPU suite: random augmentation specs and parameter sets that cover every fill
// mode, flips, crops and photometric step, and the comparisons with their error bounds.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "params.hpp"
#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/image.hpp"
#include "test_support.hpp"

namespace stoker::test {

inline ImageView view_of(const cv::Mat& m) {
  return ImageView{m.ptr<std::uint8_t>(), m.rows, m.cols, m.channels(), static_cast<std::size_t>(m.step)};
}

// One case of the comparison: a spec and how its parameters are made.
struct AugmentCase {
  std::string name;
  AugmentSpec spec;
};

inline AugmentSpec base_spec(int h, int w, FillMode fill, int order) {
  AugmentSpec s;
  s.height = h;
  s.width = w;
  s.fill_mode = fill;
  s.cval = 77;
  s.interpolation_order = order;
  return s;
}

// Every fill mode x interpolation, geometry + flips; photometric steps (with the statistics pass);
// crops; sample-wise standardisation; normalisation to NCHW with BGR.
inline std::vector<AugmentCase> augment_cases(int h, int w) {
  std::vector<AugmentCase> cases;
  for (FillMode fill : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (int order : {0, 1}) {
      AugmentSpec s = base_spec(h, w, fill, order);
      s.rotation_range = 40;
      s.width_shift_range = ShiftRange::uniform(0.3);
      s.height_shift_range = ShiftRange::uniform(0.3);
      s.shear_range = 20;
      s.zoom_range = AugmentSpec::zoom(0.4);
      s.horizontal_flip = true;
      s.vertical_flip = true;
      cases.push_back({std::string("geometry_") + to_string(fill) + "_order" + std::to_string(order), s});
    }
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Reflect, 1);
    s.rotation_range = 20;
    s.horizontal_flip = true;
    s.brightness_range = Range{0.5, 1.5};
    s.channel_shift_range = 40;
    s.contrast = 0.4;
    s.saturation = 0.4;
    s.hue = 0.1;
    cases.push_back({"photometric_all", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Nearest, 1);
    s.channel_shift_range = 60;
    s.contrast = 0.5;
    cases.push_back({"photometric_no_warp", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Nearest, 1);
    s.random_resized_crop = RandomResizedCrop{};
    s.horizontal_flip = true;
    s.vertical_flip = true;
    cases.push_back({"random_resized_crop_flips", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Nearest, 0);
    s.random_resized_crop = RandomResizedCrop{};
    s.horizontal_flip = true;
    cases.push_back({"random_resized_crop_nearest", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Constant, 1);
    s.center_crop = CenterCrop{0.8, true};
    s.rotation_range = 15;
    cases.push_back({"center_crop_rotation", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Wrap, 1);
    s.rotation_range = 30;
    s.brightness_range = Range{0.7, 1.3};
    s.dtype = DType::F32;
    s.samplewise_center = true;
    s.samplewise_std_normalization = true;
    s.rescale = 1.0 / 255.0;
    cases.push_back({"samplewise_f32", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Reflect, 1);
    s.rotation_range = 25;
    s.zoom_range = AugmentSpec::zoom(0.2);
    s.horizontal_flip = true;
    s.contrast = 0.3;
    s.dtype = DType::F32;
    s.layout = Layout::NCHW;
    s.normalization = ChannelNormalization::caffe();
    cases.push_back({"caffe_nchw_f32", s});
  }
  {
    AugmentSpec s = base_spec(h, w, FillMode::Constant, 1);
    s.rotation_range = 10;
    s.dtype = DType::F32;
    s.layout = Layout::NCHW;
    s.normalization = ChannelNormalization::torch();
    cases.push_back({"torch_nchw_f32", s});
  }
  return cases;
}

// Different sizes per sample (the executor takes per-sample source sizes).
inline std::vector<cv::Mat> source_images(int count) {
  std::vector<cv::Mat> out;
  for (int i = 0; i < count; ++i) out.push_back(make_pattern_rgb(40 + 7 * i, 56 - 3 * i, i));
  return out;
}

// Largest difference, in output units; u8 or f32 arrays of n elements. A NaN on one side only
// (a value the kernel never wrote, or a broken computation) counts as an infinite difference;
// NaN on both sides as none (a plain |a - b| would be NaN, which no bound check ever fails).
inline double max_abs_diff(DType dtype, const void* a, const void* b, std::size_t n, std::size_t* where = nullptr) {
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double d;
    if (dtype == DType::U8) {
      d = std::abs(static_cast<int>(static_cast<const std::uint8_t*>(a)[i]) - static_cast<const std::uint8_t*>(b)[i]);
    } else {
      const double x = static_cast<const float*>(a)[i], y = static_cast<const float*>(b)[i];
      if (std::isnan(x) || std::isnan(y)) {
        d = std::isnan(x) && std::isnan(y) ? 0.0 : HUGE_VAL;
      } else {
        d = x == y ? 0.0 : std::abs(x - y);  // equal infinities: no difference
      }
    }
    if (d > worst) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

// The error bound: one grey level in u8, 1e-3 in float, against the reference executor (the
// per-pixel definition both executors share). Against the fast CPU path, whose crop + resize-only
// case uses cv::resize (within one grey level of the reference before the photometric steps), the
// grey level is multiplied by the photometric gain (brightness, contrast and saturation factors
// can stretch a one-level difference to two) and, for float, by the output scale.
inline double photometric_gain(const AugmentSpec& s) {
  double g = s.brightness_range ? std::max(1.0, s.brightness_range->hi) : 1.0;
  return g * (1.0 + s.contrast) * (1.0 + s.saturation);
}

inline double tolerance(const Augmenter& a, bool against_fast_path) {
  const double gain = against_fast_path ? photometric_gain(a.spec()) : 1.0;
  if (!a.plan().float_output) return std::ceil(gain - 1e-9);
  if (!against_fast_path) return 1e-3;
  double scale = 0.0;
  const augment::OutputAffine oa = augment::output_affine(a.plan(), a.plan().channels, 0.0f, 1.0f);
  for (int c = 0; c < a.plan().channels; ++c) scale = std::max(scale, static_cast<double>(std::abs(oa.scale[c])));
  if (a.plan().samplewise_std) scale = std::max(scale, 0.05);  // 1/std of a normalised image, generous
  return 1e-3 + gain * scale;
}

}  // namespace stoker::test
