// TrainableTop and Optimizer: the trainable top computes what the backbone computes, its
// gradients are TensorFlow's (committed tf.GradientTape vectors), one fine-tuning step is Keras'
// (Adam at 1e-5), and the optimizers follow Keras' update rules.
#include <cmath>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/fine_tune.hpp>
#include <stoker/trainer/head.hpp>
#include <stoker/trainer/model.hpp>

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

std::vector<float> noise(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

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

}  // namespace
}  // namespace stoker::trainer
