// The Keras form of each layer kind (layers.hpp, KerasForm): the classes read as the kind, how
// their config becomes a node's parameters, and how a node is written back as tf_keras' layers.
// The layer table (layers.cpp) holds one form per kind; the reader (keras_topology.cpp) and the
// writer (import/keras_h5_writer.cpp) take them from there.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <stoker/core/error.hpp>

#include "keras_json.hpp"
#include "layers.hpp"

namespace stoker::trainer::detail {

using nlohmann::json;

[[noreturn]] void fail(const std::string& layer, const std::string& what) {
  throw InvalidArgument("layer '" + layer + "': " + what);
}

int to_int(const json& v, const std::string& layer, const std::string& what) {
  if (!v.is_number_integer()) fail(layer, what + " must be an integer, received " + v.dump().substr(0, 100));
  const bool fits = v.is_number_unsigned()
                        ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                        : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                              v.get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) fail(layer, what + " " + v.dump() + " is out of range");
  return static_cast<int>(v.get<std::int64_t>());
}

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

namespace {

// ---- reading configs --------------------------------------------------------------------------------

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

// Conv2D with groups == filters is a depthwise convolution (ConvNeXt); finalize checks C == groups.
void read_conv2d(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  n.filters = int_at(cfg, "filters", k.layer);
  read_convolution(cfg, k.layer, n);
  if ((n.stride_h > 1 || n.stride_w > 1) && (n.dilation_h > 1 || n.dilation_w > 1))
    fail(k.layer, "strides > 1 together with dilation_rate > 1 is not supported by Keras either");
  const int groups = int_or(cfg, "groups", 1, k.layer);
  if (groups > 1 && groups == n.filters) {
    n.kind = LayerKind::DepthwiseConv2D;
    n.depth_multiplier = 1;
  } else if (groups != 1) {
    fail(k.layer, "grouped convolution (groups=" + cfg["groups"].dump() +
                      ") is not supported (only groups == filters == input channels, a depthwise convolution)");
  }
}

void read_depthwise_conv2d(const KerasConfig& k, LayerNode& n) {
  read_convolution(k.config, k.layer, n);
  n.depth_multiplier = int_or(k.config, "depth_multiplier", 1, k.layer);
}

void read_separable_conv2d(const KerasConfig& k, LayerNode& n) {
  n.filters = int_at(k.config, "filters", k.layer);
  read_convolution(k.config, k.layer, n);
  n.depth_multiplier = int_or(k.config, "depth_multiplier", 1, k.layer);
}

// Adapted statistics (weights), or constants in the config (then a per-channel Rescaling).
void read_normalization(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  n.axis = single_axis(cfg, k.layer, "Normalization");
  if (cfg.value("invert", false)) fail(k.layer, "Normalization with invert=True is not supported");
  const bool has_mean = cfg.contains("mean") && !cfg["mean"].is_null();
  const bool has_variance = cfg.contains("variance") && !cfg["variance"].is_null();
  if (has_mean != has_variance) fail(k.layer, "Normalization with only one of mean and variance in its config");
  if (has_mean) normalization_as_rescaling(cfg, k.layer, n);
}

void read_layer_normalization(const KerasConfig& k, LayerNode& n) {
  n.axis = single_axis(k.config, k.layer, "LayerNormalization");
  n.epsilon = float_or(k.config, "epsilon", 1e-3f);
  n.use_bias = k.config.value("center", true);
  n.scale = k.config.value("scale", true);
}

void read_batch_normalization(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  int axis = -1;
  if (cfg.contains("axis")) {
    const json& a = cfg["axis"];
    if (a.is_number_integer()) axis = to_int(a, k.layer, "axis");
    else if (a.is_array() && a.size() == 1) axis = to_int(a[0], k.layer, "axis");
    else fail(k.layer, "BatchNormalization over axis " + a.dump() + " is not supported (only the channel axis)");
  }
  n.axis = axis;
  n.epsilon = float_or(cfg, "epsilon", 1e-3f);
  n.use_bias = cfg.value("center", true);  // beta present
  n.scale = cfg.value("scale", true);      // gamma present
}

// Activation, ReLU, LeakyReLU, ELU and Softmax are all the Activation kind (ActivationSpec).
void read_activation(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  const std::string& cls = k.class_name;
  if (cls == "ReLU") {
    n.activation.kind = ActKind::ReLU;
    n.activation.max_value = float_or(cfg, "max_value", std::numeric_limits<float>::infinity());
    n.activation.negative_slope = float_or(cfg, "negative_slope", 0.0f);
    n.activation.threshold = float_or(cfg, "threshold", 0.0f);
  } else if (cls == "LeakyReLU") {
    n.activation.kind = ActKind::ReLU;
    n.activation.negative_slope =
        cfg.contains("alpha") ? float_or(cfg, "alpha", 0.3f) : float_or(cfg, "negative_slope", 0.3f);
  } else if (cls == "ELU") {
    if (float_or(cfg, "alpha", 1.0f) != 1.0f)
      fail(k.layer, "ELU with alpha " + cfg["alpha"].dump() + " is not supported (only alpha 1)");
    n.activation.kind = ActKind::Elu;
  } else if (cls == "Softmax") {
    if (cfg.contains("axis") && !cfg["axis"].is_null() && int_or(cfg, "axis", -1, k.layer) != -1)
      fail(k.layer, "Softmax over axis " + cfg["axis"].dump() + " is not supported (only -1)");
    n.activation.kind = ActKind::Softmax;
  } else {
    n.activation = activation_of(cfg, k.layer);
  }
}

void read_zero_padding2d(const KerasConfig& k, LayerNode& n) {
  check_channels_last(k.config, k.layer);
  read_sides(k.config, "padding", k.layer, n.pad_top, n.pad_bottom, n.pad_left, n.pad_right);
}

void read_cropping2d(const KerasConfig& k, LayerNode& n) {
  check_channels_last(k.config, k.layer);
  read_sides(k.config, "cropping", k.layer, n.crop_top, n.crop_bottom, n.crop_left, n.crop_right);
}

void read_nothing(const KerasConfig&, LayerNode&) {}

// tf-keras >= 2.13 InceptionResNetV2's CustomScaleLayer (registered as "Custom>..."): inputs[0] +
// inputs[1] * scale. Older Keras wrote the same residual as Lambda(lambda inputs, scale: inputs[0] +
// inputs[1] * scale, arguments={'scale': s}, name='block35_1').
void read_scaled_add(const KerasConfig& k, LayerNode& n) {
  if (k.class_name != "Lambda") {
    n.residual_scale = k.config.at("scale").get<float>();
    return;
  }
  if (!is_inception_resnet_lambda(k.config, k.layer))
    fail(k.layer, "layer class 'Lambda' (arbitrary Python code) is not supported");
  n.residual_scale = k.config.at("arguments").at("scale").get<float>();
}

void read_concatenate(const KerasConfig& k, LayerNode& n) { n.axis = int_or(k.config, "axis", -1, k.layer); }

void read_pooling2d(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  check_channels_last(cfg, k.layer);
  auto w = int_list(cfg, "pool_size", 2, 2, k.layer);
  n.kernel_h = w[0], n.kernel_w = w[1];
  auto s = (cfg.contains("strides") && !cfg["strides"].is_null()) ? int_list(cfg, "strides", 2, 1, k.layer) : w;
  n.stride_h = s[0], n.stride_w = s[1];
  n.padding = parse_padding(cfg, k.layer);
}

void read_global_pooling2d(const KerasConfig& k, LayerNode& n) {
  check_channels_last(k.config, k.layer);
  n.keepdims = k.config.value("keepdims", false);
}

void read_reshape(const KerasConfig& k, LayerNode& n) {
  const json& t = k.config.at("target_shape");
  if (!t.is_array() || t.empty()) fail(k.layer, "target_shape " + t.dump() + " must be a non-empty list");
  for (const auto& d : t) n.target_shape.push_back(to_int(d, k.layer, "target_shape"));
}

void read_flatten(const KerasConfig& k, LayerNode&) { check_channels_last(k.config, k.layer); }

void read_dense(const KerasConfig& k, LayerNode& n) {
  n.filters = int_at(k.config, "units", k.layer);
  n.use_bias = k.config.value("use_bias", true);
  n.activation = activation_of(k.config, k.layer);
}

void read_rescaling(const KerasConfig& k, LayerNode& n) {
  const std::vector<float> scale = numbers_or(k.config, "scale", 1.0f, k.layer);
  const std::vector<float> offset = numbers_or(k.config, "offset", 0.0f, k.layer);
  if (scale.size() == 1 && offset.size() == 1) {
    n.multiplier = scale[0], n.offset = offset[0];
  } else if (scale.size() == 1 || offset.size() == 1 || scale.size() == offset.size()) {
    const std::size_t c = std::max(scale.size(), offset.size());
    n.channel_multipliers = scale.size() == 1 ? std::vector<float>(c, scale[0]) : scale;
    n.channel_offsets = offset.size() == 1 ? std::vector<float>(c, offset[0]) : offset;
  } else {
    fail(k.layer, "Rescaling's scale and offset have different lengths");
  }
}

// Dropout and the layers that are identities at inference like it; SpatialDropout2D drops whole
// channels.
void read_dropout(const KerasConfig& k, LayerNode& n) {
  const json& cfg = k.config;
  n.rate = cfg.contains("rate") && cfg["rate"].is_number() ? cfg["rate"].get<float>() : 0.0f;
  if (k.class_name == "SpatialDropout2D") n.noise_shape = {1, 1, -1};
  if (k.class_name == "Dropout" && cfg.contains("noise_shape") && cfg["noise_shape"].is_array()) {
    const json& ns = cfg["noise_shape"];
    for (std::size_t i = 1; i < ns.size(); ++i)  // [0] is the batch
      n.noise_shape.push_back(ns[i].is_null() ? -1 : to_int(ns[i], k.layer, "noise_shape"));
  }
}

// ---- writing configs --------------------------------------------------------------------------------

const char* padding_name(Padding p) { return p == Padding::Same ? "same" : "valid"; }

// A fused activation Keras can name; a ReLU with a cap, slope or threshold is a separate layer.
bool nameable(const ActivationSpec& a) {
  return a.kind != ActKind::ReLU ||
         (a.max_value == std::numeric_limits<float>::infinity() && a.negative_slope == 0 && a.threshold == 0);
}
std::string activation_name(const ActivationSpec& a) { return a.kind == ActKind::ReLU ? "relu" : to_string(a); }

json relu_config(const ActivationSpec& a) {
  return {{"max_value", a.max_value == std::numeric_limits<float>::infinity() ? json(nullptr) : json(a.max_value)},
          {"negative_slope", a.negative_slope},
          {"threshold", a.threshold}};
}

// The window of a convolution and its fused activation ("linear" when it needs a layer of its own).
void write_convolution(const LayerNode& n, json& c) {
  c["kernel_size"] = {n.kernel_h, n.kernel_w};
  c["strides"] = {n.stride_h, n.stride_w};
  c["padding"] = padding_name(n.padding);
  c["data_format"] = "channels_last";
  c["dilation_rate"] = {n.dilation_h, n.dilation_w};
  c["use_bias"] = n.use_bias;
  c["activation"] = nameable(n.activation) ? activation_name(n.activation) : "linear";
}

void write_input(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json shape = json::array({nullptr});
  for (int d : n.out_shape) shape.push_back(d);
  layers.back().config = {
      {"batch_input_shape", shape}, {"dtype", "float32"}, {"sparse", false}, {"ragged", false}, {"name", n.name}};
}

void write_conv2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["filters"] = n.filters, c["groups"] = 1;
  write_convolution(n, c);
}

