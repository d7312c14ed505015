// TrainableTop and Optimizer: the trainable top computes what the backbone computes, its
// gradients are TensorFlow's (committed tf.GradientTape vectors), one fine-tuning step is Keras'
// (Adam at 1e-5), and the optimizers follow Keras' update rules.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include <stoker/core/cuda.hpp>
#include <stoker/core/error.hpp>
#include <stoker/trainer/fine_tune.hpp>
#include <stoker/trainer/head.hpp>
#include <stoker/trainer/model.hpp>

#include "fine_tune/fine_tune_twin.hpp"
#include "fine_tune_support.hpp"
#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

using test::max_rel_error;
using test::vectors_dir;

std::filesystem::path mobilenet_or_empty() {
  auto d = test::shared_data_dir();
  return d ? *d / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5" : std::filesystem::path();
}
#define REQUIRE_MOBILENET(path)           \
  const auto path = mobilenet_or_empty(); \
  if (path.empty()) GTEST_SKIP() << "shared data (../shared/data) not present; skipped"

TEST(FineTune, TopComputesWhatTheBackboneComputes) {
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  TrainableTop top(backbone.graph(), "block_13_expand");
  EXPECT_EQ(top.boundary(), "block_12_add");
  EXPECT_FALSE(top.boundary_is_input());
  const Model below = backbone.cut_at(top.boundary());
  EXPECT_EQ(below.output_shape(), top.input_shape());
  const int n = 2;
  const std::vector<float> images = noise(static_cast<std::size_t>(n) * 224 * 224 * 3, 3);
  const Tensor want = backbone.forward(images.data(), n);
  const Tensor x = below.forward(images.data(), n);
  const Tensor inference = top.forward(x.data.data(), n);
  EXPECT_LT(max_rel_error(inference.data, want.data), 1e-5);
  const float* trained = top.forward_train(x.data.data(), n);
  EXPECT_LT(max_rel_error(std::vector<float>(trained, trained + want.size()), want.data), 1e-5)
      << "the unfused training forward differs from the folded inference one";
  EXPECT_GT(top.trainable_parameters(), 100000u);
  EXPECT_GT(top.activation_bytes(32), top.activation_bytes(1));
}

std::filesystem::path gradient_vectors() { return vectors_dir() / "gradients"; }

// A gradient entry of the vectors against ours: max |got - want| / max |want| over the stored
// values (all of them, or the sampled indices of a big array), and the sums of squares of the
// whole arrays within 2e-4 of each other.
double entry_error(const test::VectorFile& v, const nlohmann::json& entry, const std::vector<float>& got,
                   const std::string& what) {
  const std::size_t full = Tensor::element_count(entry.at("shape").get<std::vector<int>>());
  EXPECT_EQ(got.size(), full) << what;
  if (got.size() != full) return INFINITY;
  std::vector<float> want, mine;
  const std::size_t offset = entry.at("offset").get<std::size_t>();
  if (entry.contains("indices")) {
    const auto indices = entry.at("indices").get<std::vector<std::size_t>>();
    for (std::size_t k = 0; k < indices.size(); ++k) {
      want.push_back(v.data[offset + k]);
      mine.push_back(got[indices[k]]);
    }
  } else {
    want.assign(v.data.begin() + static_cast<std::ptrdiff_t>(offset),
                v.data.begin() + static_cast<std::ptrdiff_t>(offset + full));
    mine = got;
  }
  if (entry.contains("sum_of_squares")) {
    double sum = 0;
    for (float x : got) sum += double(x) * x;
    const double ref = entry.at("sum_of_squares").get<double>();
    EXPECT_NEAR(sum, ref, 2e-4 * ref + 1e-12) << what << ": sum of squares";
  }
  return max_rel_error(mine, want);
}

// Every trainable weight's gradient of L = sum(top(x) * upstream) against tf.GradientTape's.
void check_gradients(const test::VectorFile& v, TrainableTop& top, const std::string& name) {
  const Tensor x = v.tensor(v.meta.at("input"));
  const Tensor upstream = v.tensor(v.meta.at("upstream"));
  const Tensor output = v.tensor(v.meta.at("output"));
  const float* got = top.forward_train(x.data.data(), x.batch());
  EXPECT_LT(max_rel_error(std::vector<float>(got, got + output.size()), output.data), 1e-5) << name;
  top.backward(upstream.data.data());
  std::size_t checked = 0;
  for (const auto& [key, entry] : v.meta.at("gradients").items()) {
    const std::size_t slash = key.rfind('/');
    const std::string layer = key.substr(0, slash), weight = key.substr(slash + 1);
    const double error = entry_error(v, entry, top.gradient(layer, weight), name + " " + key);
    EXPECT_LT(error, 1e-4) << name << " " << key;
    ++checked;
  }
  EXPECT_EQ(checked, top.trainable_weights().size()) << name << ": every trainable weight has a reference";
}

