// Keras topology JSON -> flattened layer graph.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <stoker/core/error.hpp>

#include "import.hpp"

namespace stoker::trainer::detail {
namespace {

using nlohmann::json;

bool is_model_class(const std::string& c) { return c == "Sequential" || c == "Functional" || c == "Model"; }

std::string layer_name_of(const json& layer) {
  if (layer.is_object() && layer.contains("name") && layer["name"].is_string()) return layer["name"].get<std::string>();
  if (layer.is_object() && layer.contains("config") && layer["config"].is_object() &&
      layer["config"].contains("name") && layer["config"]["name"].is_string())
    return layer["config"]["name"].get<std::string>();
  return {};
}

// A layer's name for messages: its name, else its position in its model.
std::string layer_label(const json& layer, std::size_t index, const std::string& model) {
  const std::string name = layer_name_of(layer);
  if (!name.empty()) return name;
  return "#" + std::to_string(index) + (model.empty() ? "" : " of model '" + model + "'");
}

[[noreturn]] void fail(const std::string& layer, const std::string& what) {
  throw InvalidArgument("layer '" + layer + "': " + what);
}

// A JSON integer that fits an int (get<int>() would wrap a larger one, or convert a float with
// undefined behaviour when it is out of range).
int to_int(const json& v, const std::string& layer, const std::string& what) {
  if (!v.is_number_integer()) fail(layer, what + " must be an integer, received " + v.dump().substr(0, 100));
  const bool fits = v.is_number_unsigned()
                        ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                        : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                              v.get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) fail(layer, what + " " + v.dump() + " is out of range");
  return static_cast<int>(v.get<std::int64_t>());
}

int int_at(const json& cfg, const char* key, const std::string& layer) { return to_int(cfg.at(key), layer, key); }

int int_or(const json& cfg, const char* key, int fallback, const std::string& layer) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  return to_int(cfg[key], layer, key);
}

// An int or a list of ints of length n (Keras accepts both for kernel_size, strides, ...).
std::vector<int> int_list(const json& cfg, const char* key, std::size_t n, int fallback, const std::string& layer) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::vector<int>(n, fallback);
  const json& v = cfg[key];
  if (v.is_number_integer()) return std::vector<int>(n, to_int(v, layer, key));
  if (v.is_array() && v.size() == n) {
    std::vector<int> r;
    for (const auto& e : v) {
      if (!e.is_number_integer()) fail(layer, std::string(key) + " must hold integers, received " + v.dump());
      r.push_back(to_int(e, layer, key));
    }
    return r;
  }
  fail(layer, std::string(key) + " must be an integer or a list of " + std::to_string(n) + ", received " + v.dump());
}

Padding parse_padding(const json& cfg, const std::string& layer) {
  const std::string p = cfg.value("padding", std::string("valid"));
  if (p == "valid") return Padding::Valid;
  if (p == "same") return Padding::Same;
  fail(layer, "padding '" + p + "' is not supported (only 'valid' and 'same')");
}

void check_channels_last(const json& cfg, const std::string& layer) {
  if (cfg.contains("data_format") && cfg["data_format"].is_string() &&
      cfg["data_format"].get<std::string>() != "channels_last")
    fail(layer, "data_format '" + cfg["data_format"].get<std::string>() + "' is not supported (only channels_last)");
}

// ZeroPadding2D's `padding` and Cropping2D's `cropping`: n, (rows, columns) or ((top, bottom),
// (left, right)).
void read_sides(const json& cfg, const char* key, const std::string& name, int& top, int& bottom, int& left,
                int& right) {
  const json& p = cfg.at(key);
  if (p.is_number_integer()) {
    top = bottom = left = right = to_int(p, name, key);
  } else if (p.is_array() && p.size() == 2 && p[0].is_number_integer()) {
    top = bottom = to_int(p[0], name, key);
    left = right = to_int(p[1], name, key);
  } else if (p.is_array() && p.size() == 2 && p[0].is_array() && p[0].size() == 2 && p[1].is_array() &&
             p[1].size() == 2) {
    top = to_int(p[0][0], name, key), bottom = to_int(p[0][1], name, key);
    left = to_int(p[1][0], name, key), right = to_int(p[1][1], name, key);
  } else {
    fail(name, std::string(key) + " " + p.dump() + " is not understood");
  }
}

ActivationSpec activation_of(const json& cfg, const std::string& layer) {
  if (!cfg.contains("activation") || cfg["activation"].is_null()) return {};
  const json& a = cfg["activation"];
  if (a.is_string()) return parse_activation(a.get<std::string>(), layer);
  if (a.is_object() && a.contains("class_name") && a["class_name"].is_string()) {
    // Keras 3 may serialise a built-in activation as {"class_name": "function", "config": "relu"}.
    if (a.contains("config") && a["config"].is_string()) return parse_activation(a["config"].get<std::string>(), layer);
  }
  fail(layer, "activation " + a.dump() + " is not supported");
}

