// The Keras form of every layer kind (trainer/src/layers.hpp, KerasForm): each class the reader
// takes belongs to one kind, and every kind written by save_keras_h5 and read again by load_model
// is the same node (parameters, weights, inputs); a kind Keras says in two layers computes the same.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "graph/layers.hpp"
#include "test_support.hpp"

namespace stoker::trainer {
namespace {

std::vector<std::string> classes_of(const detail::KerasForm& form) {
  std::vector<std::string> classes;
  std::string_view rest = form.classes;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find(' '), rest.size());
    classes.emplace_back(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return classes;
}

// Every LayerKind, by walking the table until it ends.
std::vector<const detail::LayerRule*> all_rules() {
  std::vector<const detail::LayerRule*> rules;
  for (int k = 0; const detail::LayerRule* r = detail::layer_rule(static_cast<LayerKind>(k)); ++k) rules.push_back(r);
  return rules;
}

LayerNode node(const std::string& name, LayerKind kind, const std::string& keras_class) {
  LayerNode n;
  n.name = name;
  n.kind = kind;
  n.keras_class = keras_class;
  return n;
}

ActivationSpec act(ActKind kind, float max_value = std::numeric_limits<float>::infinity(), float slope = 0.0f) {
  ActivationSpec a;
  a.kind = kind;
  a.max_value = max_value;
  a.negative_slope = slope;
  return a;
}

// One node under test: fed by the input (a [4, 4, 3] image unless `input` says otherwise), and
// when `second` is set also by that node (itself fed by the input).
struct Case {
  std::string what;
  LayerNode node;
  std::vector<int> input = {4, 4, 3};
  std::optional<LayerNode> second;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string what, LayerNode n, std::function<void(LayerNode&)> set = {}) {
    if (set) set(n);
    c.push_back({std::move(what), std::move(n)});
  };
  LayerNode relu = node("relu_in", LayerKind::Activation, "Activation");
  relu.activation = act(ActKind::ReLU);
  LayerNode pooled = node("pooled", LayerKind::GlobalAveragePooling2D, "GlobalAveragePooling2D");
  pooled.keepdims = true;