TEST(FineTune, GradientsOfEveryLayerTypeAreTensorFlows) {
  for (const char* name : {"grad_conv", "grad_bn_act", "grad_pool_dense", "grad_se"}) {
    const test::VectorFile v(gradient_vectors() / (std::string(name) + ".json"));
    const Model model = load_model(gradient_vectors() / (std::string(name) + ".h5"));
    ASSERT_EQ(model.graph().nodes[0].kind, LayerKind::Input);
    TrainableTop top(model.graph(), model.graph().nodes[1].name);  // everything trains
    ASSERT_TRUE(top.boundary_is_input());
    check_gradients(v, top, name);
  }
}

TEST(FineTune, MobileNetTopGradientsAreTensorFlows) {
  REQUIRE_MOBILENET(file);
  const test::VectorFile v(gradient_vectors() / "mobilenet_top.json");
  const Model backbone = load_model(file).cut_at(v.meta.at("feature_layer").get<std::string>());
  TrainableTop top(backbone.graph(), v.meta.at("unfrozen_from").get<std::string>());
  EXPECT_EQ(top.boundary(), v.meta.at("boundary_layer").get<std::string>());
  check_gradients(v, top, "mobilenet_top");
}

// One step of Keras' fine-tuning recipe: Adam(1e-5) over the top from block_13_expand and the
// Dense(1, sigmoid) head, binary cross-entropy, one train_on_batch.
TEST(FineTune, OneAdamStepIsKeras) {
  REQUIRE_MOBILENET(file);
  const test::VectorFile v(gradient_vectors() / "adam_step.json");
  const Model backbone = load_model(file).cut_at(v.meta.at("feature_layer").get<std::string>());
  OptimizerConfig adam;
  adam.learning_rate = 1e-5f;
  TrainableTop top(backbone.graph(), v.meta.at("unfrozen_from").get<std::string>(), adam);
  Head head = Head::sigmoid(top.features());
  head.kernel() = v.tensor(v.meta.at("head_kernel_before")).data;
  head.bias() = v.tensor(v.meta.at("head_bias_before")).data;
  TopAndHead model(top, head, adam);

  const Tensor x = v.tensor(v.meta.at("input"));
  const std::vector<float> label_values = v.tensor(v.meta.at("labels")).data;
  std::vector<int> labels(label_values.begin(), label_values.end());
  const Graph before = top.graph();
  const StepResult r = model.train_step(x.data.data(), labels.data(), x.batch());
  EXPECT_NEAR(r.loss, v.tensor(v.meta.at("loss")).data[0], 1e-5);

  // Every updated weight within 1e-6 of Keras' (the step is 1e-5: a wrong sign is off by 2e-5).
  const Graph after = top.graph();
  auto values = [](const Graph& graph, const std::string& layer, const std::string& weight) {
    return *graph.nodes[static_cast<std::size_t>(graph.find(layer))].weight(weight)->data;
  };
  std::size_t checked = 0;
  for (const auto& [key, entry] : v.meta.at("deltas").items()) {
    const std::size_t slash = key.rfind('/');
    const std::string layer = key.substr(0, slash), weight = key.substr(slash + 1);
    std::vector<float> delta;
    if (layer == "head") {
      const std::vector<float>& now = weight == "kernel" ? head.kernel() : head.bias();
      const std::vector<float> then =
          v.tensor(v.meta.at(weight == "kernel" ? "head_kernel_before" : "head_bias_before")).data;
      for (std::size_t i = 0; i < now.size(); ++i) delta.push_back(now[i] - then[i]);
    } else {
      const std::vector<float> now = values(after, layer, weight), then = values(before, layer, weight);
      for (std::size_t i = 0; i < now.size(); ++i) delta.push_back(now[i] - then[i]);
    }
    const std::size_t offset = entry.at("offset").get<std::size_t>();
    const std::vector<std::size_t> indices =
        entry.contains("indices") ? entry.at("indices").get<std::vector<std::size_t>>() : std::vector<std::size_t>{};
    const std::size_t count = indices.empty() ? delta.size() : indices.size();
    double worst = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const float mine = delta[indices.empty() ? k : indices[k]];
      worst = std::max(worst, std::abs(double(mine) - v.data[offset + k]));
    }
    EXPECT_LT(worst, 1e-6) << key;
    ++checked;
  }
  EXPECT_EQ(checked, top.trainable_weights().size() + 2);
}

