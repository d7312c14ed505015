// The CPU backward kernels: the exact derivatives of the forward kernels in cpu/forward.cpp (same
// padding, window and broadcast conventions). Convolutions and Dense as GEMMs (dW = im2col(X)^T·dY,
// dX = col2im(dY·W^T)); depthwise, pooling and element-wise ops as direct loops over channels.
//
// Determinism: a parameter gradient is summed in chunks of rows whose boundaries depend on the
// shapes alone; each chunk is summed by one task in row order and the chunks' partial sums are
// added in chunk order, so the result is the same whatever the thread count.
//
// Element-wise ops (Affine, Activation, Add, Mul) take h·w·c values per sample, as the forward
// Mul does: the lowered op's geometry (values of rank 1 or 3 per sample).
#include "backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "forward.hpp"
#include "gemm.hpp"
#include "ops/activation.hpp"
#include "ops/backward_math.hpp"
#include "simd.hpp"

namespace stoker::trainer::cpu {

namespace {

// Rows [0, rows) in chunks of a size that depends on the shape alone. f(chunk, begin, end).
struct Chunks {
  std::size_t rows = 0, size = 1, count = 0;
  Chunks(std::size_t total_rows, std::size_t chunk_rows)
      : rows(total_rows), size(std::max<std::size_t>(chunk_rows, 1)), count((total_rows + size - 1) / size) {}
  template <typename F>
  void run(const F& f) const {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i != r.end(); ++i) f(i, i * size, std::min(rows, (i + 1) * size));
    });
  }
};

// g[j] += the sum over chunks, in chunk order, of partial[chunk * n + j].
void add_partials(const std::vector<float>& partial, std::size_t chunks, std::size_t n, float* g) {
  for (std::size_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (std::size_t k = 0; k < chunks; ++k) s += partial[k * n + j];
    g[j] += s;
  }
}

bool wants(const OpGradients* g, const std::vector<float> OpGradients::*member) { return g && !(g->*member).empty(); }

std::size_t values_per_sample(const detail::LoweredOp& op) { return static_cast<std::size_t>(op.h) * op.w * op.c; }

constexpr std::size_t kSubRows = 256;             // GEMM rows (the dW GEMM's depth) per im2col block
constexpr std::size_t kChunkRows = 4 * kSubRows;  // rows per partial sum of dW (at most)

// Conv and Dense. Rows of the GEMM: output pixels (Dense: rows of the last axis); K = kh·kw·c.
struct ConvShape {
  std::size_t m;  // output rows over the batch
  int k, c, oc;
  bool direct;  // the input is its own im2col matrix
};

// dst[j * rows + i] = src[i * cols + j], 8 source rows at a time so that reads and writes stream.
void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst) {
  constexpr std::size_t kStrip = 8;
  for (std::size_t i0 = 0; i0 < rows; i0 += kStrip) {
    const std::size_t i1 = std::min(rows, i0 + kStrip);
    for (std::size_t j = 0; j < cols; ++j)
      for (std::size_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * cols + j];
  }
}

