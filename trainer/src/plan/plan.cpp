// The cuDNN backend's plan: the shared lowering (../lowering.hpp) → GPU ops and their buffers (host
// code, no CUDA). Both backends lower through the same rules, so they compute the same thing.
#include "plan.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

#include <stoker/core/error.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer::cudnn {

const char* to_string(OpType t) {
  switch (t) {
    case OpType::Conv: return "Conv";
    case OpType::Pad: return "Pad";
    case OpType::Affine: return "Affine";
    case OpType::Concat: return "Concat";
    case OpType::MaxPool: return "MaxPool";
    case OpType::AvgPool: return "AvgPool";
    case OpType::Gap: return "Gap";
    case OpType::Gmp: return "Gmp";
    case OpType::Mul: return "Mul";
    case OpType::LayerNorm: return "LayerNorm";
  }
  return "?";
}

std::size_t Plan::activation_values() const {
  std::size_t n = 0;
  for (auto b : buffer_size) n += b;
  return n;
}

std::string Plan::describe() const {
  std::ostringstream s;
  for (const auto& op : ops) {
    s << to_string(op.type) << " " << op.name << " in";
    for (int i : op.in) s << " " << i;
    s << " -> " << op.out << " (buffer " << slot_buffer[static_cast<std::size_t>(op.out)] << ")";
    if (op.type == OpType::Conv) {
      s << (op.kind == detail::OpKind::Dense ? " dense" : "") << " " << op.h << "x" << op.w << "x" << op.c << " -> "
        << op.oh << "x" << op.ow << "x" << op.oc << " k" << op.kh << "x" << op.kw << " s" << op.sh << "x" << op.sw
        << " pad " << op.pad_top << "," << op.pad_bottom << "," << op.pad_left << "," << op.pad_right
        << (op.explicit_pad ? " explicit" : "") << " groups " << op.groups
        << (op.depthwise_kernel ? " (own depthwise kernel)" : "");
      if (op.residual >= 0) s << " + slot " << op.residual;
    }
    if (!op.act.is_linear()) s << " act " << trainer::to_string(op.act);
    s << "\n";
  }
  return s.str();
}

namespace {

using detail::OpKind;

Op gpu_op(detail::LoweredOp lowered, OpType type) {
  Op op{std::move(lowered)};
  op.type = type;
  return op;
}

// Keras order (rows × output channels) → cuDNN's KRSC (output channel major). For a Conv2D the
// rows are (ky, kx, cin); for a depthwise conv (ky, kx) with the output channel c * multiplier + m,
// which is group c of a grouped conv with one input channel per group; for Dense the rows are the
// inputs of a 1×1 conv.
std::vector<float> to_krsc(const std::vector<float>& keras, int out_channels) {
  const std::size_t oc = static_cast<std::size_t>(out_channels);
  const std::size_t k = keras.size() / oc;
  std::vector<float> krsc(keras.size());
  for (std::size_t r = 0; r < k; ++r)
    for (std::size_t o = 0; o < oc; ++o) krsc[o * k + r] = keras[r * oc + o];
  return krsc;
}

Op conv_op(detail::LoweredOp lowered, const PlanOptions& options) {
  Op op = gpu_op(std::move(lowered), OpType::Conv);
  const bool depthwise = op.kind == OpKind::DepthwiseConv;
  op.groups = depthwise ? op.c : 1;
  op.depthwise_kernel = depthwise && !options.cudnn_depthwise;
  // cuDNN pads symmetrically; padding as wide as the (dilated) kernel is left to the explicit
  // path too, to stay inside what every cuDNN algorithm accepts.
  const int eff_h = (op.kh - 1) * op.dh + 1, eff_w = (op.kw - 1) * op.dw + 1;
  op.explicit_pad = !op.depthwise_kernel && (!op.symmetric_pad() || op.pad_top >= eff_h || op.pad_left >= eff_w);
  if (!op.depthwise_kernel) op.weights = to_krsc(op.weights, op.oc);
  return op;
}

// y = in[0] + residual_scale * in[1], then y += in[k] in place for each further input; the fused
// activation goes with the last.
void append_add(std::vector<Op>& ops, detail::LoweredOp lowered) {
  Op op = gpu_op(std::move(lowered), OpType::Affine);
  const std::vector<int> inputs = std::move(op.in);
  const ActivationSpec act = op.act;
  op.act = {};
  op.in = {inputs[0], inputs[1]};
  ops.push_back(op);
  for (std::size_t k = 2; k < inputs.size(); ++k) {
    op.in = {op.out, inputs[k]};
    op.residual_scale = 1.0f;
    ops.push_back(op);
  }
  ops.back().act = act;
}

}  // namespace