TEST(FineTune, RefusesLayersItCannotSplitAt) {
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  auto message = [&](const std::string& layer) {
    try {
      TrainableTop top(backbone.graph(), layer);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("no_such_layer").find("no layer 'no_such_layer'"), std::string::npos);
  // Inside a residual block the block's input and the branch both cross the boundary.
  const std::string inside = message("block_14_project");
  EXPECT_NE(inside.find("2 values"), std::string::npos) << inside;
  EXPECT_NE(message(backbone.graph().nodes[0].name).find("input layer"), std::string::npos);
}

TEST(FineTune, GraphHoldsTheTrainedWeights) {
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::Sgd;
  sgd.learning_rate = 0.05f;
  TrainableTop top(backbone.graph(), "block_16_expand", sgd);
  const Model below = backbone.cut_at(top.boundary());
  const int n = 2;
  const std::vector<float> images = noise(static_cast<std::size_t>(n) * 224 * 224 * 3, 5);
  const Tensor x = below.forward(images.data(), n);
  const Tensor before = top.forward(x.data.data(), n);
  top.forward_train(x.data.data(), n);
  const std::vector<float> upstream = noise(before.size(), 7);
  top.backward(upstream.data());
  const std::vector<float> kernel_before =
      *backbone.graph()
           .nodes[static_cast<std::size_t>(backbone.graph().find("block_16_project"))]
           .weight("kernel")
           ->data;
  const std::vector<float> g = top.gradient("block_16_project", "kernel");
  top.step();
  // SGD without momentum: w - lr g, exactly.
  const Graph trained = top.graph();
  const std::vector<float>& kernel_after =
      *trained.nodes[static_cast<std::size_t>(trained.find("block_16_project"))].weight("kernel")->data;
  ASSERT_EQ(kernel_after.size(), kernel_before.size());
  for (std::size_t i = 0; i < kernel_after.size(); i += 97)
    ASSERT_FLOAT_EQ(kernel_after[i], kernel_before[i] - 0.05f * g[i]) << i;
  // The merged graph computes what the top computes now, and both moved.
  const Tensor after = top.forward(x.data.data(), n);
  EXPECT_GT(max_rel_error(after.data, before.data), 1e-4);
  const Tensor merged = Model(trained).forward(images.data(), n);
  EXPECT_LT(max_rel_error(merged.data, after.data), 1e-5);
  // The backbone given is untouched.
  EXPECT_LT(max_rel_error(backbone.forward(images.data(), n).data, before.data), 1e-6);
  EXPECT_THROW(top.gradient("block_16_project_BN", "moving_mean"), InvalidArgument);
  // The activations' buffers are allocated once: a step changes the weights, not the buffers.
  const float* first = top.forward_train(x.data.data(), n);
  top.step();
  EXPECT_EQ(top.forward_train(x.data.data(), n), first);
}

TEST(FineTune, OptimizersFollowKerasRules) {
  const std::vector<float> g1 = {0.5f, -2.0f, 1e-3f}, g2 = {-0.25f, 1.0f, 3.0f};
  // Adam: two steps against the formula in double.
  {
    OptimizerConfig c;
    c.learning_rate = 0.01f;
    Optimizer adam(c);
    std::vector<float> w = {1.0f, 2.0f, 3.0f};
    const int slot = adam.add(w.size());
    std::vector<double> ref(w.begin(), w.end()), m(3, 0), v(3, 0);
    for (int t = 1; t <= 2; ++t) {
      const std::vector<float>& g = t == 1 ? g1 : g2;
      adam.begin_step();
      adam.update(slot, w.data(), g.data());
      const double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      for (int i = 0; i < 3; ++i) {
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.999 * v[i] + 0.001 * double(g[i]) * g[i];
        ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + 1e-7);
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], ref[i], 1e-6) << i;
  }
  // SGD with momentum, plain and Nesterov (tf_keras' SGD).
  for (bool nesterov : {false, true}) {
    OptimizerConfig c;
    c.kind = OptimizerKind::Sgd;
    c.learning_rate = 0.1f;
    c.momentum = 0.9f;
    c.nesterov = nesterov;
    Optimizer sgd(c);
    std::vector<float> w = {1.0f, 2.0f, 3.0f};
    const int slot = sgd.add(w.size());
    std::vector<double> ref(w.begin(), w.end()), u(3, 0);
    for (const auto* g : {&g1, &g2}) {
      sgd.begin_step();
      sgd.update(slot, w.data(), g->data());
      for (int i = 0; i < 3; ++i) {
        u[i] = 0.9 * u[i] - 0.1 * (*g)[i];
        ref[i] += nesterov ? 0.9 * u[i] - 0.1 * (*g)[i] : u[i];
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], ref[i], 1e-6) << "nesterov " << nesterov << " " << i;
  }
  EXPECT_THROW(parse_optimizer("rmsprop"), InvalidArgument);
  OptimizerConfig bad;
  bad.kind = OptimizerKind::Sgd;
  bad.momentum = 1.5f;
  EXPECT_THROW(Optimizer{bad}, InvalidArgument);
}

