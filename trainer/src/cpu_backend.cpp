// The CPU backend: float32 NHWC, oneTBB. Compiling a graph folds frozen BatchNormalization into
// the convolution/dense before it, fuses a following activation into its epilogue, packs weights,
// and turns Dropout/Flatten into aliases (the kernels are in cpu_ops.cpp). forward() runs chunks
// of samples in parallel; each op also parallelises over rows, so small batches use every core too.
#include <algorithm>
#include <cstring>
#include <memory>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/backend.hpp>

#include "cpu_ops.hpp"
#include "import.hpp"
#include "lowering.hpp"

namespace stoker::trainer {
namespace {

using cpu::Op;
using cpu::OpType;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Graph& g, const CpuBackendOptions& opt) : options_(opt) { compile(g); }

  std::string name() const override { return "cpu"; }

  std::vector<Tensor> forward(const float* input, int batch) const override {
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      std::vector<int> shape = output_shapes_[i];
      shape.insert(shape.begin(), batch);
      outs.emplace_back(shape);
    }
    if (batch == 0) return outs;
    auto run = [&] {
      const int threads = tbb::this_task_arena::max_concurrency();
      // Whole samples per task when there are enough of them (better locality); otherwise one
      // chunk and the ops' own row parallelism.
      const int chunk = batch >= 2 * threads ? std::max(1, std::min(4, batch / (4 * threads))) : batch;
      const int chunks = (batch + chunk - 1) / chunk;
      tbb::parallel_for(0, chunks, [&](int ci) {
        const int b0 = ci * chunk;
        run_chunk(input + static_cast<std::size_t>(b0) * input_size_, b0, std::min(chunk, batch - b0), outs);
      });
    };
    if (arena_) arena_->execute(run);
    else run();
    return outs;
  }

 private:
  CpuBackendOptions options_;
  std::vector<Op> ops_;
  int input_slot_ = -1;
  std::size_t input_size_ = 0;
  std::vector<int> outputs_;  // value slots
  std::vector<std::vector<int>> output_shapes_;
  std::vector<std::size_t> slot_size_;  // values per sample
  std::vector<int> slot_uses_;          // ops reading each slot (+1 per graph output)
  std::unique_ptr<tbb::task_arena> arena_;

  void compile(const Graph& g) {
    if (g.inputs.size() != 1)
      throw InvalidArgument("cpu backend: model '" + g.name + "' has " + std::to_string(g.inputs.size()) +
                            " inputs; only single-input models are supported");
    if (options_.max_threads > 0) arena_ = std::make_unique<tbb::task_arena>(options_.max_threads);
    const std::size_t n = g.nodes.size();
    detail::SlotLowering<Op> lower(g, ops_);
    auto add_op = [&](Op op, int nid, std::vector<int> ins) {
      op.in = std::move(ins);
      op.out_size = Tensor::element_count(g.nodes[static_cast<std::size_t>(nid)].out_shape);
      lower.add(std::move(op), nid);
    };

    for (std::size_t id = 0; id < n; ++id) {
      const LayerNode& node = g.nodes[id];
      const int nid = static_cast<int>(id);
      auto in_slot = [&](std::size_t k) { return lower.input_slot(nid, k); };
      const std::vector<int>& in_shape = detail::first_input_shape(g, node);

      switch (node.kind) {
        case LayerKind::Input:
          input_slot_ = nid;
          input_size_ = Tensor::element_count(node.out_shape);
          lower.set_input(nid);
          continue;
        case LayerKind::Dropout:
        case LayerKind::Flatten:
          lower.alias(nid, in_slot(0));  // identity / same memory layout in NHWC
          continue;
        case LayerKind::BatchNormalization: {
          const detail::BatchNormAffine bn = detail::batch_norm_affine(node, static_cast<std::size_t>(in_shape.back()));
          Op* p = options_.fold_batch_norm ? lower.fusable_producer(in_slot(0)) : nullptr;
          if (p && (p->type == OpType::Conv || p->type == OpType::Depthwise || p->type == OpType::Dense)) {
            detail::fold_into(bn, p->weights, p->bias);
            lower.alias(nid, in_slot(0));
            continue;
          }
          Op op;
          op.type = OpType::Scale;
          op.scale.assign(bn.scale.begin(), bn.scale.end());
          op.bias.assign(bn.shift.begin(), bn.shift.end());
          op.c = in_shape.back();
          add_op(std::move(op), nid, {in_slot(0)});
          continue;
        }
        case LayerKind::Activation: {
          Op* p = options_.fuse_activations ? lower.fusable_producer(in_slot(0)) : nullptr;
          if (p && cpu::applies_activation(p->type)) {
            p->act = node.activation;
            lower.alias(nid, in_slot(0));
            continue;
          }
          Op op;
          op.type = OpType::Act;
          op.act = node.activation;
          op.c = in_shape.back();
          add_op(std::move(op), nid, {in_slot(0)});
          continue;
        }
        default: break;
      }

      Op op;
      std::vector<int> ins;
      for (std::size_t k = 0; k < node.inputs.size(); ++k) ins.push_back(in_slot(k));
      if (in_shape.size() == 3) op.h = in_shape[0], op.w = in_shape[1], op.c = in_shape[2];
      else op.c = in_shape.back();
      if (node.out_shape.size() == 3) op.oh = node.out_shape[0], op.ow = node.out_shape[1];
      op.oc = node.out_shape.back();
      op.kh = node.kernel_h, op.kw = node.kernel_w, op.sh = node.stride_h, op.sw = node.stride_w;
      op.dh = node.dilation_h, op.dw = node.dilation_w, op.mult = node.depth_multiplier;
      if (node.kind == LayerKind::Conv2D || node.kind == LayerKind::DepthwiseConv2D ||
          node.kind == LayerKind::MaxPooling2D || node.kind == LayerKind::AveragePooling2D) {
        const bool conv = node.kind == LayerKind::Conv2D || node.kind == LayerKind::DepthwiseConv2D;
        op.pt = detail::tf_padding(op.h, op.kh, op.sh, conv ? op.dh : 1, node.padding).pad_before;
        op.pl = detail::tf_padding(op.w, op.kw, op.sw, conv ? op.dw : 1, node.padding).pad_before;
        if (!conv) op.dh = op.dw = 1;
      }
      switch (node.kind) {
        case LayerKind::Conv2D:
          op.type = OpType::Conv;
          op.weights = *node.weight("kernel")->data;  // [kh, kw, cin, cout] == [K, N]
          if (node.use_bias) op.bias = *node.weight("bias")->data;
          op.act = node.activation;
          op.direct = op.kh == 1 && op.kw == 1 && op.sh == 1 && op.sw == 1;
          break;
        case LayerKind::DepthwiseConv2D:
          op.type = OpType::Depthwise;
          op.weights = *node.weight("depthwise_kernel")->data;  // [kh, kw, cin, mult] == [kh*kw, cin*mult]
          if (node.use_bias) op.bias = *node.weight("bias")->data;
          op.act = node.activation;
          break;
        case LayerKind::Dense:
          op.type = OpType::Dense;
          op.weights = *node.weight("kernel")->data;
          if (node.use_bias) op.bias = *node.weight("bias")->data;
          op.act = node.activation;
          break;
        case LayerKind::ZeroPadding2D:
          op.type = OpType::ZeroPad;
          op.pt = node.pad_top, op.pl = node.pad_left;
          break;
        case LayerKind::Add:
          op.type = OpType::Add;
          op.scale.assign(node.inputs.size(), 1.0f);
          break;
        case LayerKind::ScaledAdd:
          op.type = OpType::Add;
          op.scale = {1.0f, node.residual_scale};
          break;
        case LayerKind::Concatenate:
          op.type = OpType::Concat;
          for (int i : node.inputs)
            op.in_sizes.push_back(static_cast<std::size_t>(g.nodes[static_cast<std::size_t>(i)].out_shape.back()));
          break;
        case LayerKind::MaxPooling2D: op.type = OpType::MaxPool; break;
        case LayerKind::AveragePooling2D: op.type = OpType::AvgPool; break;
        case LayerKind::GlobalAveragePooling2D: op.type = OpType::Gap; break;
        default: throw InvalidArgument("cpu backend: layer '" + node.name + "' (" + node.keras_class + ") is not supported");
      }
      add_op(std::move(op), nid, std::move(ins));
    }
    slot_size_ = lower.slot_sizes();

    for (auto& op : ops_) {
      if (op.type == OpType::Conv || op.type == OpType::Dense) {
        const int n_out = op.oc;
        const int k = static_cast<int>(op.weights.size() / static_cast<std::size_t>(n_out));
        op.packed = cpu::pack_b(op.weights.data(), k, n_out);
        op.weights.clear();
        op.weights.shrink_to_fit();
      }
    }
    for (int o : g.outputs) {
      outputs_.push_back(lower.slot(o));
      output_shapes_.push_back(g.nodes[static_cast<std::size_t>(o)].out_shape);
    }
    slot_uses_.assign(n, 0);
    for (const auto& op : ops_)
      for (int s : op.in) ++slot_uses_[static_cast<std::size_t>(s)];
    for (int s : outputs_) ++slot_uses_[static_cast<std::size_t>(s)];
  }

  // Activation buffers come from a per-thread free list, so steady-state forward passes do not
  // allocate (or page-fault fresh memory) per op.
  struct BufferPool {
    std::vector<std::pair<std::size_t, std::unique_ptr<float[]>>> free;  // (capacity, buffer)
    std::pair<std::size_t, std::unique_ptr<float[]>> take(std::size_t n) {
      std::size_t best = free.size();
      for (std::size_t i = 0; i < free.size(); ++i)
        if (free[i].first >= n && (best == free.size() || free[i].first < free[best].first)) best = i;
      if (best == free.size()) return {n, std::unique_ptr<float[]>(new float[n])};
      auto b = std::move(free[best]);
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
      return b;
    }
    void give(std::pair<std::size_t, std::unique_ptr<float[]>> b) {
      if (!b.second) return;
      free.push_back(std::move(b));
      if (free.size() > 64) free.erase(free.begin());  // bound what an idle thread keeps
    }
  };

  void run_chunk(const float* input, int b0, int nb, std::vector<Tensor>& outs) const {
    thread_local BufferPool pool;
    std::vector<std::pair<std::size_t, std::unique_ptr<float[]>>> buffers(slot_size_.size());
    std::vector<const float*> values(slot_size_.size(), nullptr);
    std::vector<int> uses = slot_uses_;
    values[static_cast<std::size_t>(input_slot_)] = input;
    std::vector<const float*> ins;
    for (const Op& op : ops_) {
      auto& buf = buffers[static_cast<std::size_t>(op.out)];
      buf = pool.take(op.out_size * static_cast<std::size_t>(nb));
      ins.clear();
      for (int s : op.in) ins.push_back(values[static_cast<std::size_t>(s)]);
      cpu::run_op(op, ins, buf.second.get(), nb);
      values[static_cast<std::size_t>(op.out)] = buf.second.get();
      for (int s : op.in)
        if (--uses[static_cast<std::size_t>(s)] == 0) pool.give(std::move(buffers[static_cast<std::size_t>(s)]));
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      const float* src = values[static_cast<std::size_t>(outputs_[i])];
      const std::size_t per = slot_size_[static_cast<std::size_t>(outputs_[i])];
      std::memcpy(outs[i].data.data() + static_cast<std::size_t>(b0) * per, src, per * static_cast<std::size_t>(nb) * sizeof(float));
    }
    for (auto& b : buffers) pool.give(std::move(b));
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Graph& graph, const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(graph, options);
}

}  // namespace stoker::trainer