// dW (and db) = im2col(X)^T · dY, chunked over rows for a deterministic sum. The GEMM's A is the
// transpose of the narrower of im2col(X) (K wide) and dY (oc wide), its B the other one packed:
// with K > oc it computes dW^T = dY^T · im2col(X), transposed once at the end.
void conv_weight_grad(const detail::LoweredOp& op, const ConvShape& s, const float* x, const float* dy,
                      OpGradients* g) {
  const bool want_w = wants(g, &OpGradients::weights), want_b = wants(g, &OpGradients::bias);
  if ((!want_w && !want_b) || s.m == 0) return;
  const auto kn = static_cast<std::size_t>(s.k) * s.oc;
  // (Not with fewer rows than K: the final transpose of dW would cost more than it saves.)
  const bool transposed = s.k > s.oc && s.m >= static_cast<std::size_t>(s.k);  // the partials hold dW^T [oc, K]
  const int a_rows = transposed ? s.oc : s.k, b_cols = transposed ? s.k : s.oc;
  // Enough chunks to keep the threads busy, few enough that their partial sums stay small.
  constexpr std::size_t kPartialBudget = std::size_t{4} << 20;  // floats
  const std::size_t by_memory = std::max<std::size_t>(1, kPartialBudget / kn);
  const std::size_t chunks = std::min({(s.m + kChunkRows - 1) / kChunkRows, by_memory, std::size_t{64}});
  const Chunks parts(s.m, (s.m + chunks - 1) / std::max<std::size_t>(chunks, 1));
  std::vector<float> pw(want_w ? parts.count * kn : 0), pb(want_b ? parts.count * s.oc : 0);
  parts.run([&](std::size_t chunk, std::size_t begin, std::size_t end) {
    if (want_b) {
      float* b = pb.data() + chunk * s.oc;
      for (std::size_t r = begin; r < end; ++r)
        for (int o = 0; o < s.oc; ++o) b[o] += dy[r * s.oc + o];
    }
    if (!want_w) return;
    float* acc = pw.data() + chunk * kn;
    std::vector<float> cols, a, tmp;
    for (std::size_t r0 = begin; r0 < end; r0 += kSubRows) {
      const std::size_t m = std::min(kSubRows, end - r0);
      const float* rows = x + r0 * s.c;  // im2col(X) for these rows: m × K
      if (!s.direct) {
        cols.resize(m * static_cast<std::size_t>(s.k));
        for (std::size_t i = 0; i < m; ++i) im2col_row(op, x, r0 + i, cols.data() + i * s.k);
        rows = cols.data();
      }
      const float* dys = dy + r0 * s.oc;
      a.resize(static_cast<std::size_t>(a_rows) * m);
      transpose(transposed ? dys : rows, m, static_cast<std::size_t>(a_rows), a.data());
      const PackedB b = pack_b(transposed ? rows : dys, static_cast<int>(m), b_cols);
      if (r0 != begin) tmp.resize(kn);
      float* out = r0 == begin ? acc : tmp.data();
      constexpr std::size_t kBlock = 8 * kRows;  // rows of the product per task
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(a_rows), kBlock),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          gemm_rows(a.data() + r.begin() * m, static_cast<int>(m), static_cast<int>(r.size()), b,
                                    nullptr, out + r.begin() * b_cols, b_cols);
                        });
      if (out != acc)
        for (std::size_t j = 0; j < kn; ++j) acc[j] += tmp[j];
    }
  });
  if (want_w) {
    if (!transposed) {
      add_partials(pw, parts.count, kn, g->weights.data());
    } else {
      std::vector<float> sum_t(kn, 0.0f), sum(kn);
      add_partials(pw, parts.count, kn, sum_t.data());
      transpose(sum_t.data(), static_cast<std::size_t>(s.oc), static_cast<std::size_t>(s.k), sum.data());
      for (std::size_t j = 0; j < kn; ++j) g->weights[j] += sum[j];
    }
  }
  if (want_b) add_partials(pb, parts.count, static_cast<std::size_t>(s.oc), g->bias.data());
}

