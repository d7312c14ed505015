// Internal: the per-layer table. One rule per LayerKind says everything the trainer knows about a
// layer: its Keras form (the classes the importer reads as this kind, how their config becomes a
// node, and how a node is written back; keras_layers.cpp), its output shape (and what it
// rejects), the weights it holds in Keras' order, and how it lowers (lowering.hpp): aliased, fused
// into the op before it, or emitted as an op kind. The Keras reader (keras_topology.cpp), the
// writer (import/keras_h5_writer.cpp), finalize and the lowering all take a kind from here. A new layer
// kind is one rule in layers.cpp and its Keras form; a new op kind also needs a kernel in each
// backend.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/trainer/graph.hpp>

namespace stoker::trainer::detail {

class Lowering;

using WeightShapes = std::vector<std::pair<std::string, std::vector<int>>>;

// One Keras layer of a topology being read: its class, its config and its name for messages.
struct KerasConfig {
  const std::string& class_name;
  const nlohmann::json& config;
  const std::string& layer;
};

// One Keras layer being written: class, config, the layers feeding it, and its weights in Keras'
// creation order.
struct KerasLayer {
  std::string class_name;
  nlohmann::json config;
  std::vector<std::string> inputs;
  std::vector<std::pair<std::string, const Weight*>> weights;
};

struct KerasForm {
  // The Keras classes read as this kind, separated by spaces; the first is the one written.
  const char* classes;
  // Sets the node's parameters from the config (the node's kind is the rule's; a class that Keras
  // uses for another computation may change it, as Conv2D with groups == filters does). Fails
  // naming the layer for a config it cannot take. Null: the importer reads it (InputLayer).
  void (*read)(const KerasConfig& keras, LayerNode& node);
  // Writes the node back: `layers` holds one layer of the first class, with the node's name and
  // inputs; the function fills its config and may put a layer before it (a node that Keras says
  // in two layers). The node's weights go to the layer of its name, in the order of the rule's
  // weights.
  void (*write)(const LayerNode& node, std::vector<KerasLayer>& layers);
  // The config names a fused activation; one Keras cannot name (a capped ReLU) is written as a
  // ReLU layer of its own after it, named `<node>_activation`.
  bool fused_activation;
};

struct LayerRule {
  LayerKind kind;
  const char* name;  // to_string(kind)
  const KerasForm* keras;
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
// The rule whose Keras form reads `keras_class`; null when none does.
const LayerRule* keras_rule(std::string_view keras_class);
// Every Keras class some rule reads, the written one of each kind first: "InputLayer, Conv2D, ...".
std::string keras_classes_read();

// A node of the graph from one leaf Keras layer's class and config, by the form that reads the
// class; InvalidArgument naming the layer when none does or the config is not understood.
LayerNode read_keras_layer(const std::string& keras_class, const nlohmann::json& config, const std::string& name);
// The Keras layers that say node `n` fed by the layers `inputs`: its form's, with its weights,
// and a ReLU layer after it for a fused activation Keras cannot name.
std::vector<KerasLayer> keras_layers(const LayerNode& n, const std::vector<std::string>& inputs);
// The Keras layer that holds a node's value: the last of keras_layers(n).
std::string keras_output_name(const LayerNode& n);

// The Keras forms of the rules, one per LayerKind (keras_layers.cpp).
namespace keras {
extern const KerasForm input, conv2d, depthwise_conv2d, batch_normalization, activation, zero_padding2d, add,
    scaled_add, concatenate, max_pooling2d, average_pooling2d, global_average_pooling2d, flatten, dense, dropout,
    rescaling, global_max_pooling2d, reshape, multiply, separable_conv2d, normalization, layer_normalization,
    layer_scale, cropping2d;
}  // namespace keras

}  // namespace stoker::trainer::detail
