// Layer graphs built in code, run on the CPU backend, against direct loop implementations written
// here (TensorFlow's padding rules spelled out), plus import error messages.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

std::vector<float> random_vec(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Weight make_weight(std::vector<int> shape, unsigned seed, float scale = 0.5f) {
  auto data = random_vec(Tensor::element_count(shape), seed, scale);
  return Weight{std::move(shape), std::make_shared<const std::vector<float>>(std::move(data))};
}

LayerNode input_node(std::vector<int> shape) {
  LayerNode n;
  n.name = "input";
  n.kind = LayerKind::Input;
  n.out_shape = std::move(shape);
  return n;
}

Graph chain(std::vector<int> in_shape, LayerNode node) {
  Graph g;
  g.name = "test";
  g.nodes.push_back(input_node(std::move(in_shape)));
  g.inputs = {0};
  node.inputs = {0};
  g.nodes.push_back(std::move(node));
  g.outputs = {1};
  infer_shapes_and_check(g);
  return g;
}

// TensorFlow: out = ceil(in / stride) for 'same', pad_total = max((out-1)*s + (k-1)*d + 1 - in, 0),
// pad_before = pad_total / 2 (the extra pixel goes to the bottom/right).
struct Pad {
  int out, before;
};
Pad tf_pad(int in, int k, int s, int d, bool same) {
  const int eff = (k - 1) * d + 1;
  if (!same) return {(in - eff) / s + 1, 0};
  const int out = (in + s - 1) / s;
  return {out, std::max((out - 1) * s + eff - in, 0) / 2};
}

// Direct loops: conv (groups = 1) or depthwise (mult) in NHWC.
std::vector<float> direct_conv(const std::vector<float>& x, int n, int h, int w, int c, const LayerNode& node,
                               bool depthwise) {
  const auto ph = tf_pad(h, node.kernel_h, node.stride_h, node.dilation_h, node.padding == Padding::Same);
  const auto pw = tf_pad(w, node.kernel_w, node.stride_w, node.dilation_w, node.padding == Padding::Same);
  const int oc = depthwise ? c * node.depth_multiplier : node.filters;
  const float* k = depthwise ? node.weight("depthwise_kernel")->ptr() : node.weight("kernel")->ptr();
  const Weight* b = node.weight("bias");
  std::vector<float> y(static_cast<std::size_t>(n) * ph.out * pw.out * oc, 0.0f);
  for (int b0 = 0; b0 < n; ++b0)
    for (int oy = 0; oy < ph.out; ++oy)
      for (int ox = 0; ox < pw.out; ++ox)
        for (int o = 0; o < oc; ++o) {
          double acc = b ? b->ptr()[o] : 0.0;
          for (int ky = 0; ky < node.kernel_h; ++ky)
            for (int kx = 0; kx < node.kernel_w; ++kx) {
              const int iy = oy * node.stride_h - ph.before + ky * node.dilation_h;
              const int ix = ox * node.stride_w - pw.before + kx * node.dilation_w;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const float* px = &x[((static_cast<std::size_t>(b0) * h + iy) * w + ix) * c];
              if (depthwise) {
                const int ci = o / node.depth_multiplier, m = o % node.depth_multiplier;
                acc += double(px[ci]) * k[((ky * node.kernel_w + kx) * c + ci) * node.depth_multiplier + m];
              } else {
                for (int ci = 0; ci < c; ++ci) acc += double(px[ci]) * k[((ky * node.kernel_w + kx) * c + ci) * oc + o];
              }
            }
          y[((static_cast<std::size_t>(b0) * ph.out + oy) * pw.out + ox) * oc + o] = static_cast<float>(acc);
        }
  return y;
}

struct ConvCase {
  int h, w, c, filters, k, s, d;
  bool same, depthwise;
  int mult;
};

class ConvVsDirect : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvVsDirect, Matches) {
  const auto p = GetParam();
  LayerNode node;
  node.name = "conv";
  node.kind = p.depthwise ? LayerKind::DepthwiseConv2D : LayerKind::Conv2D;
  node.kernel_h = node.kernel_w = p.k;
  node.stride_h = node.stride_w = p.s;
  node.dilation_h = node.dilation_w = p.d;
  node.padding = p.same ? Padding::Same : Padding::Valid;
  node.filters = p.filters;
  node.depth_multiplier = p.mult;
  node.use_bias = true;
  if (p.depthwise) {
    node.weights["depthwise_kernel"] = make_weight({p.k, p.k, p.c, p.mult}, 1);
    node.weights["bias"] = make_weight({p.c * p.mult}, 2);
  } else {
    node.weights["kernel"] = make_weight({p.k, p.k, p.c, p.filters}, 1);
    node.weights["bias"] = make_weight({p.filters}, 2);
  }
  const int n = 3;
  Graph g = chain({p.h, p.w, p.c}, node);
  auto x = random_vec(static_cast<std::size_t>(n) * p.h * p.w * p.c, 3);
  Model m(g);
  Tensor y = m.forward(x.data(), n);
  auto ref = direct_conv(x, n, p.h, p.w, p.c, g.nodes[1], p.depthwise);
  ASSERT_EQ(y.size(), ref.size());
  EXPECT_LE(test::max_rel_error(y.data, ref), 2e-6);
  // Batch 1 (row-parallel path) gives the same values as batch 3.
  Tensor y1 = m.forward(x.data() + x.size() / n, 1);
  EXPECT_LE(
      test::max_rel_error(y1.data, std::vector<float>(ref.begin() + ref.size() / n, ref.begin() + 2 * ref.size() / n)),
      2e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvVsDirect,
    ::testing::Values(ConvCase{8, 6, 3, 5, 3, 2, 1, true, false, 1},     // 'same' stride 2, even: pad 0 top / 1 bottom
                      ConvCase{9, 7, 4, 17, 3, 2, 1, true, false, 1},    // odd: symmetric; 17 filters (partial panel)
                      ConvCase{10, 10, 3, 8, 5, 1, 2, true, false, 1},   // dilated 'same'
                      ConvCase{11, 9, 6, 33, 3, 1, 1, false, false, 1},  // 'valid'
                      ConvCase{7, 5, 40, 37, 1, 1, 1, false, false, 1},  // 1×1 direct GEMM, K=40, N=37
                      ConvCase{6, 6, 70, 20, 1, 2, 1, true, false, 1},   // 1×1 stride 2
                      ConvCase{8, 8, 5, 0, 3, 2, 1, true, true, 1},      // depthwise, asymmetric 'same'
                      ConvCase{7, 9, 3, 0, 3, 2, 1, true, true, 3},      // depthwise multiplier 3
                      ConvCase{9, 9, 4, 0, 5, 1, 1, false, true, 2},     // depthwise 'valid'
                      ConvCase{12, 11, 20, 0, 3, 2, 1, true, true, 1},   // 3×3 fast path: 8-channel blocks + tail
                      ConvCase{9, 10, 16, 0, 3, 1, 2, true, true, 1},    // 3×3 fast path, dilated
                      ConvCase{10, 10, 24, 0, 3, 1, 1, false, true, 1},  // 3×3 fast path, 'valid'
                      ConvCase{13, 7, 8, 0, 3, 2, 1, false, true, 1}),   // 3×3 fast path, stride 2 'valid'
    [](const ::testing::TestParamInfo<ConvCase>& info) {
      const auto& p = info.param;
      return std::string(p.depthwise ? "dw" : "conv") + "_" + std::to_string(p.h) + "x" + std::to_string(p.w) + "x" +
             std::to_string(p.c) + "_k" + std::to_string(p.k) + "s" + std::to_string(p.s) + "d" + std::to_string(p.d) +
             (p.same ? "_same" : "_valid") +
             (p.depthwise ? "_m" + std::to_string(p.mult) : "_f" + std::to_string(p.filters));
    });

TEST(Pooling, MaxAndAverageSameExcludePadding) {
  for (auto kind : {LayerKind::MaxPooling2D, LayerKind::AveragePooling2D}) {
    LayerNode node;
    node.name = "pool";
    node.kind = kind;
    node.kernel_h = node.kernel_w = 3;
    node.stride_h = node.stride_w = 2;
    node.padding = Padding::Same;
    const int h = 6, w = 4, c = 2;
    Graph g = chain({h, w, c}, node);
    ASSERT_EQ(g.nodes[1].out_shape, (std::vector<int>{3, 2, 2}));
    auto x = random_vec(h * w * c, 5);
    Tensor y = Model(g).forward(x.data(), 1);
    // 6 -> 3: pad total 1 (0 top, 1 bottom); 4 -> 2: pad total 1 (0 left, 1 right).
    for (int oy = 0; oy < 3; ++oy)
      for (int ox = 0; ox < 2; ++ox)
        for (int ch = 0; ch < c; ++ch) {
          float mx = -INFINITY, sum = 0;
          int cnt = 0;
          for (int iy = oy * 2; iy < std::min(oy * 2 + 3, h); ++iy)
            for (int ix = ox * 2; ix < std::min(ox * 2 + 3, w); ++ix) {
              const float v = x[static_cast<std::size_t>((iy * w + ix) * c + ch)];
              mx = std::max(mx, v), sum += v, ++cnt;
            }
          const float expect = kind == LayerKind::MaxPooling2D ? mx : sum / static_cast<float>(cnt);
          EXPECT_NEAR(y.data[static_cast<std::size_t>((oy * 2 + ox) * c + ch)], expect, 1e-6f);
        }
  }
}

// input 9x9x4 -> conv 3x3 (6 filters) -> BatchNormalization -> ReLU(max 6)
Graph conv_bn_relu6() {
  Graph g;
  g.nodes.push_back(input_node({9, 9, 4}));
  LayerNode conv;
  conv.name = "conv";
  conv.kind = LayerKind::Conv2D;
  conv.kernel_h = conv.kernel_w = 3;
  conv.filters = 6;
  conv.padding = Padding::Same;
  conv.weights["kernel"] = make_weight({3, 3, 4, 6}, 7);
  conv.inputs = {0};
  LayerNode bn;
  bn.name = "bn";
  bn.kind = LayerKind::BatchNormalization;
  bn.use_bias = true;
  bn.weights["gamma"] = make_weight({6}, 8);
  bn.weights["beta"] = make_weight({6}, 9);
  bn.weights["moving_mean"] = make_weight({6}, 10);
  auto var = random_vec(6, 11);
  for (auto& v : var) v = v * v + 0.1f;
  bn.weights["moving_variance"] = Weight{{6}, std::make_shared<const std::vector<float>>(var)};
  bn.inputs = {1};
  LayerNode relu;
  relu.name = "relu6";
  relu.kind = LayerKind::Activation;
  relu.activation.kind = ActKind::ReLU;
  relu.activation.max_value = 6.0f;
  relu.inputs = {2};
  g.nodes.push_back(conv), g.nodes.push_back(bn), g.nodes.push_back(relu);
  g.inputs = {0};
  g.outputs = {3};
  infer_shapes_and_check(g);
  return g;
}

TEST(Graph, BatchNormFoldingMatchesUnfolded) {
  const Graph g = conv_bn_relu6();
  auto x = random_vec(2 * 9 * 9 * 4, 12);
  CpuBackendOptions plain;
  plain.fold_batch_norm = plain.fuse_activations = false;
  auto a = make_cpu_backend(g)->forward(x.data(), 2);
  auto b = make_cpu_backend(g, plain)->forward(x.data(), 2);
  EXPECT_LE(test::max_rel_error(a[0].data, b[0].data), 1e-6);
}

// The CPU reference with its output damaged the way a broken backend would damage it.
class DamagedBackend final : public Backend {
 public:
  enum class Damage { SwapSamples, OneNaN, ExtraOutput };
  DamagedBackend(const Graph& g, Damage d) : cpu_(make_cpu_backend(g)), damage_(d) {}
  std::string name() const override { return "damaged"; }
  std::vector<Tensor> forward(const float* input, int batch) const override {
    std::vector<Tensor> out = cpu_->forward(input, batch);
    std::vector<float>& v = out[0].data;
    switch (damage_) {
      case Damage::SwapSamples:  // e.g. a batch stride mixed up
        std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        break;
      case Damage::OneNaN:  // an element nobody wrote
        v[v.size() / 3] = std::numeric_limits<float>::quiet_NaN();
        break;
      case Damage::ExtraOutput: out.push_back(out[0]); break;
    }
    return out;
  }

