#include "depthwise.hpp"

#include <cstring>

#include "simd.hpp"

namespace stoker::trainer::cpu {
namespace {

// (Not under ThreadSanitizer: the clones' ifunc resolvers would run before its runtime starts.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define STOKER_DW_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STOKER_DW_CLONES
#endif

STOKER_DW_CLONES
void line_impl(const float* x, const DepthwiseGeometry& g, int oy, const float* k, const float* bias, float* y) {
  const int c = g.c;
  const float* rows[3];
  for (int ky = 0; ky < 3; ++ky) {
    const int iy = oy * g.sh - g.pt + ky * g.dh;
    rows[ky] = (iy >= 0 && iy < g.h) ? x + static_cast<long>(iy) * g.w * c : nullptr;
  }
  int c0 = 0;
  for (; c0 + 8 <= c; c0 += 8) {
    v8 wv[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t) wv[t] = load8(k + t * c + c0);
    const v8 bv = bias ? load8(bias + c0) : v8{};
    for (int ox = 0; ox < g.ow; ++ox) {
      v8 acc{};  // bias last, see gemm.cpp
      const int ix0 = ox * g.sw - g.pl;
#pragma GCC unroll 3
      for (int ky = 0; ky < 3; ++ky) {
        if (!rows[ky]) continue;
#pragma GCC unroll 3
        for (int kx = 0; kx < 3; ++kx) {
          const int ix = ix0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc += load8(rows[ky] + static_cast<long>(ix) * c + c0) * wv[ky * 3 + kx];
        }
      }
      store8(y + static_cast<long>(ox) * c + c0, acc + bv);
    }
  }
  for (; c0 < c; ++c0) {  // channels past the last multiple of 8
    for (int ox = 0; ox < g.ow; ++ox) {
      float acc = 0.0f;
      const int ix0 = ox * g.sw - g.pl;
      for (int ky = 0; ky < 3; ++ky) {
        if (!rows[ky]) continue;
        for (int kx = 0; kx < 3; ++kx) {
          const int ix = ix0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc += rows[ky][static_cast<long>(ix) * c + c0] * k[(ky * 3 + kx) * c + c0];
        }
      }
      y[static_cast<long>(ox) * c + c0] = acc + (bias ? bias[c0] : 0.0f);
    }
  }
}

}  // namespace

void depthwise3x3_line(const float* x, const DepthwiseGeometry& g, int oy, const float* k, const float* bias,
                       float* y) {
  line_impl(x, g, oy, k, bias, y);
}

}  // namespace stoker::trainer::cpu