float float_or(const json& cfg, const char* key, float fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  return cfg[key].get<float>();
}

// An axis given as an int or a list of one int (Normalization, LayerNormalization); the shape
// inference checks that it is the last.
int single_axis(const json& cfg, const std::string& layer, const char* cls) {
  if (!cfg.contains("axis")) return -1;
  const json& a = cfg["axis"];
  if (a.is_number_integer()) return to_int(a, layer, "axis");
  if (a.is_array() && a.size() == 1) return to_int(a[0], layer, "axis");
  fail(layer, std::string(cls) + " over axis " + a.dump() + " is not supported (only the last axis)");
}

// The one Lambda we recognise: Keras Applications' InceptionResNetV2 residual scaling, named
// block35_N / block17_N / block8_N with arguments {"scale": s}. Any other Lambda is Python code we
// cannot run.
bool is_inception_resnet_lambda(const json& cfg, const std::string& name) {
  if (!cfg.contains("arguments") || !cfg["arguments"].is_object() || cfg["arguments"].size() != 1 ||
      !cfg["arguments"].contains("scale") || !cfg["arguments"]["scale"].is_number())
    return false;
  for (const char* prefix : {"block35_", "block17_", "block8_"}) {
    const std::string p = prefix;
    if (name.size() > p.size() && name.compare(0, p.size(), p) == 0 &&
        name.find_first_not_of("0123456789", p.size()) == std::string::npos)
      return true;
  }
  return false;
}

// A number or a list of numbers (Rescaling's scale and offset, Normalization's mean and variance).
std::vector<float> numbers_or(const json& cfg, const char* key, float fallback, const std::string& layer) {
  if (!cfg.contains(key) || cfg[key].is_null()) return {fallback};
  const json& v = cfg[key];
  if (v.is_number()) return {v.get<float>()};
  std::vector<float> r;
  if (v.is_array())
    for (const auto& e : v) {
      if (!e.is_number()) break;
      r.push_back(e.get<float>());
    }
  if (r.empty() || r.size() != v.size())
    fail(layer, std::string(key) + " must be a number or a flat list of numbers, received " + v.dump().substr(0, 100));
  return r;
}

// Normalization with a constant mean and variance in its config (ConvNeXt's ImageNet statistics):
// tf_keras' (x - mean) / max(sqrt(variance), 1e-7), as a per-channel Rescaling. No weights.
void normalization_as_rescaling(const json& cfg, const std::string& name, LayerNode& n) {
  const std::vector<float> mean = numbers_or(cfg, "mean", 0.0f, name);
  const std::vector<float> variance = numbers_or(cfg, "variance", 1.0f, name);
  if (mean.size() != variance.size() && mean.size() != 1 && variance.size() != 1)
    fail(name, "Normalization's mean and variance have different lengths");
  const std::size_t c = std::max(mean.size(), variance.size());
  std::vector<float> scale(c), offset(c);
  for (std::size_t i = 0; i < c; ++i) {
    const double m = mean[mean.size() == 1 ? 0 : i], v = variance[variance.size() == 1 ? 0 : i];
    if (!(v >= 0)) fail(name, "Normalization's variance must be >= 0");
    const double s = 1.0 / std::max(std::sqrt(v), 1e-7);
    scale[i] = static_cast<float>(s), offset[i] = static_cast<float>(-m * s);
  }
  n.kind = LayerKind::Rescaling;
  if (c == 1) n.multiplier = scale[0], n.offset = offset[0];
  else n.channel_multipliers = std::move(scale), n.channel_offsets = std::move(offset);
}

// A Keras 2 tensor reference [layer, node index, tensor index] (a TFOpLambda's second operand).
bool is_tensor_ref(const json& v) { return v.is_array() && v.size() >= 3 && v[0].is_string(); }

