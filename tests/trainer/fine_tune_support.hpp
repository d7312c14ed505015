// What the fine-tuning tests and the op tests share: random inputs, and the error of one training
// step of a top (on some executor) against the CPU's.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <stoker/trainer/fine_tune.hpp>
#include <stoker/trainer/graph.hpp>

namespace stoker::trainer {

inline std::vector<float> noise(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The relative L2 error ||got - want|| / ||want||.
inline double l2_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (double(got.at(i)) - want[i]) * (double(got.at(i)) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// One forward_train() and backward() of both tops on x with the given upstream gradient: the
// largest relative L2 error of the output and of every trainable weight's gradient, each
// expected below `limit`.
inline double gradient_error_to_cpu(TrainableTop& cpu, TrainableTop& gpu, const std::vector<float>& x, int n,
                                    const std::vector<float>& upstream, const std::string& what, double limit) {
  const float* a = cpu.forward_train(x.data(), n);
  const std::vector<float> want(a, a + upstream.size());
  const float* b = gpu.forward_train(x.data(), n);
  double worst = l2_error(std::vector<float>(b, b + upstream.size()), want);
  EXPECT_LT(worst, limit) << what << ": output";
  cpu.backward(upstream.data());
  gpu.backward(upstream.data());
  for (const auto& [layer, weight] : cpu.trainable_weights()) {
    const double e = l2_error(gpu.gradient(layer, weight), cpu.gradient(layer, weight));
    EXPECT_LT(e, limit) << what << " " << layer << "/" << weight;
    worst = std::max(worst, e);
  }
  return worst;
}

// A layer whose gradient jumps where its input crosses a point: a ReLU's kink (at 0, a threshold
// or max_value), a hard sigmoid's corners, SELU's slope at 0, the element a max pooling routes to.
inline bool gradient_switches(const LayerNode& layer) {
  const ActKind a = layer.activation.kind;
  return layer.kind == LayerKind::MaxPooling2D || layer.kind == LayerKind::GlobalMaxPooling2D || a == ActKind::ReLU ||
         a == ActKind::HardSigmoid || a == ActKind::HardSwish || a == ActKind::Selu;
}

}  // namespace stoker::trainer
