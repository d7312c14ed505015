#include "gemm.hpp"

#include <algorithm>
#include <cstring>

#include "simd.hpp"

namespace stoker::trainer::cpu {
namespace {

// R rows × 16 columns: acc = A[R, k] · Bpanel[k, 16] (+ bias), written to out (ldo).
template <int R>
inline __attribute__((always_inline)) void micro(int k, const float* a, int lda, const float* bp, const float* bias,
                                                 float* out, int ldo) {
  // The bias is added after the dot product: starting from it would round every partial sum at the
  // bias' magnitude (folded BatchNormalization shifts can be much larger than the result).
  v8 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = v8{}, acc[r][1] = v8{};
  for (int p = 0; p < k; ++p) {
    const v8 b0 = load8(bp + p * kPanel);
    const v8 b1 = load8(bp + p * kPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + p];
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  const v8 b0 = bias ? load8(bias) : v8{};
  const v8 b1 = bias ? load8(bias + 8) : v8{};
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc[r][0] += b0;
    acc[r][1] += b1;
    store8(out + r * ldo, acc[r][0]);
    store8(out + r * ldo + 8, acc[r][1]);
  }
}

template <int R>
inline __attribute__((always_inline)) void tile(int k, const float* a, int lda, const float* bp, const float* bias,
                                                float* c, int ldc, int cols) {
  if (cols == kPanel) {
    micro<R>(k, a, lda, bp, bias, c, ldc);
  } else {
    float tmp[R * kPanel];
    float bias_pad[kPanel] = {};
    if (bias) std::memcpy(bias_pad, bias, sizeof(float) * static_cast<std::size_t>(cols));
    micro<R>(k, a, lda, bp, bias ? bias_pad : nullptr, tmp, kPanel);
    for (int r = 0; r < R; ++r)
      std::memcpy(c + r * ldc, tmp + r * kPanel, sizeof(float) * static_cast<std::size_t>(cols));
  }
}

// (Not under ThreadSanitizer: the clones' ifunc resolvers would run before its runtime starts.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define STOKER_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STOKER_GEMM_CLONES
#endif

STOKER_GEMM_CLONES
void gemm_rows_impl(const float* a, int lda, int m, const float* packed, int k, int n, const float* bias, float* c,
                    int ldc) {
  const int panels = (n + kPanel - 1) / kPanel;
  for (int p = 0; p < panels; ++p) {
    const float* bp = packed + static_cast<std::size_t>(p) * k * kPanel;
    const int col0 = p * kPanel;
    const int cols = std::min(kPanel, n - col0);
    const float* bias_p = bias ? bias + col0 : nullptr;
    // A bias pointer must allow reading 16 values; the last panel pads it in tile().
    int i = 0;
    for (; i + kRows <= m; i += kRows)
      tile<kRows>(k, a + static_cast<std::size_t>(i) * lda, lda, bp, bias_p,
                  c + static_cast<std::size_t>(i) * ldc + col0, ldc, cols);
    const float* ai = a + static_cast<std::size_t>(i) * lda;
    float* ci = c + static_cast<std::size_t>(i) * ldc + col0;
    switch (m - i) {
      case 1: tile<1>(k, ai, lda, bp, bias_p, ci, ldc, cols); break;
      case 2: tile<2>(k, ai, lda, bp, bias_p, ci, ldc, cols); break;
      case 3: tile<3>(k, ai, lda, bp, bias_p, ci, ldc, cols); break;
      case 4: tile<4>(k, ai, lda, bp, bias_p, ci, ldc, cols); break;
      case 5: tile<5>(k, ai, lda, bp, bias_p, ci, ldc, cols); break;
      default: break;
    }
  }
}

}  // namespace

PackedB pack_b(const float* b, int k, int n) {
  PackedB out;
  out.k = k;
  out.n = n;
  const int panels = (n + kPanel - 1) / kPanel;
  out.data.assign(static_cast<std::size_t>(panels) * k * kPanel, 0.0f);
  for (int p = 0; p < panels; ++p)
    for (int r = 0; r < k; ++r)
      for (int j = 0; j < kPanel && p * kPanel + j < n; ++j)
        out.data[(static_cast<std::size_t>(p) * k + r) * kPanel + j] =
            b[static_cast<std::size_t>(r) * n + p * kPanel + j];
  return out;
}

void gemm_rows(const float* a, int lda, int m, const PackedB& b, const float* bias, float* c, int ldc) {
  if (m <= 0 || b.n <= 0) return;
  gemm_rows_impl(a, lda, m, b.data.data(), b.k, b.n, bias, c, ldc);
}

}  // namespace stoker::trainer::cpu
