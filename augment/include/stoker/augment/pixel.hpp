// Per-pixel math shared by every executor: where an output pixel comes from, how it is sampled
// (fill modes, bilinear or nearest), the photometric steps and the output conversion. The slow
// reference executor (reference.hpp) is these functions in a loop; the CUDA kernel is meant to be
// the same loop on a device. The CPU fast path uses OpenCV, whose fixed-point conventions these
// functions reproduce (1/32 px sub-pixel grid, round-half-even coordinates) so that all three
// agree within one grey level.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/augment/host_device.hpp"
#include "stoker/augment/params.hpp"
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

inline constexpr int kSubpixelBits = 5;  // OpenCV's INTER_BITS: 1/32 px
inline constexpr int kSubpixel = 1 << kSubpixelBits;

// Source coordinate of output pixel (dx, dy) in fixed point, computed exactly as cv::warpAffine
// does (AB_BITS = 10): bits = 5 for bilinear (1/32 px units), 0 for nearest (rounded to pixels).
STOKER_HOST_DEVICE inline void warp_coord_fixed(const Affine& a, int dx, int dy, int bits, int& X, int& Y) {
  constexpr double kScale = 1024.0;
  const long long delta = bits == 0 ? 512 : (1024 / kSubpixel / 2);
  const long long ax = hd::round_even(hd::dmul(hd::dmul(a.m[0], dx), kScale));
  const long long ay = hd::round_even(hd::dmul(hd::dmul(a.m[3], dx), kScale));
  const long long x0 = hd::round_even(hd::dmul(hd::dadd(hd::dmul(a.m[1], dy), a.m[2]), kScale)) + delta;
  const long long y0 = hd::round_even(hd::dmul(hd::dadd(hd::dmul(a.m[4], dy), a.m[5]), kScale)) + delta;
  X = static_cast<int>((x0 + ax) >> (10 - bits));
  Y = static_cast<int>((y0 + ay) >> (10 - bits));
}

// scipy's "wrap" on a fixed-point coordinate: inside [0, n - 1] unchanged, outside periodic with
// period n - 1 (the first and the last pixel overlap).
STOKER_HOST_DEVICE inline int wrap_fixed(int X, int n, int bits) {
  if (n <= 1) return 0;
  const int period = (n - 1) << bits;
  if (X < 0 || X > period) {
    X %= period;
    if (X < 0) X += period;
  }
  return X;
}

// Index of tap i along an axis of length n; -1 means "use cval" (constant mode only).
STOKER_HOST_DEVICE inline int border_index(int i, int n, FillMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case FillMode::Constant: return -1;
    case FillMode::Nearest:
    case FillMode::Wrap:  // coordinates are wrapped first; only the weight-0 tap at n can remain
      return i < 0 ? 0 : n - 1;
    case FillMode::Reflect: {
      if (n == 1) return 0;
      const int period = 2 * n;
      int j = i % period;
      if (j < 0) j += period;
      return j < n ? j : period - 1 - j;
    }
  }
  return 0;
}

STOKER_HOST_DEVICE inline std::uint8_t cval_u8(const AugmentPlan& p) { return hd::to_u8(p.cval); }