 private:
  std::unique_ptr<Backend> cpu_;
  Damage damage_;
};

TEST(BackendCheck, PassesAnEquivalentBackendAndCatchesDamagedOutputs) {
  const Graph g = conv_bn_relu6();
  CpuBackendOptions plain;  // no folding, no fusion: other code, same function
  plain.fold_batch_norm = plain.fuse_activations = false;
  EXPECT_LE(relative_error_to_cpu(g, *make_cpu_backend(g, plain)), 1e-6);
  EXPECT_LE(relative_error_to_cpu(g, *make_cpu_backend(g, plain), 3, 99), 1e-6);
  EXPECT_GT(relative_error_to_cpu(g, DamagedBackend(g, DamagedBackend::Damage::SwapSamples)), 0.1);
  EXPECT_TRUE(std::isinf(relative_error_to_cpu(g, DamagedBackend(g, DamagedBackend::Damage::OneNaN))));
  EXPECT_TRUE(std::isinf(relative_error_to_cpu(g, DamagedBackend(g, DamagedBackend::Damage::ExtraOutput))));
  EXPECT_THROW(relative_error_to_cpu(g, *make_cpu_backend(g), 0), InvalidArgument);
}

TEST(BackendCheck, RelativeErrorIsStrict) {
  const std::vector<float> ref = {1.0f, -4.0f, 2.0f};
  EXPECT_DOUBLE_EQ(relative_error(std::vector<float>{1.0f, -4.0f, 2.0f}, ref), 0.0);
  EXPECT_DOUBLE_EQ(relative_error(std::vector<float>{1.0f, -3.0f, 2.0f}, ref), 0.25);  // relative to max |ref|
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(relative_error(std::vector<float>{1.0f, nan, 2.0f}, ref)));
  EXPECT_TRUE(std::isinf(relative_error(std::vector<float>{1.0f, -4.0f}, ref)));
}