// TFOpLambda: a TensorFlow function tf_keras recorded by name when a model applied it to a Keras
// tensor (MobileNetV3's hard_sigmoid is tf.__operators__.add(x, 3.0) -> ReLU(6) ->
// tf.math.multiply(., 1/6); ConvNeXt's residual is tf.__operators__.add(x, y)). The other
// arguments are in the call's kwargs; `tensor_inputs` counts the Keras tensors among them.
LayerNode make_tf_op_node(const json& cfg, const std::string& name, const json& kwargs, std::size_t tensor_inputs) {
  const std::string fn = cfg.value("function", std::string());
  LayerNode n;
  n.name = name;
  n.keras_class = "TFOpLambda";
  const json* y = kwargs.is_object() && kwargs.contains("y") ? &kwargs["y"] : nullptr;
  const bool y_number = y && y->is_number();
  const bool y_tensor = y && is_tensor_ref(*y) && tensor_inputs == 2;
  auto activation = [&](ActKind kind, float max_value) {
    n.kind = LayerKind::Activation;
    n.activation.kind = kind;
    n.activation.max_value = max_value;
  };
  const float inf = std::numeric_limits<float>::infinity();
  if ((fn == "__operators__.add" || fn == "math.add") && y_number) {
    n.kind = LayerKind::Rescaling, n.offset = y->get<float>();
  } else if ((fn == "__operators__.add" || fn == "math.add") && y_tensor) {
    n.kind = LayerKind::Add;
  } else if (fn == "math.subtract" && y_number) {
    n.kind = LayerKind::Rescaling, n.offset = -y->get<float>();
  } else if (fn == "math.multiply" && y_number) {
    n.kind = LayerKind::Rescaling, n.multiplier = y->get<float>();
  } else if (fn == "math.multiply" && y_tensor) {
    n.kind = LayerKind::Multiply;
  } else if ((fn == "math.truediv" || fn == "math.divide") && y_number && y->get<float>() != 0.0f) {
    n.kind = LayerKind::Rescaling, n.multiplier = 1.0f / y->get<float>();
  } else if (fn == "nn.relu" && !y) {
    activation(ActKind::ReLU, inf);
  } else if (fn == "nn.relu6" && !y) {
    activation(ActKind::ReLU, 6.0f);
  } else if ((fn == "math.sigmoid" || fn == "nn.sigmoid") && !y) {
    activation(ActKind::Sigmoid, inf);
  } else if ((fn == "nn.silu" || fn == "nn.swish") && !y) {
    activation(ActKind::Swish, inf);
  } else if (fn == "math.tanh" && !y) {
    activation(ActKind::Tanh, inf);
  } else {
    const std::string args = kwargs.is_object() ? kwargs.dump().substr(0, 100) : "{}";
    fail(name, "TFOpLambda op '" + fn + "' with arguments " + args +
                   " is not supported (supported: __operators__.add, math.add, math.subtract, math.multiply, "
                   "math.truediv with a number; __operators__.add, math.add, math.multiply of two tensors; "
                   "nn.relu, nn.relu6, math.sigmoid, nn.silu, math.tanh)");
  }
  return n;
}

// What Conv2D, DepthwiseConv2D and SeparableConv2D configs share: channels last, the window,
// padding, bias and fused activation.
void read_convolution(const json& cfg, const std::string& name, LayerNode& n) {
  check_channels_last(cfg, name);
  const auto k = int_list(cfg, "kernel_size", 2, 1, name);
  const auto s = int_list(cfg, "strides", 2, 1, name);
  const auto d = int_list(cfg, "dilation_rate", 2, 1, name);
  n.kernel_h = k[0], n.kernel_w = k[1];
  n.stride_h = s[0], n.stride_w = s[1];
  n.dilation_h = d[0], n.dilation_w = d[1];
  n.padding = parse_padding(cfg, name);
  n.use_bias = cfg.value("use_bias", true);
  n.activation = activation_of(cfg, name);
}

