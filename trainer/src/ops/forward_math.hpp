// Internal: the per-element math of the forward ops, shared by the cuDNN backend's CUDA kernels
// (cuda/kernels.cu), its host executor of the plan (twin/plan_host.cpp) and, where a formula is
// not a loop the CPU writes its own way, the CPU backend (cpu/forward.cpp). Plain values, passed
// by value; the activations are activation.hpp's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <stoker/core/host_device.hpp>
#include <stoker/trainer/graph.hpp>

#include "activation.hpp"

namespace stoker::trainer::ops {

// ---- per-element math of the kernels (kernels.cu) and of run_plan_host -----------------------------
// Each function computes output element `e` (NHWC, flat) from an input read through `x(i)`, a
// functor returning element i as float. The GPU calls them once per thread; the host executor of
// the plan calls the same functions in loops, so the host tests check the kernels' index math.

// The index type I is std::size_t, or std::uint32_t on the GPU when every index of the op fits
// (32-bit division is several times cheaper than 64-bit there).
// e = ((image * oh + oy) * ow + ox) * oc + o
template <typename I>
struct Pixel {
  I image;
  int oy, ox, o;
};
template <typename I>
STOKER_HOST_DEVICE inline Pixel<I> unflatten(I e, int oh, int ow, int oc) {
  Pixel<I> p;
  p.o = static_cast<int>(e % static_cast<I>(oc));
  I r = e / static_cast<I>(oc);
  p.ox = static_cast<int>(r % static_cast<I>(ow));
  r /= static_cast<I>(ow);
  p.oy = static_cast<int>(r % static_cast<I>(oh));
  p.image = r / static_cast<I>(oh);
  return p;
}
// Element (image, y, x, channel) of an NHWC tensor of h × w × c per image.
template <typename I>
STOKER_HOST_DEVICE inline I nhwc_index(I image, int y, int x, int channel, int h, int w, int c) {
  return ((image * static_cast<I>(h) + static_cast<I>(y)) * static_cast<I>(w) + static_cast<I>(x)) * static_cast<I>(c) +
         static_cast<I>(channel);
}

// Depthwise convolution, multiplier m = oc / c: output channel o reads input channel o / m.
// Weights float32 [kh][kw][oc]. TensorFlow padding: top/left offsets, bottom/right by bounds.
struct DepthwiseGeometry {
  int h, w, c, oh, ow, oc, kh, kw, sh, sw, dh, dw, top, left, mult;
};
template <typename Load, typename I>
STOKER_HOST_DEVICE inline float depthwise_sum(const Load& x, const float* wt, const DepthwiseGeometry& g, I e) {
  const Pixel<I> p = unflatten(e, g.oh, g.ow, g.oc);
  const int ci = p.o / g.mult;
  float acc = 0.0f;
  for (int ky = 0; ky < g.kh; ++ky) {
    const int iy = p.oy * g.sh - g.top + ky * g.dh;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.kw; ++kx) {
      const int ix = p.ox * g.sw - g.left + kx * g.dw;
      if (ix < 0 || ix >= g.w) continue;
      acc += x(nhwc_index(p.image, iy, ix, ci, g.h, g.w, g.c)) * wt[(ky * g.kw + kx) * g.oc + p.o];
    }
  }
  return acc;
}

// Max / average pooling; the average counts only the window's pixels inside the input (TensorFlow).
struct PoolGeometry {
  int h, w, c, oh, ow, kh, kw, sh, sw, top, left;
};
template <typename Load, typename I>
STOKER_HOST_DEVICE inline float pool_value(const Load& x, const PoolGeometry& g, bool is_max, I e) {
  const Pixel<I> p = unflatten(e, g.oh, g.ow, g.c);
  float acc = is_max ? -INFINITY : 0.0f;
  int count = 0;
  for (int ky = 0; ky < g.kh; ++ky) {
    const int iy = p.oy * g.sh - g.top + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.kw; ++kx) {
      const int ix = p.ox * g.sw - g.left + kx;
      if (ix < 0 || ix >= g.w) continue;
      const float v = x(nhwc_index(p.image, iy, ix, p.o, g.h, g.w, g.c));
      acc = is_max ? fmaxf(acc, v) : acc + v;
      ++count;
    }
  }
  if (!is_max && count > 0) acc /= static_cast<float>(count);
  return acc;
}

