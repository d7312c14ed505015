// Internal: the one lowering of a layer graph, shared by the CPU backend (cpu/backend.cpp) and the
// cuDNN plan (plan/plan.cpp). lower() visits the nodes in graph order and lets each layer kind's
// rule (layers.cpp) alias the node, fuse it into the op producing its input, or emit an op; the
// result is a backend-neutral op list that each backend maps onto its own kernels.
//   - value slots: every node's output lives in a slot (the node's index); Dropout/Flatten, and
//     whatever is fused or folded away, alias their input's slot instead of getting one;
//   - fusion: something may be fused into the op producing a slot only when the node being lowered
//     is the slot's only reader and that op carries no activation yet (what each op kind can take
//     in: fusions());
//   - frozen BatchNormalization as a per-channel affine, in double, rounded once where it lands.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <stoker/trainer/graph.hpp>

namespace stoker::trainer::detail {

enum class OpKind {
  Conv,           // Conv2D; weights [kh, kw, c, oc]
  DepthwiseConv,  // DepthwiseConv2D; weights [kh, kw, c, depth_multiplier], output channel c * multiplier + m
  Dense,          // rows × c → rows × oc (h = w = oh = ow = 1); weights [c, oc]
  Affine,         // y = x * scale[channel] + bias[channel]: an unfolded BatchNormalization
  Activation,     // y = act(x)
  ZeroPad,        // each image into a window of the output: zeros around it (pad_* > 0) or cut (< 0)
  Add,            // y = in[0] + residual_scale * in[1] + in[2] + ...
  Concat,         // along the last axis
  MaxPool,
  AvgPool,  // TensorFlow: the window's pixels inside the input only
  GlobalAvgPool,
  GlobalMaxPool,
  Mul,        // y = in[0] * in[1]; in[1] is one value per image and channel when channel_broadcast
  LayerNorm,  // per row of c: (x - mean) / sqrt(var + epsilon) * scale[c] + bias[c] (scale/bias may be empty)
};

// What the lowering may fuse into an op of a kind: what every backend's kernel for the kind does
// (the residual: where the backend sets LoweringOptions::fuse_residual_add).
struct Fusions {
  bool activation = false;  // an epilogue activation
  bool batch_norm = false;  // BatchNormalization folded into the weights and bias
  bool residual = false;    // a residual added before the activation
};
constexpr Fusions fusions(OpKind kind) {
  switch (kind) {
    case OpKind::Conv:
    case OpKind::DepthwiseConv:
    case OpKind::Dense: return {.activation = true, .batch_norm = true, .residual = true};
    case OpKind::Affine:
    case OpKind::Activation:
    case OpKind::Add:
    case OpKind::GlobalAvgPool:
    case OpKind::GlobalMaxPool:
    case OpKind::Mul:
    case OpKind::LayerNorm: return {.activation = true};
    case OpKind::ZeroPad:
    case OpKind::Concat:
    case OpKind::MaxPool:
    case OpKind::AvgPool: return {};
  }
  return {};
}

struct LoweredOp {
  OpKind kind = OpKind::Activation;
  std::string name;     // the layer (for messages)
  std::vector<int> in;  // value slots read
  int out = -1;         // value slot written (the node's index)
  // Geometry per sample, NHWC: the first input (h = w = 1 below rank 3) and the output.
  int h = 1, w = 1, c = 0, oh = 1, ow = 1, oc = 0;
  int rows = 1;  // Dense, Concat: rows of the last axis (the first input's values / c)
  // Convolution / pooling window; padding per side (TensorFlow's 'same' resolved, plus a folded
  // ZeroPadding2D), or ZeroPad's.
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int depth_multiplier = 1;
  ActivationSpec act;              // applied last (Softmax: over the last axis)
  std::vector<float> weights;      // Keras order (above), BatchNormalization folded in
  std::vector<float> bias;         // per output channel (may be empty)
  std::vector<float> scale;        // Affine: per channel
  int residual = -1;               // Conv/DepthwiseConv/Dense: slot added before the activation (-1: none)
  float residual_scale = 1.0f;     // Add: the factor of in[1]; the residual's factor
  std::vector<int> in_channels;    // Concat: last-axis width of each input
  float epsilon = 0.0f;            // LayerNorm
  bool channel_broadcast = false;  // Mul: in[1] is [1, 1, c] per image, in[0] (the geometry) h × w × c
};

struct LoweredGraph {
  std::vector<LoweredOp> ops;  // in execution order
  int input_slot = -1;
  std::vector<int> input_shape;                 // per sample
  std::vector<int> outputs;                     // slots of the graph outputs, in order
  std::vector<std::vector<int>> output_shapes;  // per sample
  std::vector<std::size_t> slot_size;           // values per sample of each slot (0: aliased)
};

struct LoweringOptions {
  std::string backend;  // "cpu backend", ...: starts the error messages
  bool fold_batch_norm = true;
  bool fuse_activations = true;
  // What a backend's kernels can do beyond every backend's:
  bool fuse_residual_add = false;  // a 2-input Add into the conv/dense producing one input
  bool fold_zero_padding = false;  // a ZeroPadding2D read only by a convolution becomes its padding
};

// Throws InvalidArgument naming the layer for what cannot run (multi-input models, unknown kinds).
LoweredGraph lower(const Graph& graph, const LoweringOptions& options);

// The walk's state, handed to each layer's rule (layers.cpp): value slots, readers, the ops so far.
class Lowering {
 public:
  Lowering(const Graph& graph, const LoweringOptions& options);