// Builds a node of the graph from one leaf layer's class and config.
LayerNode make_node(const std::string& cls, const json& cfg, const std::string& name) {
  LayerNode n;
  n.name = name;
  n.keras_class = cls;
  if (cls == "Conv2D" || cls == "Convolution2D") {
    n.kind = LayerKind::Conv2D;
    n.filters = int_at(cfg, "filters", name);
    read_convolution(cfg, name, n);
    if ((n.stride_h > 1 || n.stride_w > 1) && (n.dilation_h > 1 || n.dilation_w > 1))
      fail(name, "strides > 1 together with dilation_rate > 1 is not supported by Keras either");
    const int groups = int_or(cfg, "groups", 1, name);
    if (groups > 1 && groups == n.filters) {  // a depthwise convolution (ConvNeXt); finalize checks C == groups
      n.kind = LayerKind::DepthwiseConv2D;
      n.depth_multiplier = 1;
    } else if (groups != 1) {
      fail(name, "grouped convolution (groups=" + cfg["groups"].dump() +
                     ") is not supported (only groups == filters == input channels, a depthwise convolution)");
    }
  } else if (cls == "DepthwiseConv2D") {
    n.kind = LayerKind::DepthwiseConv2D;
    read_convolution(cfg, name, n);
    n.depth_multiplier = int_or(cfg, "depth_multiplier", 1, name);
  } else if (cls == "SeparableConv2D" || cls == "SeparableConvolution2D") {
    n.kind = LayerKind::SeparableConv2D;
    n.filters = int_at(cfg, "filters", name);
    read_convolution(cfg, name, n);
    n.depth_multiplier = int_or(cfg, "depth_multiplier", 1, name);
  } else if (cls == "Normalization") {
    n.kind = LayerKind::Normalization;
    n.axis = single_axis(cfg, name, "Normalization");
    if (cfg.value("invert", false)) fail(name, "Normalization with invert=True is not supported");
    const bool has_mean = cfg.contains("mean") && !cfg["mean"].is_null();
    const bool has_variance = cfg.contains("variance") && !cfg["variance"].is_null();
    if (has_mean != has_variance) fail(name, "Normalization with only one of mean and variance in its config");
    if (has_mean) normalization_as_rescaling(cfg, name, n);
  } else if (cls == "LayerNormalization") {
    n.kind = LayerKind::LayerNormalization;
    n.axis = single_axis(cfg, name, "LayerNormalization");
    n.epsilon = float_or(cfg, "epsilon", 1e-3f);
    n.use_bias = cfg.value("center", true);
    n.scale = cfg.value("scale", true);
  } else if (cls == "BatchNormalization") {
    n.kind = LayerKind::BatchNormalization;
    int axis = -1;
    if (cfg.contains("axis")) {
      const json& a = cfg["axis"];
      if (a.is_number_integer()) axis = to_int(a, name, "axis");
      else if (a.is_array() && a.size() == 1) axis = to_int(a[0], name, "axis");
      else fail(name, "BatchNormalization over axis " + a.dump() + " is not supported (only the channel axis)");
    }
    n.axis = axis;
    n.epsilon = float_or(cfg, "epsilon", 1e-3f);
    n.use_bias = cfg.value("center", true);  // beta present
    n.scale = cfg.value("scale", true);      // gamma present
  } else if (cls == "ReLU") {
    n.kind = LayerKind::Activation;
    n.activation.kind = ActKind::ReLU;
    n.activation.max_value = float_or(cfg, "max_value", std::numeric_limits<float>::infinity());
    n.activation.negative_slope = float_or(cfg, "negative_slope", 0.0f);
    n.activation.threshold = float_or(cfg, "threshold", 0.0f);
  } else if (cls == "LeakyReLU") {
    n.kind = LayerKind::Activation;
    n.activation.kind = ActKind::ReLU;
    n.activation.negative_slope =
        cfg.contains("alpha") ? float_or(cfg, "alpha", 0.3f) : float_or(cfg, "negative_slope", 0.3f);
  } else if (cls == "ELU") {
    n.kind = LayerKind::Activation;
    if (float_or(cfg, "alpha", 1.0f) != 1.0f)
      fail(name, "ELU with alpha " + cfg["alpha"].dump() + " is not supported (only alpha 1)");
    n.activation.kind = ActKind::Elu;
  } else if (cls == "Activation") {
    n.kind = LayerKind::Activation;
    n.activation = activation_of(cfg, name);
  } else if (cls == "Softmax") {
    n.kind = LayerKind::Activation;
    if (cfg.contains("axis") && !cfg["axis"].is_null() && int_or(cfg, "axis", -1, name) != -1)
      fail(name, "Softmax over axis " + cfg["axis"].dump() + " is not supported (only -1)");
    n.activation.kind = ActKind::Softmax;
  } else if (cls == "ZeroPadding2D") {
    n.kind = LayerKind::ZeroPadding2D;
    check_channels_last(cfg, name);
    read_sides(cfg, "padding", name, n.pad_top, n.pad_bottom, n.pad_left, n.pad_right);
  } else if (cls == "Cropping2D") {
    n.kind = LayerKind::Cropping2D;
    check_channels_last(cfg, name);
    read_sides(cfg, "cropping", name, n.crop_top, n.crop_bottom, n.crop_left, n.crop_right);
  } else if (cls == "Add") {
    n.kind = LayerKind::Add;
  } else if (cls == "CustomScaleLayer" ||
             cls == "Custom>CustomScaleLayer") {  // registered as "Custom>..."  // tf-keras >= 2.13 InceptionResNetV2:
                                                  // inputs[0] + inputs[1] * scale
    n.kind = LayerKind::ScaledAdd;
    n.residual_scale = cfg.at("scale").get<float>();
  } else if (cls == "Lambda" && is_inception_resnet_lambda(cfg, name)) {
    // Older Keras InceptionResNetV2 wrote the same residual as
    // Lambda(lambda inputs, scale: inputs[0] + inputs[1] * scale, arguments={'scale': s}, name='block35_1').
    n.kind = LayerKind::ScaledAdd;
    n.residual_scale = cfg.at("arguments").at("scale").get<float>();
  } else if (cls == "Concatenate") {
    n.kind = LayerKind::Concatenate;
    n.axis = int_or(cfg, "axis", -1, name);
  } else if (cls == "MaxPooling2D" || cls == "AveragePooling2D" || cls == "MaxPool2D" || cls == "AvgPool2D") {
    n.kind = (cls == "MaxPooling2D" || cls == "MaxPool2D") ? LayerKind::MaxPooling2D : LayerKind::AveragePooling2D;
    check_channels_last(cfg, name);
    auto k = int_list(cfg, "pool_size", 2, 2, name);
    n.kernel_h = k[0], n.kernel_w = k[1];
    auto s = (cfg.contains("strides") && !cfg["strides"].is_null()) ? int_list(cfg, "strides", 2, 1, name) : k;
    n.stride_h = s[0], n.stride_w = s[1];
    n.padding = parse_padding(cfg, name);
  } else if (cls == "GlobalAveragePooling2D" || cls == "GlobalAvgPool2D") {
    n.kind = LayerKind::GlobalAveragePooling2D;
    check_channels_last(cfg, name);
    n.keepdims = cfg.value("keepdims", false);
  } else if (cls == "GlobalMaxPooling2D" || cls == "GlobalMaxPool2D") {
    n.kind = LayerKind::GlobalMaxPooling2D;
    check_channels_last(cfg, name);
    n.keepdims = cfg.value("keepdims", false);
  } else if (cls == "Reshape") {
    n.kind = LayerKind::Reshape;
    const json& t = cfg.at("target_shape");
    if (!t.is_array() || t.empty()) fail(name, "target_shape " + t.dump() + " must be a non-empty list");
    for (const auto& d : t) n.target_shape.push_back(to_int(d, name, "target_shape"));
  } else if (cls == "Multiply") {
    n.kind = LayerKind::Multiply;
  } else if (cls == "Flatten") {
    n.kind = LayerKind::Flatten;
    check_channels_last(cfg, name);
  } else if (cls == "Dense") {
    n.kind = LayerKind::Dense;
    n.filters = int_at(cfg, "units", name);
    n.use_bias = cfg.value("use_bias", true);
    n.activation = activation_of(cfg, name);
  } else if (cls == "Rescaling") {
    n.kind = LayerKind::Rescaling;
    const std::vector<float> scale = numbers_or(cfg, "scale", 1.0f, name);
    const std::vector<float> offset = numbers_or(cfg, "offset", 0.0f, name);
    if (scale.size() == 1 && offset.size() == 1) {
      n.multiplier = scale[0], n.offset = offset[0];
    } else if (scale.size() == 1 || offset.size() == 1 || scale.size() == offset.size()) {
      const std::size_t c = std::max(scale.size(), offset.size());
      n.channel_multipliers = scale.size() == 1 ? std::vector<float>(c, scale[0]) : scale;
      n.channel_offsets = offset.size() == 1 ? std::vector<float>(c, offset[0]) : offset;
    } else {
      fail(name, "Rescaling's scale and offset have different lengths");
    }
  } else if (cls == "LayerScale") {  // Keras Applications' ConvNeXt: x * gamma, gamma trainable per channel
    n.kind = LayerKind::LayerScale;
  } else if (cls == "Dropout" || cls == "SpatialDropout2D" || cls == "GaussianDropout" || cls == "GaussianNoise") {
    n.kind = LayerKind::Dropout;  // identity at inference
    n.rate = cfg.contains("rate") && cfg["rate"].is_number() ? cfg["rate"].get<float>() : 0.0f;
    if (cls == "SpatialDropout2D") n.noise_shape = {1, 1, -1};
    if (cls == "Dropout" && cfg.contains("noise_shape") && cfg["noise_shape"].is_array()) {
      const json& ns = cfg["noise_shape"];
      for (std::size_t i = 1; i < ns.size(); ++i)  // [0] is the batch
        n.noise_shape.push_back(ns[i].is_null() ? -1 : to_int(ns[i], name, "noise_shape"));
    }
  } else {
    fail(name, "layer class '" + cls +
                   "' is not supported (supported: InputLayer, Conv2D, DepthwiseConv2D, SeparableConv2D, "
                   "BatchNormalization, LayerNormalization, Normalization, ReLU, LeakyReLU, ELU, Activation, "
                   "ZeroPadding2D, Cropping2D, Add, Concatenate, MaxPooling2D, "
                   "AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, Reshape, Multiply, Flatten, Dense, "
                   "Dropout, Rescaling, CustomScaleLayer, LayerScale, TFOpLambda)");
  }
  return n;
}

