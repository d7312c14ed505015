// The layer graph that model import produces and backends execute. Each node is one Keras layer
// (nested Sequential/Functional models are flattened away); nodes are stored in topological order
// and refer to their inputs by index. Shapes are per sample (no batch dimension), channels last.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace stoker::trainer {

enum class LayerKind {
  Input,
  Conv2D,
  DepthwiseConv2D,
  BatchNormalization,
  Activation,  // Activation, ReLU (max_value, negative_slope, threshold), LeakyReLU: see ActivationSpec
  ZeroPadding2D,
  Add,
  ScaledAdd,  // inputs[0] + inputs[1] * residual_scale: InceptionResNetV2's CustomScaleLayer
  Concatenate,
  MaxPooling2D,
  AveragePooling2D,
  GlobalAveragePooling2D,
  Flatten,
  Dense,
  Dropout,
  Rescaling,  // y = x * multiplier + offset, per channel when channel_multipliers/offsets are set
  GlobalMaxPooling2D,
  Reshape,             // target_shape: a relabelling of the per-sample data (row-major, like Keras)
  Multiply,            // two inputs of equal shapes, or [H, W, C] × [1, 1, C] (squeeze-and-excitation)
  SeparableConv2D,     // a depthwise conv (depth_multiplier) then a 1×1 conv to `filters`, + bias, act
  Normalization,       // Keras' adapted Normalization: (x - mean) / max(sqrt(variance), 1e-7), last axis
  LayerNormalization,  // over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta
  LayerScale,          // x * gamma per channel (ConvNeXt's trainable residual scale)
  Cropping2D,          // rows and columns cut off each side (crop_*; NASNet's reduction cells)
};
const char* to_string(LayerKind kind);

// Elu: x > 0 ? x : exp(x) - 1 (alpha 1); Selu: scale * elu(x, alpha) with Keras' constants; Gelu:
// the exact erf form x * (1 + erf(x / sqrt 2)) / 2 (Keras' default, approximate=False); Softplus:
// log(1 + exp(x)); HardSigmoid: tf_keras' clip(0.2 x + 0.5, 0, 1); HardSwish: Keras 3's hard_silu,
// x * relu6(x + 3) / 6.
enum class ActKind { Linear, ReLU, Sigmoid, Softmax, Swish, Tanh, Elu, Selu, Gelu, Softplus, HardSigmoid, HardSwish };

// y = relu-like(x) with Keras ReLU semantics: x >= threshold ? min(x, max_value)
//                                                  : negative_slope * (x - threshold);
// sigmoid / swish (x * sigmoid(x)) / tanh / softmax over the last axis otherwise.
struct ActivationSpec {
  ActKind kind = ActKind::Linear;
  float max_value = std::numeric_limits<float>::infinity();
  float negative_slope = 0.0f;
  float threshold = 0.0f;
  bool is_linear() const { return kind == ActKind::Linear; }
};
// Parses a Keras activation name ("relu", "relu6", "linear", "sigmoid", "softmax", "swish", "silu",
// "tanh", "elu", "selu", "gelu", "softplus", "hard_sigmoid", "hard_swish", "hard_silu"); throws
// InvalidArgument naming `layer` for anything else.
ActivationSpec parse_activation(const std::string& name, const std::string& layer);
std::string to_string(const ActivationSpec& act);

enum class Padding { Valid, Same };

// A weight array, shared between a model and the models cut from it.
struct Weight {
  std::vector<int> shape;
  std::shared_ptr<const std::vector<float>> data;
  std::size_t size() const { return data ? data->size() : 0; }
  const float* ptr() const { return data ? data->data() : nullptr; }
};

struct LayerNode {
  std::string name;
  std::string keras_class;  // as written in the topology ("Conv2D", "ReLU", "LeakyReLU", ...)
  LayerKind kind = LayerKind::Input;
  std::vector<int> inputs;     // indices of earlier nodes
  std::vector<int> out_shape;  // per sample, e.g. {H, W, C} or {features}

  // Parameters (the ones that apply to the kind).
  int filters = 0;                 // Conv2D filters, Dense units
  int kernel_h = 1, kernel_w = 1;  // convolution / pooling window
  int stride_h = 1, stride_w = 1;
  int dilation_h = 1, dilation_w = 1;
  Padding padding = Padding::Valid;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;      // ZeroPadding2D
  int crop_top = 0, crop_bottom = 0, crop_left = 0, crop_right = 0;  // Cropping2D
  int depth_multiplier = 1;
  bool use_bias = false;  // Conv2D/DepthwiseConv2D/SeparableConv2D/Dense bias; (Layer/Batch)Normalization `center`
  bool scale = true;      // BatchNormalization / LayerNormalization `scale` (gamma)
  bool keepdims = false;  // GlobalAveragePooling2D, GlobalMaxPooling2D
  std::vector<int> target_shape;  // Reshape, as Keras writes it (one -1 allowed)
  float epsilon = 1e-3f;          // BatchNormalization, LayerNormalization
  int axis = -1;                  // Concatenate, BatchNormalization, (Layer)Normalization
  float residual_scale = 1.0f;    // ScaledAdd
  float rate = 0.0f;              // Dropout (kept for export; inference ignores it)
  // Dropout in training (fine-tuning): which axes of the per-sample value share one draw — Keras'
  // noise_shape without its batch entry, 1 where the mask is broadcast, -1 (None) where it is not;
  // empty: every value draws its own. SpatialDropout2D is {1, 1, -1}.
  std::vector<int> noise_shape;
  float multiplier = 1.0f, offset = 0.0f;  // Rescaling
  // Rescaling per channel (a list scale/offset, or Normalization with a constant mean and
  // variance in its config); empty: the scalars above.
  std::vector<float> channel_multipliers, channel_offsets;
  ActivationSpec activation;  // fused activation of Conv2D/DepthwiseConv2D/Dense; the op of ReLU/Activation

  // Weights by Keras name: kernel, bias, depthwise_kernel, gamma, beta, moving_mean, moving_variance.
  std::map<std::string, Weight> weights;

  std::size_t parameter_count() const;
  const Weight* weight(const std::string& key) const;
};

struct Graph {
  std::vector<LayerNode> nodes;  // topological order
  std::vector<int> inputs;       // Input nodes
  std::vector<int> outputs;      // nodes whose values the model returns
  // Names of (nested) models and the node that is their output, so cut_at("backbone") works.
  std::map<std::string, int> model_outputs;
  std::string name;

  int find(const std::string& layer_name) const;  // -1 when absent
  std::size_t parameter_count() const;
};

// For graphs built in code: computes every node's out_shape from its inputs (Input nodes keep
// theirs) and checks that each node holds the weights its kind needs, with the right shapes.
// Throws InvalidArgument naming the layer otherwise.
void infer_shapes_and_check(Graph& graph);

// The weights a node needs given its input channels: (key, shape) pairs.
std::vector<std::pair<std::string, std::vector<int>>> expected_weights(const LayerNode& node, int input_channels);

}  // namespace stoker::trainer
