// The cuDNN backend's plan: graph → GPU ops (host code, no CUDA). The folding and fusion rules are
// the CPU backend's (cpu_backend.cpp), so both backends compute the same thing.
#include "plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <stoker/core/error.hpp>
#include <stoker/trainer/tensor.hpp>

#include "../import.hpp"
#include "../lowering.hpp"

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
      s << (op.dense ? " dense" : "") << " " << op.h << "x" << op.w << "x" << op.c << " -> " << op.oh << "x" << op.ow
        << "x" << op.oc << " k" << op.kh << "x" << op.kw << " s" << op.sh << "x" << op.sw << " pad " << op.pad_top
        << "," << op.pad_bottom << "," << op.pad_left << "," << op.pad_right << (op.explicit_pad ? " explicit" : "")
        << " groups " << op.groups << (op.depthwise_kernel ? " (own depthwise kernel)" : "");
      if (op.residual >= 0) s << " + slot " << op.residual;
    }
    if (!op.act.is_linear()) s << " act " << trainer::to_string(op.act);
    s << "\n";
  }
  return s.str();
}

namespace {

bool applies_activation(OpType t) { return t == OpType::Conv || t == OpType::Affine || t == OpType::Gap; }

}  // namespace

Plan lower_graph(const Graph& g, const PlanOptions& options) {
  if (g.inputs.size() != 1)
    throw InvalidArgument("cudnn backend: model '" + g.name + "' has " + std::to_string(g.inputs.size()) +
                          " inputs; only single-input models are supported");
  Plan plan;
  const std::size_t n = g.nodes.size();
  auto& ops = plan.ops;
  detail::SlotLowering<Op> lower(g, ops);
  std::vector<int> only_reader(n, -1);  // the reading node when there is exactly one
  for (std::size_t id = 0; id < n; ++id)
    for (int i : g.nodes[id].inputs) only_reader[static_cast<std::size_t>(i)] = static_cast<int>(id);
  std::vector<bool> folded_pad(n, false);  // ZeroPadding2D folded into its reader's padding

  for (std::size_t id = 0; id < n; ++id) {
    const LayerNode& node = g.nodes[id];
    const int nid = static_cast<int>(id);
    auto in_slot = [&](std::size_t k) { return lower.input_slot(nid, k); };
    const std::vector<int>& in_shape = detail::first_input_shape(g, node);

    switch (node.kind) {
      case LayerKind::Input:
        plan.input_slot = nid;
        plan.input_shape = node.out_shape;
        lower.set_input(nid);
        continue;
      case LayerKind::Dropout:
      case LayerKind::Flatten: lower.alias(nid, in_slot(0)); continue;
      case LayerKind::ZeroPadding2D: {
        const int reader = only_reader[id];
        const bool into_conv = lower.consumers(nid) == 1 && reader >= 0 &&
                               (g.nodes[static_cast<std::size_t>(reader)].kind == LayerKind::Conv2D ||
                                g.nodes[static_cast<std::size_t>(reader)].kind == LayerKind::DepthwiseConv2D);
        if (into_conv) {  // zeros are what convolution padding means
          folded_pad[id] = true;
          lower.alias(nid, in_slot(0));
          continue;
        }
        Op op;
        op.type = OpType::Pad;
        op.in = {in_slot(0)};
        op.h = in_shape[0], op.w = in_shape[1], op.c = in_shape[2];
        op.oh = node.out_shape[0], op.ow = node.out_shape[1], op.oc = node.out_shape[2];
        op.pad_top = node.pad_top, op.pad_bottom = node.pad_bottom, op.pad_left = node.pad_left,
        op.pad_right = node.pad_right;
        lower.add(std::move(op), nid);
        continue;
      }
      case LayerKind::BatchNormalization: {
        const detail::BatchNormAffine bn = detail::batch_norm_affine(node, static_cast<std::size_t>(in_shape.back()));
        Op* p = options.fold_batch_norm ? lower.fusable_producer(in_slot(0)) : nullptr;
        if (p && p->type == OpType::Conv && p->residual < 0) {
          detail::fold_into(bn, p->weights, p->bias);  // weights still in Keras order here
          lower.alias(nid, in_slot(0));
          continue;
        }
        Op op;
        op.type = OpType::Affine;
        op.in = {in_slot(0)};
        op.c = op.oc = in_shape.back();
        op.scale.assign(bn.scale.begin(), bn.scale.end());
        op.bias.assign(bn.shift.begin(), bn.shift.end());
        lower.add(std::move(op), nid);
        continue;
      }
      case LayerKind::Activation: {
        Op* p = options.fuse_activations ? lower.fusable_producer(in_slot(0)) : nullptr;
        if (p && applies_activation(p->type)) {
          p->act = node.activation;
          lower.alias(nid, in_slot(0));
          continue;
        }
        Op op;
        op.type = OpType::Affine;
        op.in = {in_slot(0)};
        op.c = op.oc = in_shape.back();
        op.act = node.activation;
        lower.add(std::move(op), nid);
        continue;
      }
      case LayerKind::Add:
      case LayerKind::ScaledAdd: {
        const bool scaled = node.kind == LayerKind::ScaledAdd;
        bool fused = false;
        if (!scaled && node.inputs.size() == 2 && options.fuse_residual_add) {
          for (int k = 0; k < 2 && !fused; ++k) {
            const int s = in_slot(static_cast<std::size_t>(k)), z = in_slot(static_cast<std::size_t>(1 - k));
            if (s == z) break;
            Op* p = lower.fusable_producer(s);
            // z must be complete before p runs: in ResNet, Add([shortcut, x]) has the shortcut
            // conv first in the graph, and x is computed after it.
            if (p && lower.producer(z) >= lower.producer(s)) p = nullptr;
            if (p && p->type == OpType::Conv && p->residual < 0) {
              p->residual = z;
              p->residual_scale = 1.0f;
              lower.alias(nid, s);
              fused = true;
            }
          }
        }
        if (!fused) {
          Op op;
          op.type = OpType::Affine;
          op.in = {in_slot(0), in_slot(1)};
          op.c = op.oc = in_shape.back();
          op.residual_scale = scaled ? node.residual_scale : 1.0f;
          lower.add(std::move(op), nid);
          for (std::size_t k = 2; k < node.inputs.size(); ++k) {  // y += input k, in place
            Op more;
            more.type = OpType::Affine;
            more.in = {nid, in_slot(k)};
            more.c = more.oc = in_shape.back();
            lower.add(std::move(more), nid);
          }
        }
        continue;
      }
      default: break;
    }

    Op op;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) op.in.push_back(in_slot(k));
    switch (node.kind) {
      case LayerKind::Conv2D:
      case LayerKind::DepthwiseConv2D: {
        const bool depthwise = node.kind == LayerKind::DepthwiseConv2D;
        op.type = OpType::Conv;
        // A folded ZeroPadding2D: the conv reads the unpadded value and pads both ways at once.
        const int src = node.inputs[0];
        const LayerNode* zp = folded_pad[static_cast<std::size_t>(src)] ? &g.nodes[static_cast<std::size_t>(src)] : nullptr;
        const std::vector<int>& real_in =
            zp ? g.nodes[static_cast<std::size_t>(zp->inputs[0])].out_shape : in_shape;
        op.h = real_in[0], op.w = real_in[1], op.c = real_in[2];
        op.oh = node.out_shape[0], op.ow = node.out_shape[1], op.oc = node.out_shape[2];
        op.kh = node.kernel_h, op.kw = node.kernel_w, op.sh = node.stride_h, op.sw = node.stride_w;
        op.dh = node.dilation_h, op.dw = node.dilation_w;
        const auto ph = detail::tf_padding(in_shape[0], op.kh, op.sh, op.dh, node.padding);
        const auto pw = detail::tf_padding(in_shape[1], op.kw, op.sw, op.dw, node.padding);
        op.pad_top = ph.pad_before + (zp ? zp->pad_top : 0);
        op.pad_bottom = ph.pad_after + (zp ? zp->pad_bottom : 0);
        op.pad_left = pw.pad_before + (zp ? zp->pad_left : 0);
        op.pad_right = pw.pad_after + (zp ? zp->pad_right : 0);
        // cuDNN pads symmetrically; padding as wide as the (dilated) kernel is left to the explicit
        // path too, to stay inside what every cuDNN algorithm accepts.
        const int eff_h = (op.kh - 1) * op.dh + 1, eff_w = (op.kw - 1) * op.dw + 1;
        op.groups = depthwise ? op.c : 1;
        op.depthwise_kernel = depthwise && !options.cudnn_depthwise;
        op.explicit_pad = !op.depthwise_kernel && (!op.symmetric_pad() || op.pad_top >= eff_h || op.pad_left >= eff_w);
        op.weights = *node.weight(depthwise ? "depthwise_kernel" : "kernel")->data;  // Keras: rows × oc
        if (node.use_bias) op.bias = *node.weight("bias")->data;
        op.act = node.activation;
        break;
      }
      case LayerKind::Dense:
        op.type = OpType::Conv;
        op.dense = true;
        op.c = in_shape.back();
        op.oc = node.filters;
        op.rows = static_cast<int>(Tensor::element_count(in_shape) / static_cast<std::size_t>(op.c));
        op.weights = *node.weight("kernel")->data;  // [c, oc]
        if (node.use_bias) op.bias = *node.weight("bias")->data;
        op.act = node.activation;
        break;
      case LayerKind::Concatenate:
        op.type = OpType::Concat;
        op.oc = node.out_shape.back();
        for (int i : node.inputs) op.in_channels.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape.back());
        op.rows = static_cast<int>(Tensor::element_count(node.out_shape) / static_cast<std::size_t>(op.oc));
        break;
      case LayerKind::MaxPooling2D:
      case LayerKind::AveragePooling2D: {
        op.type = node.kind == LayerKind::MaxPooling2D ? OpType::MaxPool : OpType::AvgPool;
        op.h = in_shape[0], op.w = in_shape[1], op.c = in_shape[2];
        op.oh = node.out_shape[0], op.ow = node.out_shape[1], op.oc = node.out_shape[2];
        op.kh = node.kernel_h, op.kw = node.kernel_w, op.sh = node.stride_h, op.sw = node.stride_w;
        const auto ph = detail::tf_padding(op.h, op.kh, op.sh, 1, node.padding);
        const auto pw = detail::tf_padding(op.w, op.kw, op.sw, 1, node.padding);
        op.pad_top = ph.pad_before, op.pad_bottom = ph.pad_after;
        op.pad_left = pw.pad_before, op.pad_right = pw.pad_after;
        break;
      }
      case LayerKind::GlobalAveragePooling2D:
        op.type = OpType::Gap;
        op.h = in_shape[0], op.w = in_shape[1], op.c = op.oc = in_shape[2];
        break;
      default:
        throw InvalidArgument("cudnn backend: layer '" + node.name + "' (" +
                              (node.keras_class.empty() ? std::string(trainer::to_string(node.kind)) : node.keras_class) +
                              ") is not supported");
    }
    lower.add(std::move(op), nid);
  }
  plan.slot_size = lower.slot_sizes();

  // Weights: Keras order (rows × output channels) → cuDNN's KRSC (output channel major). For a
  // Conv2D the rows are (ky, kx, cin); for a depthwise conv (ky, kx) with the output channel
  // c * multiplier + m, which is group c of a grouped conv with one input channel per group; for
  // Dense the rows are the inputs of a 1×1 conv.
  for (auto& op : ops) {
    if (op.type != OpType::Conv) continue;
    const std::size_t oc = static_cast<std::size_t>(op.oc);
    const std::size_t k = op.weights.size() / oc;
    std::vector<float> krsc(op.weights.size());
    for (std::size_t r = 0; r < k; ++r)
      for (std::size_t o = 0; o < oc; ++o) krsc[o * k + r] = op.weights[r * oc + o];
    op.weights = std::move(krsc);
  }

  for (int o : g.outputs) {
    plan.outputs.push_back(lower.slot(o));
    plan.output_shapes.push_back(g.nodes[static_cast<std::size_t>(o)].out_shape);
  }

  // Buffers: a value lives from its first write to its last read (graph outputs to the end); a
  // released buffer is reused by the next value that fits (best fit), or grown.
  constexpr int kForever = std::numeric_limits<int>::max();
  std::vector<int> last_use(n, -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (int s : ops[i].in) last_use[static_cast<std::size_t>(s)] = static_cast<int>(i);
    if (ops[i].residual >= 0) last_use[static_cast<std::size_t>(ops[i].residual)] = static_cast<int>(i);
  }
  for (int s : plan.outputs) last_use[static_cast<std::size_t>(s)] = kForever;
  plan.slot_buffer.assign(n, -1);
  std::vector<int> free_buffers;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const int s = ops[i].out;
    if (s != plan.input_slot && plan.slot_buffer[static_cast<std::size_t>(s)] < 0) {
      const std::size_t need = plan.slot_size[static_cast<std::size_t>(s)];
      int pick = -1;
      for (int b : free_buffers)  // smallest that fits
        if (plan.buffer_size[static_cast<std::size_t>(b)] >= need &&
            (pick < 0 || plan.buffer_size[static_cast<std::size_t>(b)] < plan.buffer_size[static_cast<std::size_t>(pick)]))
          pick = b;
      if (pick < 0)
        for (int b : free_buffers)  // else the largest, grown
          if (pick < 0 || plan.buffer_size[static_cast<std::size_t>(b)] > plan.buffer_size[static_cast<std::size_t>(pick)])
            pick = b;
      if (pick < 0) {
        pick = static_cast<int>(plan.buffer_size.size());
        plan.buffer_size.push_back(0);
      } else {
        free_buffers.erase(std::find(free_buffers.begin(), free_buffers.end(), pick));
      }
      plan.buffer_size[static_cast<std::size_t>(pick)] = std::max(plan.buffer_size[static_cast<std::size_t>(pick)], need);
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
    const bool written_later = [&] {
      for (std::size_t j = i + 1; j < ops.size(); ++j)
        if (ops[j].out == s) return true;
      return false;
    }();
    if (!written_later) release(s);
  }
  for (const auto& op : ops)
    if (op.type == OpType::Conv && op.explicit_pad)
      plan.scratch_size = std::max(plan.scratch_size, static_cast<std::size_t>(op.rows) * op.padded_h() * op.padded_w() * op.c);
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