// batch_input_shape [null, H, W, C] (Keras 2) or batch_shape (Keras 3) -> {H, W, C}
std::vector<int> input_shape_of(const json& cfg, const std::string& name, const LoadOptions& options) {
  const json* s = nullptr;
  if (cfg.contains("batch_input_shape")) s = &cfg["batch_input_shape"];
  else if (cfg.contains("batch_shape")) s = &cfg["batch_shape"];
  if (!s || !s->is_array() || s->size() < 2) fail(name, "input has no batch_input_shape");
  std::vector<int> shape;
  for (std::size_t i = 1; i < s->size(); ++i) {
    const json& d = (*s)[i];
    if (d.is_number_integer()) {
      const int v = to_int(d, name, "input dimension");
      if (v < 1) fail(name, "input shape " + s->dump() + " has a dimension < 1");
      shape.push_back(v);
    } else if (shape.size() < 2 && options.input_hw.size() == 2) {
      shape.push_back(options.input_hw[shape.size()]);
    } else {
      fail(name, "input shape " + s->dump() + " has an unknown dimension; pass LoadOptions::input_hw");
    }
  }
  if (shape.size() == 3 && options.input_hw.size() == 2) shape[0] = options.input_hw[0], shape[1] = options.input_hw[1];
  return shape;
}