void write_depthwise_conv2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["depth_multiplier"] = n.depth_multiplier;
  write_convolution(n, c);
}

void write_separable_conv2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["filters"] = n.filters;
  c["depth_multiplier"] = n.depth_multiplier;
  write_convolution(n, c);
}

void write_normalization(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["axis"] = {n.axis};
  c["invert"] = false;
  c["mean"] = nullptr;
  c["variance"] = nullptr;
}

void write_layer_normalization(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["axis"] = {n.axis};
  c["epsilon"] = n.epsilon;
  c["center"] = n.use_bias;
  c["scale"] = n.scale;
}

void write_dense(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["units"] = n.filters;
  c["use_bias"] = n.use_bias;
  c["activation"] = nameable(n.activation) ? activation_name(n.activation) : "linear";
}

void write_batch_normalization(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["axis"] = n.axis;
  c["momentum"] = 0.99;
  c["epsilon"] = n.epsilon;
  c["center"] = n.use_bias;
  c["scale"] = n.scale;
}

// LeakyReLU as it was read, a ReLU with a cap, slope or threshold as ReLU, any other by name.
void write_activation(const LayerNode& n, std::vector<KerasLayer>& layers) {
  KerasLayer& l = layers.back();
  const ActivationSpec& a = n.activation;
  if (a.kind == ActKind::ReLU && n.keras_class == "LeakyReLU" && a.threshold == 0 &&
      a.max_value == std::numeric_limits<float>::infinity()) {
    l.class_name = "LeakyReLU";
    l.config["alpha"] = a.negative_slope;
  } else if (a.kind == ActKind::ReLU && !nameable(a)) {
    l.class_name = "ReLU";
    l.config.update(relu_config(a));
  } else {
    l.config["activation"] = activation_name(a);
  }
}