// dX += col2im(dY · W^T).
void conv_input_grad(const detail::LoweredOp& op, const ConvShape& s, const float* dy, float* dx) {
  const auto kn = static_cast<std::size_t>(s.k) * s.oc;
  if (s.direct && s.m * (static_cast<std::size_t>(s.k) + s.oc) < kn) {
    // Few rows (a Dense layer's batch): dX^T = W · dY^T with W as it is, cheaper than repacking W^T.
    std::vector<float> dyt(s.m * s.oc), dxt(s.m * s.k);
    transpose(dy, s.m, static_cast<std::size_t>(s.oc), dyt.data());
    const PackedB dyp = pack_b(dyt.data(), s.oc, static_cast<int>(s.m));
    constexpr std::size_t kBlock = 8 * kRows;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(s.k), kBlock),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        gemm_rows(op.weights.data() + r.begin() * s.oc, s.oc, static_cast<int>(r.size()), dyp, nullptr,
                                  dxt.data() + r.begin() * s.m, static_cast<int>(s.m));
                      });
    for (std::size_t i = 0; i < s.m; ++i)
      for (int p = 0; p < s.k; ++p) dx[i * s.k + p] += dxt[static_cast<std::size_t>(p) * s.m + i];
    return;
  }
  std::vector<float> wt(op.weights.size());  // W^T: [oc, K]
  for (int p = 0; p < s.k; ++p)
    for (int o = 0; o < s.oc; ++o)
      wt[static_cast<std::size_t>(o) * s.k + p] = op.weights[static_cast<std::size_t>(p) * s.oc + o];
  const PackedB wtp = pack_b(wt.data(), s.oc, s.k);
  if (s.direct) {
    constexpr std::size_t kBlock = 4 * kRows;  // the least rows per task: a Dense layer has few
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.m, kBlock), [&](const tbb::blocked_range<std::size_t>& r) {
      std::vector<float> tmp(r.size() * s.c);
      gemm_rows(dy + r.begin() * s.oc, s.oc, static_cast<int>(r.size()), wtp, nullptr, tmp.data(), s.c);
      float* d = dx + r.begin() * s.c;
      for (std::size_t i = 0; i < tmp.size(); ++i) d[i] += tmp[i];
    });
    return;
  }
  // One sample per task: the windows of a sample's pixels overlap, those of two samples do not.
  const std::size_t pixels = static_cast<std::size_t>(op.oh) * op.ow;
  const std::size_t nb = s.m / pixels;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, nb, 1), [&](const tbb::blocked_range<std::size_t>& r) {
    constexpr std::size_t kBlock = 64 * kRows;
    std::vector<float> dcols;
    for (std::size_t n = r.begin(); n != r.end(); ++n) {
      for (std::size_t p0 = 0; p0 < pixels; p0 += kBlock) {
        const std::size_t m = std::min(kBlock, pixels - p0);
        dcols.resize(m * static_cast<std::size_t>(s.k));
        const std::size_t row0 = n * pixels + p0;
        gemm_rows(dy + row0 * s.oc, s.oc, static_cast<int>(m), wtp, nullptr, dcols.data(), s.k);
        for (std::size_t i = 0; i < m; ++i) {
          const int ox = static_cast<int>((p0 + i) % op.ow);
          const int oy = static_cast<int>((p0 + i) / op.ow);
          for (int ky = 0; ky < op.kh; ++ky) {
            const int iy = oy * op.sh - op.pad_top + ky * op.dh;
            if (iy < 0 || iy >= op.h) continue;
            for (int kx = 0; kx < op.kw; ++kx) {
              const int ix = ox * op.sw - op.pad_left + kx * op.dw;
              if (ix < 0 || ix >= op.w) continue;
              const float* src = dcols.data() + i * s.k + (static_cast<std::size_t>(ky) * op.kw + kx) * op.c;
              float* d = dx + ((n * op.h + iy) * op.w + ix) * op.c;
              for (int ch = 0; ch < op.c; ++ch) d[ch] += src[ch];
            }
          }
        }
      }
    }
  });
}

void conv_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, OpGradients* g, int nb) {
  const bool dense = op.kind == detail::OpKind::Dense;
  const bool padded = op.pad_top || op.pad_bottom || op.pad_left || op.pad_right;
  ConvShape s;
  s.c = op.c;
  s.oc = op.oc;
  s.k = dense ? op.c : op.kh * op.kw * op.c;
  s.direct = dense || (op.kh == 1 && op.kw == 1 && op.sh == 1 && op.sw == 1 && !padded);
  s.m = static_cast<std::size_t>(nb) *
        (dense ? static_cast<std::size_t>(op.rows) : static_cast<std::size_t>(op.oh) * op.ow);
  conv_weight_grad(op, s, x, dy, g);
  if (dx) conv_input_grad(op, s, dy, dx);
}

// (Not under ThreadSanitizer: the clones' ifunc resolvers would run before its runtime starts.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define STOKER_BACKWARD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STOKER_BACKWARD_CLONES
#endif