// One tensor reference of an inbound node: (layer name, node index, tensor index).
struct Ref {
  std::string layer;
  int node = 0;
  int tensor = 0;
};

void collect_keras3_refs(const json& v, std::vector<Ref>& out) {
  if (v.is_object()) {
    if (v.value("class_name", std::string()) == "__keras_tensor__" && v.contains("config")) {
      const json& h = v["config"].at("keras_history");  // .at(): const operator[] does not check the index
      out.push_back({h.at(0).get<std::string>(), to_int(h.at(1), "", "keras_history node index"),
                     to_int(h.at(2), "", "keras_history tensor index")});
      return;
    }
    for (const auto& [k, e] : v.items()) collect_keras3_refs(e, out);
  } else if (v.is_array()) {
    for (const auto& e : v) collect_keras3_refs(e, out);
  }
}

std::vector<Ref> parse_inbound_node(const json& node) {
  std::vector<Ref> refs;
  if (node.is_array() && !node.empty() && node[0].is_string()) {  // a TFOpLambda's: [name, node, tensor, kwargs]
    refs.push_back({node[0].get<std::string>(), to_int(node.at(1), "", "inbound node index"),
                    to_int(node.at(2), "", "inbound tensor index")});
  } else if (node.is_array()) {  // Keras 2: [[name, node_index, tensor_index, kwargs], ...]
    for (const auto& r : node) {
      if (r.is_array() && r.size() >= 3 && r[0].is_string())
        refs.push_back({r[0].get<std::string>(), to_int(r[1], "", "inbound node index"),
                        to_int(r[2], "", "inbound tensor index")});
    }
  } else if (node.is_object()) {  // Keras 3: {"args": [...], "kwargs": {...}}
    collect_keras3_refs(node, refs);
  }
  return refs;
}

// The keyword arguments of a layer call: Keras 2 writes them as the 4th element of the (first)
// inbound reference, Keras 3 as "kwargs".
json call_kwargs(const json& node) {
  if (node.is_array() && node.size() >= 4 && node[0].is_string() && node[3].is_object()) return node[3];
  if (node.is_array() && !node.empty() && node[0].is_array() && node[0].size() >= 4 && node[0][3].is_object())
    return node[0][3];
  if (node.is_object() && node.contains("kwargs") && node["kwargs"].is_object()) return node["kwargs"];
  return nullptr;
}

class Flattener {
 public:
  Flattener(Graph& g, const LoadOptions& o) : g_(g), options_(o) {}

  // Adds `model` to the graph. `inputs`: the node ids feeding it (empty at top level: the model's
  // own InputLayers become graph inputs). Returns the node ids of its outputs.
  std::vector<int> add_model(const json& model, const std::vector<int>& inputs) {
    const std::string cls = model.at("class_name").get<std::string>();
    const json& cfg = model.at("config");
    const std::string name = layer_name_of(model);
    if (depth_ >= kMaxModelDepth)
      fail(name, "models are nested more than " + std::to_string(kMaxModelDepth) + " levels deep");
    ++depth_;
    std::vector<int> outs = cls == "Sequential" ? add_sequential(cfg, name, inputs) : add_functional(cfg, name, inputs);
    --depth_;
    if (outs.size() == 1 && !name.empty()) g_.model_outputs[name] = outs[0];
    return outs;
  }

 private:
  Graph& g_;
  const LoadOptions& options_;
  std::set<std::string> names_;
  int depth_ = 0;  // models being added, one inside the other

