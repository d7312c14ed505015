// The CPU backend's kernels: convolution as GEMM (im2col per row block), depthwise and pooling
// as direct loops vectorised over channels, element-wise ops. All NHWC float32, oneTBB-parallel.
#include "forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "depthwise.hpp"
#include "ops/activation.hpp"
#include "ops/forward_math.hpp"

namespace stoker::trainer::cpu {

// One loop per kind over the shared formulas (ops/activation.hpp), each its own lambda type so
// that the formula is inlined and the loop vectorises.
template <typename F>
void each(float* x, std::size_t total, F f) {
  for (std::size_t i = 0; i < total; ++i) x[i] = f(x[i]);
}

void apply_act(float* x, std::size_t rows, int n, const ActivationSpec& a) {
  const std::size_t total = rows * static_cast<std::size_t>(n);
  switch (a.kind) {
    case ActKind::Linear: return;
    case ActKind::ReLU: {
      const float mx = a.max_value, slope = a.negative_slope, thr = a.threshold;
      if (thr == 0.0f && slope == 0.0f) return each(x, total, [mx](float v) { return ops::relu_value(v, mx); });
      return each(x, total, [=](float v) { return ops::relu_value(v, thr, slope, mx); });
    }
    case ActKind::Sigmoid: return each(x, total, [](float v) { return ops::sigmoid_value(v); });
    case ActKind::Swish: return each(x, total, [](float v) { return ops::swish_value(v); });
    case ActKind::Tanh: return each(x, total, [](float v) { return ops::tanh_value(v); });
    case ActKind::Elu: return each(x, total, [](float v) { return ops::elu_value(v); });
    case ActKind::Selu: return each(x, total, [](float v) { return ops::selu_value(v); });
    case ActKind::Gelu: return each(x, total, [](float v) { return ops::gelu_value(v); });
    case ActKind::Softplus: return each(x, total, [](float v) { return ops::softplus_value(v); });
    case ActKind::HardSigmoid: return each(x, total, [](float v) { return ops::hard_sigmoid_value(v); });
    case ActKind::HardSwish: return each(x, total, [](float v) { return ops::hard_swish_value(v); });
    case ActKind::Softmax:
      for (std::size_t r = 0; r < rows; ++r) {
        float* row = x + r * static_cast<std::size_t>(n);
        const float m = *std::max_element(row, row + n);
        float sum = 0.0f;
        for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
        const float inv = 1.0f / sum;
        for (int j = 0; j < n; ++j) row[j] *= inv;
      }
      return;
  }
}

void im2col_row(const detail::LoweredOp& op, const float* x, std::size_t row, float* dst) {
  const int ox = static_cast<int>(row % op.ow);
  const int oy = static_cast<int>((row / op.ow) % op.oh);
  const std::size_t n = row / (static_cast<std::size_t>(op.ow) * op.oh);
  for (int ky = 0; ky < op.kh; ++ky) {
    const int iy = oy * op.sh - op.pad_top + ky * op.dh;
    for (int kx = 0; kx < op.kw; ++kx) {
      const int ix = ox * op.sw - op.pad_left + kx * op.dw;
      float* d = dst + (static_cast<std::size_t>(ky) * op.kw + kx) * op.c;
      if (iy < 0 || iy >= op.h || ix < 0 || ix >= op.w) std::fill(d, d + op.c, 0.0f);
      else std::memcpy(d, x + ((n * op.h + iy) * op.w + ix) * op.c, sizeof(float) * static_cast<std::size_t>(op.c));
    }
  }
}

using detail::OpKind;

namespace {

constexpr std::size_t kRowBlock = 96;  // GEMM rows per task (a multiple of kRows)

void conv(const Op& op, const float* x, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * op.oh * op.ow;
  const int k = op.packed.k;
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, kRowBlock), [&](const tbb::blocked_range<std::size_t>& r) {
    const std::size_t r0 = r.begin(), m = r.size();
    float* yb = y + r0 * op.oc;
    if (op.direct) {
      gemm_rows(x + r0 * op.c, op.c, static_cast<int>(m), op.packed, bias, yb, op.oc);
    } else {
      thread_local std::vector<float> cols;
      cols.resize(m * static_cast<std::size_t>(k));
      for (std::size_t i = 0; i < m; ++i) im2col_row(op, x, r0 + i, cols.data() + i * k);
      gemm_rows(cols.data(), k, static_cast<int>(m), op.packed, bias, yb, op.oc);
    }
    apply_act(yb, m, op.oc, op.act);
  });
}