// Warped value of output pixel (dx, dy), all channels, as uint8 (rounded, halves up).
STOKER_HOST_DEVICE inline void sample_warp(const PixelSource& src, const AugmentPlan& p, const Affine& a, int dx,
                                           int dy, std::uint8_t* out) {
  const int cn = src.channels;
  const std::uint8_t cv = cval_u8(p);
  if (p.interpolation_order == 0) {
    int X, Y;
    warp_coord_fixed(a, dx, dy, 0, X, Y);
    if (p.fill_mode == FillMode::Wrap) {
      X = wrap_fixed(X, src.width, 0);
      Y = wrap_fixed(Y, src.height, 0);
    }
    const int ix = border_index(X, src.width, p.fill_mode), iy = border_index(Y, src.height, p.fill_mode);
    for (int c = 0; c < cn; ++c) {
      out[c] = (ix < 0 || iy < 0) ? cv : src.data[static_cast<std::size_t>(iy) * src.row_stride + ix * cn + c];
    }
    return;
  }
  int X, Y;
  warp_coord_fixed(a, dx, dy, kSubpixelBits, X, Y);
  if (p.fill_mode == FillMode::Wrap) {
    X = wrap_fixed(X, src.width, kSubpixelBits);
    Y = wrap_fixed(Y, src.height, kSubpixelBits);
  }
  const int sx = X >> kSubpixelBits, sy = Y >> kSubpixelBits;
  const int fx = X & (kSubpixel - 1), fy = Y & (kSubpixel - 1);
  const int x0 = border_index(sx, src.width, p.fill_mode), x1 = border_index(sx + 1, src.width, p.fill_mode);
  const int y0 = border_index(sy, src.height, p.fill_mode), y1 = border_index(sy + 1, src.height, p.fill_mode);
  const int w00 = (kSubpixel - fx) * (kSubpixel - fy), w01 = fx * (kSubpixel - fy);
  const int w10 = (kSubpixel - fx) * fy, w11 = fx * fy;
  const std::uint8_t* r0 = y0 < 0 ? nullptr : src.data + static_cast<std::size_t>(y0) * src.row_stride;
  const std::uint8_t* r1 = y1 < 0 ? nullptr : src.data + static_cast<std::size_t>(y1) * src.row_stride;
  for (int c = 0; c < cn; ++c) {
    const int v00 = (r0 && x0 >= 0) ? r0[x0 * cn + c] : cv;
    const int v01 = (r0 && x1 >= 0) ? r0[x1 * cn + c] : cv;
    const int v10 = (r1 && x0 >= 0) ? r1[x0 * cn + c] : cv;
    const int v11 = (r1 && x1 >= 0) ? r1[x1 * cn + c] : cv;
    const int sum = v00 * w00 + v01 * w01 + v10 * w10 + v11 * w11;
    out[c] = static_cast<std::uint8_t>((sum + (kSubpixel * kSubpixel / 2)) >> (2 * kSubpixelBits));
  }
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

STOKER_HOST_DEVICE inline void sample_resize(const PixelSource& src, const AugmentPlan& p, const SampleParams& s, int dx,
                                             int dy, std::uint8_t* out) {
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
    sample_warp(src, p, a, dx, dy, out);
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

STOKER_HOST_DEVICE inline int pil_luma(int r, int g, int b) { return (19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16; }

// PIL's ImageEnhance blend of a degenerate value d and the pixel v by factor f, as uint8:
// truncated towards zero and clipped to [0, 255].
STOKER_HOST_DEVICE inline float pil_blend(float d, float v, float f) {
  const float t = hd::add(d, hd::mul(f, hd::add(v, -d)));
  if (t <= 0.0f) return 0.0f;
  if (t >= 255.0f) return 255.0f;
  return floorf(t);
}

// Grey level the contrast step blends towards: the warped image's mean luma after the channel
// shift and brightness steps applied to it (clipping inside the image ignored), rounded as PIL.
STOKER_HOST_DEVICE inline float contrast_mean(const SampleParams& s, const WarpStats& st) {
  float m = static_cast<float>(static_cast<double>(st.luma_sum) / static_cast<double>(st.pixels));
  if (s.has_channel_shift) m = hd::clampf(hd::add(m, s.channel_shift), static_cast<float>(st.min), static_cast<float>(st.max));
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
  const float h6 = h * 6.0f;
  const int i = static_cast<int>(floorf(h6)) % 6;
  const float f = h6 - floorf(h6);
  const float p = v * (1.0f - sat), q = v * (1.0f - sat * f), t = v * (1.0f - sat * (1.0f - f));
  switch (i < 0 ? i + 6 : i) {
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
    for (int c = 0; c < cn; ++c) v[c] = pil_blend(0.0f, floorf(v[c]), s.brightness);
  }
  if (s.has_contrast) {
    for (int c = 0; c < cn; ++c) v[c] = pil_blend(cmean, v[c], s.contrast);
  }
  if (cn >= 3 && s.has_saturation) {
    const float l = static_cast<float>(pil_luma(static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])));
    for (int c = 0; c < 3; ++c) v[c] = pil_blend(l, v[c], s.saturation);
  }
  if (cn >= 3 && s.has_hue) {
    float h, sat, val;
    rgb_to_hsv(v[0], v[1], v[2], h, sat, val);
    h += s.hue;
    h -= floorf(h);
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

STOKER_HOST_DEVICE inline OutputAffine output_affine(const AugmentPlan& p, int cn, float sample_mean, float sample_std) {
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
