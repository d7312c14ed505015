// Internal: the convolution the cuDNN backend asks cuDNN for, said once as plain loops over float
// values. The plan's host executors (plan_host.cpp, train_host.cpp) and the emulated device's
// stand-in for cuDNN (emulated_conv.cpp) run these; cuDNN itself runs on a GPU (conv.cpp).
// NHWC values, KRSC weights (oc × kh × kw × c / groups), float32 accumulation over ky, kx, c.
#pragma once

#include <algorithm>
#include <cstddef>

#include <stoker/core/image.hpp>

#include "plan/plan.hpp"

namespace stoker::trainer::cudnn {

// One convolution: images × h × w × c with padding pad_h / pad_w on both sides, weights KRSC,
// groups, output images × oh × ow × oc. The images vary per call.
struct ConvGeometry {
  int c = 0, h = 0, w = 0, oc = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, pad_h = 0, pad_w = 0, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
  DType storage = DType::F16;
};

// The convolution running a plan's Conv op: over its explicitly padded input (then with no
// padding of its own) or with the op's symmetric padding.
inline ConvGeometry conv_geometry(const Op& op, DType storage) {
  ConvGeometry g;
  g.c = op.c, g.oc = op.oc, g.oh = op.oh, g.ow = op.ow;
  g.h = op.explicit_pad ? op.padded_h() : op.h;
  g.w = op.explicit_pad ? op.padded_w() : op.w;
  g.pad_h = op.explicit_pad ? 0 : op.pad_top;
  g.pad_w = op.explicit_pad ? 0 : op.pad_left;
  g.kh = op.kh, g.kw = op.kw, g.sh = op.sh, g.sw = op.sw, g.dh = op.dh, g.dw = op.dw;
  g.groups = op.groups;
  g.storage = storage;
  return g;
}

// Every tap of the convolution in one fixed order: for each output element y_at (images, oy, ox,
// o), tap(y_at, x_at, w_at, n) for each kernel position inside the input, where x[x_at + k] meets
// w[w_at + k] for k < n (the group's channels); then done(y_at).
template <typename Tap, typename Done>
void for_each_conv_tap(const ConvGeometry& g, std::size_t images, Tap&& tap, Done&& done) {
  const int cg = g.c / g.groups, og = g.oc / g.groups;
  for (std::size_t i = 0; i < images; ++i)
    for (int oy = 0; oy < g.oh; ++oy)
      for (int ox = 0; ox < g.ow; ++ox)
        for (int o = 0; o < g.oc; ++o) {
          const std::size_t y_at = ((i * g.oh + oy) * g.ow + ox) * g.oc + o;
          const std::size_t group_at = static_cast<std::size_t>(o / og) * cg;
          for (int ky = 0; ky < g.kh; ++ky) {
            const int iy = oy * g.sh - g.pad_h + ky * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int kx = 0; kx < g.kw; ++kx) {
              const int ix = ox * g.sw - g.pad_w + kx * g.dw;
              if (ix < 0 || ix >= g.w) continue;
              tap(y_at, ((i * g.h + iy) * g.w + ix) * g.c + group_at,
                  ((static_cast<std::size_t>(o) * g.kh + ky) * g.kw + kx) * cg, cg);
            }
          }
          done(y_at);
        }
}

// y = conv(x), unrounded float32 sums.
inline void conv_forward_sums(const ConvGeometry& g, std::size_t images, const float* x, const float* w, float* y) {
  float acc = 0.0f;
  for_each_conv_tap(
      g, images,
      [&](std::size_t, std::size_t xa, std::size_t wa, int n) {
        for (int k = 0; k < n; ++k) acc += x[xa + k] * w[wa + k];
      },
      [&](std::size_t ya) {
        y[ya] = acc;
        acc = 0.0f;
      });
}

// From dy: dx = the input's gradient (images × h × w × c), dw = the weights' gradient (KRSC, summed
// over the images), unrounded float32 sums; either may be null. Both are overwritten.
inline void conv_backward_sums(const ConvGeometry& g, std::size_t images, const float* x, const float* w,
                               const float* dy, float* dx, float* dw) {
  if (dx) std::fill(dx, dx + images * g.h * g.w * g.c, 0.0f);
  if (dw) std::fill(dw, dw + static_cast<std::size_t>(g.oc) * g.kh * g.kw * (g.c / g.groups), 0.0f);
  for_each_conv_tap(
      g, images,
      [&](std::size_t ya, std::size_t xa, std::size_t wa, int n) {
        const float d = dy[ya];
        for (int k = 0; k < n; ++k) {
          if (dx) dx[xa + k] += d * w[wa + k];
          if (dw) dw[wa + k] += d * x[xa + k];
        }
      },
      [](std::size_t) {});
}

}  // namespace stoker::trainer::cudnn
