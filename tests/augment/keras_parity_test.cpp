// Parity with Keras itself: tf_keras' ImageDataGenerator.apply_transform outputs, committed under
// tests/augment/vectors/ by scripts/keras_reference_augment.py, against the CPU executor run with
// the same fixed parameters. Keras' tolerance: 2 grey levels away from the borders.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

namespace fs = std::filesystem;

struct KerasCase {
  std::string name, image, fill;
  int height = 0, width = 0, order = 1;
  double cval = 0;
  augment::SampleParams params;
};

fs::path vectors_dir() { return test::source_dir() / "tests" / "augment" / "vectors"; }

std::vector<KerasCase> load_cases() {
  std::ifstream in(vectors_dir() / "cases.txt");
  std::vector<KerasCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    KerasCase c;
    std::string theta, tx, ty, shear, zx, zy, fh, fv, cs, br;
    f >> c.name >> c.image >> c.height >> c.width >> c.fill >> c.cval >> c.order >> theta >> tx >> ty >> shear >> zx >>
        zy >> fh >> fv >> cs >> br;
    auto& p = c.params;
    p.theta = std::stof(theta), p.tx = std::stof(tx), p.ty = std::stof(ty), p.shear = std::stof(shear);
    p.zx = std::stof(zx), p.zy = std::stof(zy);
    p.flip_horizontal = fh == "1", p.flip_vertical = fv == "1";
    p.crop_w = static_cast<float>(c.width), p.crop_h = static_cast<float>(c.height);
    if (cs != "-") p.has_channel_shift = true, p.channel_shift = std::stof(cs);
    if (br != "-") p.has_brightness = true, p.brightness = std::stof(br);
    cases.push_back(c);
  }
  return cases;
}

template <typename T>
std::vector<T> read_raw(const fs::path& file) {
  const std::vector<std::uint8_t> bytes = test::read_bytes(file);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

struct Worst {
  double interior = 0, all = 0;
};

TEST(KerasParity, ApplyTransformMatchesKerasWithinTwoGreyLevelsAwayFromBorders) {
  const std::vector<KerasCase> cases = load_cases();
  ASSERT_GE(cases.size(), 40u) << "missing vectors in " << vectors_dir();
  std::map<std::string, Worst> per_parameter;
  Worst overall;
  for (const KerasCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<std::uint8_t> pixels = read_raw<std::uint8_t>(vectors_dir() / (c.image + ".u8"));
    const std::vector<std::uint16_t> expected = read_raw<std::uint16_t>(vectors_dir() / (c.name + ".q6"));
    const std::size_t n = static_cast<std::size_t>(c.height) * c.width * 3;
    ASSERT_EQ(pixels.size(), n);
    ASSERT_EQ(expected.size(), n);

    AugmentSpec spec;
    spec.height = c.height;
    spec.width = c.width;
    spec.dtype = DType::F32;
    spec.fill_mode = fill_mode_from_string(c.fill);
    spec.cval = c.cval;
    spec.interpolation_order = c.order;
    const Augmenter aug(spec);
    const ImageView src{pixels.data(), c.height, c.width, 3, static_cast<std::size_t>(c.width) * 3};
    std::vector<float> out(n);
    aug.apply_with(src, c.params, SampleContext{}, reinterpret_cast<std::byte*>(out.data()));

    const augment::Affine a = aug.matrix(c.params);
    Worst w;
    for (int y = 0; y < c.height; ++y) {
      for (int x = 0; x < c.width; ++x) {
        const double sx = a.m[0] * x + a.m[1] * y + a.m[2], sy = a.m[3] * x + a.m[4] * y + a.m[5];
        const bool interior = sx >= 1 && sx <= c.width - 2 && sy >= 1 && sy <= c.height - 2;
        for (int ch = 0; ch < 3; ++ch) {
          const std::size_t i = (static_cast<std::size_t>(y) * c.width + x) * 3 + ch;
          const double d = std::abs(out[i] - expected[i] / 64.0);
          w.all = std::max(w.all, d);
          if (interior) w.interior = std::max(w.interior, d);
        }
      }
    }
    EXPECT_LE(w.interior, 2.0) << "worst difference away from the borders (the issue's bound)";
    EXPECT_LE(w.all, 2.0) << "worst difference including the borders and fill regions";
    const std::string key = c.name.substr(0, c.name.rfind('_'));
    Worst& k = per_parameter[key];
    k.interior = std::max(k.interior, w.interior);
    k.all = std::max(k.all, w.all);
    overall.interior = std::max(overall.interior, w.interior);
    overall.all = std::max(overall.all, w.all);
  }
  std::cout << "Keras parity, worst |stoker - keras| in grey levels (interior / all pixels):\n";
  for (const auto& [name, w] : per_parameter) {
    std::cout << "  " << std::left << std::setw(24) << name << std::fixed << std::setprecision(3) << w.interior << " / "
              << w.all << "\n";
  }
  std::cout << "  overall " << overall.interior << " / " << overall.all << "\n";
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// Keras' fit + standardize (featurewise, rescale 1/255) and samplewise standardisation.
TEST(KerasParity, FitAndStandardizeMatchKeras) {
  std::ifstream in(vectors_dir() / "standardize.txt");
  std::string line, tag, names;
  std::array<float, 3> mean{}, stdev{};
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    f >> tag >> names >> mean[0] >> mean[1] >> mean[2] >> stdev[0] >> stdev[1] >> stdev[2];
  }
  ASSERT_EQ(tag, "fit");
  std::vector<std::string> images;
  for (std::size_t start = 0; start <= names.size();) {
    const std::size_t comma = std::min(names.find(',', start), names.size());
    images.push_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  std::vector<std::vector<std::uint8_t>> pixels;
  std::vector<ImageView> views;
  for (const std::string& name : images) pixels.push_back(read_raw<std::uint8_t>(vectors_dir() / (name + ".u8")));
  for (const auto& p : pixels) views.push_back(ImageView{p.data(), 32, 32, 3, 32 * 3});

  AugmentSpec s;
  s.height = s.width = 32;
  s.dtype = DType::F32;
  s.rescale = 1.0 / 255;
  s.featurewise_center = true;
  s.featurewise_std_normalization = true;
  s.featurewise = fit_featurewise(s, views);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(s.featurewise->mean[c], mean[c], 1e-5) << "channel " << c;
    EXPECT_NEAR(s.featurewise->std[c], stdev[c], 1e-5) << "channel " << c;
  }
  const Augmenter featurewise(s);
  AugmentSpec w;
  w.height = w.width = 32;
  w.dtype = DType::F32;
  w.rescale = 1.0 / 255;
  w.samplewise_center = true;
  w.samplewise_std_normalization = true;
  const Augmenter samplewise(w);
  double worst = 0;
  for (std::size_t k = 0; k < images.size(); ++k) {
    for (const auto& [aug, prefix] : {std::pair{&featurewise, "featurewise_"}, std::pair{&samplewise, "samplewise_"}}) {
      const std::vector<float> want = read_raw<float>(vectors_dir() / (prefix + images[k] + ".f32"));
      std::vector<float> got(32 * 32 * 3);
      aug->apply(views[k], SampleContext{}, reinterpret_cast<std::byte*>(got.data()));
      ASSERT_EQ(want.size(), got.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
    }
  }
  EXPECT_LE(worst, 1e-4);
  std::cout << std::scientific << "fit/standardize: worst |stoker - keras| " << worst << " (standardised units)\n";
}

}  // namespace
}  // namespace stoker
