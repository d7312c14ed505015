// Internal: what both backends' compilers (cpu_backend.cpp, cudnn/plan.cpp) share when they lower
// a layer graph into their own op lists, so that they fold and fuse by the same rules:
//   - value slots: every node's output lives in a slot; Dropout/Flatten (and whatever a backend
//     folds away) alias their input's slot instead of getting one;
//   - fusion: something may be fused into the op producing a slot only when the node being lowered
//     is the slot's only reader and that op carries no activation yet;
//   - frozen BatchNormalization as a per-channel affine, in double, rounded once where it lands.
#pragma once

#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer::detail {

// Keras' inference BatchNormalization, (x - mean) / sqrt(var + eps) * gamma + beta, as
// x * scale + shift per channel.
struct BatchNormAffine {
  std::vector<double> scale, shift;
};

inline BatchNormAffine batch_norm_affine(const LayerNode& node, std::size_t channels) {
  BatchNormAffine bn{std::vector<double>(channels), std::vector<double>(channels)};
  const Weight* gamma = node.weight("gamma");
  const Weight* beta = node.weight("beta");
  const float* mean = node.weight("moving_mean")->ptr();
  const float* var = node.weight("moving_variance")->ptr();
  for (std::size_t i = 0; i < channels; ++i) {
    bn.scale[i] = (gamma ? double(gamma->ptr()[i]) : 1.0) / std::sqrt(double(var[i]) + double(node.epsilon));
    bn.shift[i] = (beta ? double(beta->ptr()[i]) : 0.0) - double(mean[i]) * bn.scale[i];
  }
  return bn;
}

// Folds `bn` into a conv/dense producing its input: weights in Keras order (rows × channels, the
// output channel fastest) and bias (created when the layer had none).
inline void fold_into(const BatchNormAffine& bn, std::vector<float>& weights, std::vector<float>& bias) {
  const std::size_t c = bn.scale.size();
  if (bias.empty()) bias.assign(c, 0.0f);
  for (std::size_t r = 0; r < weights.size() / c; ++r)
    for (std::size_t j = 0; j < c; ++j) weights[r * c + j] = static_cast<float>(weights[r * c + j] * bn.scale[j]);
  for (std::size_t j = 0; j < c; ++j) bias[j] = static_cast<float>(bias[j] * bn.scale[j] + bn.shift[j]);
}

// The shape of node's first input (an Input node's own).
inline const std::vector<int>& first_input_shape(const Graph& g, const LayerNode& node) {
  return node.inputs.empty() ? node.out_shape : g.nodes[static_cast<std::size_t>(node.inputs[0])].out_shape;
}

// Slot bookkeeping while nodes are visited in graph order. Op needs `name`, `out` and `act`
// (ActivationSpec); the ops vector is the backend's own list.
template <class Op>
class SlotLowering {
 public:
  SlotLowering(const Graph& g, std::vector<Op>& ops)
      : g_(g), ops_(ops), consumers_(g.nodes.size(), 0), slot_of_(g.nodes.size(), -1),
        producer_(g.nodes.size(), -1), readers_(g.nodes.size(), 0), slot_size_(g.nodes.size(), 0) {
    for (const auto& node : g.nodes)
      for (int i : node.inputs) ++consumers_[at(i)];
    for (int o : g.outputs) ++consumers_[at(o)];
  }

  // Graph readers of a node (+1 when it is a graph output).
  int consumers(int node) const { return consumers_[at(node)]; }
  // The slot holding node's output (its own, or an aliased one).
  int slot(int node) const { return slot_of_[at(node)]; }
  // Slot of node's k-th input.
  int input_slot(int node, std::size_t k) const { return slot(g_.nodes[at(node)].inputs.at(k)); }
  // Index in ops of the op writing `slot`; -1 for the graph input.
  int producer(int slot) const { return producer_[at(slot)]; }
  // Values per sample of each slot (0 for nodes that alias another slot).
  const std::vector<std::size_t>& slot_sizes() const { return slot_size_; }

  void set_input(int node) {
    slot_of_[at(node)] = node;
    slot_size_[at(node)] = Tensor::element_count(g_.nodes[at(node)].out_shape);
    readers_[at(node)] = consumers_[at(node)];
  }

  // `node` reads `slot` once and passes it on to its own readers.
  void alias(int node, int slot) {
    slot_of_[at(node)] = slot;
    readers_[at(slot)] += consumers_[at(node)] - 1;
  }

  // The op producing `slot` when the node being lowered is the slot's only reader and nothing is
  // fused into that op yet; otherwise null.
  Op* fusable_producer(int slot) {
    const int p = producer_[at(slot)];
    if (p < 0 || readers_[at(slot)] != 1) return nullptr;
    Op& op = ops_[at(p)];
    return op.act.is_linear() ? &op : nullptr;
  }

  // Appends `op` as the producer of node's own slot (op.in is the caller's).
  void add(Op op, int node) {
    const LayerNode& n = g_.nodes[at(node)];
    op.name = n.name;
    op.out = node;
    slot_of_[at(node)] = node;
    slot_size_[at(node)] = Tensor::element_count(n.out_shape);
    readers_[at(node)] = consumers_[at(node)];
    producer_[at(node)] = static_cast<int>(ops_.size());
    ops_.push_back(std::move(op));
  }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }

  const Graph& g_;
  std::vector<Op>& ops_;
  std::vector<int> consumers_;
  std::vector<int> slot_of_;   // node -> value slot
  std::vector<int> producer_;  // slot -> op index
  std::vector<int> readers_;   // graph readers of the node now owning the slot
  std::vector<std::size_t> slot_size_;
};

}  // namespace stoker::trainer::detail