// The head's gradient with respect to its features, against central differences of its loss.
TEST(FineTune, HeadGradientOfTheFeaturesIsTheLossDerivative) {
  for (const bool softmax : {false, true}) {
    Head head = softmax ? Head::softmax(6, 3, {}, 4) : Head::sigmoid(6, {}, 4);
    const int n = 3;
    std::vector<float> x = noise(static_cast<std::size_t>(n) * 6, 9);
    const std::vector<int> labels = {0, 1, softmax ? 2 : 1};
    const LossOptions loss{0.1, {}};
    HeadGradients g;
    head.backward(x.data(), labels.data(), n, loss, g);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float keep = x[i], h = 1e-2f;
      HeadGradients unused;
      x[i] = keep + h;
      const double up = head.backward(x.data(), labels.data(), n, loss, unused).loss;
      x[i] = keep - h;
      const double down = head.backward(x.data(), labels.data(), n, loss, unused).loss;
      x[i] = keep;
      EXPECT_NEAR(g.features[i], (up - down) / (2 * h), 2e-4) << (softmax ? "softmax " : "sigmoid ") << i;
    }
  }
}

// Input [rows, 6] -> Dropout(rate, noise_shape) -> Dense(6) with the identity kernel: the top's
// training output is the masked input itself.
Graph dropout_graph(std::vector<int> input_shape, float rate, std::vector<int> noise_shape) {
  Graph g;
  LayerNode input;
  input.name = "input";
  input.kind = LayerKind::Input;
  input.out_shape = std::move(input_shape);
  LayerNode drop;
  drop.name = "drop";
  drop.keras_class = "Dropout";
  drop.kind = LayerKind::Dropout;
  drop.inputs = {0};
  drop.rate = rate;
  drop.noise_shape = std::move(noise_shape);
  LayerNode dense;
  dense.name = "dense";
  dense.kind = LayerKind::Dense;
  dense.inputs = {1};
  dense.filters = 6;
  dense.use_bias = true;
  std::vector<float> identity(36, 0.0f);
  for (int i = 0; i < 6; ++i) identity[static_cast<std::size_t>(i * 7)] = 1.0f;
  dense.weights["kernel"] = Weight{{6, 6}, std::make_shared<const std::vector<float>>(identity)};
  dense.weights["bias"] = Weight{{6}, std::make_shared<const std::vector<float>>(6, 0.0f)};
  g.nodes = {input, drop, dense};
  g.inputs = {0};
  g.outputs = {2};
  infer_shapes_and_check(g);
  return g;
}

