// Layer graph: names, activations, shape inference, weight checks.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>

#include <stoker/core/error.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

#include "import.hpp"

namespace stoker::trainer {

std::string shape_to_string(const std::vector<int>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
  }
  return s + "]";
}

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::Input: return "Input";
    case LayerKind::Conv2D: return "Conv2D";
    case LayerKind::DepthwiseConv2D: return "DepthwiseConv2D";
    case LayerKind::BatchNormalization: return "BatchNormalization";
    case LayerKind::Activation: return "Activation";
    case LayerKind::ZeroPadding2D: return "ZeroPadding2D";
    case LayerKind::Add: return "Add";
    case LayerKind::ScaledAdd: return "ScaledAdd";
    case LayerKind::Concatenate: return "Concatenate";
    case LayerKind::MaxPooling2D: return "MaxPooling2D";
    case LayerKind::AveragePooling2D: return "AveragePooling2D";
    case LayerKind::GlobalAveragePooling2D: return "GlobalAveragePooling2D";
    case LayerKind::Flatten: return "Flatten";
    case LayerKind::Dense: return "Dense";
    case LayerKind::Dropout: return "Dropout";
  }
  return "?";
}

ActivationSpec parse_activation(const std::string& name, const std::string& layer) {
  ActivationSpec a;
  if (name == "linear" || name.empty()) a.kind = ActKind::Linear;
  else if (name == "relu") a.kind = ActKind::ReLU;
  else if (name == "relu6") a.kind = ActKind::ReLU, a.max_value = 6.0f;
  else if (name == "sigmoid") a.kind = ActKind::Sigmoid;
  else if (name == "softmax") a.kind = ActKind::Softmax;
  else if (name == "swish" || name == "silu") a.kind = ActKind::Swish;
  else if (name == "tanh") a.kind = ActKind::Tanh;
  else
    throw InvalidArgument("layer '" + layer + "': activation '" + name +
                          "' is not supported (linear, relu, relu6, sigmoid, softmax, swish/silu, tanh)");
  return a;
}

std::string to_string(const ActivationSpec& a) {
  switch (a.kind) {
    case ActKind::Linear: return "linear";
    case ActKind::Sigmoid: return "sigmoid";
    case ActKind::Softmax: return "softmax";
    case ActKind::Swish: return "swish";
    case ActKind::Tanh: return "tanh";
    case ActKind::ReLU: {
      std::ostringstream s;
      s << "relu";
      if (a.max_value != std::numeric_limits<float>::infinity()) s << " max " << a.max_value;
      if (a.negative_slope != 0.0f) s << " slope " << a.negative_slope;
      if (a.threshold != 0.0f) s << " threshold " << a.threshold;
      return s.str();
    }
  }
  return "?";
}

std::size_t LayerNode::parameter_count() const {
  std::size_t n = 0;
  for (const auto& [k, w] : weights) n += w.size();
  return n;
}

const Weight* LayerNode::weight(const std::string& key) const {
  auto it = weights.find(key);
  return it == weights.end() ? nullptr : &it->second;
}

int Graph::find(const std::string& layer_name) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == layer_name) return static_cast<int>(i);
  auto it = model_outputs.find(layer_name);
  return it == model_outputs.end() ? -1 : it->second;
}

std::size_t Graph::parameter_count() const {
  std::size_t n = 0;
  for (const auto& node : nodes) n += node.parameter_count();
  return n;
}