  add("Conv2D", node("conv", LayerKind::Conv2D, "Conv2D"), [](LayerNode& n) {
    n.filters = 5, n.kernel_h = 3, n.kernel_w = 2, n.stride_h = 2, n.padding = Padding::Same, n.use_bias = true;
    n.activation = act(ActKind::Swish);
  });
  add("Conv2D dilated", node("conv_d", LayerKind::Conv2D, "Conv2D"), [](LayerNode& n) {
    n.filters = 2, n.kernel_h = n.kernel_w = 2, n.dilation_h = n.dilation_w = 2, n.activation = act(ActKind::ReLU);
  });
  add("DepthwiseConv2D", node("dw", LayerKind::DepthwiseConv2D, "DepthwiseConv2D"), [](LayerNode& n) {
    n.kernel_h = n.kernel_w = 3, n.depth_multiplier = 2, n.padding = Padding::Same, n.use_bias = true;
  });
  add("BatchNormalization", node("bn", LayerKind::BatchNormalization, "BatchNormalization"),
      [](LayerNode& n) { n.epsilon = 1e-5f, n.use_bias = true, n.scale = false; });
  add("ReLU capped", node("relu6", LayerKind::Activation, "ReLU"),
      [](LayerNode& n) { n.activation = act(ActKind::ReLU, 6.0f, 0.1f), n.activation.threshold = 0.5f; });
  add("LeakyReLU", node("leaky", LayerKind::Activation, "LeakyReLU"),
      [](LayerNode& n) { n.activation = act(ActKind::ReLU, std::numeric_limits<float>::infinity(), 0.2f); });
  for (ActKind k : {ActKind::ReLU, ActKind::Sigmoid, ActKind::Softmax, ActKind::Tanh, ActKind::Elu, ActKind::Gelu,
                    ActKind::HardSigmoid})
    add("Activation " + to_string(act(k)), node("act_" + to_string(act(k)), LayerKind::Activation, "Activation"),
        [k](LayerNode& n) { n.activation = act(k); });
  add("ZeroPadding2D", node("pad", LayerKind::ZeroPadding2D, "ZeroPadding2D"),
      [](LayerNode& n) { n.pad_top = 1, n.pad_bottom = 2, n.pad_left = 0, n.pad_right = 3; });
  c.push_back({"Add", node("add", LayerKind::Add, "Add"), {4, 4, 3}, relu});
  c.push_back({"Concatenate", node("cat", LayerKind::Concatenate, "Concatenate"), {4, 4, 3}, relu});
  add("MaxPooling2D", node("maxpool", LayerKind::MaxPooling2D, "MaxPooling2D"),
      [](LayerNode& n) { n.kernel_h = n.kernel_w = 3, n.stride_h = n.stride_w = 2, n.padding = Padding::Same; });
  add("AveragePooling2D", node("avgpool", LayerKind::AveragePooling2D, "AveragePooling2D"),
      [](LayerNode& n) { n.kernel_h = n.kernel_w = 2, n.stride_h = 1, n.stride_w = 2; });
  add("GlobalAveragePooling2D", node("gap", LayerKind::GlobalAveragePooling2D, "GlobalAveragePooling2D"),
      [](LayerNode& n) { n.keepdims = true; });
  add("GlobalMaxPooling2D", node("gmp", LayerKind::GlobalMaxPooling2D, "GlobalMaxPooling2D"));
  add("Flatten", node("flat", LayerKind::Flatten, "Flatten"));
  c.push_back({"Dense", node("dense", LayerKind::Dense, "Dense"), {6}});
  c.back().node.filters = 4, c.back().node.activation = act(ActKind::Softmax);
  c.push_back({"Dense with bias", node("dense_b", LayerKind::Dense, "Dense"), {2, 2, 3}});
  c.back().node.filters = 2, c.back().node.use_bias = true;
  add("Dropout", node("drop", LayerKind::Dropout, "Dropout"), [](LayerNode& n) { n.rate = 0.25f; });
  // SpatialDropout2D's mask (one draw per channel) is written as Dropout's noise_shape.
  add("Dropout with a shared mask", node("drop_spatial", LayerKind::Dropout, "Dropout"), [](LayerNode& n) {
    n.rate = 0.5f, n.noise_shape = {1, 1, -1};
  });
  add("Rescaling", node("rescale", LayerKind::Rescaling, "Rescaling"),
      [](LayerNode& n) { n.multiplier = 1.0f / 255.0f, n.offset = -1.0f; });
  add("Rescaling per channel", node("rescale_c", LayerKind::Rescaling, "Rescaling"), [](LayerNode& n) {
    n.channel_multipliers = {0.5f, 2.0f, 0.25f}, n.channel_offsets = {-1.0f, 0.0f, 3.5f};
  });
  add("Reshape", node("reshape", LayerKind::Reshape, "Reshape"), [](LayerNode& n) { n.target_shape = {-1, 3}; });
  c.push_back({"Multiply", node("mul", LayerKind::Multiply, "Multiply"), {4, 4, 3}, pooled});
  add("SeparableConv2D", node("sep", LayerKind::SeparableConv2D, "SeparableConv2D"), [](LayerNode& n) {
    n.filters = 4, n.kernel_h = n.kernel_w = 3, n.depth_multiplier = 2, n.use_bias = true;
    n.activation = act(ActKind::ReLU);
  });
  add("Normalization", node("norm", LayerKind::Normalization, "Normalization"));
  add("LayerNormalization", node("ln", LayerKind::LayerNormalization, "LayerNormalization"),
      [](LayerNode& n) { n.epsilon = 1e-6f, n.use_bias = true, n.scale = true; });
  add("LayerScale", node("ls", LayerKind::LayerScale, "LayerScale"));
  add("Cropping2D", node("crop", LayerKind::Cropping2D, "Cropping2D"),
      [](LayerNode& n) { n.crop_top = 1, n.crop_bottom = 0, n.crop_left = 2, n.crop_right = 1; });
  return c;
}

// The case as a graph: input, the second input's node when there is one, the node under test
// (with random weights of the shapes its kind holds).
Graph graph_of(const Case& c, unsigned seed) {
  Graph g;
  g.name = "round_trip";
  LayerNode in = node("input", LayerKind::Input, "InputLayer");
  in.out_shape = c.input;
  g.nodes.push_back(in);
  g.inputs = {0};
  LayerNode n = c.node;
  n.inputs = {0};
  if (c.second) {
    LayerNode s = *c.second;
    s.inputs = {0};
    g.nodes.push_back(s);
    n.inputs.push_back(1);
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.1f, 2.0f);  // positive: variances, and never a neutral value
  for (const auto& [name, shape] : expected_weights(n, c.input.back())) {
    std::vector<float> values(Tensor::element_count(shape));
    for (float& v : values) v = d(rng);
    n.weights[name] = Weight{shape, std::make_shared<const std::vector<float>>(std::move(values))};
  }
  g.nodes.push_back(std::move(n));
  g.outputs = {static_cast<int>(g.nodes.size()) - 1};
  infer_shapes_and_check(g);
  return g;
}

void expect_same_node(const LayerNode& a, const LayerNode& b) {
  SCOPED_TRACE("layer " + a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.keras_class, b.keras_class);
  EXPECT_EQ(a.kind, b.kind) << to_string(a.kind) << " read back as " << to_string(b.kind);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.out_shape, b.out_shape);
  EXPECT_EQ(a.filters, b.filters);
  EXPECT_EQ(std::vector<int>({a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.dilation_h, a.dilation_w}),
            std::vector<int>({b.kernel_h, b.kernel_w, b.stride_h, b.stride_w, b.dilation_h, b.dilation_w}));
  EXPECT_EQ(a.padding, b.padding);
  EXPECT_EQ(std::vector<int>({a.pad_top, a.pad_bottom, a.pad_left, a.pad_right}),
            std::vector<int>({b.pad_top, b.pad_bottom, b.pad_left, b.pad_right}));
  EXPECT_EQ(std::vector<int>({a.crop_top, a.crop_bottom, a.crop_left, a.crop_right}),
            std::vector<int>({b.crop_top, b.crop_bottom, b.crop_left, b.crop_right}));
  EXPECT_EQ(a.depth_multiplier, b.depth_multiplier);
  EXPECT_EQ(a.use_bias, b.use_bias);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.keepdims, b.keepdims);
  EXPECT_EQ(a.target_shape, b.target_shape);
  EXPECT_EQ(a.epsilon, b.epsilon);
  EXPECT_EQ(a.axis, b.axis);
  EXPECT_EQ(a.residual_scale, b.residual_scale);
  EXPECT_EQ(a.rate, b.rate);
  EXPECT_EQ(a.noise_shape, b.noise_shape);
  EXPECT_EQ(a.multiplier, b.multiplier);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.channel_multipliers, b.channel_multipliers);
  EXPECT_EQ(a.channel_offsets, b.channel_offsets);
  EXPECT_EQ(a.activation.kind, b.activation.kind);
  EXPECT_EQ(a.activation.max_value, b.activation.max_value);
  EXPECT_EQ(a.activation.negative_slope, b.activation.negative_slope);
  EXPECT_EQ(a.activation.threshold, b.activation.threshold);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, w] : a.weights) {
    const Weight* r = b.weight(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(w.shape, r->shape) << name;
    EXPECT_EQ(*w.data, *r->data) << name;
  }
}