// Zero padding: whether output element e copies an input element (then *src is its index) or is 0.
struct PadGeometry {
  int h, w, c, oh, ow, top, left;
};
template <typename I>
STOKER_HOST_DEVICE inline bool pad_source(const PadGeometry& g, I e, I* src) {
  const Pixel<I> p = unflatten(e, g.oh, g.ow, g.c);
  const int iy = p.oy - g.top, ix = p.ox - g.left;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return false;
  *src = nhwc_index(p.image, iy, ix, p.o, g.h, g.w, g.c);
  return true;
}

// Global average pooling: e = image * c + channel.
template <typename Load, typename I>
STOKER_HOST_DEVICE inline float gap_value(const Load& x, int hw, int c, I e) {
  const I image = e / static_cast<I>(c);
  const I base = image * static_cast<I>(hw) * static_cast<I>(c) + e % static_cast<I>(c);
  float acc = 0.0f;
  for (int p = 0; p < hw; ++p) acc += x(base + static_cast<I>(p) * static_cast<I>(c));
  return acc / static_cast<float>(hw);
}

// Global max pooling: e = image * c + channel.
template <typename Load, typename I>
STOKER_HOST_DEVICE inline float gmp_value(const Load& x, int hw, int c, I e) {
  const I image = e / static_cast<I>(c);
  const I base = image * static_cast<I>(hw) * static_cast<I>(c) + e % static_cast<I>(c);
  float acc = -INFINITY;
  for (int p = 0; p < hw; ++p) acc = fmaxf(acc, x(base + static_cast<I>(p) * static_cast<I>(c)));
  return acc;
}

// Multiply: the element of the second input that element e of the first (per image `per` values,
// c channels) is multiplied by: the same, or its image's channel with channel_broadcast.
template <typename I>
STOKER_HOST_DEVICE inline I mul_source(I e, I per, int c, bool channel_broadcast) {
  return channel_broadcast ? e / per * static_cast<I>(c) + e % static_cast<I>(c) : e;
}

// Layer normalization of the row of c values from `base`: its mean and 1 / sqrt(var + epsilon)
// (two passes, float32), then value j is (x_j - mean) * rstd * scale[j] + bias[j] (scale/bias may
// be null). The CPU backend (forward and backward), the host executors and the kernels all use
// these two.
struct RowStats {
  float mean, rstd;
};
template <typename Load, typename I>
STOKER_HOST_DEVICE inline RowStats layer_norm_stats(const Load& x, I base, int c, float epsilon) {
  float sum = 0.0f;
  for (int j = 0; j < c; ++j) sum += x(base + static_cast<I>(j));
  const float mean = sum / static_cast<float>(c);
  float sq = 0.0f;
  for (int j = 0; j < c; ++j) {
    const float d = x(base + static_cast<I>(j)) - mean;
    sq += d * d;
  }
  return {mean, 1.0f / sqrtf(sq / static_cast<float>(c) + epsilon)};
}
STOKER_HOST_DEVICE inline float layer_norm_value(float x, const RowStats& s, const float* scale, const float* bias,
                                                 int j) {
  float v = (x - s.mean) * s.rstd;
  if (scale) v *= scale[j];
  if (bias) v += bias[j];
  return v;
}

// Concatenation: element e of an input with ck channels lands here in the output of oc channels.
template <typename I>
STOKER_HOST_DEVICE inline I concat_destination(I e, int ck, int oc, int offset) {
  return e / static_cast<I>(ck) * static_cast<I>(oc) + static_cast<I>(offset) + e % static_cast<I>(ck);
}

// The conv epilogue and the element-wise ops: act(x * scale + bias + z_scale * z); scale/bias may
// be null (1 / 0), has_z says whether z counts.
STOKER_HOST_DEVICE inline float affine_value(float x, const float* scale, const float* bias, int channel, bool has_z,
                                             float z, float z_scale, const ActParams& act) {
  float v = x;
  if (scale) v = v * scale[channel];
  if (bias) v = v + bias[channel];
  if (has_z) v = v + z_scale * z;
  return apply_act(v, act);
}

}  // namespace stoker::trainer::ops