// Keras' Dropout in training (set_dropout): values dropped at the rate, the kept ones scaled by 1 / (1 - rate),
// the same mask in the backward pass; noise_shape shares draws along its 1 axes; inference keeps
// everything; the masks are new each step and the same for the same step.
TEST(FineTune, DropoutDropsInTrainingOnly) {
  const int n = 200;
  const std::vector<float> x = noise(static_cast<std::size_t>(n) * 4 * 6, 11);
  for (const bool shared_rows : {false, true}) {
    // A value of 4 rows of 6 per sample; noise_shape [None, 1, None]: one draw per column.
    TrainableTop top(dropout_graph({4, 6}, 0.25f, shared_rows ? std::vector<int>{1, -1} : std::vector<int>{}), "drop",
                     {.kind = OptimizerKind::Sgd, .learning_rate = 0.0f});
    const Tensor inference = top.forward(x.data(), n);
    EXPECT_EQ(inference.data, x) << "no dropout at inference";
    const float* off = top.forward_train(x.data(), n);
    EXPECT_EQ(std::vector<float>(off, off + x.size()), x) << "off by default (a backbone called with training=False)";
    top.set_dropout(true);
    const float* y = top.forward_train(x.data(), n);
    std::vector<float> mask(x.size());
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      mask[i] = y[i] == 0.0f ? 0.0f : y[i] / x[i];
      dropped += y[i] == 0.0f;
      if (y[i] != 0.0f) {
        ASSERT_NEAR(mask[i], 1.0f / 0.75f, 1e-5) << i;
      }
    }
    EXPECT_NEAR(dropped / static_cast<double>(x.size()), 0.25, 0.04);
    if (shared_rows) {
      for (int b = 0; b < n; ++b)
        for (int r = 1; r < 4; ++r)
          for (int c = 0; c < 6; ++c) {
            const std::size_t at = (static_cast<std::size_t>(b) * 4 + r) * 6 + c,
                              first = static_cast<std::size_t>(b) * 24 + c;
            ASSERT_EQ(mask[at] == 0.0f, mask[first] == 0.0f) << "sample " << b << " row " << r << " column " << c;
          }
    }
    // dL/dkernel[i][j] = sum over rows of masked x[i] * upstream[j].
    const std::vector<float> upstream = noise(x.size(), 12);
    top.backward(upstream.data());
    const std::vector<float>& g = top.gradient("dense", "kernel");
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) {
        double want = 0;
        for (std::size_t r = 0; r < x.size() / 6; ++r) want += double(y[r * 6 + i]) * upstream[r * 6 + j];
        ASSERT_NEAR(g[static_cast<std::size_t>(i * 6 + j)], want, 1e-3 * (1 + std::abs(want))) << i << "," << j;
      }
    // The same step draws the same mask; the next step another.
    const std::vector<float> first(y, y + x.size());
    EXPECT_EQ(std::vector<float>(top.forward_train(x.data(), n), top.forward_train(x.data(), n) + x.size()), first);
    top.step();
    EXPECT_NE(std::vector<float>(top.forward_train(x.data(), n), top.forward_train(x.data(), n) + x.size()), first);
  }
}

// ConvNeXt's LayerScale (x * gamma per channel) trains: dL/dgamma[c] = sum of x * dL/dy over
// channel c's values.
TEST(FineTune, LayerScaleGammaTrains) {
  Graph g;
  LayerNode input;
  input.name = "input";
  input.kind = LayerKind::Input;
  input.out_shape = {2, 3, 4};
  LayerNode scale;
  scale.name = "layer_scale";
  scale.kind = LayerKind::LayerScale;
  scale.inputs = {0};
  scale.weights["gamma"] = Weight{{4}, std::make_shared<const std::vector<float>>(noise(4, 21))};
  g.nodes = {input, scale};
  g.inputs = {0};
  g.outputs = {1};
  infer_shapes_and_check(g);
  TrainableTop top(g, "layer_scale");
  const int n = 3;
  const std::vector<float> x = noise(static_cast<std::size_t>(n) * 24, 22), upstream = noise(x.size(), 23);
  top.forward_train(x.data(), n);
  top.backward(upstream.data());
  const std::vector<float>& got = top.gradient("layer_scale", "gamma");
  ASSERT_EQ(got.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    double want = 0;
    for (std::size_t i = static_cast<std::size_t>(c); i < x.size(); i += 4) want += double(x[i]) * upstream[i];
    EXPECT_NEAR(got[static_cast<std::size_t>(c)], want, 1e-5) << c;
  }
}

// ---- The GPU trainer (TrainableTop::run_on_gpu) ----------------------------------------------------
// Its kernels' host twins run the same per-element functions and the same plan as the GPU, so in
// float32 they must give TensorFlow's gradients, and in bf16 (the GPU's storage) stay within 1e-2
// of the CPU's float32 ones. On the emulated device (the sanitizer build) run_on_gpu() itself
// takes the twin in bf16; on a GPU, cuDNN.

TEST(GpuFineTune, HostTwinGradientsOfEveryLayerTypeAreTensorFlows) {
  for (const char* name : {"grad_conv", "grad_bn_act", "grad_pool_dense", "grad_se"}) {
    const test::VectorFile v(gradient_vectors() / (std::string(name) + ".json"));
    const Model model = load_model(gradient_vectors() / (std::string(name) + ".h5"));
    TrainableTop top(model.graph(), model.graph().nodes[1].name);
    detail::run_on_host_twin(top, v.tensor(v.meta.at("input")).batch(), DType::F32);
    EXPECT_NE(top.executor().find("host twin (float32)"), std::string::npos) << top.executor();
    check_gradients(v, top, name);
  }
}

TEST(GpuFineTune, HostTwinMobileNetTopGradientsAreTensorFlows) {
  REQUIRE_MOBILENET(file);
  const test::VectorFile v(gradient_vectors() / "mobilenet_top.json");
  const Model backbone = load_model(file).cut_at(v.meta.at("feature_layer").get<std::string>());
  TrainableTop top(backbone.graph(), v.meta.at("unfrozen_from").get<std::string>());
  detail::run_on_host_twin(top, v.tensor(v.meta.at("input")).batch(), DType::F32);
  check_gradients(v, top, "mobilenet_top");
}