  // A JSON type or key error inside one layer, named by the layer (the message of a nested
  // model's layer is kept as it is).
  template <typename F>
  auto in_layer(const json& layer, std::size_t index, const std::string& model, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const json::exception& e) {
      fail(layer_label(layer, index, model), std::string("malformed layer: ") + e.what());
    }
  }

  int add_node(LayerNode node) {
    if (!names_.insert(node.name).second)
      fail(node.name, "the layer name appears twice in the model; layer names must be unique");
    g_.nodes.push_back(std::move(node));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  int add_input(const json& cfg, const std::string& name) {
    LayerNode n;
    n.name = name;
    n.keras_class = "InputLayer";
    n.kind = LayerKind::Input;
    n.out_shape = input_shape_of(cfg, name, options_);
    int id = add_node(std::move(n));
    g_.inputs.push_back(id);
    return id;
  }

  // `kwargs`: the call's keyword arguments (a TFOpLambda's operands), null when none.
  std::vector<int> add_layer(const json& layer, const std::vector<int>& inputs, const json& kwargs = nullptr) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string name = layer_name_of(layer);
    if (is_model_class(cls)) return add_model(layer, inputs);
    if (cls == "InputLayer") fail(name, "InputLayer inside the graph is not expected here");
    if (cls == "Lambda" && !is_inception_resnet_lambda(layer.at("config"), name))
      fail(name, "layer class '" + cls + "' (arbitrary Python code) is not supported");
    LayerNode n = cls == "TFOpLambda" ? make_tf_op_node(layer.at("config"), name, kwargs, inputs.size())
                                      : make_node(cls, layer.at("config"), name);
    // Keras 3 (its layers carry "module") redefined hard_sigmoid as relu6(x + 3) / 6; stoker's is
    // tf_keras' clip(0.2 x + 0.5, 0, 1).
    if (layer.contains("module") && n.activation.kind == ActKind::HardSigmoid)
      fail(name, "Keras 3's hard_sigmoid (relu6(x + 3) / 6) is not supported (only tf_keras' clip(0.2 x + 0.5, 0, 1))");
    n.inputs = inputs;
    return {add_node(std::move(n))};
  }

  std::vector<int> add_sequential(const json& cfg, const std::string& name, const std::vector<int>& inputs) {
    const json& layers = cfg.is_array() ? cfg : cfg.at("layers");
    std::vector<int> current = inputs;
    std::size_t index = 0;
    for (const auto& layer : layers) {
      in_layer(layer, index++, name, [&] { add_sequential_layer(layer, name, current); });
    }
    return current;
  }

  void add_sequential_layer(const json& layer, const std::string& name, std::vector<int>& current) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string lname = layer_name_of(layer);
    if (cls == "InputLayer") {
      if (current.empty()) current = {add_input(layer.at("config"), lname)};
      return;  // nested: the InputLayer stands for what feeds the Sequential
    }
    if (current.empty()) {
      const json& lc = layer.at("config");
      if (lc.is_object() && (lc.contains("batch_input_shape") || lc.contains("batch_shape"))) {
        current = {add_input(lc, (name.empty() ? lname : name) + "_input")};
      } else if (is_model_class(cls)) {
        current = {};  // a nested model brings its own InputLayer
      } else {
        fail(lname, "the Sequential model '" + name + "' has no input shape");
      }
    }
    if (current.size() > 1) fail(lname, "a Sequential layer receives " + std::to_string(current.size()) + " tensors");
    current = add_layer(layer, current);
  }

  std::vector<int> add_functional(const json& cfg, const std::string& name, const std::vector<int>& inputs) {
    const json& layers = cfg.at("layers");
    std::map<std::string, std::vector<int>> produced;  // layer name -> its output nodes
    auto normalise_io = [&name](const json& io) {
      std::vector<Ref> refs;
      // .at(): operator[] on a const array does not check the index.
      auto ref = [&](const json& r) {
        return Ref{r.at(0).get<std::string>(), to_int(r.at(1), name, "input/output node index"),
                   to_int(r.at(2), name, "input/output tensor index")};
      };
      if (io.is_array() && !io.empty() && io[0].is_string()) {
        refs.push_back(ref(io));
      } else if (io.is_array()) {
        for (const auto& r : io) refs.push_back(ref(r));
      }
      return refs;
    };
    const auto in_refs = normalise_io(cfg.at("input_layers"));
    const auto out_refs = normalise_io(cfg.at("output_layers"));
    if (!inputs.empty() && inputs.size() != in_refs.size())
      fail(name,
           "the model has " + std::to_string(in_refs.size()) + " inputs but receives " + std::to_string(inputs.size()));

    // Layers are listed in a valid order by Keras, but resolve dependencies to be safe.
    std::vector<bool> done(layers.size(), false);
    std::size_t remaining = layers.size();
    while (remaining > 0) {
      bool progress = false;
      for (std::size_t i = 0; i < layers.size(); ++i) {
        if (done[i]) continue;
        if (in_layer(layers[i], i, name,
                     [&] { return add_functional_layer(layers[i], name, inputs, in_refs, produced); }))
          done[i] = true, --remaining, progress = true;
      }
      if (!progress) {
        for (std::size_t i = 0; i < layers.size(); ++i)
          if (!done[i]) fail(layer_label(layers[i], i, name), "its inputs are never produced in model '" + name + "'");
      }
    }
    std::vector<int> outs;
    for (const auto& r : out_refs) {
      auto it = produced.find(r.layer);
      if (it == produced.end() || static_cast<std::size_t>(r.tensor) >= it->second.size())
        fail(name, "output layer '" + r.layer + "' is not in the model");
      outs.push_back(it->second[static_cast<std::size_t>(r.tensor)]);
    }
    return outs;
  }

  // One layer of a Functional model, added when its inputs are produced: false when they are not yet.
  bool add_functional_layer(const json& layer, const std::string& name, const std::vector<int>& inputs,
                            const std::vector<Ref>& in_refs, std::map<std::string, std::vector<int>>& produced) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string lname = layer_name_of(layer);
    if (cls == "InputLayer") {
      auto it = std::find_if(in_refs.begin(), in_refs.end(), [&](const Ref& r) { return r.layer == lname; });
      if (!inputs.empty() && it != in_refs.end())
        produced[lname] = {inputs[static_cast<std::size_t>(it - in_refs.begin())]};
      else produced[lname] = {add_input(layer.at("config"), lname)};
      return true;
    }
    const json& nodes = layer.contains("inbound_nodes") ? layer["inbound_nodes"] : json::array();
    if (nodes.size() != 1)
      fail(lname, nodes.empty() ? "the layer has no inbound node (not connected)"
                                : "the layer is called " + std::to_string(nodes.size()) +
                                      " times (shared layers are not supported)");
    auto refs = parse_inbound_node(nodes[0]);
    const json kwargs = call_kwargs(nodes[0]);
    if (cls == "TFOpLambda" && kwargs.is_object() && kwargs.contains("y") && is_tensor_ref(kwargs["y"]))
      refs.push_back({kwargs["y"][0].get<std::string>(), to_int(kwargs["y"][1], lname, "y node index"),
                      to_int(kwargs["y"][2], lname, "y tensor index")});
    bool ready = true;
    for (const auto& r : refs) ready = ready && produced.count(r.layer) > 0;
    if (!ready) return false;
    std::vector<int> ins;
    for (const auto& r : refs) {
      const auto& outs = produced[r.layer];
      if (r.tensor < 0 || static_cast<std::size_t>(r.tensor) >= outs.size())
        fail(lname, "input '" + r.layer + "' has no output tensor " + std::to_string(r.tensor));
      ins.push_back(outs[static_cast<std::size_t>(r.tensor)]);
    }
    produced[lname] = add_layer(layer, ins, kwargs);
    return true;
  }
};

}  // namespace

