// Every op of the lowering in a few small graphs built in code (layer_cases), with the helpers
// that build them. The op tests (ops_test.cpp) run each case on every executor, forward and
// backward; the cuDNN backend's tests use the builders too. Adding an op kind means adding a case
// here.
#pragma once

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

#include "graph/graph_build.hpp"

namespace stoker::trainer::op_cases {

// ---- graphs built in code ------------------------------------------------------------------------

// Random weights of the shapes n's kind needs (cin: its input channels): kernels scaled by
// 1/sqrt(fan-in) and BatchNormalization statistics near the identity keep activations O(1)
// through deep graphs, so relative errors stay meaningful.
inline void randomise_weights(LayerNode& n, int cin, std::mt19937& rng) {
  int fan_in = cin * n.kernel_h * n.kernel_w;
  if (n.kind == LayerKind::DepthwiseConv2D || n.kind == LayerKind::SeparableConv2D) fan_in = n.kernel_h * n.kernel_w;
  for (const auto& [key, shape] : expected_weights(n, cin)) {
    std::vector<float> v(Tensor::element_count(shape));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.5f, 1.5f);
    for (auto& x : v) {
      if (key == "kernel" || key == "depthwise_kernel") x = normal(rng) / std::sqrt(static_cast<float>(fan_in));
      else if (key == "pointwise_kernel") x = normal(rng) / std::sqrt(static_cast<float>(shape[2]));
      else if (key == "moving_variance" || key == "gamma" || key == "variance") x = uni(rng);
      else x = 0.3f * normal(rng);  // bias, beta, moving_mean
    }
    n.weights[key] = Weight{shape, std::make_shared<const std::vector<float>>(std::move(v))};
  }
}

class Builder {
 public:
  explicit Builder(std::vector<int> input_shape, unsigned seed = 1) : rng_(seed) {
    LayerNode n;
    n.name = "input";
    n.kind = LayerKind::Input;
    n.out_shape = std::move(input_shape);
    g_.nodes.push_back(n);
    g_.inputs = {0};
    g_.name = "test";
  }

