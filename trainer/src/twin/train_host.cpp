// The GPU trainer's host twin (train_plan.hpp): the forward through run_op_on_host, the backward
// through the per-element functions of the GPU kernels (backward_math.hpp), rounding where the GPU
// stores in the storage type: values, the gradient handed to cuDNN, cuDNN's results. Gradients
// are float32 as on the GPU. cuDNN's convolution backward is plain loops here. Slow; it is the GPU
// trainer on the emulated device, and tests compare it with the CPU backward on any machine.
#include <algorithm>
#include <cstring>

#include <stoker/core/error.hpp>

#include "conv_reference.hpp"
#include "ops/backward_math.hpp"
#include "plan/train_plan.hpp"

namespace stoker::trainer::cudnn {

using namespace ops;  // the per-element math the kernels and their host twins share
namespace {

struct Load {
  const float* p;
  float operator()(std::size_t i) const { return p[i]; }
};
struct Ones {
  float operator()(std::size_t) const { return 1.0f; }
};

// out[j] = column sums of a · b over rows × c, in backward_math.hpp's block order.
template <typename B>
void column_sums(const float* a, const B& b, std::size_t rows, int c, std::vector<float>& out) {
  out.assign(static_cast<std::size_t>(c), 0.0f);
  for (int j = 0; j < c; ++j) {
    float total = 0.0f;
    for (std::size_t r0 = 0; r0 < rows; r0 += kSumRows)
      total += column_partial(Load{a}, b, c, j, r0, std::min(rows, r0 + kSumRows));
    out[static_cast<std::size_t>(j)] = total;
  }
}

class HostTrainExecutor final : public detail::TrainExecutor {
 public:
  HostTrainExecutor(const TrainLowering& lowering, int max_batch, DType storage)
      : t_(plan_training(lowering)), max_batch_(max_batch), st_(storage) {
    if (max_batch < 1) throw InvalidArgument("gpu fine-tuning: max_batch must be at least 1");
    const std::size_t slots = t_.plan.slot_size.size();
    values_.resize(slots);
    grads_.resize(slots);
    for (std::size_t s = 0; s < slots; ++s) {
      const std::size_t n = t_.plan.slot_size[s] * static_cast<std::size_t>(max_batch);
      values_[s].assign(n, 0.0f);
      if (t_.needs_gradient[s] || static_cast<int>(s) == t_.output_slot) grads_[s].assign(n, 0.0f);
      bytes_ += n * (dtype_size(storage) + (grads_[s].empty() ? 0 : sizeof(float)));
    }
  }

  std::string name() const override { return std::string("the GPU trainer's host twin (") + to_string(st_) + ")"; }
  std::size_t memory_bytes(int /*batch*/) const override { return bytes_; }
  void set_weights(const TrainLowering& lowering) override { refresh_weights(t_, lowering.steps); }

  const float* forward(const float* x, int batch, const std::vector<const float*>& masks) override {
    if (batch < 1 || batch > max_batch_)
      throw InvalidArgument("gpu fine-tuning: batch " + std::to_string(batch) + " is outside 1.." +
                            std::to_string(max_batch_));
    nb_ = static_cast<std::size_t>(batch);
    store(t_.plan.input_slot, x);
    for (std::size_t k = 0; k < t_.mask_slot.size(); ++k)
      if (t_.mask_slot[k] >= 0) store(t_.mask_slot[k], masks.at(k));
    const auto value = [this](int s) { return values_[static_cast<std::size_t>(s)].data(); };
    for (const Op& op : t_.plan.ops) {
      run_op_on_host(op, value, value(op.out), total(op.out), nb_, st_, scratch_);
      if (op.act.kind == ActKind::Softmax)
        softmax_rows_on_host(value(op.out), total(op.out) / static_cast<std::size_t>(op.oc), op.oc, st_);
    }
    return value(t_.output_slot);
  }