TEST(Graph, NoFusionIntoAValueWithOtherReaders) {
  // conv -> dropout -> relu, and add(conv, relu): the relu must not be fused into the conv, whose
  // plain output the add also reads (through the dropout alias).
  Graph g;
  g.nodes.push_back(input_node({5, 5, 3}));
  LayerNode conv;
  conv.name = "conv";
  conv.kind = LayerKind::Conv2D;
  conv.kernel_h = conv.kernel_w = 3;
  conv.filters = 4;
  conv.padding = Padding::Same;
  conv.weights["kernel"] = make_weight({3, 3, 3, 4}, 21);
  conv.inputs = {0};
  LayerNode drop;
  drop.name = "drop";
  drop.kind = LayerKind::Dropout;
  drop.inputs = {1};
  LayerNode relu;
  relu.name = "relu";
  relu.kind = LayerKind::Activation;
  relu.activation.kind = ActKind::ReLU;
  relu.inputs = {2};
  LayerNode add;
  add.name = "add";
  add.kind = LayerKind::Add;
  add.inputs = {1, 3};
  for (auto* n : {&conv, &drop, &relu, &add}) g.nodes.push_back(*n);
  g.inputs = {0};
  g.outputs = {4};
  infer_shapes_and_check(g);
  auto x = random_vec(5 * 5 * 3, 22);
  Tensor y = Model(g).forward(x.data(), 1);
  Tensor c = Model(g).cut_at("conv").forward(x.data(), 1);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y.data[i], c.data[i] + std::max(c.data[i], 0.0f)) << i;
}