// A 3×3 depthwise convolution (multiplier 1) of one sample, channels [c0, c0 + 8), over a band
// of rows (kept in cache while its channel blocks are done): dW from output rows [y0, y1) with
// the nine taps' sums in registers; dX of input rows [y0, y1), gathered per input pixel from the
// output pixels whose windows hold it (no scattered read-modify-write), or with strides,
// scattered from output rows [y0, y1).
STOKER_BACKWARD_CLONES
void depthwise3x3_block(const detail::LoweredOp& op, const float* xs, const float* dys, float* dxs, float* gw, int c0,
                        int y0, int y1) {
  const auto c = static_cast<std::size_t>(op.c);
  if (gw) {
    v8 acc[9] = {};
    for (int oy = y0; oy < y1; ++oy)
      for (int ox = 0; ox < op.ow; ++ox) {
        const v8 d = load8(dys + (static_cast<std::size_t>(oy) * op.ow + ox) * c + c0);
#pragma GCC unroll 3
        for (int ky = 0; ky < 3; ++ky) {
          const int iy = oy * op.sh - op.pad_top + ky * op.dh;
          if (iy < 0 || iy >= op.h) continue;
#pragma GCC unroll 3
          for (int kx = 0; kx < 3; ++kx) {
            const int ix = ox * op.sw - op.pad_left + kx * op.dw;
            if (ix < 0 || ix >= op.w) continue;
            acc[ky * 3 + kx] += d * load8(xs + (static_cast<std::size_t>(iy) * op.w + ix) * c + c0);
          }
        }
      }
    for (int t = 0; t < 9; ++t) store8(gw + t * c + c0, load8(gw + t * c + c0) + acc[t]);
  }
  if (dxs && (op.sh != 1 || op.sw != 1)) {  // strided: most taps miss a given input pixel, scatter instead
    v8 wt[9];
    for (int t = 0; t < 9; ++t) wt[t] = load8(op.weights.data() + t * c + c0);
    for (int oy = y0; oy < y1; ++oy)
      for (int ox = 0; ox < op.ow; ++ox) {
        const v8 d = load8(dys + (static_cast<std::size_t>(oy) * op.ow + ox) * c + c0);
#pragma GCC unroll 3
        for (int ky = 0; ky < 3; ++ky) {
          const int iy = oy * op.sh - op.pad_top + ky * op.dh;
          if (iy < 0 || iy >= op.h) continue;
#pragma GCC unroll 3
          for (int kx = 0; kx < 3; ++kx) {
            const int ix = ox * op.sw - op.pad_left + kx * op.dw;
            if (ix < 0 || ix >= op.w) continue;
            float* dd = dxs + (static_cast<std::size_t>(iy) * op.w + ix) * c + c0;
            store8(dd, load8(dd) + d * wt[ky * 3 + kx]);
          }
        }
      }
  } else if (dxs) {
    // The output pixel reading input row iy (column ix) through tap ky (kx), or -1.
    std::vector<int> from_y(static_cast<std::size_t>(op.h) * 3), from_x(static_cast<std::size_t>(op.w) * 3);
    auto source = [](int i, int pad, int k, int dil, int stride, int out) {
      const int num = i + pad - k * dil;
      return num >= 0 && num % stride == 0 && num / stride < out ? num / stride : -1;
    };
    for (int iy = 0; iy < op.h; ++iy)
      for (int k = 0; k < 3; ++k) from_y[iy * 3 + k] = source(iy, op.pad_top, k, op.dh, op.sh, op.oh);
    for (int ix = 0; ix < op.w; ++ix)
      for (int k = 0; k < 3; ++k) from_x[ix * 3 + k] = source(ix, op.pad_left, k, op.dw, op.sw, op.ow);
    v8 wt[9];
    for (int t = 0; t < 9; ++t) wt[t] = load8(op.weights.data() + t * c + c0);
    for (int iy = y0; iy < y1; ++iy)
      for (int ix = 0; ix < op.w; ++ix) {
        v8 acc = {};
#pragma GCC unroll 3
        for (int ky = 0; ky < 3; ++ky) {
          const int oy = from_y[iy * 3 + ky];
          if (oy < 0) continue;
#pragma GCC unroll 3
          for (int kx = 0; kx < 3; ++kx) {
            const int ox = from_x[ix * 3 + kx];
            if (ox < 0) continue;
            acc += wt[ky * 3 + kx] * load8(dys + (static_cast<std::size_t>(oy) * op.ow + ox) * c + c0);
          }
        }
        float* d = dxs + (static_cast<std::size_t>(iy) * op.w + ix) * c + c0;
        store8(d, load8(d) + acc);
      }
  }
}

