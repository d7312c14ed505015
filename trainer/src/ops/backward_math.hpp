// Internal: per-element math of the GPU trainer's backward kernels (cuda/backward_kernels.cu),
// shared with their host twins (twin/train_host.cpp), as forward_math.hpp is for the forward; the
// activations' gradients are activation.hpp's, which the CPU backward uses too. Every function
// computes one gradient element by gathering what contributes to it, so the kernels need no
// atomics and give the same sums in the same order on every run. Values are read through a
// functor `x(i)` returning element i as float (storage type on the GPU), gradients are float32.
#pragma once

#include <cmath>
#include <cstddef>

#include <stoker/core/host_device.hpp>

#include "forward_math.hpp"

namespace stoker::trainer::ops {

// Zero padding's inverse: the output element input element e was copied to, if it was not cut
// (negative sides crop). The gradient of the input is that element's.
template <typename I>
STOKER_HOST_DEVICE inline bool pad_destination(const PadGeometry& g, I e, I* dst) {
  const Pixel<I> p = unflatten(e, g.h, g.w, g.c);
  const int oy = p.oy + g.top, ox = p.ox + g.left;
  if (oy < 0 || oy >= g.oh || ox < 0 || ox >= g.ow) return false;
  *dst = nhwc_index(p.image, oy, ox, p.o, g.oh, g.ow, g.c);
  return true;
}

// The first and one-past-last output rows whose window (stride s, offset `before`, kernel extent k,
// dilation d) reads input row i at kernel tap `tap`: out = (i + before - tap·d) / s when it divides.
STOKER_HOST_DEVICE inline bool window_output(int i, int before, int tap, int d, int s, int out_size, int* out) {
  const int t = i + before - tap * d;
  if (t < 0 || t % s != 0) return false;
  *out = t / s;
  return *out < out_size;
}

// Depthwise convolution, gradient of input element e (NHWC over h × w × c): every output channel
// of its input channel, at every tap that reads it. dy(i) loads the output gradient.
template <typename Load, typename I>
STOKER_HOST_DEVICE inline float depthwise_input_gradient(const Load& dy, const float* wt, const DepthwiseGeometry& g,
                                                         I e) {
  const Pixel<I> p = unflatten(e, g.h, g.w, g.c);
  float acc = 0.0f;
  for (int ky = 0; ky < g.kh; ++ky) {
    int oy = 0;
    if (!window_output(p.oy, g.top, ky, g.dh, g.sh, g.oh, &oy)) continue;
    for (int kx = 0; kx < g.kw; ++kx) {
      int ox = 0;
      if (!window_output(p.ox, g.left, kx, g.dw, g.sw, g.ow, &ox)) continue;
      for (int m = 0; m < g.mult; ++m) {
        const int o = p.o * g.mult + m;
        acc += dy(nhwc_index(p.image, oy, ox, o, g.oh, g.ow, g.oc)) * wt[(ky * g.kw + kx) * g.oc + o];
      }
    }
  }
  return acc;
}

// Depthwise convolution, partial gradient of weight k = (ky·kw + kx)·oc + o over the output
// pixels [p0, p1) (p = (image·oh + oy)·ow + ox): the sum of dy · x over them, in pixel order.
template <typename LoadX, typename LoadDy>
STOKER_HOST_DEVICE inline float depthwise_weight_partial(const LoadX& x, const LoadDy& dy, const DepthwiseGeometry& g,
                                                         int k, std::size_t p0, std::size_t p1) {
  const int o = k % g.oc, tap = k / g.oc, ky = tap / g.kw, kx = tap % g.kw;
  const int ci = o / g.mult;
  float acc = 0.0f;
  for (std::size_t p = p0; p < p1; ++p) {
    const int ox = static_cast<int>(p % static_cast<std::size_t>(g.ow));
    const std::size_t r = p / static_cast<std::size_t>(g.ow);
    const int oy = static_cast<int>(r % static_cast<std::size_t>(g.oh));
    const std::size_t image = r / static_cast<std::size_t>(g.oh);
    const int iy = oy * g.sh - g.top + ky * g.dh, ix = ox * g.sw - g.left + kx * g.dw;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
    acc += dy(p * static_cast<std::size_t>(g.oc) + static_cast<std::size_t>(o)) *
           x(nhwc_index(image, iy, ix, ci, g.h, g.w, g.c));
  }
  return acc;
}

// Pooling, gradient of input element e: max pooling gives it the gradient of every window whose
// first maximum (in window order, as the forward's and the CPU backward's) it is; average pooling
// its share of every window that reads it (the window's pixels inside the input).
template <typename LoadX, typename LoadDy, typename I>
STOKER_HOST_DEVICE inline float pool_input_gradient(const LoadX& x, const LoadDy& dy, const PoolGeometry& g,
                                                    bool is_max, I e) {
  const Pixel<I> p = unflatten(e, g.h, g.w, g.c);
  float acc = 0.0f;
  for (int ky = 0; ky < g.kh; ++ky) {
    int oy = 0;
    if (!window_output(p.oy, g.top, ky, 1, g.sh, g.oh, &oy)) continue;
    const int wy = oy * g.sh - g.top;
    const int y0 = wy > 0 ? wy : 0, y1 = wy + g.kh < g.h ? wy + g.kh : g.h;
    for (int kx = 0; kx < g.kw; ++kx) {
      int ox = 0;
      if (!window_output(p.ox, g.left, kx, 1, g.sw, g.ow, &ox)) continue;
      const int wx = ox * g.sw - g.left;
      const int x0 = wx > 0 ? wx : 0, x1 = wx + g.kw < g.w ? wx + g.kw : g.w;
      const float d = dy(nhwc_index(p.image, oy, ox, p.o, g.oh, g.ow, g.c));
      if (!is_max) {
        acc += d * (1.0f / static_cast<float>((y1 - y0) * (x1 - x0)));
        continue;
      }
      float best = -INFINITY;
      int by = -1, bx = -1;
      for (int iy = y0; iy < y1; ++iy)
        for (int ix = x0; ix < x1; ++ix) {
          const float v = x(nhwc_index(p.image, iy, ix, p.o, g.h, g.w, g.c));
          if (v > best) best = v, by = iy, bx = ix;
        }
      if (by == p.oy && bx == p.ox) acc += d;
    }
  }
  return acc;
}

// Global pooling over hw pixels of c channels, gradient of input element e = (image·hw + p)·c + ch:
// the average's 1/hw share, or the whole gradient at the channel's first maximum.
template <typename LoadX, typename LoadDy, typename I>
STOKER_HOST_DEVICE inline float global_pool_input_gradient(const LoadX& x, const LoadDy& dy, int hw, int c, bool is_max,
                                                           I e) {
  const I ch = e % static_cast<I>(c);
  const I image = e / static_cast<I>(c) / static_cast<I>(hw);
  const float d = dy(image * static_cast<I>(c) + ch);
  if (!is_max) return d / static_cast<float>(hw);
  const I base = image * static_cast<I>(hw) * static_cast<I>(c) + ch;
  float best = -INFINITY;
  I arg = base + static_cast<I>(hw) * static_cast<I>(c);  // none
  for (int p = 0; p < hw; ++p) {
    const I at = base + static_cast<I>(p) * static_cast<I>(c);
    const float v = x(at);
    if (v > best) best = v, arg = at;
  }
  return arg == e ? d : 0.0f;
}

// Multiply with a per-image-and-channel second input (a squeeze-and-excitation scale): the
// gradient of that input's element e = image·c + ch, the sum over the image's pixels of dy · a.
template <typename LoadA, typename LoadDy, typename I>
STOKER_HOST_DEVICE inline float broadcast_mul_gradient(const LoadA& a, const LoadDy& dy, I per, int c, I e) {
  const I image = e / static_cast<I>(c), ch = e % static_cast<I>(c);
  const I pixels = per / static_cast<I>(c);
  float acc = 0.0f;
  for (I p = 0; p < pixels; ++p) {
    const I at = image * per + p * static_cast<I>(c) + ch;
    acc += dy(at) * a(at);
  }
  return acc;
}

// Layer normalization of the row of c values from `base`, input gradient of value j:
// rstd · (g_j − mean(g) − x̂_j · mean(g · x̂)) with g = dy · scale and x̂ = (x − mean) · rstd.
// `sums` are mean(g) and mean(g · x̂) of the row (layer_norm_sums).
struct LayerNormSums {
  float mean_g, mean_gx;
};
template <typename LoadX, typename LoadDy, typename I>
STOKER_HOST_DEVICE inline LayerNormSums layer_norm_sums(const LoadX& x, const LoadDy& dy, I base, int c,
                                                        const RowStats& s, const float* scale) {
  float sg = 0.0f, sgx = 0.0f;
  for (int j = 0; j < c; ++j) {
    const float g = dy(base + static_cast<I>(j)) * (scale ? scale[j] : 1.0f);
    sg += g;
    sgx += g * ((x(base + static_cast<I>(j)) - s.mean) * s.rstd);
  }
  return {sg / static_cast<float>(c), sgx / static_cast<float>(c)};
}
STOKER_HOST_DEVICE inline float layer_norm_input_gradient(float x, float dy, const RowStats& s,
                                                          const LayerNormSums& sums, const float* scale, int j) {
  const float g = dy * (scale ? scale[j] : 1.0f);
  return s.rstd * (g - sums.mean_g - (x - s.mean) * s.rstd * sums.mean_gx);
}

// Softmax over the row of n values from `base`: dL/dv_j = y_j · (dy_j − Σ_k dy_k · y_k).
template <typename LoadY, typename LoadDy, typename I>
STOKER_HOST_DEVICE inline float softmax_row_dot(const LoadY& y, const LoadDy& dy, I base, int n) {
  float dot = 0.0f;
  for (int k = 0; k < n; ++k) dot += dy(base + static_cast<I>(k)) * y(base + static_cast<I>(k));
  return dot;
}

// Column sums of a rows × c matrix of terms a(i) · b(i) (b may be all ones), in two passes with a
// fixed order: partial sums over blocks of kSumRows rows, then the blocks in order. The partial of
// column j over rows [r0, r1):
constexpr std::size_t kSumRows = 256;
template <typename LoadA, typename LoadB>
STOKER_HOST_DEVICE inline float column_partial(const LoadA& a, const LoadB& b, int c, int j, std::size_t r0,
                                               std::size_t r1) {
  float acc = 0.0f;
  for (std::size_t r = r0; r < r1; ++r) {
    const std::size_t i = r * static_cast<std::size_t>(c) + static_cast<std::size_t>(j);
    acc += a(i) * b(i);
  }
  return acc;
}

}  // namespace stoker::trainer::ops