void write_zero_padding2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["padding"] = {{n.pad_top, n.pad_bottom}, {n.pad_left, n.pad_right}};
  c["data_format"] = "channels_last";
}

void write_cropping2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["cropping"] = {{n.crop_top, n.crop_bottom}, {n.crop_left, n.crop_right}};
  c["data_format"] = "channels_last";
}

void write_nothing(const LayerNode&, std::vector<KerasLayer>&) {}

// inputs[0] + inputs[1] * scale as Rescaling(scale) + Add: the same two float operations, with
// layers every Keras has (InceptionResNetV2's CustomScaleLayer is not registered there).
void write_scaled_add(const LayerNode& n, std::vector<KerasLayer>& layers) {
  KerasLayer& add = layers.back();
  add.class_name = "Add";
  KerasLayer scale{"Rescaling",
                   {{"name", n.name + "_scale"},
                    {"trainable", true},
                    {"dtype", "float32"},
                    {"scale", n.residual_scale},
                    {"offset", 0.0}},
                   {add.inputs.at(1)},
                   {}};
  add.inputs = {add.inputs.at(0), n.name + "_scale"};
  layers.insert(layers.begin(), std::move(scale));
}

void write_concatenate(const LayerNode& n, std::vector<KerasLayer>& layers) { layers.back().config["axis"] = n.axis; }