  void backward(const float* doutput, std::vector<detail::OpGradients>& gradients) override {
    for (auto& g : grads_) std::fill(g.begin(), g.end(), 0.0f);
    std::memcpy(grad(t_.output_slot), doutput, total(t_.output_slot) * sizeof(float));
    for (std::size_t k = t_.plan.ops.size(); k-- > 0;) {
      const Op& op = t_.plan.ops[k];
      detail::OpGradients* g = t_.main_op[k] ? &gradients.at(static_cast<std::size_t>(t_.step_of[k])) : nullptr;
      backward_op(op, g);
    }
  }

 private:
  std::size_t total(int slot) const { return t_.plan.slot_size[static_cast<std::size_t>(slot)] * nb_; }
  float* value(int slot) { return values_[static_cast<std::size_t>(slot)].data(); }
  // The gradient buffer of a slot, or null when nothing below it trains.
  float* grad(int slot) {
    auto& g = grads_[static_cast<std::size_t>(slot)];
    return g.empty() ? nullptr : g.data();
  }
  void store(int slot, const float* x) {
    float* v = value(slot);
    const std::size_t n = total(slot);
    for (std::size_t i = 0; i < n; ++i) v[i] = round_to_storage(x[i], st_);
  }

  void backward_op(const Op& op, detail::OpGradients* g) {
    const float* dy = grad(op.out);
    if (!dy) return;
    const std::size_t n_out = total(op.out);
    switch (op.type) {
      case OpType::Conv: return op.depthwise_kernel ? depthwise_backward(op, dy, g) : conv_backward(op, dy, g);
      case OpType::Pad: {
        float* dx = grad(op.in[0]);
        if (!dx) return;
        const PadGeometry pg{op.h, op.w, op.c, op.oh, op.ow, op.pad_top, op.pad_left};
        const std::size_t n = total(op.in[0]);
        for (std::size_t e = 0; e < n; ++e) {
          std::size_t at = 0;
          if (pad_destination(pg, e, &at)) dx[e] += dy[at];
        }
        return;
      }
      case OpType::Affine: return affine_backward(op, dy, n_out, g);
      case OpType::Concat: {
        const std::size_t rows = static_cast<std::size_t>(op.rows) * nb_;
        int offset = 0;
        for (std::size_t k = 0; k < op.in.size(); ++k) {
          const int ck = op.in_channels[k];
          if (float* dx = grad(op.in[k]))
            for (std::size_t e = 0; e < rows * static_cast<std::size_t>(ck); ++e)
              dx[e] += dy[concat_destination(e, ck, op.oc, offset)];
          offset += ck;
        }
        return;
      }
      case OpType::MaxPool:
      case OpType::AvgPool: {
        float* dx = grad(op.in[0]);
        if (!dx) return;
        const PoolGeometry pg{op.h, op.w, op.c, op.oh, op.ow, op.kh, op.kw, op.sh, op.sw, op.pad_top, op.pad_left};
        const std::size_t n = total(op.in[0]);
        for (std::size_t e = 0; e < n; ++e)
          dx[e] += pool_input_gradient(Load{value(op.in[0])}, Load{dy}, pg, op.type == OpType::MaxPool, e);
        return;
      }
      case OpType::Gap:
      case OpType::Gmp: {
        float* dx = grad(op.in[0]);
        if (!dx) return;
        const std::size_t n = total(op.in[0]);
        for (std::size_t e = 0; e < n; ++e)
          dx[e] +=
              global_pool_input_gradient(Load{value(op.in[0])}, Load{dy}, op.h * op.w, op.c, op.type == OpType::Gmp, e);
        return;
      }
      case OpType::Mul: {
        const float* a = value(op.in[0]);
        const float* b = value(op.in[1]);
        const std::size_t per = static_cast<std::size_t>(op.h) * op.w * op.c;
        if (float* da = grad(op.in[0]))
          for (std::size_t e = 0; e < n_out; ++e) da[e] += dy[e] * b[mul_source(e, per, op.c, op.channel_broadcast)];
        if (float* db = grad(op.in[1])) {
          if (op.channel_broadcast) {
            const std::size_t n = nb_ * static_cast<std::size_t>(op.c);
            for (std::size_t e = 0; e < n; ++e) db[e] += broadcast_mul_gradient(Load{a}, Load{dy}, per, op.c, e);
          } else {
            for (std::size_t e = 0; e < n_out; ++e) db[e] += dy[e] * a[e];
          }
        }
        return;
      }
      case OpType::LayerNorm: return layer_norm_backward(op, dy, n_out, g);
    }
  }

