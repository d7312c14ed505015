// run_plan_host(): the cuDNN backend's plan executed on the host, through the same buffer assignment
// and explicit-padding path as the GPU and, for everything but cuDNN's convolutions, through the
// kernels' own per-element functions (ops/forward_math.hpp), optionally rounding every stored value and
// weight to fp16/bf16 like the GPU's storage. Slow; for tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <stoker/core/error.hpp>
#include <stoker/core/half.hpp>

#include "conv_reference.hpp"
#include "ops/forward_math.hpp"
#include "plan/plan.hpp"

namespace stoker::trainer::cudnn {

using namespace ops;  // the per-element math the kernels and their host twins share

float storage_to_float(std::uint16_t bits, DType dtype) {
  return dtype == DType::BF16 ? convert::bf16_value(bits) : convert::f16_value(bits);
}

float round_to_storage(float v, DType dtype) {
  if (dtype == DType::F32) return v;
  return storage_to_float(dtype == DType::BF16 ? convert::bf16_bits(v) : convert::f16_bits(v), dtype);
}

namespace {

void round_all(float* x, std::size_t n, DType d) {
  if (d == DType::F32) return;
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to_storage(x[i], d);
}

void softmax_rows(float* x, std::size_t rows, int n) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = x + r * static_cast<std::size_t>(n);
    const float m = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
    for (int j = 0; j < n; ++j) row[j] /= sum;
  }
}

struct HostLoad {
  const float* p;
  float operator()(std::size_t i) const { return p[i]; }
};

void pad_host(const float* x, float* y, std::size_t images, const PadGeometry& g) {
  const std::size_t total = images * g.oh * g.ow * g.c;
  for (std::size_t e = 0; e < total; ++e) {
    std::size_t src = 0;
    y[e] = pad_source(g, e, &src) ? x[src] : 0.0f;
  }
}

// The plan's values during one run: the input (in the storage precision, as the GPU converts it)
// and the plan's buffers, poisoned with NaN so that a value read before it is written shows.
class HostValues {
 public:
  HostValues(const Plan& plan, const float* input, std::size_t nb, DType round_to)
      : plan_(plan), buffers_(plan.buffer_size.size()) {
    for (std::size_t b = 0; b < buffers_.size(); ++b) buffers_[b].assign(plan.buffer_size[b] * nb, std::nanf(""));
    const std::size_t in_size = plan.slot_size[static_cast<std::size_t>(plan.input_slot)];
    input_.assign(input, input + in_size * nb);
    round_all(input_.data(), input_.size(), round_to);
  }

  float* operator()(int slot) {
    if (slot == plan_.input_slot) return input_.data();
    const int b = plan_.slot_buffer[static_cast<std::size_t>(slot)];
    if (b < 0) throw Error("run_plan_host: slot " + std::to_string(slot) + " has no buffer");
    return buffers_[static_cast<std::size_t>(b)].data();
  }

 private:
  const Plan& plan_;
  std::vector<float> input_;
  std::vector<std::vector<float>> buffers_;
};

// What every op needs besides its own values.
struct HostRun {
  std::size_t nb;               // samples
  DType round_to;               // the storage precision
  std::vector<float>& scratch;  // the explicit-padding scratch
};

// The backend's own depthwise kernel: float32 weights [kh][kw][oc], one rounding.
void depthwise_host(const Op& op, const float* x, const float* z, float* y, const HostRun& run) {
  const ActParams act = act_params(op.act);
  const DepthwiseGeometry g{op.h,  op.w,  op.c,  op.oh, op.ow,      op.oc,       op.kh,       op.kw,
                            op.sh, op.sw, op.dh, op.dw, op.pad_top, op.pad_left, op.oc / op.c};
  const std::size_t oc = static_cast<std::size_t>(op.oc);
  const std::size_t total = run.nb * static_cast<std::size_t>(op.rows) * op.oh * op.ow * oc;
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  for (std::size_t e = 0; e < total; ++e) {
    const float acc = depthwise_sum(HostLoad{x}, op.weights.data(), g, e);
    y[e] = round_to_storage(affine_value(acc, nullptr, bias, static_cast<int>(e % oc), z != nullptr, z ? z[e] : 0.0f,
                                         op.residual_scale, act),
                            run.round_to);
  }
}

// cuDNN's part: weights in the storage type, the sum stored in it before the epilogue; an
// explicit padding copied into the zero-padded scratch first, like on the GPU.
void cudnn_conv_host(const Op& op, const float* x, const float* z, float* y, const HostRun& run) {
  const ActParams act = act_params(op.act);
  const std::size_t imgs = run.nb * static_cast<std::size_t>(op.rows);
  std::vector<float> w = op.weights;
  round_all(w.data(), w.size(), run.round_to);
  if (op.explicit_pad) {
    const int ph = op.padded_h(), pw = op.padded_w();
    run.scratch.assign(imgs * ph * pw * op.c, 0.0f);
    pad_host(x, run.scratch.data(), imgs, PadGeometry{op.h, op.w, op.c, ph, pw, op.pad_top, op.pad_left});
    x = run.scratch.data();
  }
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  const ConvGeometry g = conv_geometry(op, run.round_to);
  std::vector<float> sums(imgs * op.oh * op.ow * op.oc);
  conv_forward_sums(g, imgs, x, w.data(), sums.data());
  for (std::size_t e = 0; e < sums.size(); ++e) {
    const float acc = round_to_storage(sums[e], run.round_to);
    y[e] = round_to_storage(affine_value(acc, nullptr, bias, static_cast<int>(e % static_cast<std::size_t>(op.oc)),
                                         z != nullptr, z ? z[e] : 0.0f, op.residual_scale, act),
                            run.round_to);
  }
}

