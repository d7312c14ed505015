// TrainableTop and Optimizer: the trainable top computes what the backbone computes, its
// gradients are TensorFlow's (committed tf.GradientTape vectors), one fine-tuning step is Keras'
// (Adam at 1e-5), and the optimizers follow Keras' update rules.
#include <cmath>
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
#define REQUIRE_MOBILENET(path)              \
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
  const std::vector<float> kernel_before = *backbone.graph().nodes[static_cast<std::size_t>(
                                                backbone.graph().find("block_16_project"))].weight("kernel")->data;
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

}  // namespace
}  // namespace stoker::trainer
