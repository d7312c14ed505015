// Reads the committed reference vectors: <name>.json indexes tensors ({shape, offset}) that lie in
// <name>.bin as little-endian float32 (written by scripts/keras_reference_*.py).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/trainer/tensor.hpp>

#include "test_support.hpp"

namespace stoker::test {

inline std::filesystem::path vectors_dir() {
  return source_dir() / "tests" / "trainer" / "vectors";
}

struct VectorFile {
  nlohmann::json meta;
  std::vector<float> data;

  explicit VectorFile(const std::filesystem::path& json_path) {
    std::ifstream j(json_path);
    meta = nlohmann::json::parse(j);
    auto bin = json_path;
    bin.replace_extension(".bin");
    std::ifstream b(bin, std::ios::binary | std::ios::ate);
    data.resize(static_cast<std::size_t>(b.tellg()) / sizeof(float));
    b.seekg(0);
    b.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  }

  trainer::Tensor tensor(const nlohmann::json& entry) const {
    std::vector<int> shape = entry.at("shape").get<std::vector<int>>();
    const std::size_t off = entry.at("offset").get<std::size_t>();
    const std::size_t n = trainer::Tensor::element_count(shape);
    return trainer::Tensor(shape, std::vector<float>(data.begin() + static_cast<std::ptrdiff_t>(off),
                                                      data.begin() + static_cast<std::ptrdiff_t>(off + n)));
  }
};

// max |a - b| / max(|b|_inf, floor): an error relative to the reference tensor's scale. Strict:
// a size mismatch, or a value that is not finite on one side only (NaN from a buffer nobody wrote;
// std::max would skip it), is an infinite error.
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-6) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return inf;
  double scale = floor, err = 0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(a[i]) != std::isfinite(b[i])) return inf;
    if (std::isfinite(a[i])) err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return err / scale;
}

}  // namespace stoker::test