TEST(Graph, WrongWeightShapeNamesTheLayer) {
  LayerNode node;
  node.name = "my_dense";
  node.kind = LayerKind::Dense;
  node.filters = 4;
  node.use_bias = true;
  node.weights["kernel"] = make_weight({5, 4}, 1);
  node.weights["bias"] = make_weight({4}, 2);
  try {
    chain({6}, node);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("my_dense"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[5, 4]"), std::string::npos) << e.what();
  }
}

// A TF.js model.json + weights.bin written here, to check import errors.
void write_tfjs(const std::filesystem::path& dir, const nlohmann::json& layers, const nlohmann::json& weights,
                std::size_t floats) {
  nlohmann::json m;
  m["modelTopology"] = {{"class_name", "Sequential"}, {"config", {{"name", "seq"}, {"layers", layers}}}};
  nlohmann::json group = nlohmann::json::object();
  group["paths"] = nlohmann::json::array({"weights.bin"});
  group["weights"] = weights;
  m["weightsManifest"] = nlohmann::json::array({group});
  std::ofstream(dir / "model.json") << m.dump();
  std::vector<float> w(floats, 0.5f);
  std::ofstream(dir / "weights.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
}

nlohmann::json wspec(const char* name, std::vector<int> shape) {
  nlohmann::json j = nlohmann::json::object();
  j["name"] = name;
  j["shape"] = shape;
  j["dtype"] = "float32";
  return j;
}

nlohmann::json dense_layer(const char* name, int units, bool with_input) {
  nlohmann::json cfg = {{"name", name}, {"units", units}, {"activation", "relu"}, {"use_bias", true}};
  if (with_input) cfg["batch_input_shape"] = {nullptr, 3};
  return {{"class_name", "Dense"}, {"config", cfg}};
}

TEST(Import, TfjsSequentialWithoutInputLayer) {
  test::TempDir tmp;
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2}), wspec("d1/bias", {2})}), 8);
  Model m = load_model(tmp.path());
  EXPECT_EQ(m.input_shape(), (std::vector<int>{3}));
  std::vector<float> x = {1, 2, 3};
  Tensor y = m.forward(x.data(), 1);
  EXPECT_FLOAT_EQ(y.data[0], 0.5f * 6 + 0.5f);
  EXPECT_NE(m.summary().find("d1"), std::string::npos);
}