void affine_host(const Op& op, const float* x, const float* z, float* y, std::size_t total, const HostRun& run) {
  const ActParams act = act_params(op.act);
  const float* scale = op.scale.empty() ? nullptr : op.scale.data();
  const float* bias = op.bias.empty() ? nullptr : op.bias.data();
  for (std::size_t e = 0; e < total; ++e)
    y[e] = round_to_storage(affine_value(x[e], scale, bias, static_cast<int>(e % static_cast<std::size_t>(op.c)),
                                         z != nullptr, z ? z[e] : 0.0f, op.residual_scale, act),
                            run.round_to);
}

}  // namespace

void run_op_on_host(const Op& op, const std::function<float*(int)>& value, float* y, std::size_t total, std::size_t nb,
                    DType round_to, std::vector<float>& scratch) {
  const HostRun run{nb, round_to, scratch};
  switch (op.type) {
    case OpType::Conv: {
      const float* z = op.residual >= 0 ? value(op.residual) : nullptr;
      if (op.depthwise_kernel) return depthwise_host(op, value(op.in[0]), z, y, run);
      return cudnn_conv_host(op, value(op.in[0]), z, y, run);
    }
    case OpType::Pad:
      return pad_host(value(op.in[0]), y, run.nb, PadGeometry{op.h, op.w, op.c, op.oh, op.ow, op.pad_top, op.pad_left});
    case OpType::Affine:
      return affine_host(op, value(op.in[0]), op.in.size() > 1 ? value(op.in[1]) : nullptr, y, total, run);
    case OpType::Concat: {
      const std::size_t rows = static_cast<std::size_t>(op.rows) * run.nb;
      int off = 0;
      for (std::size_t k = 0; k < op.in.size(); ++k) {
        const float* x = value(op.in[k]);
        const std::size_t n = rows * static_cast<std::size_t>(op.in_channels[k]);
        for (std::size_t e = 0; e < n; ++e) y[concat_destination(e, op.in_channels[k], op.oc, off)] = x[e];
        off += op.in_channels[k];
      }
      return;
    }
    case OpType::MaxPool:
    case OpType::AvgPool: {
      const PoolGeometry g{op.h, op.w, op.c, op.oh, op.ow, op.kh, op.kw, op.sh, op.sw, op.pad_top, op.pad_left};
      const HostLoad x{value(op.in[0])};
      for (std::size_t e = 0; e < total; ++e)
        y[e] = round_to_storage(pool_value(x, g, op.type == OpType::MaxPool, e), run.round_to);
      return;
    }
    case OpType::Gap: {
      const ActParams act = act_params(op.act);
      const HostLoad x{value(op.in[0])};
      for (std::size_t e = 0; e < total; ++e)
        y[e] = round_to_storage(apply_act(gap_value(x, op.h * op.w, op.c, e), act), run.round_to);
      return;
    }
    case OpType::Gmp: {
      const ActParams act = act_params(op.act);
      const HostLoad x{value(op.in[0])};
      for (std::size_t e = 0; e < total; ++e)
        y[e] = round_to_storage(apply_act(gmp_value(x, op.h * op.w, op.c, e), act), run.round_to);
      return;
    }
    case OpType::LayerNorm: {
      const ActParams act = act_params(op.act);
      const HostLoad x{value(op.in[0])};
      const float* scale = op.scale.empty() ? nullptr : op.scale.data();
      const float* bias = op.bias.empty() ? nullptr : op.bias.data();
      for (std::size_t base = 0; base < total; base += static_cast<std::size_t>(op.c)) {
        const RowStats s = layer_norm_stats(x, base, op.c, op.epsilon);
        for (int j = 0; j < op.c; ++j)
          y[base + j] =
              round_to_storage(apply_act(layer_norm_value(x(base + j), s, scale, bias, j), act), run.round_to);
      }
      return;
    }
    case OpType::Mul: {
      const ActParams act = act_params(op.act);
      const float* a = value(op.in[0]);
      const float* b = value(op.in[1]);
      const std::size_t per = static_cast<std::size_t>(op.h) * op.w * op.c;
      for (std::size_t e = 0; e < total; ++e)
        y[e] = round_to_storage(apply_act(a[e] * b[mul_source(e, per, op.c, op.channel_broadcast)], act), run.round_to);
      return;
    }
  }
}

void softmax_rows_on_host(float* y, std::size_t rows, int n, DType round_to) {
  softmax_rows(y, rows, n);
  round_all(y, rows * static_cast<std::size_t>(n), round_to);
}

std::vector<std::vector<float>> run_plan_host(const Plan& plan, const float* input, int batch, DType round_to) {
  const std::size_t nb = static_cast<std::size_t>(batch);
  HostValues value(plan, input, nb, round_to);
  std::vector<float> scratch;
  const auto slot = [&value](int s) { return value(s); };
  for (const Op& op : plan.ops) {
    float* y = value(op.out);
    const std::size_t total = plan.slot_size[static_cast<std::size_t>(op.out)] * nb;
    run_op_on_host(op, slot, y, total, nb, round_to, scratch);
    if (op.act.kind == ActKind::Softmax)
      softmax_rows_on_host(y, total / static_cast<std::size_t>(op.oc), op.oc, round_to);
  }

  std::vector<std::vector<float>> outs;
  for (int s : plan.outputs) {
    const float* v = value(s);
    outs.emplace_back(v, v + plan.slot_size[static_cast<std::size_t>(s)] * nb);
  }
  return outs;
}

}  // namespace stoker::trainer::cudnn