void dense(const Op& op, const float* x, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * op.rows;
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, 12), [&](const tbb::blocked_range<std::size_t>& r) {
    float* yb = y + r.begin() * op.oc;
    gemm_rows(x + r.begin() * op.c, op.c, static_cast<int>(r.size()), op.packed, bias, yb, op.oc);
    apply_act(yb, r.size(), op.oc, op.act);
  });
}

void depthwise(const Op& op, const float* x, float* y, int nb) {
  const int mult = op.depth_multiplier;
  const int oc = op.c * mult;
  const std::size_t lines = static_cast<std::size_t>(nb) * op.oh;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, lines, 2), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t line = r.begin(); line != r.end(); ++line) {
      const std::size_t n = line / op.oh;
      const int oy = static_cast<int>(line % op.oh);
      float* yl = y + line * op.ow * oc;
      if (op.kh == 3 && op.kw == 3 && mult == 1) {
        const DepthwiseGeometry geo{op.h, op.w, op.c, op.ow, op.sh, op.sw, op.dh, op.dw, op.pad_top, op.pad_left};
        depthwise3x3_line(x + n * op.h * op.w * op.c, geo, oy, op.weights.data(),
                          op.bias.empty() ? nullptr : op.bias.data(), yl);
        apply_act(yl, static_cast<std::size_t>(op.ow), oc, op.act);
        continue;
      }
      for (int ox = 0; ox < op.ow; ++ox) {
        float* acc = yl + static_cast<std::size_t>(ox) * oc;
        std::fill(acc, acc + oc, 0.0f);
        for (int ky = 0; ky < op.kh; ++ky) {
          const int iy = oy * op.sh - op.pad_top + ky * op.dh;
          if (iy < 0 || iy >= op.h) continue;
          for (int kx = 0; kx < op.kw; ++kx) {
            const int ix = ox * op.sw - op.pad_left + kx * op.dw;
            if (ix < 0 || ix >= op.w) continue;
            const float* xs = x + ((n * op.h + iy) * op.w + ix) * op.c;
            const float* ws = op.weights.data() + (static_cast<std::size_t>(ky) * op.kw + kx) * oc;
            if (mult == 1) {
              for (int c = 0; c < oc; ++c) acc[c] += xs[c] * ws[c];
            } else {
              for (int c = 0; c < op.c; ++c)
                for (int m = 0; m < mult; ++m) acc[c * mult + m] += xs[c] * ws[c * mult + m];
            }
          }
        }
        if (!op.bias.empty())
          for (int c = 0; c < oc; ++c) acc[c] += op.bias[static_cast<std::size_t>(c)];
      }
      apply_act(yl, static_cast<std::size_t>(op.ow), oc, op.act);
    }
  });
}

void affine(const Op& op, const float* x, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * (op.out_size / static_cast<std::size_t>(op.c));
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, 256), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      const float* xs = x + i * op.c;
      float* ys = y + i * op.c;
      for (int c = 0; c < op.c; ++c)
        ys[c] = xs[c] * op.scale[static_cast<std::size_t>(c)] + op.bias[static_cast<std::size_t>(c)];
    }
    apply_act(y + r.begin() * op.c, r.size(), op.c, op.act);
  });
}

void act(const Op& op, const float* x, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * (op.out_size / static_cast<std::size_t>(op.c));
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, 256), [&](const tbb::blocked_range<std::size_t>& r) {
    std::memcpy(y + r.begin() * op.c, x + r.begin() * op.c, r.size() * op.c * sizeof(float));
    apply_act(y + r.begin() * op.c, r.size(), op.c, op.act);
  });
}

// y[oy][ox] = x[oy - pad_top][ox - pad_left] inside x, else 0: padding, or a crop when the pads
// are negative.
void zero_pad(const Op& op, const float* x, float* y, int nb) {
  std::fill(y, y + op.out_size * static_cast<std::size_t>(nb), 0.0f);
  const int ox0 = std::max(0, op.pad_left), ox1 = std::min(op.ow, op.w + op.pad_left);
  if (ox1 <= ox0) return;
  for (int n = 0; n < nb; ++n)
    for (int oy = std::max(0, op.pad_top); oy < std::min(op.oh, op.h + op.pad_top); ++oy)
      std::memcpy(y + ((static_cast<std::size_t>(n) * op.oh + oy) * op.ow + ox0) * op.c,
                  x + ((static_cast<std::size_t>(n) * op.h + oy - op.pad_top) * op.w + ox0 - op.pad_left) * op.c,
                  sizeof(float) * static_cast<std::size_t>(ox1 - ox0) * op.c);
}