TEST(Import, UnsupportedLayerNamesLayerAndClass) {
  test::TempDir tmp;
  nlohmann::json bad = {{"class_name", "Conv3D"}, {"config", {{"name", "vol_conv"}}}};
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true), bad}), nlohmann::json::array(), 0);
  try {
    load_model(tmp.path());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("vol_conv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Conv3D"), std::string::npos) << e.what();
  }
}

TEST(Import, WrongShapedWeightNamesLayerAndShapes) {
  test::TempDir tmp;
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({wspec("d1/kernel", {4, 2}), wspec("d1/bias", {2})}), 10);
  try {
    load_model(tmp.path() / "model.json");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("d1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  }
}

// A Functional model.json: input (4,) -> Dense a, Dense b -> `merge` layer ([a, b]).
void write_functional(const std::filesystem::path& dir, const nlohmann::json& merge) {
  auto layer = [](nlohmann::json l, std::vector<std::string> inputs) {
    nlohmann::json node = nlohmann::json::array();
    for (const auto& i : inputs) node.push_back(nlohmann::json::array({i, 0, 0, nlohmann::json::object()}));
    l["name"] = l["config"]["name"];
    l["inbound_nodes"] = inputs.empty() ? nlohmann::json::array() : nlohmann::json::array({node});
    return l;
  };
  nlohmann::json input = {{"class_name", "InputLayer"},
                          {"config", {{"name", "in"}, {"batch_input_shape", {nullptr, 4}}}}};
  nlohmann::json layers = nlohmann::json::array({layer(input, {}), layer(dense_layer("a", 2, false), {"in"}),
                                                 layer(dense_layer("b", 2, false), {"in"}), layer(merge, {"a", "b"})});
  nlohmann::json cfg = {{"name", "f"}, {"layers", layers}};
  cfg["input_layers"] = nlohmann::json::array({nlohmann::json::array({"in", 0, 0})});
  cfg["output_layers"] = nlohmann::json::array({nlohmann::json::array({merge["config"]["name"], 0, 0})});
  nlohmann::json m;
  m["modelTopology"] = {{"class_name", "Functional"}, {"config", cfg}};
  nlohmann::json group = nlohmann::json::object();
  group["paths"] = nlohmann::json::array({"weights.bin"});
  group["weights"] = nlohmann::json::array(
      {wspec("a/kernel", {4, 2}), wspec("a/bias", {2}), wspec("b/kernel", {4, 2}), wspec("b/bias", {2})});
  m["weightsManifest"] = nlohmann::json::array({group});
  std::ofstream(dir / "model.json") << m.dump();
  std::vector<float> w(20, 0.25f);
  std::ofstream(dir / "weights.bin", std::ios::binary).write(reinterpret_cast<const char*>(w.data()), 80);
}

TEST(Import, InceptionResNetResidualScaling) {
  test::TempDir tmp;
  std::vector<float> x = {1, 2, 3, 4};
  // a = b = relu(0.25 * 10 + 0.25) = 2.75 per unit; the merge gives a + b * scale.
  nlohmann::json custom = {{"class_name", "CustomScaleLayer"}, {"config", {{"name", "block35_1"}, {"scale", 0.17}}}};
  write_functional(tmp.path(), custom);
  Tensor y = load_model(tmp.path()).forward(x.data(), 1);
  EXPECT_FLOAT_EQ(y.data[0], 2.75f + 2.75f * 0.17f);
  // Older Keras: the same residual as a Lambda named block17_N with arguments {scale}.
  nlohmann::json lambda = {
      {"class_name", "Lambda"},
      {"config",
       {{"name", "block17_3"}, {"function", {"4wEAAAAA", nullptr, nullptr}}, {"arguments", {{"scale", 0.1}}}}}};
  write_functional(tmp.path(), lambda);
  y = load_model(tmp.path()).forward(x.data(), 1);
  EXPECT_FLOAT_EQ(y.data[1], 2.75f + 2.75f * 0.1f);
  // Any other Lambda is Python code: rejected with its name.
  lambda["config"]["name"] = "my_lambda";
  write_functional(tmp.path(), lambda);
  try {
    load_model(tmp.path());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("my_lambda"), std::string::npos) << e.what();
  }
}

