// The CPU backward kernels (cpu/backward.cpp) against central finite differences, in float64, of a
// float64 reference forward written here as plain loops; that reference is itself checked against
// the CPU backend's float32 forward (cpu::run_op), so the derivative is of the function the
// backend computes. Small odd shapes (strides, dilation, padding on each side, depth multiplier,
// broadcasts), then the thread-count independence of the gradients and one realistic size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include "cpu/backward.hpp"
#include "cpu/forward.hpp"
#include "graph/lowering.hpp"

namespace stoker::trainer {
namespace {

using detail::LoweredOp;
using detail::OpKind;
using Vec = std::vector<double>;

std::mt19937& rng() {
  static std::mt19937 gen(1234);
  return gen;
}

std::vector<float> random_floats(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng());
  return v;
}

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

int out_dim(int in, int k, int s, int d, int before, int after) {
  return (in + before + after - (d * (k - 1) + 1)) / s + 1;
}

// ---- the reference forward ---------------------------------------------------------------------

struct Params {
  Vec weights, bias, scale;
};

Params params_of(const LoweredOp& op) { return {to_double(op.weights), to_double(op.bias), to_double(op.scale)}; }

std::size_t in_size(const LoweredOp& op, std::size_t k) {
  switch (op.kind) {
    case OpKind::Dense:
    case OpKind::LayerNorm: return static_cast<std::size_t>(op.rows) * op.c;
    case OpKind::Concat: return static_cast<std::size_t>(op.rows) * op.in_channels[k];
    case OpKind::Mul:
      if (op.channel_broadcast && k == 1) return static_cast<std::size_t>(op.c);
      break;
    default: break;
  }
  return static_cast<std::size_t>(op.h) * op.w * op.c;
}

std::size_t out_size(const LoweredOp& op) {
  switch (op.kind) {
    case OpKind::Dense:
    case OpKind::Concat: return static_cast<std::size_t>(op.rows) * op.oc;
    case OpKind::LayerNorm: return static_cast<std::size_t>(op.rows) * op.c;
    default: return static_cast<std::size_t>(op.oh) * op.ow * op.oc;
  }
}

Vec ref_forward(const LoweredOp& op, const std::vector<Vec>& in, const Params& p, int nb) {
  Vec y(out_size(op) * nb, 0.0);
  const Vec& x = in[0];
  auto xat = [&](int n, int iy, int ix, int ch) {
    return x[((static_cast<std::size_t>(n) * op.h + iy) * op.w + ix) * op.c + ch];
  };
  auto yat = [&](int n, int oy, int ox, int o) -> double& {
    return y[((static_cast<std::size_t>(n) * op.oh + oy) * op.ow + ox) * op.oc + o];
  };
  const std::size_t per = in_size(op, 0);
  switch (op.kind) {
    case OpKind::Conv:
    case OpKind::DepthwiseConv: {
      const bool dw = op.kind == OpKind::DepthwiseConv;
      for (int n = 0; n < nb; ++n)
        for (int oy = 0; oy < op.oh; ++oy)
          for (int ox = 0; ox < op.ow; ++ox)
            for (int o = 0; o < op.oc; ++o) {
              double acc = p.bias.empty() ? 0.0 : p.bias[o];
              for (int ky = 0; ky < op.kh; ++ky)
                for (int kx = 0; kx < op.kw; ++kx) {
                  const int iy = oy * op.sh - op.pad_top + ky * op.dh, ix = ox * op.sw - op.pad_left + kx * op.dw;
                  if (iy < 0 || iy >= op.h || ix < 0 || ix >= op.w) continue;
                  const std::size_t tap = static_cast<std::size_t>(ky) * op.kw + kx;
                  if (dw) acc += xat(n, iy, ix, o / op.depth_multiplier) * p.weights[tap * op.oc + o];
                  else
                    for (int ch = 0; ch < op.c; ++ch)
                      acc += xat(n, iy, ix, ch) * p.weights[(tap * op.c + ch) * op.oc + o];
                }
              yat(n, oy, ox, o) = acc;
            }
      break;
    }
    case OpKind::Dense:
      for (std::size_t r = 0; r < static_cast<std::size_t>(nb) * op.rows; ++r)
        for (int o = 0; o < op.oc; ++o) {
          double acc = p.bias.empty() ? 0.0 : p.bias[o];
          for (int ch = 0; ch < op.c; ++ch)
            acc += x[r * op.c + ch] * p.weights[static_cast<std::size_t>(ch) * op.oc + o];
          y[r * op.oc + o] = acc;
        }
      break;
    case OpKind::Affine:
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] * p.scale[i % op.c] + p.bias[i % op.c];
      break;
    case OpKind::Activation: y = x; break;
    case OpKind::ZeroPad:
      for (int n = 0; n < nb; ++n)
        for (int iy = 0; iy < op.h; ++iy)
          for (int ix = 0; ix < op.w; ++ix) {
            const int oy = iy + op.pad_top, ox = ix + op.pad_left;  // negative pads crop
            if (oy < 0 || oy >= op.oh || ox < 0 || ox >= op.ow) continue;
            for (int ch = 0; ch < op.c; ++ch) yat(n, oy, ox, ch) = xat(n, iy, ix, ch);
          }
      break;
    case OpKind::Add:
      for (std::size_t i = 0; i < y.size(); ++i) {
        y[i] = in[0][i] + op.residual_scale * in[1][i];
        for (std::size_t k = 2; k < in.size(); ++k) y[i] += in[k][i];
      }
      break;
    case OpKind::Concat:
      for (std::size_t r = 0; r < static_cast<std::size_t>(nb) * op.rows; ++r) {
        std::size_t off = 0;
        for (std::size_t k = 0; k < in.size(); ++k) {
          const auto width = static_cast<std::size_t>(op.in_channels[k]);
          for (std::size_t j = 0; j < width; ++j) y[r * op.oc + off + j] = in[k][r * width + j];
          off += width;
        }
      }
      break;
    case OpKind::MaxPool:
    case OpKind::AvgPool:
      for (int n = 0; n < nb; ++n)
        for (int oy = 0; oy < op.oh; ++oy)
          for (int ox = 0; ox < op.ow; ++ox)
            for (int ch = 0; ch < op.c; ++ch) {
              double acc = op.kind == OpKind::MaxPool ? -INFINITY : 0.0;
              int count = 0;
              for (int ky = 0; ky < op.kh; ++ky)
                for (int kx = 0; kx < op.kw; ++kx) {
                  const int iy = oy * op.sh - op.pad_top + ky, ix = ox * op.sw - op.pad_left + kx;
                  if (iy < 0 || iy >= op.h || ix < 0 || ix >= op.w) continue;
                  ++count;
                  acc = op.kind == OpKind::MaxPool ? std::max(acc, xat(n, iy, ix, ch)) : acc + xat(n, iy, ix, ch);
                }
              yat(n, oy, ox, ch) = op.kind == OpKind::MaxPool ? acc : acc / count;
            }
      break;
    case OpKind::GlobalAvgPool:
    case OpKind::GlobalMaxPool: {
      const std::size_t hw = static_cast<std::size_t>(op.h) * op.w;
      for (int n = 0; n < nb; ++n)
        for (int ch = 0; ch < op.c; ++ch) {
          double acc = op.kind == OpKind::GlobalMaxPool ? -INFINITY : 0.0;
          for (std::size_t q = 0; q < hw; ++q) {
            const double v = x[(n * hw + q) * op.c + ch];
            acc = op.kind == OpKind::GlobalMaxPool ? std::max(acc, v) : acc + v;
          }
          y[static_cast<std::size_t>(n) * op.c + ch] = op.kind == OpKind::GlobalMaxPool ? acc : acc / hw;
        }
      break;
    }
    case OpKind::Mul:
      for (std::size_t i = 0; i < y.size(); ++i)
        y[i] = in[0][i] * (op.channel_broadcast ? in[1][i / per * op.c + i % op.c] : in[1][i]);
      break;
    case OpKind::LayerNorm:
      for (std::size_t r = 0; r < static_cast<std::size_t>(nb) * op.rows; ++r) {
        const double* xs = x.data() + r * op.c;
        double mean = 0.0, var = 0.0;
        for (int j = 0; j < op.c; ++j) mean += xs[j];
        mean /= op.c;
        for (int j = 0; j < op.c; ++j) var += (xs[j] - mean) * (xs[j] - mean);
        const double rstd = 1.0 / std::sqrt(var / op.c + op.epsilon);
        for (int j = 0; j < op.c; ++j) {
          double v = (xs[j] - mean) * rstd;
          if (!p.scale.empty()) v *= p.scale[j];
          if (!p.bias.empty()) v += p.bias[j];
          y[r * op.c + j] = v;
        }
      }
      break;
  }
  return y;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |got - want| / max |want| (want all zero: the absolute error).
double rel_error(const std::vector<float>& got, const Vec& want) {
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

// d/dv of f at v, for each element, by central differences.
template <typename F>
Vec numeric_gradient(Vec& v, const F& f) {
  Vec g(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i], h = 1e-5 * std::max(1.0, std::abs(keep));
    v[i] = keep + h;
    const double up = f();
    v[i] = keep - h;
    const double down = f();
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

constexpr float kPrefill = 0.25f;  // din and the gradients start here: backward_op adds
constexpr double kTolerance = 1e-4;

struct Backward {
  std::vector<std::vector<float>> din;
  detail::OpGradients grads;
};

Backward run_backward(const LoweredOp& op, const std::vector<std::vector<float>>& in, const std::vector<float>& out,
                      const std::vector<float>& dout, int nb) {
  Backward b;
  std::vector<const float*> ins;
  std::vector<float*> dins;
  for (const auto& v : in) {
    b.din.emplace_back(v.size(), kPrefill);
    ins.push_back(v.data());
  }
  for (auto& d : b.din) dins.push_back(d.data());
  b.grads.weights.assign(op.weights.size(), kPrefill);
  b.grads.bias.assign(op.bias.size(), kPrefill);
  b.grads.scale.assign(op.scale.size(), kPrefill);
  cpu::backward_op(op, ins, out.data(), dout.data(), dins, &b.grads, nb);
  return b;
}

std::vector<float> minus_prefill(std::vector<float> v) {
  for (float& x : v) x -= kPrefill;
  return v;
}

std::vector<float> run_forward(const LoweredOp& op, const std::vector<std::vector<float>>& in, int nb) {
  const cpu::Op prepared = cpu::prepare_op(op, out_size(op));
  std::vector<const float*> ins;
  for (const auto& v : in) ins.push_back(v.data());
  std::vector<float> out(out_size(op) * nb);
  cpu::run_op(prepared, ins, out.data(), nb);
  return out;
}

// The reference forward against the backend's, then backward_op's input and parameter gradients
// against finite differences of L = sum(out * R).
void check_op(const LoweredOp& op, int nb) {
  SCOPED_TRACE(op.name);
  const std::size_t inputs = std::max<std::size_t>(1, op.in.size());
  std::vector<std::vector<float>> in;
  std::vector<Vec> in_d;
  for (std::size_t k = 0; k < inputs; ++k) {
    in.push_back(random_floats(in_size(op, k) * nb));
    in_d.push_back(to_double(in.back()));
  }
  Params p = params_of(op);
  const std::vector<float> out = run_forward(op, in, nb);
  ASSERT_EQ(out.size(), out_size(op) * nb);
  EXPECT_LT(rel_error(out, ref_forward(op, in_d, p, nb)), 1e-5) << "the reference forward is not the backend's";

  const std::vector<float> r = random_floats(out.size());
  const Vec r_d = to_double(r);
  const Backward b = run_backward(op, in, out, r, nb);
  auto loss = [&] { return dot(ref_forward(op, in_d, p, nb), r_d); };
  for (std::size_t k = 0; k < inputs; ++k)
    EXPECT_LT(rel_error(minus_prefill(b.din[k]), numeric_gradient(in_d[k], loss)), kTolerance) << "input " << k;
  if (!p.weights.empty()) {
    EXPECT_LT(rel_error(minus_prefill(b.grads.weights), numeric_gradient(p.weights, loss)), kTolerance) << "weights";
  }
  if (!p.bias.empty()) {
    EXPECT_LT(rel_error(minus_prefill(b.grads.bias), numeric_gradient(p.bias, loss)), kTolerance) << "bias";
  }
  if (!p.scale.empty()) {
    EXPECT_LT(rel_error(minus_prefill(b.grads.scale), numeric_gradient(p.scale, loss)), kTolerance) << "scale";
  }
}

// ---- ops built by hand -------------------------------------------------------------------------

struct Window {
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, top = 0, bottom = 0, left = 0, right = 0;
};

LoweredOp windowed(OpKind kind, const char* name, int h, int w, int c, const Window& win) {
  LoweredOp op;
  op.kind = kind;
  op.name = name;
  op.in = {0};
  op.h = h, op.w = w, op.c = c, op.oc = c;
  op.kh = win.kh, op.kw = win.kw, op.sh = win.sh, op.sw = win.sw, op.dh = win.dh, op.dw = win.dw;
  op.pad_top = win.top, op.pad_bottom = win.bottom, op.pad_left = win.left, op.pad_right = win.right;
  op.oh = out_dim(h, op.kh, op.sh, op.dh, op.pad_top, op.pad_bottom);
  op.ow = out_dim(w, op.kw, op.sw, op.dw, op.pad_left, op.pad_right);
  return op;
}

LoweredOp conv_op(const char* name, int h, int w, int c, int oc, const Window& win, bool bias = true) {
  LoweredOp op = windowed(OpKind::Conv, name, h, w, c, win);
  op.oc = oc;
  op.weights = random_floats(static_cast<std::size_t>(win.kh) * win.kw * c * oc, -0.5f, 0.5f);
  if (bias) op.bias = random_floats(static_cast<std::size_t>(oc));
  return op;
}

LoweredOp depthwise_op(const char* name, int h, int w, int c, int mult, const Window& win, bool bias = true) {
  LoweredOp op = windowed(OpKind::DepthwiseConv, name, h, w, c, win);
  op.depth_multiplier = mult;
  op.oc = c * mult;
  op.weights = random_floats(static_cast<std::size_t>(win.kh) * win.kw * c * mult, -0.5f, 0.5f);
  if (bias) op.bias = random_floats(static_cast<std::size_t>(op.oc));
  return op;
}

LoweredOp elementwise_op(OpKind kind, const char* name, int h, int w, int c, int inputs) {
  LoweredOp op = windowed(kind, name, h, w, c, {});
  op.in.assign(static_cast<std::size_t>(inputs), 0);
  return op;
}

TEST(BackwardOps, Conv) {
  check_op(conv_op("conv 3x3 stride 2, padding on each side", 5, 7, 3, 4,
                   {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .top = 0, .bottom = 1, .left = 1, .right = 2}),
           2);
  check_op(
      conv_op("conv 3x2 dilation 2, stride (1, 2)", 5, 7, 3, 5,
              {.kh = 3, .kw = 2, .sh = 1, .sw = 2, .dh = 2, .dw = 2, .top = 2, .bottom = 1, .left = 1, .right = 1}),
      2);
  check_op(conv_op("conv 1x1 (the direct GEMM)", 5, 7, 3, 4, {}), 2);
  check_op(conv_op("conv 1x1 stride 2, no bias", 5, 7, 3, 4, {.sh = 2, .sw = 2}, false), 2);
  check_op(conv_op("conv 2x2 valid, wider than a GEMM panel", 4, 5, 3, 19, {.kh = 2, .kw = 2}), 2);
}

TEST(BackwardOps, DepthwiseConv) {
  check_op(depthwise_op("depthwise 3x3 multiplier 2, stride 2, padding", 5, 7, 3, 2,
                        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .top = 1, .bottom = 1, .left = 0, .right = 2}),
           2);
  check_op(depthwise_op("depthwise 3x3 multiplier 1, dilation 2", 5, 7, 3, 1,
                        {.kh = 3, .kw = 3, .dh = 2, .dw = 2, .top = 2, .bottom = 2, .left = 1, .right = 2}),
           2);
  // 3x3, multiplier 1, 11 channels: the kernels' 8-channel blocks and the 3 left over.
  check_op(depthwise_op("depthwise 3x3 x1, 11 channels, stride 2, padding", 5, 7, 11, 1,
                        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .top = 1, .bottom = 0, .left = 2, .right = 1}),
           2);
  check_op(depthwise_op(
               "depthwise 3x3 x1, 11 channels, stride (1, 2), dilation 2", 5, 7, 11, 1,
               {.kh = 3, .kw = 3, .sh = 1, .sw = 2, .dh = 2, .dw = 2, .top = 2, .bottom = 1, .left = 1, .right = 2}),
           2);
  check_op(depthwise_op("depthwise 3x3 x1, 16 channels, dilation (2, 1), padding", 5, 7, 16, 1,
                        {.kh = 3, .kw = 3, .dh = 2, .dw = 1, .top = 2, .bottom = 2, .left = 0, .right = 2}),
           2);
  check_op(depthwise_op("depthwise 2x3 multiplier 3, stride (2, 1), no bias", 5, 7, 3, 3,
                        {.kh = 2, .kw = 3, .sh = 2, .sw = 1, .left = 1, .right = 1}, false),
           2);
}

TEST(BackwardOps, Dense) {
  LoweredOp op;
  op.kind = OpKind::Dense;
  op.name = "dense over 3 rows";
  op.in = {0};
  op.c = 5, op.oc = 4, op.rows = 3;
  op.weights = random_floats(5 * 4, -0.5f, 0.5f);
  op.bias = random_floats(4);
  check_op(op, 2);
  op.name = "dense, 1 row, wider than a panel, no bias";
  op.rows = 1, op.oc = 17;
  op.weights = random_floats(5 * 17, -0.5f, 0.5f);
  op.bias.clear();
  check_op(op, 3);
}

TEST(BackwardOps, Affine) {
  LoweredOp op = elementwise_op(OpKind::Affine, "affine", 5, 7, 3, 1);
  op.scale = random_floats(3);
  op.bias = random_floats(3);
  check_op(op, 2);
}

TEST(BackwardOps, ActivationOpIsIdentity) { check_op(elementwise_op(OpKind::Activation, "activation", 5, 7, 3, 1), 2); }

TEST(BackwardOps, ZeroPad) {
  LoweredOp op = elementwise_op(OpKind::ZeroPad, "zero pad 1, 2, 0, 3", 5, 7, 3, 1);
  op.pad_top = 1, op.pad_bottom = 2, op.pad_left = 0, op.pad_right = 3;
  op.oh = 5 + 3, op.ow = 7 + 3;
  check_op(op, 2);
}

// Cropping2D lowers to ZeroPad with negative sides; mixed signs too (cut one side, pad the other).
TEST(BackwardOps, ZeroPadWithNegativeSidesCrops) {
  LoweredOp op = elementwise_op(OpKind::ZeroPad, "crop 1, 0, 2, 1", 5, 7, 3, 1);
  op.pad_top = -1, op.pad_bottom = 0, op.pad_left = -2, op.pad_right = -1;
  op.oh = 5 - 1, op.ow = 7 - 3;
  check_op(op, 2);
  LoweredOp mixed = elementwise_op(OpKind::ZeroPad, "crop top 2, pad left 1", 5, 7, 3, 1);
  mixed.pad_top = -2, mixed.pad_bottom = 1, mixed.pad_left = 1, mixed.pad_right = -2;
  mixed.oh = 5 - 1, mixed.ow = 7 - 1;
  check_op(mixed, 2);
}

TEST(BackwardOps, Add) {
  check_op(elementwise_op(OpKind::Add, "add of 2", 5, 7, 3, 2), 2);
  LoweredOp op = elementwise_op(OpKind::Add, "add of 3, residual_scale 0.3", 5, 7, 3, 3);
  op.residual_scale = 0.3f;
  check_op(op, 2);
}

TEST(BackwardOps, Concat) {
  LoweredOp op = elementwise_op(OpKind::Concat, "concat 2 + 3 + 1", 5, 7, 2, 3);
  op.rows = 35;
  op.in_channels = {2, 3, 1};
  op.oc = 6;
  check_op(op, 2);
}

TEST(BackwardOps, Pooling) {
  for (OpKind kind : {OpKind::MaxPool, OpKind::AvgPool}) {
    const bool is_max = kind == OpKind::MaxPool;
    check_op(windowed(kind, is_max ? "max 3x3 stride 2, padding" : "avg 3x3 stride 2, padding", 5, 7, 3,
                      {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .top = 1, .bottom = 1, .left = 0, .right = 1}),
             2);
    check_op(windowed(kind, is_max ? "max 2x2 stride 2, valid" : "avg 2x2 stride 2, valid", 5, 7, 3,
                      {.kh = 2, .kw = 2, .sh = 2, .sw = 2}),
             2);
    check_op(windowed(kind, is_max ? "max 3x2 stride 1, overlapping" : "avg 3x2 stride 1, overlapping", 5, 7, 3,
                      {.kh = 3, .kw = 2, .top = 1, .bottom = 1, .left = 1, .right = 0}),
             2);
  }
}

TEST(BackwardOps, GlobalPooling) {
  for (OpKind kind : {OpKind::GlobalAvgPool, OpKind::GlobalMaxPool}) {
    LoweredOp op = elementwise_op(kind, kind == OpKind::GlobalAvgPool ? "global avg" : "global max", 5, 7, 3, 1);
    op.oh = op.ow = 1;
    check_op(op, 2);
  }
}

TEST(BackwardOps, MaxPoolTiesGoToTheFirstMaximum) {
  // All-equal windows: the forward's std::max keeps the first value, so its pixel gets the gradient.
  LoweredOp op = windowed(OpKind::MaxPool, "max ties", 4, 4, 2, {.kh = 2, .kw = 2, .sh = 2, .sw = 2});
  const std::vector<float> x(32, 1.0f), dout(8, 1.0f);
  std::vector<float> dx(32, 0.0f);
  cpu::backward_op(op, {x.data()}, nullptr, dout.data(), {dx.data()}, nullptr, 1);
  for (int y = 0; y < 4; ++y)
    for (int xx = 0; xx < 4; ++xx)
      for (int ch = 0; ch < 2; ++ch)
        EXPECT_EQ(dx[(y * 4 + xx) * 2 + ch], y % 2 == 0 && xx % 2 == 0 ? 1.0f : 0.0f) << y << "," << xx;
}

TEST(BackwardOps, Mul) {
  check_op(elementwise_op(OpKind::Mul, "mul of equal shapes", 5, 7, 3, 2), 2);
  LoweredOp op = elementwise_op(OpKind::Mul, "mul by a channel vector", 5, 7, 3, 2);
  op.channel_broadcast = true;
  check_op(op, 2);
}

TEST(BackwardOps, LayerNorm) {
  LoweredOp op = elementwise_op(OpKind::LayerNorm, "layer norm with scale and bias", 1, 1, 6, 1);
  op.rows = 4;
  op.epsilon = 1e-3f;
  op.scale = random_floats(6);
  op.bias = random_floats(6);
  check_op(op, 2);
  op.name = "layer norm without scale or bias";
  op.scale.clear();
  op.bias.clear();
  check_op(op, 3);
}

// ---- activations -------------------------------------------------------------------------------

double ref_act(const ActivationSpec& a, double x) {
  switch (a.kind) {
    case ActKind::ReLU:
      if (a.threshold == 0.0f && a.negative_slope == 0.0f) return std::min(std::max(x, 0.0), double(a.max_value));
      return x > a.threshold ? std::min(x, double(a.max_value)) : a.negative_slope * (x - a.threshold);
    case ActKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActKind::Swish: return x / (1.0 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Elu: return x > 0 ? x : std::expm1(x);
    case ActKind::Selu: return x > 0 ? 1.05070098 * x : 1.05070098 * 1.67326324 * std::expm1(x);
    case ActKind::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActKind::Softplus: return std::log1p(std::exp(x));
    case ActKind::HardSigmoid: return std::clamp(0.2 * x + 0.5, 0.0, 1.0);
    case ActKind::HardSwish: return x * std::clamp(x + 3.0, 0.0, 6.0) / 6.0;
    case ActKind::Linear:
    case ActKind::Softmax: return x;
  }
  return x;
}

Vec ref_act_rows(const ActivationSpec& a, const Vec& pre, int n) {
  Vec y(pre.size());
  if (a.kind != ActKind::Softmax) {
    for (std::size_t i = 0; i < pre.size(); ++i) y[i] = ref_act(a, pre[i]);
    return y;
  }
  for (std::size_t r = 0; r < pre.size() / n; ++r) {
    double m = -INFINITY, sum = 0.0;
    for (int j = 0; j < n; ++j) m = std::max(m, pre[r * n + j]);
    for (int j = 0; j < n; ++j) sum += y[r * n + j] = std::exp(pre[r * n + j] - m);
    for (int j = 0; j < n; ++j) y[r * n + j] /= sum;
  }
  return y;
}

ActivationSpec relu(float max_value, float slope, float threshold) {
  return {.kind = ActKind::ReLU, .max_value = max_value, .negative_slope = slope, .threshold = threshold};
}

// Pre-activation values away from every kink (finite differences straddling one are meaningless).
std::vector<float> away_from_kinks(std::size_t n) {
  std::vector<float> v = random_floats(n, -4.5f, 4.5f);
  const float kinks[] = {0.0f, 0.5f, -0.5f, 6.0f, 2.0f, -3.0f, 3.0f, -2.5f, 2.5f};
  for (float& x : v)
    for (float k : kinks)
      if (std::abs(x - k) < 0.02f) x = k + 0.05f;
  return v;
}

TEST(BackwardActivations, EveryKindAgainstFiniteDifferences) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<const char*, ActivationSpec>> acts = {
      {"linear", {}},
      {"relu", relu(inf, 0.0f, 0.0f)},
      {"relu6", relu(6.0f, 0.0f, 0.0f)},
      {"relu max 2", relu(2.0f, 0.0f, 0.0f)},
      {"leaky relu 0.1", relu(inf, 0.1f, 0.0f)},
      {"relu threshold 0.5, slope 0.2, max 3", relu(3.0f, 0.2f, 0.5f)},
      {"relu threshold -0.5, slope 0.3", relu(inf, 0.3f, -0.5f)},
      {"sigmoid", {.kind = ActKind::Sigmoid}},
      {"swish", {.kind = ActKind::Swish}},
      {"tanh", {.kind = ActKind::Tanh}},
      {"softmax", {.kind = ActKind::Softmax}},
      {"elu", {.kind = ActKind::Elu}},
      {"selu", {.kind = ActKind::Selu}},
      {"gelu", {.kind = ActKind::Gelu}},
      {"softplus", {.kind = ActKind::Softplus}},
      {"hard sigmoid", {.kind = ActKind::HardSigmoid}},
      {"hard swish", {.kind = ActKind::HardSwish}},
  };
  constexpr std::size_t kRows = 3;
  constexpr int kN = 7;
  for (const auto& [name, act] : acts) {
    SCOPED_TRACE(name);
    const std::vector<float> pre = away_from_kinks(kRows * kN);
    std::vector<float> y = pre;
    cpu::apply_act(y.data(), kRows, kN, act);
    Vec pre_d = to_double(pre);
    EXPECT_LT(rel_error(y, ref_act_rows(act, pre_d, kN)), 1e-5) << "the reference is not the backend's activation";
    const std::vector<float> dy = random_floats(pre.size());
    const Vec dy_d = to_double(dy);
    std::vector<float> dpre(pre.size(), -7.0f);
    cpu::activation_backward(act, pre.data(), y.data(), dy.data(), dpre.data(), kRows, kN);
    const Vec want = numeric_gradient(pre_d, [&] { return dot(ref_act_rows(act, pre_d, kN), dy_d); });
    EXPECT_LT(rel_error(dpre, want), kTolerance);
    std::vector<float> in_place = dy;  // dpre may alias dy
    cpu::activation_backward(act, pre.data(), y.data(), in_place.data(), in_place.data(), kRows, kN);
    EXPECT_EQ(in_place, dpre);
  }
}

float derivative_at(const ActivationSpec& act, float x) {
  float y = x, d = 1.0f, out = 0.0f;
  cpu::apply_act(&y, 1, 1, act);
  cpu::activation_backward(act, &x, &y, &d, &out, 1, 1);
  return out;
}

TEST(BackwardActivations, KinksFollowTensorFlow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(derivative_at(relu(inf, 0.0f, 0.0f), 0.0f), 0.0f);   // ReluGrad: x > 0
  EXPECT_EQ(derivative_at(relu(6.0f, 0.0f, 0.0f), 0.0f), 0.0f);  // Relu6Grad: 0 < x < 6
  EXPECT_EQ(derivative_at(relu(6.0f, 0.0f, 0.0f), 6.0f), 0.0f);
  EXPECT_EQ(derivative_at(relu(6.0f, 0.0f, 0.0f), 5.9f), 1.0f);
  EXPECT_EQ(derivative_at(relu(inf, 0.2f, 0.0f), 0.0f), 0.2f);   // LeakyReluGrad: x > 0 ? 1 : alpha
  EXPECT_EQ(derivative_at(relu(4.0f, 0.0f, 0.0f), 4.0f), 1.0f);  // clip_by_value passes on the bound
  EXPECT_EQ(derivative_at(relu(inf, 0.0f, 1.0f), 1.0f), 0.0f);   // x * (x > threshold)
  EXPECT_EQ(derivative_at(relu(inf, 0.3f, 1.0f), 1.0f), 0.0f);   // -alpha * relu(threshold - x)
  EXPECT_EQ(derivative_at(relu(inf, 0.3f, 1.0f), 0.5f), 0.3f);
  EXPECT_EQ(derivative_at({.kind = ActKind::HardSwish}, -3.0f), 0.0f);
  EXPECT_NEAR(derivative_at({.kind = ActKind::HardSwish}, 0.0f), 0.5f, 1e-7);
  EXPECT_EQ(derivative_at({.kind = ActKind::HardSwish}, 3.0f), 1.0f);
}

// ---- threads and size --------------------------------------------------------------------------

std::vector<LoweredOp> larger_ops() {
  std::vector<LoweredOp> ops;
  ops.push_back(
      conv_op("conv 3x3 pad 1", 10, 11, 16, 24, {.kh = 3, .kw = 3, .top = 1, .bottom = 1, .left = 1, .right = 1}));
  ops.push_back(conv_op("conv 1x1", 10, 11, 16, 24, {}));
  ops.push_back(depthwise_op("depthwise 3x3 x2", 10, 11, 16, 2,
                             {.kh = 3, .kw = 3, .top = 1, .bottom = 1, .left = 1, .right = 1}));
  ops.push_back(depthwise_op("depthwise 3x3 x1 stride 2", 10, 11, 20, 1,
                             {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .top = 0, .bottom = 1, .left = 0, .right = 1}));
  LoweredOp affine = elementwise_op(OpKind::Affine, "affine", 10, 11, 16, 1);
  affine.scale = random_floats(16);
  affine.bias = random_floats(16);
  ops.push_back(affine);
  LoweredOp ln = elementwise_op(OpKind::LayerNorm, "layer norm", 1, 1, 16, 1);
  ln.rows = 110;
  ln.epsilon = 1e-3f;
  ln.scale = random_floats(16);
  ln.bias = random_floats(16);
  ops.push_back(ln);
  LoweredOp dense;
  dense.kind = OpKind::Dense;
  dense.name = "dense";
  dense.in = {0};
  dense.c = 16, dense.oc = 20, dense.rows = 110;
  dense.weights = random_floats(16 * 20);
  dense.bias = random_floats(20);
  ops.push_back(dense);
  LoweredOp mul = elementwise_op(OpKind::Mul, "mul by a channel vector", 10, 11, 16, 2);
  mul.channel_broadcast = true;
  ops.push_back(mul);
  return ops;
}

TEST(BackwardThreads, OneAndTwoThreadsGiveIdenticalGradients) {
  constexpr int kBatch = 23;  // 2530 rows: the dW sums have several chunks of several blocks
  for (const LoweredOp& op : larger_ops()) {
    SCOPED_TRACE(op.name);
    std::vector<std::vector<float>> in;
    for (std::size_t k = 0; k < op.in.size(); ++k) in.push_back(random_floats(in_size(op, k) * kBatch));
    const std::vector<float> out = run_forward(op, in, kBatch);
    const std::vector<float> dout = random_floats(out.size());
    Backward one, two;
    tbb::task_arena(1).execute([&] { one = run_backward(op, in, out, dout, kBatch); });
    tbb::task_arena(2).execute([&] { two = run_backward(op, in, out, dout, kBatch); });
    EXPECT_EQ(one.din, two.din);
    EXPECT_EQ(one.grads.weights, two.grads.weights);
    EXPECT_EQ(one.grads.bias, two.grads.bias);
    EXPECT_EQ(one.grads.scale, two.grads.scale);
  }
}

// The float64 backward of Conv / DepthwiseConv by loops: dX, dW, db of L = sum(out * R).
struct RefGrads {
  Vec dx, dw, db;
};
RefGrads ref_conv_backward(const LoweredOp& op, const Vec& x, const Vec& r, int nb) {
  RefGrads g{Vec(x.size()), Vec(op.weights.size()), Vec(op.bias.size())};
  const bool dw = op.kind == OpKind::DepthwiseConv;
  for (int n = 0; n < nb; ++n)
    for (int oy = 0; oy < op.oh; ++oy)
      for (int ox = 0; ox < op.ow; ++ox)
        for (int o = 0; o < op.oc; ++o) {
          const double d = r[((static_cast<std::size_t>(n) * op.oh + oy) * op.ow + ox) * op.oc + o];
          if (!g.db.empty()) g.db[o] += d;
          for (int ky = 0; ky < op.kh; ++ky)
            for (int kx = 0; kx < op.kw; ++kx) {
              const int iy = oy * op.sh - op.pad_top + ky * op.dh, ix = ox * op.sw - op.pad_left + kx * op.dw;
              if (iy < 0 || iy >= op.h || ix < 0 || ix >= op.w) continue;
              const std::size_t tap = static_cast<std::size_t>(ky) * op.kw + kx;
              const std::size_t px = ((static_cast<std::size_t>(n) * op.h + iy) * op.w + ix) * op.c;
              if (dw) {
                const int ch = o / op.depth_multiplier;
                g.dx[px + ch] += d * op.weights[tap * op.oc + o];
                g.dw[tap * op.oc + o] += d * x[px + ch];
              } else {
                for (int ch = 0; ch < op.c; ++ch) {
                  const std::size_t wi = (tap * op.c + ch) * op.oc + o;
                  g.dx[px + ch] += d * op.weights[wi];
                  g.dw[wi] += d * x[px + ch];
                }
              }
            }
        }
  return g;
}

TEST(BackwardOps, RealisticSizeAgainstTheReference) {
  constexpr int kBatch = 8;
  const Window same3{.kh = 3, .kw = 3, .top = 1, .bottom = 1, .left = 1, .right = 1};
  const std::vector<LoweredOp> ops = {conv_op("conv 1x1 64 -> 64", 14, 14, 64, 64, {}),
                                      depthwise_op("depthwise 3x3", 14, 14, 64, 1, same3),
                                      conv_op("conv 3x3 64 -> 40", 14, 14, 64, 40, same3)};
  for (const LoweredOp& op : ops) {
    SCOPED_TRACE(op.name);
    const std::vector<std::vector<float>> in = {random_floats(in_size(op, 0) * kBatch)};
    const Vec x = to_double(in[0]);
    const std::vector<float> out = run_forward(op, in, kBatch);
    const Params p = params_of(op);
    EXPECT_LT(rel_error(out, ref_forward(op, {x}, p, kBatch)), 1e-5);
    const std::vector<float> r = random_floats(out.size());
    const Vec r_d = to_double(r);
    const RefGrads want = ref_conv_backward(op, x, r_d, kBatch);
    // The reference backward against a directional derivative of the reference forward: along v
    // (input) and u (weights), L is linear, so the central difference is exact up to rounding.
    {
      const Vec v = to_double(random_floats(x.size())), u = to_double(random_floats(p.weights.size()));
      constexpr double kStep = 1e-3;
      auto loss_at = [&](double t) {
        Vec xt = x;
        Params pt = p;
        for (std::size_t i = 0; i < xt.size(); ++i) xt[i] += t * v[i];
        for (std::size_t i = 0; i < u.size(); ++i) pt.weights[i] += t * u[i];
        return dot(ref_forward(op, {xt}, pt, kBatch), r_d);
      };
      const double fd = (loss_at(kStep) - loss_at(-kStep)) / (2 * kStep);
      const double analytic = dot(want.dx, v) + dot(want.dw, u);
      EXPECT_NEAR(fd, analytic, 1e-6 * std::max(1.0, std::abs(analytic)));
    }
    const Backward got = run_backward(op, in, out, r, kBatch);
    EXPECT_LT(rel_error(minus_prefill(got.din[0]), want.dx), kTolerance);
    EXPECT_LT(rel_error(minus_prefill(got.grads.weights), want.dw), kTolerance);
    EXPECT_LT(rel_error(minus_prefill(got.grads.bias), want.db), kTolerance);
  }
}

}  // namespace
}  // namespace stoker::trainer