TEST(KerasForms, EveryClassTheReaderTakesBelongsToOneKind) {
  std::set<std::string> seen;
  for (const detail::LayerRule* rule : all_rules()) {
    ASSERT_NE(rule->keras, nullptr) << rule->name;
    const auto classes = classes_of(*rule->keras);
    ASSERT_FALSE(classes.empty()) << rule->name;
    for (const std::string& cls : classes) {
      EXPECT_TRUE(seen.insert(cls).second) << cls << " is read by two kinds";
      if (!rule->keras->read) continue;
      ASSERT_NE(detail::keras_rule(cls), nullptr) << cls;
      EXPECT_EQ(detail::keras_rule(cls)->kind, rule->kind) << cls;
      EXPECT_NE(detail::keras_classes_read().find(cls), std::string::npos) << cls;
    }
  }
  EXPECT_EQ(detail::keras_rule("Conv3D"), nullptr);
  EXPECT_EQ(detail::keras_rule("InputLayer"), nullptr) << "the importer reads inputs itself";
  EXPECT_GE(seen.size(), 24u);
}

TEST(KerasForms, EveryKindIsWrittenAndReadBackIdentically) {
  std::set<LayerKind> covered = {LayerKind::Input};
  unsigned seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    const Graph g = graph_of(c, seed++);
    test::TempDir dir;
    save_keras_h5(g, dir / "model.h5");
    const Model read = load_model(dir / "model.h5");
    const Graph& r = read.graph();
    ASSERT_EQ(r.nodes.size(), g.nodes.size());
    for (std::size_t i = 0; i < g.nodes.size(); ++i) expect_same_node(g.nodes[i], r.nodes[i]);
    EXPECT_EQ(r.inputs, g.inputs);
    EXPECT_EQ(r.outputs, g.outputs);
    covered.insert(c.node.kind);
  }
  // ScaledAdd, which Keras says as Rescaling + Add, has its own test below.
  covered.insert(LayerKind::ScaledAdd);
  for (const detail::LayerRule* rule : all_rules())
    EXPECT_TRUE(covered.count(rule->kind)) << rule->name << " has no round-trip case: add one to cases()";
}

