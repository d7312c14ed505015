// Per-pixel math shared by every executor: where an output pixel comes from, how it is sampled
// (fill modes, bilinear or nearest), the photometric steps and the output conversion. The slow
// reference executor (Augmenter::apply_reference) is these functions in a loop; the CUDA kernel
// is meant to be the same loop on a device. The CPU fast
// path's warp loop steps through the same fixed-point coordinates and calls sample_fixed() at
// the borders, so warps agree bit for bit; the crop+resize-only case uses cv::resize, which
// the reference follows within one grey level.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hd_math.hpp"
#include "params.hpp"
#include "stoker/augment/plan.hpp"

namespace stoker::augment {

// A read-only interleaved uint8 image (the same fields as stoker::ImageView, without methods).
struct PixelSource {
  const std::uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 3;
  std::size_t row_stride = 0;
};

// Source coordinates are 64-bit fixed point with 32 fractional bits: for output row y,
// X(x) = X0(y) + x * DX with X0 = round((m[1] y + m[2]) 2^32) and DX = round(m[0] 2^32) (same
// for Y), so every executor, stepping or not, computes bit-identical coordinates. Bilinear
// weights use the top 8 fractional bits (1/256 px, 32x finer than OpenCV's warpAffine): the
// result is within half a grey level of exact bilinear sampling even across hard edges.
inline constexpr int kCoordBits = 32;
inline constexpr long long kCoordOne = 1LL << kCoordBits;
inline constexpr int kWeightBits = 8;
inline constexpr int kWeightOne = 1 << kWeightBits;

struct FixedRow {
  long long x0, y0, dx, dy;
};

STOKER_HOST_DEVICE inline FixedRow fixed_row(const Affine& a, int y) {
  constexpr double kScale = static_cast<double>(kCoordOne);
  FixedRow r;
  r.dx = hd::round_even(hd::dmul(a.m[0], kScale));
  r.dy = hd::round_even(hd::dmul(a.m[3], kScale));
  r.x0 = hd::round_even(hd::dmul(hd::dadd(hd::dmul(a.m[1], static_cast<double>(y)), a.m[2]), kScale));
  r.y0 = hd::round_even(hd::dmul(hd::dadd(hd::dmul(a.m[4], static_cast<double>(y)), a.m[5]), kScale));
  return r;
}

// scipy's "wrap" on a fixed-point coordinate: inside [0, n - 1] unchanged, outside periodic with
// period n - 1 (the first and the last pixel overlap).
STOKER_HOST_DEVICE inline long long wrap_fixed(long long X, int n) {
  if (n <= 1) return 0;
  const long long period = static_cast<long long>(n - 1) << kCoordBits;
  if (X < 0 || X > period) {
    X %= period;
    if (X < 0) X += period;
  }
  return X;
}

// Index of tap i along an axis of length n (reflect: d c b a | a b c d | d c b a; the other
// modes have already brought the coordinate inside, so the tap is only clamped).
STOKER_HOST_DEVICE inline int tap_index(long long i, int n, FillMode mode) {
  if (i >= 0 && i < n) return static_cast<int>(i);
  if (mode == FillMode::Reflect && n > 1) {
    const long long period = 2LL * n;
    long long j = i % period;
    if (j < 0) j += period;
    return static_cast<int>(j < n ? j : period - 1 - j);
  }
  return i < 0 ? 0 : n - 1;
}

STOKER_HOST_DEVICE inline std::uint8_t cval_u8(const AugmentPlan& p) { return hd::to_u8(p.cval); }

// Keras' sampling (scipy.ndimage.affine_transform, order 0 or 1) of the source at the fixed-point
// coordinate (X, Y), all channels, to uint8. Fill modes act on the coordinate as scipy does:
// constant gives cval outside [0, n - 1] (no blending), nearest clamps, reflect mirrors about the
// outer pixel edge, wrap is periodic with period n - 1. truncate: round down instead of to
// nearest (Keras truncates to uint8 before its brightness step).
STOKER_HOST_DEVICE inline void sample_fixed(const PixelSource& src, const AugmentPlan& p, long long X, long long Y,
                                            bool truncate, std::uint8_t* out) {
  const int cn = src.channels;
  const long long xmax = static_cast<long long>(src.width - 1) << kCoordBits;
  const long long ymax = static_cast<long long>(src.height - 1) << kCoordBits;
  switch (p.fill_mode) {
    case FillMode::Constant:
      if (X < 0 || X > xmax || Y < 0 || Y > ymax) {
        const std::uint8_t cv = cval_u8(p);
        for (int c = 0; c < cn; ++c) out[c] = cv;
        return;
      }
      break;
    case FillMode::Nearest:
      X = X < 0 ? 0 : (X > xmax ? xmax : X);
      Y = Y < 0 ? 0 : (Y > ymax ? ymax : Y);
      break;
    case FillMode::Wrap:
      X = wrap_fixed(X, src.width);
      Y = wrap_fixed(Y, src.height);
      break;
    case FillMode::Reflect: break;
  }
  if (p.interpolation_order == 0) {
    const long long half = kCoordOne / 2;
    const int ix = tap_index((X + half) >> kCoordBits, src.width, p.fill_mode);
    const int iy = tap_index((Y + half) >> kCoordBits, src.height, p.fill_mode);
    const std::uint8_t* px =
        src.data + static_cast<std::size_t>(iy) * src.row_stride + static_cast<std::size_t>(ix) * cn;
    for (int c = 0; c < cn; ++c) out[c] = px[c];
    return;
  }
  const long long sx = X >> kCoordBits, sy = Y >> kCoordBits;
  const int fx = static_cast<int>((X >> (kCoordBits - kWeightBits)) & (kWeightOne - 1));
  const int fy = static_cast<int>((Y >> (kCoordBits - kWeightBits)) & (kWeightOne - 1));
  const int x0 = tap_index(sx, src.width, p.fill_mode), x1 = tap_index(sx + 1, src.width, p.fill_mode);
  const int y0 = tap_index(sy, src.height, p.fill_mode), y1 = tap_index(sy + 1, src.height, p.fill_mode);
  const std::uint8_t* r0 = src.data + static_cast<std::size_t>(y0) * src.row_stride;
  const std::uint8_t* r1 = src.data + static_cast<std::size_t>(y1) * src.row_stride;
  const int bias = truncate ? 0 : (1 << (2 * kWeightBits - 1));
  for (int c = 0; c < cn; ++c) {
    const int top = r0[x0 * cn + c] * (kWeightOne - fx) + r0[x1 * cn + c] * fx;
    const int bot = r1[x0 * cn + c] * (kWeightOne - fx) + r1[x1 * cn + c] * fx;
    out[c] = static_cast<std::uint8_t>((top * (kWeightOne - fy) + bot * fy + bias) >> (2 * kWeightBits));
  }
}

// Warped value of output pixel (dx, dy).
STOKER_HOST_DEVICE inline void sample_warp(const PixelSource& src, const AugmentPlan& p, const Affine& a, int dx,
                                           int dy, bool truncate, std::uint8_t* out) {
  const FixedRow r = fixed_row(a, dy);
  sample_fixed(src, p, r.x0 + dx * r.dx, r.y0 + dx * r.dy, truncate, out);
}

// Crop + resize (+ flips) without a warp, like cv::resize: pixel centres aligned, edge pixels
// repeated, the coordinate computed in float as OpenCV does; exact bilinear weights. Nearest
// takes the pixel whose centre is nearest (floor((x + 0.5) * scale)), as PIL does.
STOKER_HOST_DEVICE inline void resize_coord(int d, int out_size, float crop_origin, float crop_size, int order, int& i0,
                                            float& f) {
  if (order == 0) {
    const double scale = static_cast<double>(crop_size) / out_size;
    int s = static_cast<int>(floor((d + 0.5) * scale));
    s = hd::clampi(s, 0, static_cast<int>(crop_size) - 1);
    i0 = s + static_cast<int>(crop_origin);
    f = 0.0f;
    return;
  }
  const double scale = 1.0 / (static_cast<double>(out_size) / static_cast<double>(crop_size));
  float fc = static_cast<float>((d + 0.5) * scale - 0.5);
  int s = static_cast<int>(floorf(fc));
  fc -= static_cast<float>(s);
  const int n = static_cast<int>(crop_size);
  if (s < 0) fc = 0.0f, s = 0;
  if (s >= n - 1) fc = 0.0f, s = n - 1;
  i0 = s + static_cast<int>(crop_origin);
  f = fc;
}

STOKER_HOST_DEVICE inline void sample_resize(const PixelSource& src, const AugmentPlan& p, const SampleParams& s,
                                             int dx, int dy, std::uint8_t* out) {
  const int cn = src.channels;
  const int ox = s.flip_horizontal ? p.out_width - 1 - dx : dx;
  const int oy = s.flip_vertical ? p.out_height - 1 - dy : dy;
  int x0, y0;
  float fx, fy;
  resize_coord(ox, p.out_width, s.crop_x, s.crop_w, p.interpolation_order, x0, fx);
  resize_coord(oy, p.out_height, s.crop_y, s.crop_h, p.interpolation_order, y0, fy);
  const int x1 = fx > 0.0f ? x0 + 1 : x0, y1 = fy > 0.0f ? y0 + 1 : y0;
  const std::uint8_t* r0 = src.data + static_cast<std::size_t>(y0) * src.row_stride;
  const std::uint8_t* r1 = src.data + static_cast<std::size_t>(y1) * src.row_stride;
  for (int c = 0; c < cn; ++c) {
    const float top = r0[x0 * cn + c] + fx * (static_cast<float>(r0[x1 * cn + c]) - r0[x0 * cn + c]);
    const float bot = r1[x0 * cn + c] + fx * (static_cast<float>(r1[x1 * cn + c]) - r1[x0 * cn + c]);
    out[c] = hd::to_u8(top + fy * (bot - top));
  }
}

// The geometric part of one output pixel, whichever path the parameters select.
STOKER_HOST_DEVICE inline void sample_geometry(const PixelSource& src, const AugmentPlan& p, const SampleParams& s,
                                               const Affine& a, int dx, int dy, std::uint8_t* out) {
  if (is_resize_only(s)) {
    sample_resize(src, p, s, dx, dy, out);
  } else {
    sample_warp(src, p, a, dx, dy, s.has_brightness, out);
  }
}

// Statistics of the warped uint8 image that the photometric steps need (integers, so that any
// reduction order gives the same result): min and max over all values (Keras' channel shift clips
// to them) and the sum of PIL's luma L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 (contrast).
struct WarpStats {
  int min = 0;
  int max = 255;
  std::uint64_t luma_sum = 0;
  std::uint64_t pixels = 1;
};

// floor() of a non-negative float (a plain conversion: floorf is a library call on baseline x86-64).
STOKER_HOST_DEVICE inline float floor_pos(float v) { return static_cast<float>(static_cast<int>(v)); }

STOKER_HOST_DEVICE inline int pil_luma(int r, int g, int b) {
  return (19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16;
}

// PIL's ImageEnhance blend of a degenerate value d and the pixel v by factor f, as uint8:
// truncated towards zero and clipped to [0, 255].
STOKER_HOST_DEVICE inline float pil_blend(float d, float v, float f) {
  const float t = hd::add(d, hd::mul(f, hd::add(v, -d)));
  if (t <= 0.0f) return 0.0f;
  if (t >= 255.0f) return 255.0f;
  return floor_pos(t);
}

// Grey level the contrast step blends towards: the warped image's mean luma after the channel
// shift and brightness steps applied to it (clipping inside the image ignored), rounded as PIL.
STOKER_HOST_DEVICE inline float contrast_mean(const SampleParams& s, const WarpStats& st) {
  float m = static_cast<float>(static_cast<double>(st.luma_sum) / static_cast<double>(st.pixels));
  if (s.has_channel_shift)
    m = hd::clampf(hd::add(m, s.channel_shift), static_cast<float>(st.min), static_cast<float>(st.max));
  if (s.has_brightness) m = hd::mul(m, s.brightness);
  return floorf(m + 0.5f);
}

STOKER_HOST_DEVICE inline void rgb_to_hsv(float r, float g, float b, float& h, float& sat, float& v) {
  const float mx = hd::maxf(r, hd::maxf(g, b)), mn = hd::minf(r, hd::minf(g, b));
  v = mx;
  const float d = mx - mn;
  sat = mx > 0.0f ? d / mx : 0.0f;
  if (d <= 0.0f) {
    h = 0.0f;
    return;
  }
  if (mx == r) {
    h = (g - b) / d;
    if (h < 0.0f) h += 6.0f;
  } else if (mx == g) {
    h = (b - r) / d + 2.0f;
  } else {
    h = (r - g) / d + 4.0f;
  }
  h /= 6.0f;
}

STOKER_HOST_DEVICE inline void hsv_to_rgb(float h, float sat, float v, float& r, float& g, float& b) {
  const float h6 = h * 6.0f;  // h in [0, 1)
  int i = static_cast<int>(h6);
  const float f = h6 - static_cast<float>(i);
  if (i > 5) i = 5;
  const float p = v * (1.0f - sat), q = v * (1.0f - sat * f), t = v * (1.0f - sat * (1.0f - f));
  switch (i) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
}

// The photometric steps on one pixel (values on the 0..255 scale), in Keras' order and then the
// colour jitter: channel shift (clipped to the image's [min, max]), brightness (PIL: truncate to
// uint8, scale, truncate), contrast, saturation (PIL ImageEnhance semantics), hue (HSV rotation).
STOKER_HOST_DEVICE inline void photometric(const SampleParams& s, const WarpStats& st, float cmean, int cn, float* v) {
  if (s.has_channel_shift) {
    for (int c = 0; c < cn; ++c)
      v[c] = hd::clampf(hd::add(v[c], s.channel_shift), static_cast<float>(st.min), static_cast<float>(st.max));
  }
  if (s.has_brightness) {
    for (int c = 0; c < cn; ++c) v[c] = pil_blend(0.0f, floor_pos(hd::maxf(v[c], 0.0f)), s.brightness);
  }
  if (s.has_contrast) {
    for (int c = 0; c < cn; ++c) v[c] = pil_blend(cmean, v[c], s.contrast);
  }
  if (cn >= 3 && s.has_saturation) {
    const float l =
        static_cast<float>(pil_luma(static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])));
    for (int c = 0; c < 3; ++c) v[c] = pil_blend(l, v[c], s.saturation);
  }
  if (cn >= 3 && s.has_hue) {
    float h, sat, val;
    rgb_to_hsv(v[0], v[1], v[2], h, sat, val);
    h += s.hue;  // h in [0, 1), hue in [-0.5, 0.5]
    if (h < 0.0f) h += 1.0f;
    if (h >= 1.0f) h -= 1.0f;
    hsv_to_rgb(h, sat, val, v[0], v[1], v[2]);
  }
}