  // y = act(x · scale + bias + z_scale · z); an in-place op (an Add's later inputs) passes the
  // gradient of its slot on unchanged and adds to z's only.
  void affine_backward(const Op& op, const float* dy, std::size_t n, detail::OpGradients* g) {
    if (op.act.kind == ActKind::Softmax) return softmax_backward(op, dy, n);
    const bool in_place = op.out == op.in[0];
    const float* x = value(op.in[0]);
    const bool has_z = op.in.size() > 1;
    const float* z = has_z ? value(op.in[1]) : nullptr;
    const float* y = value(op.out);
    const float* scale = op.scale.empty() ? nullptr : op.scale.data();
    const float* bias = op.bias.empty() ? nullptr : op.bias.data();
    const ActParams act = act_params(op.act);
    const ActParams linear{};
    float* dx = in_place ? nullptr : grad(op.in[0]);
    float* dz = has_z ? grad(op.in[1]) : nullptr;
    dv_.resize(n);
    for (std::size_t e = 0; e < n; ++e) {
      const int ch = static_cast<int>(e % static_cast<std::size_t>(op.c));
      float dv = dy[e];
      if (!op.act.is_linear())
        dv = act_backward(affine_value(x[e], scale, bias, ch, has_z, has_z ? z[e] : 0.0f, op.residual_scale, linear),
                          y[e], dv, act);
      dv_[e] = dv;
      if (dx) dx[e] += scale ? dv * scale[ch] : dv;
      if (dz) dz[e] += op.residual_scale * dv;
    }
    if (!g) return;
    const std::size_t rows = n / static_cast<std::size_t>(op.c);
    if (!g->scale.empty()) column_sums(dv_.data(), Load{x}, rows, op.c, g->scale);
    if (!g->bias.empty()) column_sums(dv_.data(), Ones{}, rows, op.c, g->bias);
  }

  // A split-off Softmax (no parameters): dx += y · (dy − Σ dy · y) per row.
  void softmax_backward(const Op& op, const float* dy, std::size_t n) {
    float* dx = grad(op.in[0]);
    if (!dx) return;
    const float* y = value(op.out);
    for (std::size_t base = 0; base < n; base += static_cast<std::size_t>(op.oc)) {
      const float dot = softmax_row_dot(Load{y}, Load{dy}, base, op.oc);
      for (int j = 0; j < op.oc; ++j) dx[base + j] += y[base + j] * (dy[base + j] - dot);
    }
  }

  void layer_norm_backward(const Op& op, const float* dy, std::size_t n, detail::OpGradients* g) {
    const float* x = value(op.in[0]);
    float* dx = grad(op.in[0]);
    const float* scale = op.scale.empty() ? nullptr : op.scale.data();
    dv_.resize(n);  // x̂
    for (std::size_t base = 0; base < n; base += static_cast<std::size_t>(op.c)) {
      const RowStats s = layer_norm_stats(Load{x}, base, op.c, op.epsilon);
      const LayerNormSums sums = layer_norm_sums(Load{x}, Load{dy}, base, op.c, s, scale);
      for (int j = 0; j < op.c; ++j) {
        const std::size_t e = base + static_cast<std::size_t>(j);
        dv_[e] = (x[e] - s.mean) * s.rstd;
        if (dx) dx[e] += layer_norm_input_gradient(x[e], dy[e], s, sums, scale, j);
      }
    }
    if (!g) return;
    const std::size_t rows = n / static_cast<std::size_t>(op.c);
    if (!g->scale.empty()) column_sums(dy, Load{dv_.data()}, rows, op.c, g->scale);
    if (!g->bias.empty()) column_sums(dy, Ones{}, rows, op.c, g->bias);
  }

