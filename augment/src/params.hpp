// The per-sample parameter draw and the geometry built from it. Same (plan, seed, epoch, sample
// id, source size) => same parameters, on any thread and on the host or a CUDA device: the draw
// uses only integer arithmetic and explicitly rounded float multiply/add (host_device.hpp).
// The random-resized-crop draw also uses logf/expf/sqrtf; the GPU executor draws on the host
// (the parameters of a batch are a few KB), so both executors see bit-identical values.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd_math.hpp"
#include "philox.hpp"
#include "stoker/augment/plan.hpp"

namespace stoker::augment {

// Fixed Philox slots of each parameter (see SampleRng).
enum Slot : std::uint32_t {
  kSlotTheta = 0,
  kSlotTxValue = 1,
  kSlotTxSign = 2,
  kSlotTyValue = 3,
  kSlotTySign = 4,
  kSlotShear = 5,
  kSlotZx = 6,
  kSlotZy = 7,
  kSlotFlipH = 8,
  kSlotFlipV = 9,
  kSlotChannelShift = 10,
  kSlotBrightness = 11,
  kSlotContrast = 12,
  kSlotSaturation = 13,
  kSlotHue = 14,
  kSlotCrop = 16,  // 10 attempts x 4 slots: scale, log-ratio, top, left
};
inline constexpr int kCropAttempts = 10;

// One draw of a Keras shift (pixels). size: the output height (tx) or width (ty).
STOKER_HOST_DEVICE inline float draw_shift(const ShiftPlan& s, SampleRng& rng, std::uint32_t value_slot,
                                           std::uint32_t sign_slot, int size) {
  float v = 0.0f;
  switch (s.kind) {
    case ShiftKind::None: return 0.0f;
    case ShiftKind::Uniform: v = rng.uniform(value_slot, -s.range, s.range); break;
    case ShiftKind::Integer:
      v = static_cast<float>(rng.below(value_slot, static_cast<std::uint32_t>(s.count)));
      if (rng.coin(sign_slot)) v = -v;
      break;
    case ShiftKind::Choices:
      v = s.choices[rng.below(value_slot, static_cast<std::uint32_t>(s.count))];
      if (rng.coin(sign_slot)) v = -v;
      break;
  }
  return s.fraction ? hd::mul(v, static_cast<float>(size)) : v;
}

// Centre crop box (Center) or fallback box (RandomResized) in source pixels, integer-aligned.
STOKER_HOST_DEVICE inline void center_box(const AugmentPlan& p, int src_h, int src_w, SampleParams& out) {
  float bw = static_cast<float>(src_w), bh = static_cast<float>(src_h);
  if (p.keep_aspect_ratio) {
    // The largest centred box of the output's aspect ratio (Keras' keep_aspect_ratio).
    const long long lhs = static_cast<long long>(src_w) * p.out_height;
    const long long rhs = static_cast<long long>(src_h) * p.out_width;
    if (lhs > rhs) {
      bw = static_cast<float>(rhs / p.out_height);  // too wide: crop columns
    } else if (lhs < rhs) {
      bh = static_cast<float>(lhs / p.out_width);  // too tall: crop rows
    }
  }
  if (p.center_fraction < 1.0f) {
    bw = floorf(hd::add(hd::mul(bw, p.center_fraction), 0.5f));
    bh = floorf(hd::add(hd::mul(bh, p.center_fraction), 0.5f));
    bw = hd::maxf(bw, 1.0f);
    bh = hd::maxf(bh, 1.0f);
  }
  out.crop_w = bw;
  out.crop_h = bh;
  out.crop_x = static_cast<float>((src_w - static_cast<int>(bw)) / 2);
  out.crop_y = static_cast<float>((src_h - static_cast<int>(bh)) / 2);
}

// torchvision's RandomResizedCrop.get_params: 10 attempts at an area fraction in [scale_lo,
// scale_hi) and a log-uniform aspect ratio, then a centre box clamped to the ratio range.
STOKER_HOST_DEVICE inline void random_resized_box(const AugmentPlan& p, SampleRng& rng, int src_h, int src_w,
                                                  SampleParams& out) {
  const float area = static_cast<float>(src_h) * static_cast<float>(src_w);
  const float log_lo = logf(p.crop_ratio_lo), log_hi = logf(p.crop_ratio_hi);
  for (int attempt = 0; attempt < kCropAttempts; ++attempt) {
    const std::uint32_t base = kSlotCrop + 4u * static_cast<std::uint32_t>(attempt);
    const float target = hd::mul(area, rng.uniform(base, p.crop_scale_lo, p.crop_scale_hi));
    const float ratio = expf(rng.uniform(base + 1, log_lo, log_hi));
    const int w = static_cast<int>(rintf(sqrtf(hd::mul(target, ratio))));
    const int h = static_cast<int>(rintf(sqrtf(target / ratio)));
    if (w > 0 && w <= src_w && h > 0 && h <= src_h) {
      out.crop_y = static_cast<float>(rng.below(base + 2, static_cast<std::uint32_t>(src_h - h + 1)));
      out.crop_x = static_cast<float>(rng.below(base + 3, static_cast<std::uint32_t>(src_w - w + 1)));
      out.crop_w = static_cast<float>(w);
      out.crop_h = static_cast<float>(h);
      return;
    }
  }
  int w = src_w, h = src_h;
  const float in_ratio = static_cast<float>(src_w) / static_cast<float>(src_h);
  if (in_ratio < p.crop_ratio_lo) {
    h = static_cast<int>(rintf(static_cast<float>(w) / p.crop_ratio_lo));
  } else if (in_ratio > p.crop_ratio_hi) {
    w = static_cast<int>(rintf(static_cast<float>(h) * p.crop_ratio_hi));
  }
  h = hd::clampi(h, 1, src_h);
  w = hd::clampi(w, 1, src_w);
  out.crop_w = static_cast<float>(w);
  out.crop_h = static_cast<float>(h);
  out.crop_x = static_cast<float>((src_w - w) / 2);
  out.crop_y = static_cast<float>((src_h - h) / 2);
}

// Draws the parameters of one sample. In validation mode (plan.training == false) only the
// deterministic part is set: the crop is the centre box (RandomResized falls back to it too).
STOKER_HOST_DEVICE inline SampleParams draw_params(const AugmentPlan& p, std::uint64_t seed, std::uint64_t epoch,
                                                   std::int64_t sample_id, int src_h, int src_w) {
  SampleParams s;
  s.crop_w = static_cast<float>(src_w);
  s.crop_h = static_cast<float>(src_h);
  if (p.crop == CropKind::Center || (p.crop == CropKind::RandomResized && !p.training)) {
    center_box(p, src_h, src_w, s);
  }
  if (!p.training) return s;
  SampleRng rng(seed, epoch, sample_id);
  if (p.crop == CropKind::RandomResized) random_resized_box(p, rng, src_h, src_w, s);
  if (p.rotation_range > 0.0f) s.theta = rng.uniform(kSlotTheta, -p.rotation_range, p.rotation_range);
  // Keras: tx from height_shift_range (times the height), ty from width_shift_range (times the
  // width); tx translates the matrix's first coordinate. keras_axes == false swaps them back so
  // that height_shift moves rows (see build_affine).
  const float hs = draw_shift(p.height_shift, rng, kSlotTxValue, kSlotTxSign, p.out_height);
  const float ws = draw_shift(p.width_shift, rng, kSlotTyValue, kSlotTySign, p.out_width);
  s.tx = p.keras_axes ? hs : ws;
  s.ty = p.keras_axes ? ws : hs;
  if (p.shear_range > 0.0f) s.shear = rng.uniform(kSlotShear, -p.shear_range, p.shear_range);
  if (!(p.zoom_lo == 1.0f && p.zoom_hi == 1.0f)) {
    s.zx = rng.uniform(kSlotZx, p.zoom_lo, p.zoom_hi);
    s.zy = rng.uniform(kSlotZy, p.zoom_lo, p.zoom_hi);
  }
  s.flip_horizontal = p.horizontal_flip && rng.coin(kSlotFlipH);
  s.flip_vertical = p.vertical_flip && rng.coin(kSlotFlipV);
  if (p.channel_shift_range > 0.0f) {
    s.has_channel_shift = true;
    s.channel_shift = rng.uniform(kSlotChannelShift, -p.channel_shift_range, p.channel_shift_range);
  }
  if (p.brightness) {
    s.has_brightness = true;
    s.brightness = rng.uniform(kSlotBrightness, p.brightness_lo, p.brightness_hi);
  }
  if (p.contrast > 0.0f) {
    s.has_contrast = true;
    s.contrast = rng.uniform(kSlotContrast, hd::maxf(0.0f, 1.0f - p.contrast), 1.0f + p.contrast);
  }
  if (p.saturation > 0.0f) {
    s.has_saturation = true;
    s.saturation = rng.uniform(kSlotSaturation, hd::maxf(0.0f, 1.0f - p.saturation), 1.0f + p.saturation);
  }
  if (p.hue > 0.0f) {
    s.has_hue = true;
    s.hue = rng.uniform(kSlotHue, -p.hue, p.hue);
  }
  return s;
}

namespace detail {
struct M3 {
  double a[9];
};
STOKER_HOST_DEVICE inline M3 mul3(const M3& x, const M3& y) {
  M3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r.a[i * 3 + j] = x.a[i * 3] * y.a[j] + x.a[i * 3 + 1] * y.a[3 + j] + x.a[i * 3 + 2] * y.a[6 + j];
  return r;
}
}  // namespace detail

// The output->source matrix: flips of the output (Keras flips after the warp), then Keras'
// transform at the output size (rotation . shift . shear . zoom about the centre, acting on
// (x, y) = (column, row)), then the map from output-size pixel centres into the crop box.
STOKER_HOST_DEVICE inline Affine build_affine(const AugmentPlan& p, const SampleParams& s) {
  using detail::M3;
  const double w = p.out_width, h = p.out_height;
  const double kPi = 3.14159265358979323846;
  M3 f{{1, 0, 0, 0, 1, 0, 0, 0, 1}};
  if (s.flip_horizontal) f.a[0] = -1, f.a[2] = w - 1;
  if (s.flip_vertical) f.a[4] = -1, f.a[5] = h - 1;

  M3 k{{1, 0, 0, 0, 1, 0, 0, 0, 1}};
  if (!s.neutral_geometry()) {
    const double t = static_cast<double>(s.theta) * kPi / 180.0;
    const double sh = static_cast<double>(s.shear) * kPi / 180.0;
    const M3 rot{{cos(t), -sin(t), 0, sin(t), cos(t), 0, 0, 0, 1}};
    const M3 shift{{1, 0, static_cast<double>(s.tx), 0, 1, static_cast<double>(s.ty), 0, 0, 1}};
    const M3 shear{{1, -sin(sh), 0, 0, cos(sh), 0, 0, 0, 1}};
    const M3 zoom{{static_cast<double>(s.zx), 0, 0, 0, static_cast<double>(s.zy), 0, 0, 0, 1}};
    const M3 a = detail::mul3(detail::mul3(detail::mul3(rot, shift), shear), zoom);
    // Keras (transform_matrix_offset_center(matrix, h, w)) centres x on h/2 - 0.5.
    const double ox = p.keras_axes ? h / 2 - 0.5 : w / 2 - 0.5;
    const double oy = p.keras_axes ? w / 2 - 0.5 : h / 2 - 0.5;
    const M3 to{{1, 0, ox, 0, 1, oy, 0, 0, 1}};
    const M3 from{{1, 0, -ox, 0, 1, -oy, 0, 0, 1}};
    k = detail::mul3(detail::mul3(to, a), from);
  }
  const double sx = static_cast<double>(s.crop_w) / w, sy = static_cast<double>(s.crop_h) / h;
  const M3 resize{{sx, 0, s.crop_x + 0.5 * sx - 0.5, 0, sy, s.crop_y + 0.5 * sy - 0.5, 0, 0, 1}};
  const M3 total = detail::mul3(detail::mul3(resize, k), f);
  Affine out;
  for (int i = 0; i < 6; ++i) out.m[i] = total.a[i];
  return out;
}

// True when the geometry is only crop + resize (+ flips): the executors then resample like
// cv::resize (pixel-centre aligned, edge pixels repeated) instead of warping, so that neutral
// parameters reproduce the plain resize exactly.
STOKER_HOST_DEVICE inline bool is_resize_only(const SampleParams& s) { return s.neutral_geometry(); }

}  // namespace stoker::augment