void write_pooling2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["pool_size"] = {n.kernel_h, n.kernel_w};
  c["strides"] = {n.stride_h, n.stride_w};
  c["padding"] = padding_name(n.padding);
  c["data_format"] = "channels_last";
}

void write_global_pooling2d(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["data_format"] = "channels_last";
  c["keepdims"] = n.keepdims;
}

void write_reshape(const LayerNode& n, std::vector<KerasLayer>& layers) {
  layers.back().config["target_shape"] = n.target_shape;
}

void write_flatten(const LayerNode&, std::vector<KerasLayer>& layers) {
  layers.back().config["data_format"] = "channels_last";
}

// A shared mask (SpatialDropout2D's, or a Dropout's noise_shape) as Dropout's noise_shape.
void write_dropout(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["rate"] = n.rate;
  if (n.noise_shape.empty()) return;
  json shape = json::array({nullptr});  // the batch
  for (int d : n.noise_shape) shape.push_back(d < 0 ? json(nullptr) : json(d));
  c["noise_shape"] = shape;
}

void write_rescaling(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  if (n.channel_multipliers.empty()) {
    c["scale"] = n.multiplier;
    c["offset"] = n.offset;
  } else {
    c["scale"] = n.channel_multipliers;
    c["offset"] = n.channel_offsets;
  }
}

// Keras Applications' ConvNeXt layer (keras.applications.convnext.LayerScale): x * gamma, gamma
// trainable per channel.
void write_layer_scale(const LayerNode& n, std::vector<KerasLayer>& layers) {
  json& c = layers.back().config;
  c["init_values"] = 1e-6;
  if (const Weight* g = n.weight("gamma")) c["projection_dim"] = static_cast<int>(g->size());
}

}  // namespace

LayerNode read_keras_layer(const std::string& cls, const json& cfg, const std::string& name) {
  LayerNode n;
  n.name = name;
  n.keras_class = cls;
  const LayerRule* rule = keras_rule(cls);
  if (!rule)
    fail(name, "layer class '" + cls + "' is not supported (supported: " + keras_classes_read() + ", TFOpLambda)");
  n.kind = rule->kind;
  rule->keras->read({cls, cfg, name}, n);
  return n;
}