  // Adds `n` reading `inputs`, with random weights of the shapes its kind needs. Returns its index.
  int add(LayerNode n, std::vector<int> inputs) {
    n.name = n.name.empty() ? "l" + std::to_string(g_.nodes.size()) : n.name;
    n.inputs = std::move(inputs);
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g_.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = detail::infer_shape(n, ins);
    randomise_weights(n, ins.empty() ? 0 : ins[0].back(), rng_);
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  Graph done(std::vector<int> outputs) {
    g_.outputs = std::move(outputs);
    infer_shapes_and_check(g_);
    return g_;
  }
  const std::vector<int>& shape(int node) const { return g_.nodes[static_cast<std::size_t>(node)].out_shape; }

 private:
  Graph g_;
  std::mt19937 rng_;
};

inline LayerNode conv(int filters, int k, int stride, Padding pad, bool bias = true, ActivationSpec act = {},
                      int dilation = 1) {
  LayerNode n;
  n.kind = LayerKind::Conv2D;
  n.keras_class = "Conv2D";
  n.filters = filters;
  n.kernel_h = n.kernel_w = k;
  n.stride_h = n.stride_w = stride;
  n.dilation_h = n.dilation_w = dilation;
  n.padding = pad;
  n.use_bias = bias;
  n.activation = act;
  return n;
}
inline LayerNode depthwise(int k, int stride, Padding pad, int mult = 1, bool bias = false) {
  LayerNode n = conv(0, k, stride, pad, bias);
  n.kind = LayerKind::DepthwiseConv2D;
  n.keras_class = "DepthwiseConv2D";
  n.depth_multiplier = mult;
  return n;
}
inline LayerNode batch_norm(bool scale = true, bool center = true) {
  LayerNode n;
  n.kind = LayerKind::BatchNormalization;
  n.keras_class = "BatchNormalization";
  n.scale = scale;
  n.use_bias = center;
  return n;
}
inline LayerNode activation(ActivationSpec a) {
  LayerNode n;
  n.kind = LayerKind::Activation;
  n.keras_class = "Activation";
  n.activation = a;
  return n;
}
inline ActivationSpec relu(float max = std::numeric_limits<float>::infinity(), float slope = 0.0f,
                           float threshold = 0.0f) {
  ActivationSpec a;
  a.kind = ActKind::ReLU;
  a.max_value = max;
  a.negative_slope = slope;
  a.threshold = threshold;
  return a;
}
inline ActivationSpec act_of(ActKind k) {
  ActivationSpec a;
  a.kind = k;
  return a;
}
inline LayerNode zero_pad(int top, int bottom, int left, int right) {
  LayerNode n;
  n.kind = LayerKind::ZeroPadding2D;
  n.keras_class = "ZeroPadding2D";
  n.pad_top = top, n.pad_bottom = bottom, n.pad_left = left, n.pad_right = right;
  return n;
}
inline LayerNode cropping(int top, int bottom, int left, int right) {
  LayerNode n;
  n.kind = LayerKind::Cropping2D;
  n.keras_class = "Cropping2D";
  n.crop_top = top, n.crop_bottom = bottom, n.crop_left = left, n.crop_right = right;
  return n;
}
inline LayerNode pool(LayerKind kind, int k, int stride, Padding pad) {
  LayerNode n;
  n.kind = kind;
  n.keras_class = kind == LayerKind::MaxPooling2D ? "MaxPooling2D" : "AveragePooling2D";
  n.kernel_h = n.kernel_w = k;
  n.stride_h = n.stride_w = stride;
  n.padding = pad;
  return n;
}
inline LayerNode simple(LayerKind kind) {
  LayerNode n;
  n.kind = kind;
  n.keras_class = to_string(kind);
  return n;
}
inline LayerNode dense(int units, ActivationSpec act = {}, bool bias = true) {
  LayerNode n;
  n.kind = LayerKind::Dense;
  n.keras_class = "Dense";
  n.filters = units;
  n.use_bias = bias;
  n.activation = act;
  return n;
}

constexpr const char* kDiscontinuous = " (discontinuous: float32 only)";
inline bool discontinuous(const std::string& name) { return name.find(kDiscontinuous) != std::string::npos; }

// Every layer kind in a few small graphs (name, graph).
inline std::vector<std::pair<std::string, Graph>> layer_cases() {
  std::vector<std::pair<std::string, Graph>> cases;
  {  // conv + bias + plain ReLU (cuDNN's fused call on the GPU), then a linear conv
    Builder b({9, 11, 5});
    int x = b.add(conv(8, 3, 1, Padding::Same, true, relu()), {0});
    x = b.add(conv(6, 1, 1, Padding::Valid, false), {x});
    cases.push_back({"conv_relu", b.done({x})});
  }
  {  // TensorFlow 'same' with stride 2 on even sizes: the odd pixel of padding at the bottom/right
    Builder b({16, 12, 4});
    int x = b.add(conv(8, 3, 2, Padding::Same, true), {0});
    cases.push_back({"conv_same_stride2_even", b.done({x})});
  }
  {  // odd sizes: symmetric
    Builder b({15, 13, 4});
    int x = b.add(conv(8, 3, 2, Padding::Same, false, relu(6.0f)), {0});
    cases.push_back({"conv_same_stride2_odd", b.done({x})});
  }
  {  // even kernel, 'same' stride 1 (asymmetric), dilation, 'valid'
    Builder b({14, 14, 3});
    int x = b.add(conv(5, 2, 1, Padding::Same, true), {0});
    x = b.add(conv(7, 3, 1, Padding::Valid, true, {}, 2), {x});
    x = b.add(conv(4, 5, 1, Padding::Same, true, act_of(ActKind::Tanh)), {x});
    cases.push_back({"conv_even_kernel_dilation", b.done({x})});
  }
  {  // depthwise (multiplier 2, stride 2 'same') + BN folded + ReLU6; MobileNet's explicit pad
    Builder b({16, 16, 6});
    int x = b.add(depthwise(3, 2, Padding::Same, 2, true), {0});
    x = b.add(batch_norm(), {x});
    x = b.add(activation(relu(6.0f)), {x});
    x = b.add(zero_pad(0, 1, 0, 1), {x});
    x = b.add(depthwise(3, 2, Padding::Valid), {x});
    x = b.add(batch_norm(false, true), {x});
    cases.push_back({"depthwise_bn_pad", b.done({x})});
  }
  {  // symmetric ZeroPadding2D folded into a conv; one before a max pool kept as its own op
    Builder b({10, 10, 3});
    int x = b.add(zero_pad(2, 2, 1, 1), {0});
    x = b.add(conv(4, 5, 1, Padding::Valid, true), {x});
    x = b.add(zero_pad(1, 2, 3, 0), {x});
    x = b.add(pool(LayerKind::MaxPooling2D, 2, 2, Padding::Valid), {x});
    cases.push_back({"zero_padding", b.done({x})});
  }
  {  // NASNet's reduction-cell shift: pad bottom/right, crop top/left; an uneven crop after a conv
    Builder b({10, 10, 3});
    int x = b.add(zero_pad(0, 1, 0, 1), {0});
    x = b.add(cropping(1, 0, 1, 0), {x});
    x = b.add(conv(4, 3, 1, Padding::Valid, true), {x});
    x = b.add(cropping(2, 1, 0, 3), {x});
    x = b.add(pool(LayerKind::AveragePooling2D, 2, 1, Padding::Valid), {x});
    cases.push_back({"cropping", b.done({x})});
  }
  {  // BN unfolded (after the input), activations on their own
    Builder b({6, 7, 5});
    int x = b.add(batch_norm(), {0});
    int l = b.add(activation(relu(std::numeric_limits<float>::infinity(), 0.1f)), {x});  // LeakyReLU
    int r = b.add(activation(relu(4.0f, 0.2f)), {x});
    int s = b.add(activation(act_of(ActKind::Sigmoid)), {x});
    int w = b.add(activation(act_of(ActKind::Swish)), {x});
    int t = b.add(activation(act_of(ActKind::Tanh)), {x});
    LayerNode cat = simple(LayerKind::Concatenate);
    int c = b.add(cat, {l, r, s, w, t});
    cases.push_back({"activations_concat", b.done({c})});
  }
  {  // the newer activations, on their own and fused into a conv and a dense
    Builder b({6, 7, 5});
    std::vector<int> parts;
    for (ActKind k :
         {ActKind::Elu, ActKind::Selu, ActKind::Gelu, ActKind::Softplus, ActKind::HardSigmoid, ActKind::HardSwish}) {
      parts.push_back(b.add(activation(act_of(k)), {0}));
      parts.push_back(b.add(conv(3, 3, 1, Padding::Same, true, act_of(k)), {0}));
    }
    LayerNode cat = simple(LayerKind::Concatenate);
    cases.push_back({"newer_activations", b.done({b.add(cat, parts)})});
  }
  {  // squeeze-and-excitation: GAP, Reshape [1, 1, C], 1×1 convs, Multiply broadcast both ways and
     // of equal shapes (+ a fused activation), GlobalMaxPooling2D with and without keepdims
    Builder b({7, 6, 8});
    int x = b.add(conv(8, 3, 1, Padding::Same, true, act_of(ActKind::Swish)), {0});
    int se = b.add(simple(LayerKind::GlobalAveragePooling2D), {x});
    LayerNode rs = simple(LayerKind::Reshape);
    rs.target_shape = {1, 1, -1};
    se = b.add(rs, {se});
    se = b.add(conv(3, 1, 1, Padding::Valid, true, act_of(ActKind::Swish)), {se});
    se = b.add(conv(8, 1, 1, Padding::Valid, true, act_of(ActKind::Sigmoid)), {se});
    int m1 = b.add(simple(LayerKind::Multiply), {x, se});
    int m2 = b.add(simple(LayerKind::Multiply), {se, 0});
    int m3 = b.add(simple(LayerKind::Multiply), {m1, m2});
    m3 = b.add(activation(act_of(ActKind::HardSwish)), {m3});
    int g1 = b.add(simple(LayerKind::GlobalMaxPooling2D), {m3});
    LayerNode gk = simple(LayerKind::GlobalMaxPooling2D);
    gk.keepdims = true;
    int g2 = b.add(gk, {m2});
    cases.push_back({"squeeze_excitation", b.done({g1, g2, m3})});
  }
  {  // Normalization (folded into nothing: after the input), SeparableConv2D (stride 2 'same' with
     // depth multiplier 2, dilated 'valid', BN folded into its 1×1 conv, a fused activation),
     // LayerNormalization with and without gamma/beta, on images and after a Dense
    Builder b({10, 9, 4});
    int x = b.add(simple(LayerKind::Normalization), {0});
    LayerNode sep = conv(6, 3, 2, Padding::Same, true, act_of(ActKind::Gelu));
    sep.kind = LayerKind::SeparableConv2D;
    sep.keras_class = "SeparableConv2D";
    sep.depth_multiplier = 2;
    int s1 = b.add(sep, {x});
    LayerNode sep2 = conv(5, 3, 1, Padding::Valid, false, {}, 2);
    sep2.kind = LayerKind::SeparableConv2D;
    sep2.keras_class = "SeparableConv2D";
    int s2 = b.add(sep2, {x});
    s2 = b.add(batch_norm(), {s2});
    s2 = b.add(activation(relu()), {s2});
    LayerNode ln = simple(LayerKind::LayerNormalization);
    ln.use_bias = true;
    int l1 = b.add(ln, {s1});
    ln.use_bias = false;
    int l2 = b.add(ln, {s2});
    ln.scale = false;
    ln.use_bias = true;
    int d = b.add(dense(7), {b.add(simple(LayerKind::GlobalAveragePooling2D), {l2})});
    int l3 = b.add(ln, {d});
    cases.push_back({"separable_normalization", b.done({l1, l3})});
  }
  {  // ReLU with a threshold jumps from `threshold` to 0 there: half-precision rounding of a value
     // next to it moves it across, so only float32 is compared (kDiscontinuous)
    Builder b({6, 7, 5});
    int r = b.add(activation(relu(4.0f, 0.2f, 0.5f)), {0});
    cases.push_back({"relu_threshold" + std::string(kDiscontinuous), b.done({r})});
  }
  {  // residual Add fused into a conv epilogue, Add of three, ScaledAdd, Add + ReLU
    Builder b({8, 8, 6});
    int a = b.add(conv(6, 3, 1, Padding::Same, true), {0});
    int bn = b.add(batch_norm(), {a});
    int add = b.add(simple(LayerKind::Add), {bn, 0});
    int c2 = b.add(conv(6, 1, 1, Padding::Same, true), {add});
    int add3 = b.add(simple(LayerKind::Add), {c2, add, 0});
    LayerNode sc = simple(LayerKind::ScaledAdd);
    sc.residual_scale = 0.17f;
    int s = b.add(sc, {add3, c2});
    int r = b.add(activation(relu()), {s});
    cases.push_back({"add_residual", b.done({r})});
  }
  {  // ResNet's block: the shortcut conv comes first in the graph, Add([shortcut, x]) + ReLU. The
     // residual add may only be fused into the conv that runs last (x's), reading the shortcut.
    Builder b({8, 8, 6});
    int s = b.add(conv(8, 1, 1, Padding::Valid, true), {0});
    int x = b.add(conv(8, 3, 1, Padding::Same, true, relu()), {0});
    x = b.add(conv(8, 3, 1, Padding::Same, false), {x});
    int sb = b.add(batch_norm(), {s});
    int xb = b.add(batch_norm(), {x});
    int add = b.add(simple(LayerKind::Add), {sb, xb});
    int r = b.add(activation(relu()), {add});
    cases.push_back({"add_shortcut_first", b.done({r})});
  }
  {  // pooling: max 3×3/2 'same' (asymmetric), average 2×2/2 'same' on odd sizes, 3×3/1 'same'
    Builder b({13, 10, 4});
    int m = b.add(pool(LayerKind::MaxPooling2D, 3, 2, Padding::Same), {0});
    int a = b.add(pool(LayerKind::AveragePooling2D, 2, 2, Padding::Same), {m});
    int a2 = b.add(pool(LayerKind::AveragePooling2D, 3, 1, Padding::Same), {a});
    cases.push_back({"pooling", b.done({a2})});
  }
  {  // GAP (keepdims too), Flatten, Dense + softmax, Dense on rank 3, Dropout; two outputs
    Builder b({7, 5, 6});
    int d3 = b.add(dense(9, relu()), {0});
    int dr = b.add(simple(LayerKind::Dropout), {d3});
    LayerNode g = simple(LayerKind::GlobalAveragePooling2D);
    int gap = b.add(g, {dr});
    int hd = b.add(dense(5, act_of(ActKind::Softmax)), {gap});
    LayerNode gk = simple(LayerKind::GlobalAveragePooling2D);
    gk.keepdims = true;
    int gapk = b.add(gk, {dr});
    int fl = b.add(simple(LayerKind::Flatten), {gapk});
    int d2 = b.add(dense(3, act_of(ActKind::Sigmoid)), {fl});
    cases.push_back({"gap_dense_softmax", b.done({hd, d2})});
  }
  return cases;
}

inline std::vector<float> random_input(const Graph& g, int batch, unsigned seed) {
  std::vector<float> x(Tensor::element_count(g.nodes[static_cast<std::size_t>(g.inputs[0])].out_shape) * batch);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  return x;
}

}  // namespace stoker::trainer::op_cases
