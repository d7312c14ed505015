// Shared by the command's end-to-end tests: the binary under test and a small dataset.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <opencv2/core.hpp>

#include "test_support.hpp"

namespace stoker::test {

// The binary this test was built with, or $STOKER_CLI (scripts/gpu_check.sh runs a bundled build
// on another machine).
inline std::string stoker_binary() {
  const char* env = std::getenv("STOKER_CLI");
  return env && *env ? env : STOKER_CLI;
}

// Two classes that differ in colour, so a head learns them in two epochs.
inline void make_dataset(const std::filesystem::path& root, int per_class) {
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directories(root / (c ? "dog" : "cat"));
    for (int i = 0; i < per_class; ++i) {
      cv::Mat img = make_pattern_rgb(90 + i, 120, i);
      img.forEach<cv::Vec3b>([&](cv::Vec3b& px, const int*) { px[c ? 2 : 0] = 255; });
      write_jpeg(root / (c ? "dog" : "cat") / ("img" + std::to_string(i) + ".jpg"), img);
    }
  }
}

}  // namespace stoker::test