void append_gpu_ops(std::vector<Op>& ops, detail::LoweredOp lowered, const PlanOptions& options) {
  switch (lowered.kind) {
    case OpKind::Conv:
    case OpKind::DepthwiseConv:
    case OpKind::Dense: ops.push_back(conv_op(std::move(lowered), options)); return;
    case OpKind::Affine:
    case OpKind::Activation: ops.push_back(gpu_op(std::move(lowered), OpType::Affine)); return;
    case OpKind::Add: append_add(ops, std::move(lowered)); return;
    case OpKind::ZeroPad: ops.push_back(gpu_op(std::move(lowered), OpType::Pad)); return;
    case OpKind::Concat: ops.push_back(gpu_op(std::move(lowered), OpType::Concat)); return;
    case OpKind::MaxPool: ops.push_back(gpu_op(std::move(lowered), OpType::MaxPool)); return;
    case OpKind::AvgPool: ops.push_back(gpu_op(std::move(lowered), OpType::AvgPool)); return;
    case OpKind::GlobalAvgPool: ops.push_back(gpu_op(std::move(lowered), OpType::Gap)); return;
    case OpKind::GlobalMaxPool: ops.push_back(gpu_op(std::move(lowered), OpType::Gmp)); return;
    case OpKind::Mul: ops.push_back(gpu_op(std::move(lowered), OpType::Mul)); return;
    case OpKind::LayerNorm: ops.push_back(gpu_op(std::move(lowered), OpType::LayerNorm)); return;
  }
}

namespace {

// The smallest free buffer holding `need` values, else the largest (to be grown), else -1.
int best_fit(const std::vector<int>& free_buffers, const std::vector<std::size_t>& buffer_size, std::size_t need) {
  auto size = [&](int b) { return buffer_size[static_cast<std::size_t>(b)]; };
  int pick = -1;
  for (int b : free_buffers)
    if (size(b) >= need && (pick < 0 || size(b) < size(pick))) pick = b;
  if (pick >= 0) return pick;
  for (int b : free_buffers)
    if (pick < 0 || size(b) > size(pick)) pick = b;
  return pick;
}

// Buffers: a value lives from its first write to its last read (graph outputs to the end); a
// released buffer is reused by the next value that fits (best fit), or grown.
void assign_buffers(Plan& plan) {
  const auto& ops = plan.ops;
  constexpr int kForever = std::numeric_limits<int>::max();
  std::vector<int> last_use(plan.slot_size.size(), -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (int s : ops[i].in) last_use[static_cast<std::size_t>(s)] = static_cast<int>(i);
    if (ops[i].residual >= 0) last_use[static_cast<std::size_t>(ops[i].residual)] = static_cast<int>(i);
  }
  for (int s : plan.outputs) last_use[static_cast<std::size_t>(s)] = kForever;
  plan.slot_buffer.assign(plan.slot_size.size(), -1);
  std::vector<int> free_buffers;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const int s = ops[i].out;
    if (s != plan.input_slot && plan.slot_buffer[static_cast<std::size_t>(s)] < 0) {
      const std::size_t need = plan.slot_size[static_cast<std::size_t>(s)];
      int pick = best_fit(free_buffers, plan.buffer_size, need);
      if (pick < 0) {
        pick = static_cast<int>(plan.buffer_size.size());
        plan.buffer_size.push_back(0);
      } else {
        free_buffers.erase(std::find(free_buffers.begin(), free_buffers.end(), pick));
      }
      std::size_t& size = plan.buffer_size[static_cast<std::size_t>(pick)];
      size = std::max(size, need);
      plan.slot_buffer[static_cast<std::size_t>(s)] = pick;
    }
    // Release what this op read for the last time (and a value nobody reads).
    auto release = [&](int slot) {
      if (slot == plan.input_slot) return;
      const int b = plan.slot_buffer[static_cast<std::size_t>(slot)];
      if (b < 0 || last_use[static_cast<std::size_t>(slot)] > static_cast<int>(i)) return;
      if (std::find(free_buffers.begin(), free_buffers.end(), b) == free_buffers.end()) free_buffers.push_back(b);
    };
    for (int r : ops[i].in) release(r);
    if (ops[i].residual >= 0) release(ops[i].residual);
    const bool written_later = std::any_of(ops.begin() + static_cast<std::ptrdiff_t>(i) + 1, ops.end(),
                                           [&](const Op& later) { return later.out == s; });
    if (!written_later) release(s);
  }
}

}  // namespace

