// Internal: Adam's update as tf_keras 2.x computes it, shared by the head (head.cpp) and the
// fine-tuning optimizer (fine_tune/fine_tune.cpp): alpha = lr sqrt(1 - b2^t) / (1 - b1^t);
// m += (g - m)(1 - b1); v += (g² - v)(1 - b2); w -= alpha m / (sqrt(v) + eps).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace stoker::trainer::detail {

inline float adam_alpha(float learning_rate, float beta_1, float beta_2, std::int64_t step) {
  const double t = static_cast<double>(step);
  return static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(double(beta_2), t)) /
                            (1.0 - std::pow(double(beta_1), t)));
}

inline void adam_update(float* w, float* m, float* v, const float* g, std::size_t n, float alpha, float beta_1,
                        float beta_2, float epsilon) {
  const float one_b1 = 1.0f - beta_1, one_b2 = 1.0f - beta_2;
  for (std::size_t i = 0; i < n; ++i) {
    m[i] += (g[i] - m[i]) * one_b1;
    v[i] += (g[i] * g[i] - v[i]) * one_b2;
    w[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + epsilon);
  }
}

}  // namespace stoker::trainer::detail