// bf16 values move some pre-activations across a ReLU's kink (0, 6): the gradient of such an
// element is switched on or off. The share of them grows with the rounding (bf16 keeps 8 bits,
// fp16 11: about 3x the error), and with the depth of the top. So the bound is what bf16 itself
// costs, measured here (small models: at most 0.063; MobileNetV2 from block_13_expand: 0.24),
// with a margin; a wrong index or layout is off by O(1).
TEST(GpuFineTune, Bf16GradientsAreTheCpusUpToRounding) {
  for (const char* name : {"grad_conv", "grad_bn_act", "grad_pool_dense", "grad_se"}) {
    const Model model = load_model(gradient_vectors() / (std::string(name) + ".h5"));
    TrainableTop cpu(model.graph(), model.graph().nodes[1].name);
    TrainableTop gpu(model.graph(), model.graph().nodes[1].name);
    const int n = 3;
    detail::run_on_host_twin(gpu, n, DType::BF16);
    const std::vector<float> x = noise(Tensor::element_count(cpu.input_shape()) * n, 31);
    const std::vector<float> upstream = noise(static_cast<std::size_t>(cpu.features()) * n, 32);
    gradient_error_to_cpu(cpu, gpu, x, n, upstream, name, 0.1);
  }
}

// Layer by layer, bf16 costs the rounding of the layer's input, weights and values, without the
// compounding through the layers above: each layer of the four models, trained alone (a
// weightless one together with the layer feeding it, whose weight gradients carry its backward),
// is within 1e-2 of the CPU's float32 output and gradients. Not a layer whose gradient switches
// (gradient_switches): a rounding that moves a value across the switch moves a whole element's
// gradient, and a weight gradient that is a cancelling sum of many (a bias's, beta's) feels it
// most. Those are held to 0.1. Measured: at most 0.0087 over the 30 smooth ones, 0.071 over the
// 7 that switch (a LeakyReLU with threshold 0.2, on its BatchNormalization's beta).
TEST(GpuFineTune, Bf16GradientsOfEachLayerAreTheCpusUpToRounding) {
  std::size_t smooth = 0, switching = 0;
  double worst_smooth = 0, worst_switching = 0;
  for (const char* name : {"grad_conv", "grad_bn_act", "grad_pool_dense", "grad_se"}) {
    const Model model = load_model(gradient_vectors() / (std::string(name) + ".h5"));
    const Graph& g = model.graph();
    for (std::size_t i = 1; i < g.nodes.size(); ++i) {
      const LayerNode& layer = g.nodes[i];
      const Model cut = model.cut_at(layer.name);
      const Graph& cg = cut.graph();
      // The layer alone when it has weights, else with its first input's layer.
      std::optional<TrainableTop> cpu;
      for (const std::string& from : {layer.name, g.nodes[static_cast<std::size_t>(layer.inputs.at(0))].name}) {
        if (cg.nodes[static_cast<std::size_t>(cg.find(from))].kind == LayerKind::Input) break;
        try {
          cpu.emplace(cg, from);
        } catch (const InvalidArgument&) {
          break;  // more than one value crosses into it (Add, Concatenate, Multiply): the models test those
        }
        if (cpu->trainable_parameters() > 0) break;
        cpu.reset();
      }
      if (!cpu) continue;
      const bool switches =
          gradient_switches(layer) || gradient_switches(cg.nodes[static_cast<std::size_t>(cg.find(cpu->from_layer()))]);
      TrainableTop gpu(cg, cpu->from_layer());
      const int n = 3;
      detail::run_on_host_twin(gpu, n, DType::BF16);
      const std::vector<float> x = noise(Tensor::element_count(cpu->input_shape()) * n, 41 + i);
      const std::vector<float> upstream = noise(static_cast<std::size_t>(cpu->features()) * n, 42 + i);
      const std::string what = std::string(name) + " " + layer.name + " (from " + cpu->from_layer() + ")";
      const double e = gradient_error_to_cpu(*cpu, gpu, x, n, upstream, what, switches ? 0.1 : 1e-2);
      (switches ? worst_switching : worst_smooth) = std::max(switches ? worst_switching : worst_smooth, e);
      ++(switches ? switching : smooth);
    }
  }
  std::cout << "[ info ] bf16 host twin vs CPU, each layer trained alone: largest relative L2 error " << worst_smooth
            << " over " << smooth << " layers, " << worst_switching << " over " << switching
            << " whose gradient switches\n";
  EXPECT_GE(smooth, 30u);
  EXPECT_GE(switching, 7u);
}