Plan lower_graph(const Graph& g, const PlanOptions& options) {
  detail::LoweringOptions lo;
  lo.backend = "cudnn backend";
  lo.fold_batch_norm = options.fold_batch_norm;
  lo.fuse_activations = options.fuse_activations;
  lo.fuse_residual_add = options.fuse_residual_add;
  lo.fold_zero_padding = true;
  detail::LoweredGraph lowered = detail::lower(g, lo);

  Plan plan;
  for (auto& op : lowered.ops) append_gpu_ops(plan.ops, std::move(op), options);
  plan.input_slot = lowered.input_slot;
  plan.input_shape = std::move(lowered.input_shape);
  plan.outputs = std::move(lowered.outputs);
  plan.output_shapes = std::move(lowered.output_shapes);
  plan.slot_size = std::move(lowered.slot_size);
  assign_buffers(plan);
  for (const auto& op : plan.ops) {
    if (op.type != OpType::Conv || !op.explicit_pad) continue;
    const std::size_t padded = static_cast<std::size_t>(op.rows) * op.padded_h() * op.padded_w() * op.c;
    plan.scratch_size = std::max(plan.scratch_size, padded);
  }
  return plan;
}

void check_batch(int batch, int max_batch, const void* input) {
  if (batch < 0 || batch > max_batch)
    throw InvalidArgument("cudnn backend: batch " + std::to_string(batch) + " is outside 0.." +
                          std::to_string(max_batch) + " (CudnnBackendOptions::max_batch)");
  if (batch > 0 && !input) throw InvalidArgument("cudnn backend: input is null");
}

void check_device_dtype(DType dtype) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw InvalidArgument(std::string("cudnn backend: forward_device input must be F32, F16 or BF16, received ") +
                          to_string(dtype));
}

std::vector<Tensor> host_outputs(const Plan& plan, int batch) {
  std::vector<Tensor> outs;
  for (const auto& shape : plan.output_shapes) {
    std::vector<int> s = shape;
    s.insert(s.begin(), batch);
    outs.emplace_back(s);
  }
  return outs;
}

std::vector<DeviceTensor> output_views(const Plan& plan, const std::vector<DeviceBuffer>& buffers, int batch) {
  std::vector<DeviceTensor> views;
  for (std::size_t k = 0; k < plan.output_shapes.size(); ++k) {
    DeviceTensor t;
    t.data = buffers.at(k).as<const float>();
    t.shape = plan.output_shapes[k];
    t.shape.insert(t.shape.begin(), batch);
    views.push_back(std::move(t));
  }
  return views;
}

}  // namespace stoker::trainer::cudnn