// Per sample: dW and db into the sample's own partial sums (added in sample order); dX by
// scattering each output pixel's gradient over its window. 3×3 with multiplier 1 takes its
// channels 8 at a time above; the rest (from `first`) the loops here.
void depthwise_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, OpGradients* g,
                        int nb) {
  const int mult = op.depth_multiplier;
  const int oc = op.c * mult;
  const bool want_w = wants(g, &OpGradients::weights), want_b = wants(g, &OpGradients::bias);
  const std::size_t wn = static_cast<std::size_t>(op.kh) * op.kw * oc;
  std::vector<float> pw(want_w ? nb * wn : 0), pb(want_b ? static_cast<std::size_t>(nb) * oc : 0);
  const std::size_t in_per = values_per_sample(op), out_per = static_cast<std::size_t>(op.oh) * op.ow * oc;
  const bool blocked = op.kh == 3 && op.kw == 3 && mult == 1;
  const int first = blocked ? op.c / 8 * 8 : 0;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(nb), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t n = r.begin(); n != r.end(); ++n) {
                        const float* xs = x + n * in_per;
                        const float* dys = dy + n * out_per;
                        float* dxs = dx ? dx + n * in_per : nullptr;
                        float* gw = want_w ? pw.data() + n * wn : nullptr;
                        float* gb = want_b ? pb.data() + n * oc : nullptr;
                        if (gb)
                          for (std::size_t p = 0; p < out_per; p += oc)
                            for (int o = 0; o < oc; ++o) gb[o] += dys[p + o];
                        constexpr int kBand = 4;  // rows per band
                        for (int y0 = 0; gw && y0 < op.oh; y0 += kBand)
                          for (int c0 = 0; c0 < first; c0 += 8)
                            depthwise3x3_block(op, xs, dys, nullptr, gw, c0, y0, std::min(op.oh, y0 + kBand));
                        const int dx_rows = op.sh == 1 && op.sw == 1 ? op.h : op.oh;
                        for (int y0 = 0; dxs && y0 < dx_rows; y0 += kBand)
                          for (int c0 = 0; c0 < first; c0 += 8)
                            depthwise3x3_block(op, xs, dys, dxs, nullptr, c0, y0, std::min(dx_rows, y0 + kBand));
                        if (first == oc) continue;
                        for (int oy = 0; oy < op.oh; ++oy)
                          for (int ox = 0; ox < op.ow; ++ox) {
                            const float* d = dys + (static_cast<std::size_t>(oy) * op.ow + ox) * oc;
                            for (int ky = 0; ky < op.kh; ++ky) {
                              const int iy = oy * op.sh - op.pad_top + ky * op.dh;
                              if (iy < 0 || iy >= op.h) continue;
                              for (int kx = 0; kx < op.kw; ++kx) {
                                const int ix = ox * op.sw - op.pad_left + kx * op.dw;
                                if (ix < 0 || ix >= op.w) continue;
                                const std::size_t tap = (static_cast<std::size_t>(ky) * op.kw + kx) * oc;
                                const std::size_t at = (static_cast<std::size_t>(iy) * op.w + ix) * op.c;
                                const float* ws = op.weights.data() + tap;
                                const float* xi = xs + at;
                                if (mult == 1) {
                                  if (dxs)
                                    for (int ch = first; ch < oc; ++ch) dxs[at + ch] += d[ch] * ws[ch];
                                  if (gw)
                                    for (int ch = first; ch < oc; ++ch) gw[tap + ch] += d[ch] * xi[ch];
                                } else {
                                  for (int ch = 0; ch < op.c; ++ch)
                                    for (int m = 0; m < mult; ++m) {
                                      const int o = ch * mult + m;
                                      if (dxs) dxs[at + ch] += d[o] * ws[o];
                                      if (gw) gw[tap + o] += d[o] * xi[ch];
                                    }
                                }
                              }
                            }
                          }
                      }
                    });
  if (want_w) add_partials(pw, static_cast<std::size_t>(nb), wn, g->weights.data());
  if (want_b) add_partials(pb, static_cast<std::size_t>(nb), static_cast<std::size_t>(oc), g->bias.data());
}

constexpr std::size_t kReduceRows = 512;  // rows per partial sum of the per-channel reductions

void affine_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, OpGradients* g, int nb) {
  const auto c = static_cast<std::size_t>(op.c);
  const std::size_t rows = static_cast<std::size_t>(nb) * op.h * op.w;
  const bool want_s = wants(g, &OpGradients::scale), want_b = wants(g, &OpGradients::bias);
  const Chunks parts(rows, kReduceRows);
  std::vector<float> ps(want_s ? parts.count * c : 0), pb(want_b ? parts.count * c : 0);
  parts.run([&](std::size_t chunk, std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const float* d = dy + r * c;
      if (dx)
        for (std::size_t j = 0; j < c; ++j) dx[r * c + j] += d[j] * op.scale[j];
      if (want_s)
        for (std::size_t j = 0; j < c; ++j) ps[chunk * c + j] += d[j] * x[r * c + j];
      if (want_b)
        for (std::size_t j = 0; j < c; ++j) pb[chunk * c + j] += d[j];
    }
  });
  if (want_s) add_partials(ps, parts.count, c, g->scale.data());
  if (want_b) add_partials(pb, parts.count, c, g->bias.data());
}