// Per-channel output = value * scale[c] + offset[c], folding rescale, sample-wise and
// feature-wise standardisation and the mean/std normalisation (c is the output channel; with
// swap_rb it reads input channel 2 - c). sample_mean/std: of the rescaled image (Keras' order).
struct OutputAffine {
  float scale[kMaxChannels];
  float offset[kMaxChannels];
  int source_channel[kMaxChannels];
};

STOKER_HOST_DEVICE inline OutputAffine output_affine(const AugmentPlan& p, int cn, float sample_mean,
                                                     float sample_std) {
  OutputAffine o{};
  for (int oc = 0; oc < cn; ++oc) {
    const int ic = (p.swap_rb && cn >= 3 && oc < 3) ? 2 - oc : oc;
    double a = p.rescale, b = 0.0;  // value = v * a + b
    if (p.samplewise_center) b -= sample_mean;
    if (p.samplewise_std) {
      const double d = static_cast<double>(sample_std) + 1e-6;
      a /= d, b /= d;
    }
    if (p.featurewise_center) b -= p.feature_mean[ic];
    if (p.featurewise_std) {
      const double d = static_cast<double>(p.feature_std[ic]) + 1e-6;
      a /= d, b /= d;
    }
    a /= p.norm_std[oc];
    b = (b - p.norm_mean[oc]) / p.norm_std[oc];
    o.scale[oc] = static_cast<float>(a);
    o.offset[oc] = static_cast<float>(b);
    o.source_channel[oc] = ic;
  }
  return o;
}

// Element offset of (x, y, channel c) in the output.
STOKER_HOST_DEVICE inline std::size_t output_index(const AugmentPlan& p, int x, int y, int c) {
  if (p.nchw) return (static_cast<std::size_t>(c) * p.out_height + y) * p.out_width + x;
  return (static_cast<std::size_t>(y) * p.out_width + x) * p.channels + c;
}

}  // namespace stoker::augment
