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
#include <stoker/trainer/backend.hpp>

#include <stoker/trainer/tensor.hpp>

#include "test_support.hpp"

namespace stoker::test {

inline std::filesystem::path vectors_dir() { return source_dir() / "tests" / "trainer" / "vectors"; }

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

// max |a - b| / max |b|: an error relative to the reference tensor's scale, strict (a size
// mismatch, or a value finite on one side only, is infinite). The library's own measure.
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  return trainer::relative_error(a, b);
}

}  // namespace stoker::test