void layer_norm_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, OpGradients* g,
                         int nb) {
  const auto c = static_cast<std::size_t>(op.c);
  const std::size_t rows = static_cast<std::size_t>(nb) * op.rows;
  const float* scale = op.scale.empty() ? nullptr : op.scale.data();
  const bool want_s = wants(g, &OpGradients::scale), want_b = wants(g, &OpGradients::bias);
  const Chunks parts(rows, kReduceRows);
  std::vector<float> ps(want_s ? parts.count * c : 0), pb(want_b ? parts.count * c : 0);
  parts.run([&](std::size_t chunk, std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const float* xs = x + r * c;
      const float* d = dy + r * c;
      const auto load_x = [xs](std::size_t j) { return xs[j]; };
      const auto load_dy = [d](std::size_t j) { return d[j]; };
      // The forward's statistics, then the gradient's two row means (ops/backward_math.hpp).
      const ops::RowStats st = ops::layer_norm_stats(load_x, std::size_t{0}, op.c, op.epsilon);
      const ops::LayerNormSums sums = ops::layer_norm_sums(load_x, load_dy, std::size_t{0}, op.c, st, scale);
      if (dx)
        for (std::size_t j = 0; j < c; ++j)
          dx[r * c + j] += ops::layer_norm_input_gradient(xs[j], d[j], st, sums, scale, static_cast<int>(j));
      if (want_s)
        for (std::size_t j = 0; j < c; ++j) ps[chunk * c + j] += d[j] * ((xs[j] - st.mean) * st.rstd);
      if (want_b)
        for (std::size_t j = 0; j < c; ++j) pb[chunk * c + j] += d[j];
    }
  });
  if (want_s) add_partials(ps, parts.count, c, g->scale.data());
  if (want_b) add_partials(pb, parts.count, c, g->bias.data());
}

// Element-wise over `total` values, parallel in fixed blocks. f(begin, end).
template <typename F>
void elementwise(std::size_t total, const F& f) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, total, 16384),
                    [&](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.end()); });
}

void add_backward(const detail::LoweredOp& op, const float* dy, const std::vector<float*>& din, int nb) {
  const std::size_t total = values_per_sample(op) * static_cast<std::size_t>(nb);
  // One block's values of every input in one task: inputs that are the same value alias in din.
  elementwise(total, [&](std::size_t b, std::size_t e) {
    for (std::size_t k = 0; k < din.size(); ++k) {
      float* d = din[k];
      if (!d) continue;
      const float s = k == 1 ? op.residual_scale : 1.0f;
      for (std::size_t i = b; i < e; ++i) d[i] += s * dy[i];
    }
  });
}

void mul_backward(const detail::LoweredOp& op, const std::vector<const float*>& in, const float* dy,
                  const std::vector<float*>& din, int nb) {
  const std::size_t per = values_per_sample(op);
  const auto c = static_cast<std::size_t>(op.c);
  if (!op.channel_broadcast) {
    elementwise(per * static_cast<std::size_t>(nb), [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const float d = dy[i];
        if (din[0]) din[0][i] += d * in[1][i];
        if (din[1]) din[1][i] += d * in[0][i];
      }
    });
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(nb), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t n = r.begin(); n != r.end(); ++n) {
                        const float* d = dy + n * per;
                        const float* a = in[0] + n * per;
                        const float* s = in[1] + n * c;
                        if (din[0])
                          for (std::size_t p = 0; p < per; p += c)
                            for (std::size_t j = 0; j < c; ++j) din[0][n * per + p + j] += d[p + j] * s[j];
                        if (din[1]) {
                          std::vector<float> acc(c, 0.0f);
                          for (std::size_t p = 0; p < per; p += c)
                            for (std::size_t j = 0; j < c; ++j) acc[j] += d[p + j] * a[p + j];
                          for (std::size_t j = 0; j < c; ++j) din[1][n * c + j] += acc[j];
                        }
                      }
                    });
}

void concat_backward(const detail::LoweredOp& op, const float* dy, const std::vector<float*>& din, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * op.rows;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, 256), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t row = r.begin(); row != r.end(); ++row) {
      const float* src = dy + row * op.oc;
      for (std::size_t k = 0; k < din.size(); ++k) {
        const auto width = static_cast<std::size_t>(op.in_channels[k]);
        if (float* d = din[k])
          for (std::size_t j = 0; j < width; ++j) d[row * width + j] += src[j];
        src += width;
      }
    }
  });
}