  const LoweringOptions& options() const { return options_; }
  const LayerNode& node(int id) const { return g_.nodes[at(id)]; }
  // The shape of node's k-th input (an Input node's own).
  const std::vector<int>& input_shape(int id, std::size_t k = 0) const;
  // The slot holding node's k-th input.
  int input_slot(int id, std::size_t k) const { return slot_of_[at(node(id).inputs.at(k))]; }
  // The node reading node `id`'s output when that is its only use (not a graph output); -1 otherwise.
  int only_reader(int id) const;
  // Index of the op writing `slot`; -1 for the graph input.
  int producer(int slot) const { return producer_[at(slot)]; }
  // The op producing `slot` when the node being lowered is the slot's only reader and nothing is
  // fused into that op yet; otherwise null. Valid until the next emit().
  LoweredOp* fusable_producer(int slot);
  // Whether node `id` is a ZeroPadding2D folded into the convolution reading it.
  bool padding_folded(int id) const { return padding_folded_[at(id)]; }

  void set_input(int id);
  // Node `id` reads `slot` once and passes it on to its own readers.
  void alias(int id, int slot);
  // ZeroPadding2D `id` becomes the padding of the convolution reading it (which asks padding_folded()).
  void fold_padding(int id);
  // Appends an op writing node's own slot from its inputs' slots, with the geometry of its first
  // input and its output (h, w, c, oh, ow, oc); the rule fills in the rest. Valid until the next
  // emit().
  LoweredOp& emit(OpKind kind, int id);
  // An op inside node `id` (a layer lowered as more than one op): it reads the node's inputs and
  // writes a new slot of `out_shape` per sample that only the node's next op reads (its `in`).
  LoweredOp& emit_inner(OpKind kind, int id, const std::vector<int>& out_shape);

  LoweredGraph finish() &&;

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }

  const Graph& g_;
  const LoweringOptions& options_;
  LoweredGraph out_;
  std::vector<int> consumers_;    // graph readers of a node (+1 per graph output)
  std::vector<int> last_reader_;  // the last node reading a node
  std::vector<int> slot_of_;      // node -> value slot
  std::vector<int> producer_;     // slot -> op index
  std::vector<int> readers_;      // graph readers of the node now owning the slot
  std::vector<bool> padding_folded_;
};

// Gradients of an op's parameters, as every backward (CPU, host twin, GPU) gives them: in the
// layout of op.weights / op.bias / op.scale, each sized like the op's, or empty when not wanted.
struct OpGradients {
  std::vector<float> weights, bias, scale;
};

}  // namespace stoker::trainer::detail