TEST(Import, MissingWeightAndShortShardAreErrors) {
  test::TempDir tmp;
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2})}), 6);
  EXPECT_THROW(load_model(tmp.path()), InvalidArgument);  // d1/bias missing
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2}), wspec("d1/bias", {2})}), 5);
  EXPECT_THROW(load_model(tmp.path()), IoError);  // shard too short
}

// Found by tests/fuzz/fuzz_keras_topology: sizes of 0 or less reached the shape arithmetic and the
// CPU backend (a division by zero for a stride of 0 or Dense(units=0)), and a product of large
// dimensions overflowed int. infer_shapes_and_check now names the layer and the bad value.
TEST(Graph, ZeroNegativeAndOverflowingSizesAreRejectedByName) {
  auto expect_error = [](std::vector<int> in_shape, LayerNode node, const std::string& what,
                         const std::string& layer = "'bad_layer'") {
    node.name = "bad_layer";
    try {
      chain(std::move(in_shape), node);
      FAIL() << "expected InvalidArgument about " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(layer), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  LayerNode conv;
  conv.kind = LayerKind::Conv2D;
  conv.filters = 2, conv.kernel_h = conv.kernel_w = 1, conv.use_bias = false;
  conv.stride_h = 0;
  expect_error({4, 4, 1}, conv, "strides must be >= 1");
  LayerNode pool;
  pool.kind = LayerKind::MaxPooling2D;
  pool.kernel_h = 0, pool.kernel_w = 2;
  expect_error({4, 4, 1}, pool, "pool_size must be >= 1");
  LayerNode dense;
  dense.kind = LayerKind::Dense;
  dense.filters = 0;
  expect_error({3}, dense, "units must be >= 1");
  LayerNode pad;
  pad.kind = LayerKind::ZeroPadding2D;
  pad.pad_top = -3;
  expect_error({4, 4, 1}, pad, "padding must be >= 0");
  pad.pad_top = std::numeric_limits<int>::max();
  expect_error({4, 4, 1}, pad, "padded height");
  LayerNode flat;
  flat.kind = LayerKind::Flatten;
  expect_error({65536, 65536, 2}, flat, "values per sample", "'input'");  // the input's shape already
  LayerNode act;
  act.kind = LayerKind::Activation;
  expect_error({4, 0, 1}, act, "has a dimension < 1", "'input'");
  LayerNode wide;  // a padded shape over INT_MAX values, from an input that is fine on its own
  wide.kind = LayerKind::Flatten;
  LayerNode up;
  up.kind = LayerKind::ZeroPadding2D;
  up.pad_bottom = 40000;
  Graph g;
  g.nodes.push_back(input_node({30000, 30000, 2}));
  g.inputs = {0};
  up.name = "pad", up.inputs = {0};
  g.nodes.push_back(up);
  wide.name = "flat", wide.inputs = {1};
  g.nodes.push_back(wide);
  g.outputs = {2};
  try {
    infer_shapes_and_check(g);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'pad'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("values per sample"), std::string::npos) << e.what();
  }
}

// Also found by the fuzzer: integers out of int range were wrapped by get<int>() (units
// 4294967298 loaded as a Dense of 2 units), and a truncated input_layers reference was read past
// its end (const operator[] does not check).
TEST(Import, OutOfRangeIntegersAndShortReferencesAreErrors) {
  test::TempDir tmp;
  auto expect_error = [&](const std::string& what) {
    try {
      load_model(tmp.path());
      FAIL() << "expected InvalidArgument about " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto wide = dense_layer("d1", 2, true);
  wide["config"]["units"] = 4294967298ull;
  write_tfjs(tmp.path(), nlohmann::json::array({wide}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2}), wspec("d1/bias", {2})}), 8);
  expect_error("units 4294967298 is out of range");
  auto fractional = dense_layer("d1", 2, true);
  fractional["config"]["units"] = 1e30;
  write_tfjs(tmp.path(), nlohmann::json::array({fractional}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2}), wspec("d1/bias", {2})}), 8);
  expect_error("units must be an integer");
  auto zero_input = dense_layer("d1", 2, true);
  zero_input["config"]["batch_input_shape"] = {nullptr, 0};
  write_tfjs(tmp.path(), nlohmann::json::array({zero_input}),
             nlohmann::json::array({wspec("d1/kernel", {0, 2}), wspec("d1/bias", {2})}), 2);
  expect_error("has a dimension < 1");

  write_functional(tmp.path(), dense_layer("m", 2, false));
  nlohmann::json doc;
  std::ifstream(tmp.path() / "model.json") >> doc;
  doc["modelTopology"]["config"]["input_layers"] = nlohmann::json::array({nlohmann::json::array({"in"})});
  std::ofstream(tmp.path() / "model.json") << doc.dump();
  expect_error("malformed model topology");
}