namespace detail {

std::string weight_key(const std::string& full_name) {
  std::string s = full_name;
  auto colon = s.rfind(':');
  if (colon != std::string::npos && colon > s.rfind('/')) s = s.substr(0, colon);
  auto last = s.rfind('/');
  if (last == std::string::npos) return s;
  auto prev = s.rfind('/', last - 1);
  return prev == std::string::npos || last == 0 ? s : s.substr(prev + 1);
}

void WeightStore::add(RawWeight weight) {
  const std::string key = weight_key(weight.full_name);
  weights_[key].push_back(std::move(weight));
}

RawWeight* WeightStore::find(const std::string& layer, const std::string& weight) {
  auto it = weights_.find(layer + "/" + weight);
  if (it == weights_.end()) return nullptr;
  if (it->second.size() > 1)
    throw InvalidArgument("layer '" + layer + "': weight '" + weight + "' is stored " +
                          std::to_string(it->second.size()) + " times (" + it->second[0].full_name + ", " +
                          it->second[1].full_name + "); cannot tell which belongs to the layer");
  return &it->second[0];
}

PadInfo tf_padding(int in, int kernel, int stride, int dilation, Padding padding) {
  // 64-bit intermediates: a large kernel × dilation or output × stride must not overflow. Callers
  // pass kernel, stride, dilation >= 1 (infer_shape rejects anything else).
  const std::int64_t eff = (static_cast<std::int64_t>(kernel) - 1) * dilation + 1;
  const std::int64_t s = std::max(stride, 1);
  PadInfo p;
  if (padding == Padding::Valid) {
    p.out = in >= eff ? static_cast<int>((in - eff) / s + 1) : 0;
  } else {
    p.out = static_cast<int>((static_cast<std::int64_t>(in) + s - 1) / s);
    const std::int64_t total = std::max<std::int64_t>((p.out - 1) * s + eff - in, 0);
    p.pad_before = static_cast<int>(std::min<std::int64_t>(total / 2, std::numeric_limits<int>::max()));
    p.pad_after = static_cast<int>(std::min<std::int64_t>(total - total / 2, std::numeric_limits<int>::max()));
  }
  return p;
}

[[noreturn]] void fail(const LayerNode& n, const std::string& what) {
  throw InvalidArgument("layer '" + n.name + "' (" + (n.keras_class.empty() ? to_string(n.kind) : n.keras_class) +
                        "): " + what);
}
namespace {

void need_rank(const LayerNode& n, const std::vector<int>& in, std::size_t rank) {
  if (in.size() != rank)
    fail(n, "expects an input of rank " + std::to_string(rank + 1) + " (with batch), received " +
                shape_to_string(in) + " per sample");
}

// Per-sample tensors are indexed with int: every dimension >= 1 and their product <= INT_MAX.
constexpr std::int64_t kMaxElements = std::numeric_limits<int>::max();

void need_at_least(const LayerNode& n, const char* what, std::int64_t value, std::int64_t minimum) {
  if (value < minimum)
    fail(n, std::string(what) + " must be >= " + std::to_string(minimum) + ", received " + std::to_string(value));
}

void check_shape(const LayerNode& n, const std::vector<int>& shape, const char* what) {
  std::int64_t count = 1;
  for (int d : shape) {
    if (d < 1) fail(n, std::string(what) + " shape " + shape_to_string(shape) + " has a dimension < 1");
    count *= d;
    if (count > kMaxElements)
      fail(n, std::string(what) + " shape " + shape_to_string(shape) + " holds more than " +
                  std::to_string(kMaxElements) + " values per sample");
  }
}

// Values in a weight of this shape; fails when the product would overflow (a bogus config).
std::size_t weight_count(const LayerNode& n, const std::string& key, const std::vector<int>& shape) {
  std::size_t count = 1;
  for (int d : shape) {
    if (d < 0 || (d > 0 && count > (std::size_t{1} << 40) / static_cast<std::size_t>(d)))
      fail(n, "weight '" + key + "' " + shape_to_string(shape) + " is too large");
    count *= static_cast<std::size_t>(d);
  }
  return count;
}

int checked_int(const LayerNode& n, std::int64_t v, const std::string& what) {
  if (v < 1 || v > kMaxElements) fail(n, what + " " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

int channel_axis(const LayerNode& n, int axis, std::size_t rank) {
  // Keras axes count the batch dimension; the last axis is -1 or rank.
  if (axis == -1 || axis == static_cast<int>(rank)) return static_cast<int>(rank) - 1;
  fail(n, "axis " + std::to_string(axis) + " is not supported (only the last axis, -1)");
}
}  // namespace

namespace {
std::vector<int> infer_shape_unchecked(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  auto one = [&]() -> const std::vector<int>& {
    if (in.size() != 1) fail(n, "expects 1 input, received " + std::to_string(in.size()));
    if (in[0].empty()) fail(n, "received an input without dimensions");
    return in[0];
  };
  switch (n.kind) {
    case LayerKind::Input:
      if (n.out_shape.empty()) fail(n, "the input has no shape");
      return n.out_shape;
    case LayerKind::Conv2D:
    case LayerKind::DepthwiseConv2D:
    case LayerKind::MaxPooling2D:
    case LayerKind::AveragePooling2D: {
      const auto& s = one();
      need_rank(n, s, 3);
      const bool conv = n.kind == LayerKind::Conv2D || n.kind == LayerKind::DepthwiseConv2D;
      const int dh = conv ? n.dilation_h : 1;
      const int dw = conv ? n.dilation_w : 1;
      need_at_least(n, conv ? "kernel_size" : "pool_size", std::min(n.kernel_h, n.kernel_w), 1);
      need_at_least(n, "strides", std::min(n.stride_h, n.stride_w), 1);
      need_at_least(n, "dilation_rate", std::min(dh, dw), 1);
      if (n.kind == LayerKind::Conv2D) need_at_least(n, "filters", n.filters, 1);
      if (n.kind == LayerKind::DepthwiseConv2D) need_at_least(n, "depth_multiplier", n.depth_multiplier, 1);
      if ((static_cast<std::int64_t>(n.kernel_h) - 1) * dh + 1 > kMaxElements ||
          (static_cast<std::int64_t>(n.kernel_w) - 1) * dw + 1 > kMaxElements)
        fail(n, "kernel " + std::to_string(n.kernel_h) + "x" + std::to_string(n.kernel_w) + " with dilation " +
                    std::to_string(dh) + "x" + std::to_string(dw) + " is too large");
      auto ph = tf_padding(s[0], n.kernel_h, n.stride_h, dh, n.padding);
      auto pw = tf_padding(s[1], n.kernel_w, n.stride_w, dw, n.padding);
      if (ph.out <= 0 || pw.out <= 0)
        fail(n, "window " + std::to_string(n.kernel_h) + "x" + std::to_string(n.kernel_w) + " does not fit input " +
                    shape_to_string(s));
      int c = s[2];
      if (n.kind == LayerKind::Conv2D) c = n.filters;
      if (n.kind == LayerKind::DepthwiseConv2D)
        c = checked_int(n, static_cast<std::int64_t>(s[2]) * n.depth_multiplier, "output channels");
      return {ph.out, pw.out, c};
    }
    case LayerKind::BatchNormalization: {
      const auto& s = one();
      channel_axis(n, n.axis, s.size());
      return s;
    }
    case LayerKind::Activation:
    case LayerKind::Dropout: return one();
    case LayerKind::ZeroPadding2D: {
      const auto& s = one();
      need_rank(n, s, 3);
      need_at_least(n, "padding", std::min({n.pad_top, n.pad_bottom, n.pad_left, n.pad_right}), 0);
      return {checked_int(n, static_cast<std::int64_t>(s[0]) + n.pad_top + n.pad_bottom, "padded height"),
              checked_int(n, static_cast<std::int64_t>(s[1]) + n.pad_left + n.pad_right, "padded width"), s[2]};
    }
    case LayerKind::ScaledAdd:
      if (in.size() != 2) fail(n, "expects 2 inputs, received " + std::to_string(in.size()));
      [[fallthrough]];
    case LayerKind::Add: {
      if (in.size() < 2) fail(n, "expects at least 2 inputs, received " + std::to_string(in.size()));
      for (const auto& s : in)
        if (s != in[0]) fail(n, "input shapes differ: " + shape_to_string(in[0]) + " and " + shape_to_string(s));
      return in[0];
    }
    case LayerKind::Concatenate: {
      if (in.empty()) fail(n, "expects inputs");
      if (in[0].empty()) fail(n, "received an input without dimensions");
      channel_axis(n, n.axis, in[0].size());
      auto out = in[0];
      std::int64_t channels = 0;
      for (const auto& s : in) {
        if (s.size() != out.size() || !std::equal(s.begin(), s.end() - 1, out.begin()))
          fail(n, "inputs " + shape_to_string(in[0]) + " and " + shape_to_string(s) + " differ outside the last axis");
        channels += s.back();
        if (channels > kMaxElements) fail(n, "the concatenated axis is too large");
      }
      out.back() = static_cast<int>(channels);
      return out;
    }
    case LayerKind::GlobalAveragePooling2D: {
      const auto& s = one();
      need_rank(n, s, 3);
      if (n.keepdims) return {1, 1, s[2]};
      return {s[2]};
    }
    case LayerKind::Flatten: {
      const auto& s = one();
      std::int64_t count = 1;
      for (int d : s) count *= d;  // the input passed check_shape: no overflow, fits int
      return {static_cast<int>(count)};
    }
    case LayerKind::Dense: {
      need_at_least(n, "units", n.filters, 1);
      auto s = one();
      s.back() = n.filters;
      return s;
    }
  }
  fail(n, "unknown layer kind");
}
}  // namespace

std::vector<int> infer_shape(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  for (const auto& s : in) check_shape(n, s, "input");  // inputs from a hand-built graph get the same checks
  std::vector<int> out = infer_shape_unchecked(n, in);
  check_shape(n, out, "output");
  return out;
}

void finalize_graph(Graph& g, WeightStore& store, const std::string& source) {
  for (auto& n : g.nodes) {
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = infer_shape(n, ins);
    const int cin = ins.empty() || ins[0].empty() ? 0 : ins[0].back();
    for (const auto& [key, expected] : expected_weights(n, cin)) {
      const std::size_t count = weight_count(n, key, expected);
      RawWeight* w = store.find(n.name, key);
      if (!w) fail(n, "weight '" + key + "' " + shape_to_string(expected) + " is missing from " + source);
      if (w->shape != expected)
        fail(n, "weight '" + w->full_name + "' has shape " + shape_to_string(w->shape) + ", expected " +
                    shape_to_string(expected));
      if (w->data.size() != count)
        fail(n, "weight '" + w->full_name + "' holds " + std::to_string(w->data.size()) + " values, expected " +
                    std::to_string(count));
      n.weights[key] = Weight{expected, std::make_shared<const std::vector<float>>(std::move(w->data))};
    }
  }
}

}  // namespace detail

std::vector<std::pair<std::string, std::vector<int>>> expected_weights(const LayerNode& n, int cin) {
  switch (n.kind) {
    case LayerKind::Conv2D:
      if (n.use_bias) return {{"kernel", {n.kernel_h, n.kernel_w, cin, n.filters}}, {"bias", {n.filters}}};
      return {{"kernel", {n.kernel_h, n.kernel_w, cin, n.filters}}};
    case LayerKind::DepthwiseConv2D:
      if (n.use_bias)
        return {{"depthwise_kernel", {n.kernel_h, n.kernel_w, cin, n.depth_multiplier}},
                {"bias", {cin * n.depth_multiplier}}};
      return {{"depthwise_kernel", {n.kernel_h, n.kernel_w, cin, n.depth_multiplier}}};
    case LayerKind::BatchNormalization: {
      std::vector<std::pair<std::string, std::vector<int>>> w;
      if (n.scale) w.push_back({"gamma", {cin}});
      if (n.use_bias) w.push_back({"beta", {cin}});
      w.push_back({"moving_mean", {cin}});
      w.push_back({"moving_variance", {cin}});
      return w;
    }
    case LayerKind::Dense:
      if (n.use_bias) return {{"kernel", {cin, n.filters}}, {"bias", {n.filters}}};
      return {{"kernel", {cin, n.filters}}};
    default: return {};
  }
}

void infer_shapes_and_check(Graph& g) {
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    auto& n = g.nodes[id];
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) {
      if (i < 0 || static_cast<std::size_t>(i) >= id)
        detail::fail(n, "input index " + std::to_string(i) + " does not refer to an earlier node");
      ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    }
    n.out_shape = detail::infer_shape(n, ins);
    const int cin = ins.empty() || ins[0].empty() ? 0 : ins[0].back();
    for (const auto& [key, expected] : expected_weights(n, cin)) {
      const Weight* w = n.weight(key);
      if (!w || !w->data) detail::fail(n, "weight '" + key + "' " + shape_to_string(expected) + " is missing");
      if (w->shape != expected || w->size() != detail::weight_count(n, key, expected))
        detail::fail(n, "weight '" + key + "' has shape " + shape_to_string(w->shape) + ", expected " +
                            shape_to_string(expected));
    }
  }
}

}  // namespace stoker::trainer