void add(const Op& op, const std::vector<const float*>& in, float* y, int nb) {
  const std::size_t total = op.out_size * static_cast<std::size_t>(nb);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, total, 16384), [&](const tbb::blocked_range<std::size_t>& r) {
    // residual_scale: 1 for Add (exact), the factor of in[1] for ScaledAdd.
    const float s1 = op.residual_scale;
    if (s1 == 1.0f)
      for (std::size_t i = r.begin(); i != r.end(); ++i) y[i] = in[0][i] + in[1][i];
    else
      for (std::size_t i = r.begin(); i != r.end(); ++i) y[i] = in[0][i] + in[1][i] * s1;
    for (std::size_t k = 2; k < in.size(); ++k)
      for (std::size_t i = r.begin(); i != r.end(); ++i) y[i] += in[k][i];
    apply_act(y + r.begin(), 1, static_cast<int>(r.size()),
              op.act.kind == ActKind::Softmax ? ActivationSpec{} : op.act);
  });
  if (op.act.kind == ActKind::Softmax) apply_act(y, total / op.oc, op.oc, op.act);
}

void concat(const Op& op, const std::vector<const float*>& in, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * op.rows;
  for (std::size_t r = 0; r < rows; ++r) {
    float* dst = y + r * op.oc;
    for (std::size_t k = 0; k < in.size(); ++k) {
      const auto width = static_cast<std::size_t>(op.in_channels[k]);
      std::memcpy(dst, in[k] + r * width, width * sizeof(float));
      dst += width;
    }
  }
}

void pool(const Op& op, const float* x, float* y, int nb) {
  const bool is_max = op.kind == OpKind::MaxPool;
  const std::size_t lines = static_cast<std::size_t>(nb) * op.oh;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, lines, 4), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t line = r.begin(); line != r.end(); ++line) {
      const std::size_t n = line / op.oh;
      const int oy = static_cast<int>(line % op.oh);
      for (int ox = 0; ox < op.ow; ++ox) {
        float* acc = y + (line * op.ow + ox) * op.c;
        std::fill(acc, acc + op.c, is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
        int count = 0;  // TensorFlow averages over the window's pixels inside the image only
        for (int ky = 0; ky < op.kh; ++ky) {
          const int iy = oy * op.sh - op.pad_top + ky;
          if (iy < 0 || iy >= op.h) continue;
          for (int kx = 0; kx < op.kw; ++kx) {
            const int ix = ox * op.sw - op.pad_left + kx;
            if (ix < 0 || ix >= op.w) continue;
            const float* xs = x + ((n * op.h + iy) * op.w + ix) * op.c;
            ++count;
            if (is_max)
              for (int c = 0; c < op.c; ++c) acc[c] = std::max(acc[c], xs[c]);
            else
              for (int c = 0; c < op.c; ++c) acc[c] += xs[c];
          }
        }
        if (!is_max && count > 0) {
          const float inv = 1.0f / static_cast<float>(count);
          for (int c = 0; c < op.c; ++c) acc[c] *= inv;
        }
      }
    }
  });
}

void gap(const Op& op, const float* x, float* y, int nb) {
  const std::size_t hw = static_cast<std::size_t>(op.h) * op.w;
  const float inv = 1.0f / static_cast<float>(hw);
  for (int n = 0; n < nb; ++n) {
    float* acc = y + static_cast<std::size_t>(n) * op.c;
    std::fill(acc, acc + op.c, 0.0f);
    const float* xs = x + static_cast<std::size_t>(n) * hw * op.c;
    for (std::size_t p = 0; p < hw; ++p)
      for (int c = 0; c < op.c; ++c) acc[c] += xs[p * op.c + c];
    for (int c = 0; c < op.c; ++c) acc[c] *= inv;
    apply_act(acc, 1, op.c, op.act);
  }
}

