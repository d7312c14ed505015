// A plain host tensor: float32, row-major, the first dimension is the batch (NHWC for images).
#pragma once

#include <cstddef>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace stoker::trainer {

struct Tensor {
  std::vector<int> shape;   // e.g. {N, H, W, C} or {N, features}
  std::vector<float> data;  // product(shape) values

  Tensor() = default;
  explicit Tensor(std::vector<int> s) : shape(std::move(s)), data(element_count(shape), 0.0f) {}
  Tensor(std::vector<int> s, std::vector<float> d) : shape(std::move(s)), data(std::move(d)) {}

  static std::size_t element_count(const std::vector<int>& s) {
    return std::accumulate(s.begin(), s.end(), std::size_t{1},
                           [](std::size_t a, int b) { return a * static_cast<std::size_t>(b); });
  }
  std::size_t size() const { return data.size(); }
  int batch() const { return shape.empty() ? 0 : shape.front(); }
  // Values per sample (product of all dimensions but the first).
  std::size_t sample_size() const { return shape.empty() || shape[0] == 0 ? 0 : data.size() / shape[0]; }
  float* sample(int i) { return data.data() + static_cast<std::size_t>(i) * sample_size(); }
  const float* sample(int i) const { return data.data() + static_cast<std::size_t>(i) * sample_size(); }
};

// "[1, 224, 224, 3]"; an unknown batch (-1) prints as "?".
std::string shape_to_string(const std::vector<int>& shape);

}  // namespace stoker::trainer