TEST(GpuFineTune, Bf16MobileNetTopGradientsAreTheCpusUpToRounding) {
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  TrainableTop cpu(backbone.graph(), "block_13_expand"), gpu(backbone.graph(), "block_13_expand");
  const int n = 2;
  detail::run_on_host_twin(gpu, n, DType::BF16);
  const Model below = backbone.cut_at(cpu.boundary());
  const std::vector<float> images = noise(static_cast<std::size_t>(n) * 224 * 224 * 3, 33);
  const Tensor x = below.forward(images.data(), n);
  const std::vector<float> upstream = noise(static_cast<std::size_t>(cpu.features()) * n, 34);
  const double worst = gradient_error_to_cpu(cpu, gpu, x.data, n, upstream, "mobilenet from block_13_expand", 0.35);
  std::cout << "[ info ] bf16 host twin vs CPU, MobileNetV2 from block_13_expand: largest relative L2 error " << worst
            << "\n";
  EXPECT_GT(gpu.activation_bytes(n), 0u);
  // The GPU's check (train() runs it before it trusts the GPU), here on a top that runs the bf16
  // twin itself: exactly the twin's distance from the CPU, which is bf16's cost measured above.
  const TrainableTop::GpuGradientCheck check = gpu.check_gpu_gradients(2);
  EXPECT_EQ(check.gpu, check.rounding);
  EXPECT_GT(check.rounding, 1e-3);
  EXPECT_LT(check.rounding, 0.35);
  EXPECT_LE(check.gpu, check.limit(2e-2));
}

// Training: Adam steps of the head and the top on the float32 twin follow the CPU's steps.
TEST(GpuFineTune, TrainingStepsFollowTheCpu) {
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  OptimizerConfig adam;
  adam.learning_rate = 1e-3f;
  TrainableTop cpu(backbone.graph(), "block_16_expand", adam), gpu(backbone.graph(), "block_16_expand", adam);
  const int n = 4;
  detail::run_on_host_twin(gpu, n, DType::F32);
  ASSERT_NE(gpu.executor(), "cpu");
  Head cpu_head = Head::sigmoid(cpu.features(), {}, 7), gpu_head = Head::sigmoid(gpu.features(), {}, 7);
  TopAndHead a(cpu, cpu_head, adam), b(gpu, gpu_head, adam);
  const Model below = backbone.cut_at(cpu.boundary());
  const std::vector<int> labels = {0, 1, 1, 0};
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> images = noise(static_cast<std::size_t>(n) * 224 * 224 * 3, 40 + step);
    const Tensor x = below.forward(images.data(), n);
    const StepResult ra = a.train_step(x.data.data(), labels.data(), n);
    const StepResult rb = b.train_step(x.data.data(), labels.data(), n);
    EXPECT_NEAR(ra.loss, rb.loss, 1e-4 * (1 + ra.loss)) << "step " << step;
  }
  // Adam moves a weight by at most about lr per step whatever its gradient's size, so a gradient
  // near 0 may step either way: the weights must agree to 5 % of the 3 · lr they could move.
  auto largest_difference = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b.at(i)));
    return d;
  };
  const double bound = 0.05 * 3 * adam.learning_rate;
  const Graph ga = cpu.graph(), gb = gpu.graph();
  for (const auto& [layer, weight] : cpu.trainable_weights()) {
    const auto& wa = *ga.nodes[static_cast<std::size_t>(ga.find(layer))].weight(weight)->data;
    const auto& wb = *gb.nodes[static_cast<std::size_t>(gb.find(layer))].weight(weight)->data;
    EXPECT_LT(largest_difference(wb, wa), bound) << layer << "/" << weight;
  }
  EXPECT_LT(largest_difference(gpu_head.kernel(), cpu_head.kernel()), bound);
}

TEST(GpuFineTune, DropoutMasksAreTheCpus) {
  const int n = 50;
  const std::vector<float> x = noise(static_cast<std::size_t>(n) * 4 * 6, 51), upstream = noise(x.size(), 52);
  for (const bool dropping : {false, true}) {
    TrainableTop cpu(dropout_graph({4, 6}, 0.5f, {}), "drop"), gpu(dropout_graph({4, 6}, 0.5f, {}), "drop");
    detail::run_on_host_twin(gpu, n, DType::F32);
    cpu.set_dropout(dropping);
    gpu.set_dropout(dropping);
    EXPECT_LT(gradient_error_to_cpu(cpu, gpu, x, n, upstream, dropping ? "dropping" : "not dropping", 1e-6), 1e-6);
  }
}