json parse_model_json(std::string_view text, const std::string& where, const std::string& what) {
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw InvalidArgument(where + ": " + what + " is nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels (no model is)");
    return true;
  };
  try {
    return json::parse(text, bounded);
  } catch (const json::exception& e) {
    throw InvalidArgument(where + ": " + what + " is not valid JSON: " + e.what());
  }
}

void rethrow_as_load_error(const std::string& where) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const json::exception& e) {
    throw InvalidArgument(where + ": malformed model file: " + e.what());
  } catch (const std::bad_alloc&) {
    throw BadAlloc(where + ": out of memory while loading the model");
  } catch (const std::length_error& e) {
    throw IoError(where + ": a size in the file is too large (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw IoError(where + ": cannot load the model: " + e.what());
  }
}

Graph parse_keras_topology(const json& model_config, const LoadOptions& options) {
  if (!model_config.is_object() || !model_config.contains("class_name") || !model_config.contains("config"))
    throw InvalidArgument("model topology: expected {\"class_name\", \"config\"}, received " +
                          model_config.dump().substr(0, 200));
  const std::string cls = model_config["class_name"].get<std::string>();
  if (!is_model_class(cls))
    throw InvalidArgument("model topology: top-level class '" + cls + "' is not Sequential, Functional or Model");
  Graph g;
  g.name = layer_name_of(model_config);
  Flattener f(g, options);
  g.outputs = f.add_model(model_config, {});
  if (g.inputs.empty()) throw InvalidArgument("model '" + g.name + "' has no input layer");
  return g;
}

Model build_model(const json& model_config, WeightStore& weights, const LoadOptions& options,
                  const std::string& source) {
  try {
    Graph g = parse_keras_topology(model_config, options);
    finalize_graph(g, weights, source);
    return Model(std::move(g), source);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(source + ": " + e.what());
  } catch (const json::exception& e) {
    throw InvalidArgument(source + ": malformed model topology: " + e.what());
  }
}

}  // namespace stoker::trainer::detail