  void depthwise_backward(const Op& op, const float* dy, detail::OpGradients* g) {
    const DepthwiseGeometry dg{op.h,  op.w,  op.c,  op.oh, op.ow,      op.oc,       op.kh,       op.kw,
                               op.sh, op.sw, op.dh, op.dw, op.pad_top, op.pad_left, op.oc / op.c};
    const float* x = value(op.in[0]);
    if (float* dx = grad(op.in[0])) {
      const std::size_t n = total(op.in[0]);
      for (std::size_t e = 0; e < n; ++e) dx[e] += depthwise_input_gradient(Load{dy}, op.weights.data(), dg, e);
    }
    if (!g) return;
    const std::size_t pixels = nb_ * static_cast<std::size_t>(op.oh) * op.ow;
    if (!g->weights.empty())
      for (std::size_t k = 0; k < g->weights.size(); ++k) {
        float acc = 0.0f;
        for (std::size_t p0 = 0; p0 < pixels; p0 += kSumRows)
          acc +=
              depthwise_weight_partial(Load{x}, Load{dy}, dg, static_cast<int>(k), p0, std::min(pixels, p0 + kSumRows));
        g->weights[k] = acc;
      }
    if (!g->bias.empty()) column_sums(dy, Ones{}, pixels, op.oc, g->bias);
  }

  // cuDNN's part: dy rounded to the storage type, the weights in it, each result (the input's
  // gradient before it is added, the weights' gradient) rounded to it as cuDNN stores them.
  void conv_backward(const Op& op, const float* dy, detail::OpGradients* g) {
    const std::size_t imgs = nb_ * static_cast<std::size_t>(op.rows);
    const int ph = op.explicit_pad ? op.padded_h() : op.h, pw = op.explicit_pad ? op.padded_w() : op.w;
    const std::size_t in_n = imgs * ph * pw * op.c;
    std::vector<float> dys(dy, dy + total(op.out)), w = op.weights, xs(in_n, 0.0f), dxs(in_n);
    for (float& v : dys) v = round_to_storage(v, st_);
    for (float& v : w) v = round_to_storage(v, st_);
    const float* x = value(op.in[0]);
    const PadGeometry pad{op.h, op.w, op.c, ph, pw, op.pad_top, op.pad_left};
    if (op.explicit_pad) {
      for (std::size_t e = 0; e < in_n; ++e) {
        std::size_t src = 0;
        xs[e] = pad_source(pad, e, &src) ? x[src] : 0.0f;
      }
    } else {
      std::copy(x, x + in_n, xs.begin());
    }
    std::vector<float> dw(op.weights.size());
    conv_backward_sums(conv_geometry(op, st_), imgs, xs.data(), w.data(), dys.data(), dxs.data(), dw.data());
    if (float* dx = grad(op.in[0])) {
      const std::size_t n = total(op.in[0]);
      if (op.explicit_pad) {
        for (std::size_t e = 0; e < n; ++e) {
          std::size_t at = 0;
          if (pad_destination(pad, e, &at)) dx[e] += round_to_storage(dxs[at], st_);
        }
      } else {
        for (std::size_t e = 0; e < n; ++e) dx[e] += round_to_storage(dxs[e], st_);
      }
    }
    if (!g) return;
    if (!g->weights.empty()) {
      for (float& v : dw) v = round_to_storage(v, st_);
      g->weights = from_krsc(dw, op.oc);
    }
    if (!g->bias.empty()) column_sums(dy, Ones{}, total(op.out) / static_cast<std::size_t>(op.oc), op.oc, g->bias);
  }

  TrainPlan t_;
  int max_batch_;
  DType st_;
  std::size_t nb_ = 0, bytes_ = 0;
  std::vector<std::vector<float>> values_, grads_;
  std::vector<float> scratch_, dv_;
};

}  // namespace

std::unique_ptr<detail::TrainExecutor> make_host_train_executor(const TrainLowering& lowering, int max_batch,
                                                                DType storage) {
  if (storage != DType::F32 && storage != DType::BF16)
    throw InvalidArgument(std::string("gpu fine-tuning: storage must be BF16 (or F32 on the host), received ") +
                          to_string(storage));
  return std::make_unique<HostTrainExecutor>(lowering, max_batch, storage);
}

}  // namespace stoker::trainer::cudnn
