// Layer graph: names, activations, shape and weight checks (the per-layer parts: layers.cpp).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>

#include <stoker/core/error.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

#include "graph_build.hpp"
#include "layers.hpp"

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
  const detail::LayerRule* rule = detail::layer_rule(kind);
  return rule ? rule->name : "?";
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
  else if (name == "elu") a.kind = ActKind::Elu;
  else if (name == "selu") a.kind = ActKind::Selu;
  else if (name == "gelu") a.kind = ActKind::Gelu;
  else if (name == "softplus") a.kind = ActKind::Softplus;
  else if (name == "hard_sigmoid") a.kind = ActKind::HardSigmoid;
  else if (name == "hard_swish" || name == "hard_silu") a.kind = ActKind::HardSwish;
  else
    throw InvalidArgument("layer '" + layer + "': activation '" + name +
                          "' is not supported (linear, relu, relu6, sigmoid, softmax, swish/silu, tanh, elu, selu, "
                          "gelu, softplus, hard_sigmoid, hard_swish/hard_silu)");
  return a;
}

std::string to_string(const ActivationSpec& a) {
  switch (a.kind) {
    case ActKind::Linear: return "linear";
    case ActKind::Sigmoid: return "sigmoid";
    case ActKind::Softmax: return "softmax";
    case ActKind::Swish: return "swish";
    case ActKind::Tanh: return "tanh";
    case ActKind::Elu: return "elu";
    case ActKind::Selu: return "selu";
    case ActKind::Gelu: return "gelu";
    case ActKind::Softplus: return "softplus";
    case ActKind::HardSigmoid: return "hard_sigmoid";
    case ActKind::HardSwish: return "hard_silu";
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
  // A layer name with '/' (DenseNet's "conv1/conv") is keyed by its last part; its full stored
  // name tells it from the other layers sharing that part ("conv2_block1_1/conv").
  const std::string leaf = layer.substr(layer.rfind('/') + 1);
  auto it = weights_.find(leaf + "/" + weight);
  if (it == weights_.end()) return nullptr;
  if (it->second.size() > 1 || leaf != layer) {
    // An .h5 file stores a layer's weights in the group named after it: "<layer>/<layer>/<weight>".
    // Then any name ending in "/<layer>/<weight>".
    const std::string suffix = layer + "/" + weight, in_group = layer + "/" + suffix;
    for (bool exact : {true, false}) {
      RawWeight* match = nullptr;
      int matches = 0;
      for (RawWeight& w : it->second) {
        const std::string stored = w.full_name.substr(0, w.full_name.rfind(':'));
        const bool ends_with = stored.size() > suffix.size() && stored[stored.size() - suffix.size() - 1] == '/' &&
                               stored.compare(stored.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (stored == suffix || stored == in_group || (!exact && ends_with)) match = &w, ++matches;
      }
      if (matches == 1) return match;
      if (!exact && leaf != layer && matches == 0) return nullptr;
    }
  }
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

}  // namespace

std::vector<int> infer_shape(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  for (const auto& s : in) check_shape(n, s, "input");  // inputs from a hand-built graph get the same checks
  const LayerRule* rule = layer_rule(n.kind);
  if (!rule) fail(n, "unknown layer kind");
  std::vector<int> out = rule->infer(n, in);
  check_shape(n, out, "output");
  return out;
}

void finalize_graph(Graph& g, WeightStore& store, const std::string& source) {
  for (auto& n : g.nodes) {
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = infer_shape(n, ins);
    const int cin = ins.empty() || ins[0].empty() ? 0 : ins[0].back();
    // A Conv2D with groups == filters (ConvNeXt's depthwise convolution) imports as a
    // DepthwiseConv2D: its "kernel" [kh, kw, 1, C] has the depthwise kernel's memory layout.
    const bool grouped_depthwise = n.kind == LayerKind::DepthwiseConv2D && n.keras_class == "Conv2D";
    for (const auto& [key, expected] : expected_weights(n, cin)) {
      const std::size_t count = weight_count(n, key, expected);
      const bool as_grouped = grouped_depthwise && key == "depthwise_kernel";
      const std::string stored_key = as_grouped ? "kernel" : key;
      const std::vector<int> stored_shape =
          as_grouped ? std::vector<int>{n.kernel_h, n.kernel_w, 1, n.filters} : expected;
      if (as_grouped && n.filters != cin)
        fail(n, "grouped convolution with groups=" + std::to_string(n.filters) + " on " + std::to_string(cin) +
                    " input channels is not supported (only groups == filters == input channels)");
      RawWeight* w = store.find(n.name, stored_key);
      if (!w) fail(n, "weight '" + stored_key + "' " + shape_to_string(stored_shape) + " is missing from " + source);
      if (w->shape != stored_shape)
        fail(n, "weight '" + w->full_name + "' has shape " + shape_to_string(w->shape) + ", expected " +
                    shape_to_string(stored_shape));
      if (w->data.size() != count)
        fail(n, "weight '" + w->full_name + "' holds " + std::to_string(w->data.size()) + " values, expected " +
                    std::to_string(count));
      n.weights[key] = Weight{expected, std::make_shared<const std::vector<float>>(std::move(w->data))};
    }
  }
}

}  // namespace detail

std::vector<std::pair<std::string, std::vector<int>>> expected_weights(const LayerNode& n, int cin) {
  const detail::LayerRule* rule = detail::layer_rule(n.kind);
  return rule ? rule->weights(n, cin) : detail::WeightShapes{};
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
