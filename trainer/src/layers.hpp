// Internal: the per-layer table. One rule per LayerKind says everything the trainer knows about a
// layer after import: its name, its output shape (and what it rejects), the weights it holds, and
// how it lowers (lowering.hpp): aliased, fused into the op before it, or emitted as an op kind.
// A new layer kind is one rule in layers.cpp; a new op kind also needs a kernel in each backend.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <stoker/trainer/graph.hpp>

namespace stoker::trainer::detail {

class Lowering;

using WeightShapes = std::vector<std::pair<std::string, std::vector<int>>>;

struct LayerRule {
  LayerKind kind;
  const char* name;  // to_string(kind)
  // The output shape per sample from the inputs' (infer_shape() checks both for sizes); fails
  // naming the layer for what it cannot take.
  std::vector<int> (*infer)(const LayerNode& node, const std::vector<std::vector<int>>& inputs);
  // The weights it holds given its input channels: (Keras name, shape) pairs.
  WeightShapes (*weights)(const LayerNode& node, int input_channels);
  // Lowers node `id`.
  void (*lower)(Lowering& lowering, int id);
};

// The rule for `kind`; null for a value outside LayerKind.
const LayerRule* layer_rule(LayerKind kind);

}  // namespace stoker::trainer::detail