// The forward copies x[iy][ix] to y[iy + pad_top][ix + pad_left] where that is inside y (a crop,
// negative pads, leaves the rest of x out: no gradient there).
void zero_pad_backward(const detail::LoweredOp& op, const float* dy, float* dx, int nb) {
  const int ix0 = std::max(0, -op.pad_left), ix1 = std::min(op.w, op.ow - op.pad_left);
  if (ix1 <= ix0) return;
  const std::size_t lines = static_cast<std::size_t>(nb) * op.h;
  const std::size_t width = static_cast<std::size_t>(ix1 - ix0) * op.c;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, lines, 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t line = r.begin(); line != r.end(); ++line) {
      const std::size_t n = line / op.h;
      const int iy = static_cast<int>(line % op.h), oy = iy + op.pad_top;
      if (oy < 0 || oy >= op.oh) continue;
      const float* src = dy + ((n * op.oh + oy) * op.ow + ix0 + op.pad_left) * op.c;
      float* d = dx + (line * op.w + ix0) * op.c;
      for (std::size_t j = 0; j < width; ++j) d[j] += src[j];
    }
  });
}

// Max pooling routes each output's gradient to its window's first maximum in window order (the
// forward's std::max keeps the earlier value on ties); average pooling spreads it over the
// window's pixels inside the input.
void pool_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, int nb) {
  const bool is_max = op.kind == detail::OpKind::MaxPool;
  const auto c = static_cast<std::size_t>(op.c);
  const std::size_t in_per = values_per_sample(op), out_per = static_cast<std::size_t>(op.oh) * op.ow * c;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(nb), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::vector<float> best(c);
                      std::vector<std::size_t> arg(c);
                      for (std::size_t n = r.begin(); n != r.end(); ++n) {
                        const float* xs = x + n * in_per;
                        float* dxs = dx + n * in_per;
                        for (int oy = 0; oy < op.oh; ++oy)
                          for (int ox = 0; ox < op.ow; ++ox) {
                            const float* d = dy + n * out_per + (static_cast<std::size_t>(oy) * op.ow + ox) * c;
                            const int y0 = std::max(0, oy * op.sh - op.pad_top);
                            const int y1 = std::min(op.h, oy * op.sh - op.pad_top + op.kh);
                            const int x0 = std::max(0, ox * op.sw - op.pad_left);
                            const int x1 = std::min(op.w, ox * op.sw - op.pad_left + op.kw);
                            if (y0 >= y1 || x0 >= x1) continue;
                            if (is_max) {
                              std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
                              std::fill(arg.begin(), arg.end(), in_per);
                              for (int iy = y0; iy < y1; ++iy)
                                for (int ix = x0; ix < x1; ++ix) {
                                  const std::size_t at = (static_cast<std::size_t>(iy) * op.w + ix) * c;
                                  for (std::size_t j = 0; j < c; ++j)
                                    if (xs[at + j] > best[j]) best[j] = xs[at + j], arg[j] = at + j;
                                }
                              for (std::size_t j = 0; j < c; ++j)
                                if (arg[j] < in_per) dxs[arg[j]] += d[j];
                            } else {
                              const float inv = 1.0f / static_cast<float>((y1 - y0) * (x1 - x0));
                              for (int iy = y0; iy < y1; ++iy)
                                for (int ix = x0; ix < x1; ++ix) {
                                  float* dd = dxs + (static_cast<std::size_t>(iy) * op.w + ix) * c;
                                  for (std::size_t j = 0; j < c; ++j) dd[j] += d[j] * inv;
                                }
                            }
                          }
                      }
                    });
}

void global_pool_backward(const detail::LoweredOp& op, const float* x, const float* dy, float* dx, int nb) {
  const auto c = static_cast<std::size_t>(op.c);
  const std::size_t hw = static_cast<std::size_t>(op.h) * op.w;
  const bool is_max = op.kind == detail::OpKind::GlobalMaxPool;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, static_cast<std::size_t>(nb), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::vector<float> best(c);
                      std::vector<std::size_t> arg(c);
                      for (std::size_t n = r.begin(); n != r.end(); ++n) {
                        const float* xs = x + n * hw * c;
                        const float* d = dy + n * c;
                        float* dxs = dx + n * hw * c;
                        if (!is_max) {
                          const float inv = 1.0f / static_cast<float>(hw);
                          for (std::size_t p = 0; p < hw; ++p)
                            for (std::size_t j = 0; j < c; ++j) dxs[p * c + j] += d[j] * inv;
                          continue;
                        }
                        std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
                        std::fill(arg.begin(), arg.end(), hw * c);
                        for (std::size_t p = 0; p < hw; ++p)
                          for (std::size_t j = 0; j < c; ++j)
                            if (xs[p * c + j] > best[j]) best[j] = xs[p * c + j], arg[j] = p * c + j;
                        for (std::size_t j = 0; j < c; ++j)
                          if (arg[j] < hw * c) dxs[arg[j]] += d[j];
                      }
                    });
}

}  // namespace