std::vector<KerasLayer> keras_layers(const LayerNode& n, const std::vector<std::string>& inputs) {
  if (!layer_rule(n.kind)) fail(n.name, "has no layer kind");
  const LayerRule& rule = *layer_rule(n.kind);
  const std::string_view classes = rule.keras->classes;
  std::vector<KerasLayer> layers{{std::string(classes.substr(0, classes.find(' '))),
                                  {{"name", n.name}, {"trainable", true}, {"dtype", "float32"}},
                                  inputs,
                                  {}}};
  rule.keras->write(n, layers);
  KerasLayer& holder =
      *std::find_if(layers.begin(), layers.end(), [&](const KerasLayer& l) { return l.config.at("name") == n.name; });
  for (const auto& [name, shape] : rule.weights(n, 1))
    if (const Weight* w = n.weight(name)) holder.weights.emplace_back(name, w);
  if (keras_output_name(n) != n.name) {
    KerasLayer act{"ReLU", {{"name", n.name + "_activation"}, {"trainable", true}, {"dtype", "float32"}}, {n.name}, {}};
    act.config.update(relu_config(n.activation));
    layers.push_back(std::move(act));
  }
  return layers;
}

std::string keras_output_name(const LayerNode& n) {
  const LayerRule* rule = layer_rule(n.kind);
  return rule && rule->keras->fused_activation && !nameable(n.activation) ? n.name + "_activation" : n.name;
}

namespace keras {
const KerasForm input{"InputLayer", nullptr, write_input, false};
const KerasForm conv2d{"Conv2D Convolution2D", read_conv2d, write_conv2d, true};
const KerasForm depthwise_conv2d{"DepthwiseConv2D", read_depthwise_conv2d, write_depthwise_conv2d, true};
const KerasForm batch_normalization{"BatchNormalization", read_batch_normalization, write_batch_normalization, false};
const KerasForm activation{"Activation ReLU LeakyReLU ELU Softmax", read_activation, write_activation, false};
const KerasForm zero_padding2d{"ZeroPadding2D", read_zero_padding2d, write_zero_padding2d, false};
const KerasForm add{"Add", read_nothing, write_nothing, false};
const KerasForm scaled_add{"CustomScaleLayer Custom>CustomScaleLayer Lambda", read_scaled_add, write_scaled_add, false};
const KerasForm concatenate{"Concatenate", read_concatenate, write_concatenate, false};
const KerasForm max_pooling2d{"MaxPooling2D MaxPool2D", read_pooling2d, write_pooling2d, false};
const KerasForm average_pooling2d{"AveragePooling2D AvgPool2D", read_pooling2d, write_pooling2d, false};
const KerasForm global_average_pooling2d{"GlobalAveragePooling2D GlobalAvgPool2D", read_global_pooling2d,
                                         write_global_pooling2d, false};
const KerasForm flatten{"Flatten", read_flatten, write_flatten, false};
const KerasForm dense{"Dense", read_dense, write_dense, true};
const KerasForm dropout{"Dropout SpatialDropout2D GaussianDropout GaussianNoise", read_dropout, write_dropout, false};
const KerasForm rescaling{"Rescaling", read_rescaling, write_rescaling, false};
const KerasForm global_max_pooling2d{"GlobalMaxPooling2D GlobalMaxPool2D", read_global_pooling2d,
                                     write_global_pooling2d, false};
const KerasForm reshape{"Reshape", read_reshape, write_reshape, false};
const KerasForm multiply{"Multiply", read_nothing, write_nothing, false};
const KerasForm separable_conv2d{"SeparableConv2D SeparableConvolution2D", read_separable_conv2d,
                                 write_separable_conv2d, true};
const KerasForm normalization{"Normalization", read_normalization, write_normalization, false};
const KerasForm layer_normalization{"LayerNormalization", read_layer_normalization, write_layer_normalization, false};
const KerasForm layer_scale{"LayerScale", read_nothing, write_layer_scale, false};
const KerasForm cropping2d{"Cropping2D", read_cropping2d, write_cropping2d, false};
}  // namespace keras

}  // namespace stoker::trainer::detail