// Found by tests/fuzz/fuzz_tfjs: a weight shape of [2^31, 2^31] made its byte count wrap to 0, past
// the shard-size check, into a vector of 2^62 floats (std::length_error); shard paths could name
// any file (an absolute path, "..", or /dev/zero, which never ends); a non-string "format" threw
// nlohmann's type_error.
TEST(Import, TfjsBogusWeightShapesAndShardPathsAreErrors) {
  test::TempDir tmp;
  auto expect_error = [&](const std::string& what) {
    try {
      load_model(tmp.path() / "model.json");
      FAIL() << "expected InvalidArgument about " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto huge = wspec("d1/kernel", {});
  huge["shape"] = {2147483648ll, 2147483648ll};
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({huge, wspec("d1/bias", {2})}), 8);
  expect_error("invalid dimension 2147483648");
  auto negative = wspec("d1/kernel", {});
  negative["shape"] = {-1, -1};
  write_tfjs(tmp.path(), nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({negative, wspec("d1/bias", {2})}), 8);
  expect_error("invalid dimension -1");

  const auto inner = tmp.path() / "model";
  std::filesystem::create_directories(inner);
  write_tfjs(inner, nlohmann::json::array({dense_layer("d1", 2, true)}),
             nlohmann::json::array({wspec("d1/kernel", {3, 2}), wspec("d1/bias", {2})}), 8);
  std::filesystem::copy_file(inner / "weights.bin", tmp.path() / "outside.bin");
  nlohmann::json doc;
  std::ifstream(inner / "model.json") >> doc;
  for (const char* path : {"../outside.bin", "/dev/zero"}) {
    doc["weightsManifest"][0]["paths"] = nlohmann::json::array({path});
    std::ofstream(inner / "model.json") << doc.dump();
    try {
      load_model(inner / "model.json");
      FAIL() << "expected InvalidArgument for shard path " << path;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("must be relative to model.json's folder"), std::string::npos) << e.what();
    }
  }
  doc["weightsManifest"][0]["paths"] = nlohmann::json::array({"weights.bin"});
  doc["format"] = 5;
  std::ofstream(inner / "model.json") << doc.dump();
  EXPECT_EQ(load_model(inner / "model.json").output_shape(), (std::vector<int>{2}));
}

}  // namespace
}  // namespace stoker::trainer