void gmp(const Op& op, const float* x, float* y, int nb) {
  const std::size_t hw = static_cast<std::size_t>(op.h) * op.w;
  for (int n = 0; n < nb; ++n) {
    float* acc = y + static_cast<std::size_t>(n) * op.c;
    std::fill(acc, acc + op.c, -std::numeric_limits<float>::infinity());
    const float* xs = x + static_cast<std::size_t>(n) * hw * op.c;
    for (std::size_t p = 0; p < hw; ++p)
      for (int c = 0; c < op.c; ++c) acc[c] = std::max(acc[c], xs[p * op.c + c]);
    apply_act(acc, 1, op.c, op.act);
  }
}

void mul(const Op& op, const std::vector<const float*>& in, float* y, int nb) {
  const std::size_t per = static_cast<std::size_t>(op.h) * op.w * op.c;
  const std::size_t total = per * static_cast<std::size_t>(nb);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, total, 16384), [&](const tbb::blocked_range<std::size_t>& r) {
    if (op.channel_broadcast) {
      const auto c = static_cast<std::size_t>(op.c);
      for (std::size_t i = r.begin(); i != r.end(); ++i) y[i] = in[0][i] * in[1][i / per * c + i % c];
    } else {
      for (std::size_t i = r.begin(); i != r.end(); ++i) y[i] = in[0][i] * in[1][i];
    }
    apply_act(y + r.begin(), 1, static_cast<int>(r.size()),
              op.act.kind == ActKind::Softmax ? ActivationSpec{} : op.act);
  });
  if (op.act.kind == ActKind::Softmax) apply_act(y, total / op.oc, op.oc, op.act);
}

void layer_norm(const Op& op, const float* x, float* y, int nb) {
  const std::size_t rows = static_cast<std::size_t>(nb) * op.rows;
  const float* scale = op.scale.empty() ? nullptr : op.scale.data();
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, 64), [&](const tbb::blocked_range<std::size_t>& r) {
    auto load = [x](std::size_t i) { return x[i]; };
    for (std::size_t row = r.begin(); row != r.end(); ++row) {
      const std::size_t base = row * static_cast<std::size_t>(op.c);
      const ops::RowStats s = ops::layer_norm_stats(load, base, op.c, op.epsilon);
      for (int j = 0; j < op.c; ++j) y[base + j] = ops::layer_norm_value(x[base + j], s, scale, bias, j);
    }
    apply_act(y + r.begin() * op.c, r.size(), op.c, op.act);
  });
}

}  // namespace

Op prepare_op(detail::LoweredOp lowered, std::size_t out_size) {
  Op op{std::move(lowered)};
  op.out_size = out_size;
  const bool padded = op.pad_top || op.pad_bottom || op.pad_left || op.pad_right;
  op.direct = op.kind == OpKind::Conv && op.kh == 1 && op.kw == 1 && op.sh == 1 && op.sw == 1 && !padded;
  if (op.kind == OpKind::Conv || op.kind == OpKind::Dense) {  // [K, N]: Conv [kh·kw·cin, cout], Dense [cin, cout]
    op.packed = pack_b(op.weights.data(), static_cast<int>(op.weights.size() / static_cast<std::size_t>(op.oc)), op.oc);
    op.weights.clear();
    op.weights.shrink_to_fit();
  }
  return op;
}

void run_op(const Op& op, const std::vector<const float*>& in, float* out, int nb) {
  switch (op.kind) {
    case OpKind::Conv: return conv(op, in[0], out, nb);
    case OpKind::DepthwiseConv: return depthwise(op, in[0], out, nb);
    case OpKind::Dense: return dense(op, in[0], out, nb);
    case OpKind::Affine: return affine(op, in[0], out, nb);
    case OpKind::Activation: return act(op, in[0], out, nb);
    case OpKind::ZeroPad: return zero_pad(op, in[0], out, nb);
    case OpKind::Add: return add(op, in, out, nb);
    case OpKind::Concat: return concat(op, in, out, nb);
    case OpKind::MaxPool:
    case OpKind::AvgPool: return pool(op, in[0], out, nb);
    case OpKind::GlobalAvgPool: return gap(op, in[0], out, nb);
    case OpKind::GlobalMaxPool: return gmp(op, in[0], out, nb);
    case OpKind::Mul: return mul(op, in, out, nb);
    case OpKind::LayerNorm: return layer_norm(op, in[0], out, nb);
  }
}

}  // namespace stoker::trainer::cpu
