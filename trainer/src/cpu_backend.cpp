// The CPU backend: float32 NHWC, oneTBB. Compiling a graph folds frozen BatchNormalization into
// the convolution/dense before it, fuses a following activation into its epilogue, packs weights,
// and turns Dropout/Flatten into aliases (the kernels are in cpu_ops.cpp). forward() runs chunks
// of samples in parallel; each op also parallelises over rows, so small batches use every core too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <stoker/error.hpp>
#include <stoker/trainer/backend.hpp>

#include "cpu_ops.hpp"
#include "import.hpp"

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
    std::vector<int> consumers(n, 0);
    for (const auto& node : g.nodes)
      for (int i : node.inputs) ++consumers[static_cast<std::size_t>(i)];
    for (int o : g.outputs) ++consumers[static_cast<std::size_t>(o)];

    std::vector<int> slot_of(n, -1);      // node -> value slot
    std::vector<int> producer(n, -1);     // slot -> op index (or -1 for the input)
    std::vector<int> slot_readers(n, 0);  // graph consumers of the node now owning the slot
    slot_size_.assign(n, 0);
    auto sample_size = [&](int node) { return Tensor::element_count(g.nodes[static_cast<std::size_t>(node)].out_shape); };

    for (std::size_t id = 0; id < n; ++id) {
      const LayerNode& node = g.nodes[id];
      const int nid = static_cast<int>(id);
      auto in_slot = [&](std::size_t k) { return slot_of[static_cast<std::size_t>(node.inputs.at(k))]; };
      auto alias = [&](int slot) {
        // This node reads the slot once and passes it on to its own consumers.
        slot_of[id] = slot;
        slot_readers[static_cast<std::size_t>(slot)] += consumers[id] - 1;
      };
      auto fusable_producer = [&](int slot) -> Op* {
        // The op producing `slot` if this node is its only reader and nothing is fused into it yet.
        const int p = producer[static_cast<std::size_t>(slot)];
        if (p < 0 || slot_readers[static_cast<std::size_t>(slot)] != 1) return nullptr;
        Op& op = ops_[static_cast<std::size_t>(p)];
        if (!op.act.is_linear()) return nullptr;
        return &op;
      };
      const std::vector<int>& in_shape =
          node.inputs.empty() ? node.out_shape : g.nodes[static_cast<std::size_t>(node.inputs[0])].out_shape;

      switch (node.kind) {
        case LayerKind::Input:
          input_slot_ = nid;
          input_size_ = sample_size(nid);
          slot_of[id] = nid;
          slot_size_[id] = input_size_;
          slot_readers[id] = consumers[id];
          continue;
        case LayerKind::Dropout:
        case LayerKind::Flatten:
          alias(in_slot(0));  // identity / same memory layout in NHWC
          continue;
        case LayerKind::BatchNormalization: {
          const std::size_t c = static_cast<std::size_t>(in_shape.back());
          // Keras: (x - mean) / sqrt(var + eps) * gamma + beta. Folded constants are computed in
          // double and rounded once.
          std::vector<double> scale(c), shift(c);
          const Weight* gamma = node.weight("gamma");
          const Weight* beta = node.weight("beta");
          const float* mean = node.weight("moving_mean")->ptr();
          const float* var = node.weight("moving_variance")->ptr();
          for (std::size_t i = 0; i < c; ++i) {
            scale[i] = (gamma ? double(gamma->ptr()[i]) : 1.0) / std::sqrt(double(var[i]) + double(node.epsilon));
            shift[i] = (beta ? double(beta->ptr()[i]) : 0.0) - double(mean[i]) * scale[i];
          }
          Op* p = options_.fold_batch_norm ? fusable_producer(in_slot(0)) : nullptr;
          if (p && (p->type == OpType::Conv || p->type == OpType::Depthwise || p->type == OpType::Dense)) {
            const std::size_t cols = c;
            if (p->bias.empty()) p->bias.assign(cols, 0.0f);
            for (std::size_t r = 0; r < p->weights.size() / cols; ++r)
              for (std::size_t j = 0; j < cols; ++j)
                p->weights[r * cols + j] = static_cast<float>(p->weights[r * cols + j] * scale[j]);
            for (std::size_t j = 0; j < cols; ++j) p->bias[j] = static_cast<float>(p->bias[j] * scale[j] + shift[j]);
            alias(in_slot(0));
            continue;
          }
          Op op;
          op.type = OpType::Scale;
          op.scale.assign(scale.begin(), scale.end());
          op.bias.assign(shift.begin(), shift.end());
          op.c = static_cast<int>(c);
          add_op(std::move(op), node, {in_slot(0)}, nid, slot_of, producer, slot_readers, consumers);
          continue;
        }
        case LayerKind::Activation: {
          Op* p = options_.fuse_activations ? fusable_producer(in_slot(0)) : nullptr;
          if (p && cpu::applies_activation(p->type)) {
            p->act = node.activation;
            alias(in_slot(0));
            continue;
          }
          Op op;
          op.type = OpType::Act;
          op.act = node.activation;
          op.c = in_shape.back();
          add_op(std::move(op), node, {in_slot(0)}, nid, slot_of, producer, slot_readers, consumers);
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
      add_op(std::move(op), node, ins, nid, slot_of, producer, slot_readers, consumers);
    }

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
      outputs_.push_back(slot_of[static_cast<std::size_t>(o)]);
      output_shapes_.push_back(g.nodes[static_cast<std::size_t>(o)].out_shape);
    }
    slot_uses_.assign(n, 0);
    for (const auto& op : ops_)
      for (int s : op.in) ++slot_uses_[static_cast<std::size_t>(s)];
    for (int s : outputs_) ++slot_uses_[static_cast<std::size_t>(s)];
  }

  void add_op(Op op, const LayerNode& node, std::vector<int> ins, int nid, std::vector<int>& slot_of,
              std::vector<int>& producer, std::vector<int>& slot_readers, const std::vector<int>& consumers) {
    op.name = node.name;
    op.in = std::move(ins);
    op.out = nid;
    op.out_size = Tensor::element_count(node.out_shape);
    slot_of[static_cast<std::size_t>(nid)] = nid;
    slot_size_[static_cast<std::size_t>(nid)] = op.out_size;
    slot_readers[static_cast<std::size_t>(nid)] = consumers[static_cast<std::size_t>(nid)];
    producer[static_cast<std::size_t>(nid)] = static_cast<int>(ops_.size());
    ops_.push_back(std::move(op));
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