// One loop per kind over the shared formulas (ops/activation.hpp), each its own lambda type so
// that the formula is inlined and the loop vectorises: dpre[i] = f(pre[i], y[i], dy[i]).
template <typename F>
void each(const float* pre, const float* y, const float* dy, float* dpre, std::size_t total, F f) {
  for (std::size_t i = 0; i < total; ++i) dpre[i] = f(pre[i], y[i], dy[i]);
}

void activation_backward(const ActivationSpec& act, const float* pre, const float* y, const float* dy, float* dpre,
                         std::size_t rows, int n) {
  const std::size_t total = rows * static_cast<std::size_t>(n);
  switch (act.kind) {
    case ActKind::Linear:
      if (dpre != dy) std::memcpy(dpre, dy, total * sizeof(float));
      return;
    case ActKind::ReLU: {
      const ops::ReluKinks k = ops::relu_kinks(act.threshold, act.negative_slope, act.max_value);
      if (k.plain())
        return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::plain_relu_backward(v, d); });
      return each(pre, y, dy, dpre, total, [k](float v, float, float d) { return ops::relu_backward(v, d, k); });
    }
    case ActKind::Sigmoid:
      return each(pre, y, dy, dpre, total, [](float, float o, float d) { return ops::sigmoid_backward(o, d); });
    case ActKind::Swish:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::swish_backward(v, d); });
    case ActKind::Tanh:
      return each(pre, y, dy, dpre, total, [](float, float o, float d) { return ops::tanh_backward(o, d); });
    case ActKind::Elu:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::elu_backward(v, d); });
    case ActKind::Selu:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::selu_backward(v, d); });
    case ActKind::Gelu:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::gelu_backward(v, d); });
    case ActKind::Softplus:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::softplus_backward(v, d); });
    case ActKind::HardSigmoid:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::hard_sigmoid_backward(v, d); });
    case ActKind::HardSwish:
      return each(pre, y, dy, dpre, total, [](float v, float, float d) { return ops::hard_swish_backward(v, d); });
    case ActKind::Softmax:
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t base = r * static_cast<std::size_t>(n);
        float dot = 0.0f;
        for (int j = 0; j < n; ++j) dot += dy[base + j] * y[base + j];
        for (int j = 0; j < n; ++j) dpre[base + j] = y[base + j] * (dy[base + j] - dot);
      }
      return;
  }
}

void backward_op(const detail::LoweredOp& op, const std::vector<const float*>& in, const float* out, const float* dout,
                 const std::vector<float*>& din, OpGradients* grads, int nb) {
  (void)out;  // the max poolings find their window's maximum again from the input
  using detail::OpKind;
  float* d0 = din.empty() ? nullptr : din[0];
  switch (op.kind) {
    case OpKind::Conv:
    case OpKind::Dense: return conv_backward(op, in[0], dout, d0, grads, nb);
    case OpKind::DepthwiseConv: return depthwise_backward(op, in[0], dout, d0, grads, nb);
    case OpKind::Affine: return affine_backward(op, in[0], dout, d0, grads, nb);
    case OpKind::LayerNorm: return layer_norm_backward(op, in[0], dout, d0, grads, nb);
    case OpKind::Activation:  // the executor runs the activation itself: the identity here
      if (d0)
        elementwise(values_per_sample(op) * static_cast<std::size_t>(nb), [&](std::size_t b, std::size_t e) {
          for (std::size_t i = b; i < e; ++i) d0[i] += dout[i];
        });
      return;
    case OpKind::ZeroPad:
      if (d0) zero_pad_backward(op, dout, d0, nb);
      return;
    case OpKind::Add: return add_backward(op, dout, din, nb);
    case OpKind::Mul: return mul_backward(op, in, dout, din, nb);
    case OpKind::Concat: return concat_backward(op, dout, din, nb);
    case OpKind::MaxPool:
    case OpKind::AvgPool:
      if (d0) pool_backward(op, in[0], dout, d0, nb);
      return;
    case OpKind::GlobalAvgPool:
    case OpKind::GlobalMaxPool:
      if (d0) global_pool_backward(op, in[0], dout, d0, nb);
      return;
  }
}

}  // namespace stoker::trainer::cpu