TEST(GpuFineTune, RefusesWhatItCannotTake) {
  TrainableTop top(dropout_graph({6}, 0.0f, {}), "dense");
  EXPECT_THROW(detail::run_on_host_twin(top, 4, DType::F16), InvalidArgument) << "fp16 would need loss scaling";
  EXPECT_THROW(detail::run_on_host_twin(top, 0, DType::BF16), InvalidArgument);
  EXPECT_EQ(top.executor(), "cpu");
  detail::run_on_host_twin(top, 4, DType::BF16);
  const std::vector<float> x = noise(5 * 6, 61);
  EXPECT_THROW(top.forward_train(x.data(), 5), InvalidArgument) << "a batch above max_batch";
  top.run_on_cpu();
  EXPECT_EQ(top.executor(), "cpu");
  EXPECT_NE(top.forward_train(x.data(), 5), nullptr);
}

// run_on_gpu() itself: cuDNN on a GPU, the bf16 twin on the emulated device.
TEST(GpuFineTune, RunsOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  const Model model = load_model(gradient_vectors() / "grad_se.h5");
  TrainableTop cpu(model.graph(), model.graph().nodes[1].name), gpu(model.graph(), model.graph().nodes[1].name);
  const int n = 4;
  GpuTrainOptions o;
  o.max_batch = n;
  gpu.run_on_gpu(o);
  std::cout << "[ info ] " << gpu.executor() << (cuda_is_emulated() ? " on the emulated device" : "") << "\n";
  const std::vector<float> x = noise(Tensor::element_count(cpu.input_shape()) * n, 71);
  const std::vector<float> upstream = noise(static_cast<std::size_t>(cpu.features()) * n, 72);
  gradient_error_to_cpu(cpu, gpu, x, n, upstream, "grad_se", 0.1);
  const TrainableTop::GpuGradientCheck check = gpu.check_gpu_gradients();
  std::cout << "[ info ] the GPU's check: " << check.gpu << " from the CPU's float32, bf16 rounding alone "
            << check.rounding << "\n";
  EXPECT_LE(check.gpu, check.limit(2e-2));
}

// Convolutions whose channels cuDNN refuses run on channels padded to 8 (conv.hpp's Conv) in
// training too: grad_se's three convolutions (C 4, K 3, C 3) on the emulated device, its cuDNN
// stand-in refusing them whole or in their backward calls only, keep the CPU's gradients.
TEST(GpuFineTune, ConvolutionsCudnnRefusesTrainOnPaddedChannels) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  if (!cuda_is_emulated()) GTEST_SKIP() << "on a GPU cuDNN decides what it refuses";
  const Model model = load_model(gradient_vectors() / "grad_se.h5");
  for (const char* refusal : {"unaligned-channels", "unaligned-channels-backward"}) {
    test::Env env;
    env.set("STOKER_EMULATED_CUDNN_REFUSE", refusal);
    TrainableTop cpu(model.graph(), model.graph().nodes[1].name), gpu(model.graph(), model.graph().nodes[1].name);
    const int n = 4;
    GpuTrainOptions o;
    o.max_batch = n;
    gpu.run_on_gpu(o);
    const std::vector<float> x = noise(Tensor::element_count(cpu.input_shape()) * n, 73);
    const std::vector<float> upstream = noise(static_cast<std::size_t>(cpu.features()) * n, 74);
    gradient_error_to_cpu(cpu, gpu, x, n, upstream, refusal, 0.1);
  }
}

// The recipe's top on the device: MobileNetV2 from block_13_expand, held to train()'s check. On a
// GPU the figures say how far cuDNN's sums move bf16's roundings (docs/trainer.md).
TEST(GpuFineTune, MobileNetTopOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  REQUIRE_MOBILENET(file);
  const Model backbone = load_model(file).cut_at("out_relu");
  TrainableTop top(backbone.graph(), "block_13_expand");
  GpuTrainOptions o;
  o.max_batch = 4;
  top.run_on_gpu(o);
  const TrainableTop::GpuGradientCheck check = top.check_gpu_gradients(4);
  std::cout << "[ info ] " << top.executor() << (cuda_is_emulated() ? " on the emulated device" : "")
            << ": relative L2 error to the CPU's float32 " << check.gpu << ", the bf16 twin's " << check.rounding
            << " (limit " << check.limit(2e-2) << ")\n";
  EXPECT_LE(check.gpu, check.limit(2e-2));
  EXPECT_GT(top.activation_bytes(4), 0u);
}

}  // namespace
}  // namespace stoker::trainer