// InceptionResNetV2's scaled residual is written as Rescaling(scale) + Add, layers every Keras
// has: read back as those two nodes, computing the same values.
TEST(KerasForms, ScaledAddIsWrittenAsRescalingAndAdd) {
  LayerNode relu = node("relu_in", LayerKind::Activation, "Activation");
  relu.activation = act(ActKind::ReLU);
  LayerNode scaled = node("block35_1", LayerKind::ScaledAdd, "CustomScaleLayer");
  scaled.residual_scale = 0.17f;
  const Graph g = graph_of({"ScaledAdd", scaled, {4, 4, 3}, relu}, 7);
  test::TempDir dir;
  save_keras_h5(g, dir / "model.h5");
  const Model read = load_model(dir / "model.h5");
  const Graph& r = read.graph();
  ASSERT_EQ(r.nodes.size(), 4u);
  EXPECT_EQ(r.nodes[2].name, "block35_1_scale");
  EXPECT_EQ(r.nodes[2].kind, LayerKind::Rescaling);
  EXPECT_EQ(r.nodes[2].multiplier, 0.17f);
  EXPECT_EQ(r.nodes[2].offset, 0.0f);
  EXPECT_EQ(r.nodes[2].inputs, std::vector<int>{1});
  EXPECT_EQ(r.nodes[3].name, "block35_1");
  EXPECT_EQ(r.nodes[3].kind, LayerKind::Add);
  EXPECT_EQ(r.nodes[3].inputs, (std::vector<int>{0, 2}));

  std::vector<float> x(4 * 4 * 3 * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
  const Tensor want = Model(g).forward(x.data(), 2);
  const Tensor got = read.forward(x.data(), 2);
  EXPECT_EQ(want.shape, got.shape);
  EXPECT_EQ(want.data, got.data);
}

// A fused activation Keras cannot name (a capped ReLU) is written as a ReLU layer after the
// convolution, and read back as the convolution and that ReLU.
TEST(KerasForms, AFusedCappedReluIsWrittenAsALayerOfItsOwn) {
  LayerNode conv = node("conv", LayerKind::Conv2D, "Conv2D");
  conv.filters = 2, conv.use_bias = true, conv.activation = act(ActKind::ReLU, 6.0f);
  const Graph g = graph_of({"capped", conv}, 3);
  test::TempDir dir;
  save_keras_h5(g, dir / "model.h5");
  const Model read = load_model(dir / "model.h5");
  const Graph& r = read.graph();
  ASSERT_EQ(r.nodes.size(), 3u);
  EXPECT_EQ(r.nodes[1].activation.kind, ActKind::Linear);
  EXPECT_EQ(r.nodes[2].name, "conv_activation");
  EXPECT_EQ(r.nodes[2].keras_class, "ReLU");
  EXPECT_EQ(r.nodes[2].activation.max_value, 6.0f);
  EXPECT_EQ(r.outputs, std::vector<int>{2});
}

}  // namespace
}  // namespace stoker::trainer
