// The vector warps (AVX2, AVX-512) against the scalar loop, byte for byte: random and extreme
// affine matrices, every fill mode, both interpolations, 1/3/4 channels, odd and degenerate
// sizes, padded rows, the brightness table. Each kernel the CPU supports is run explicitly; the
// source image ends at an inaccessible page, so a read past its last byte crashes the test.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "params.hpp"
#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/half.hpp"
#include "warp.hpp"

namespace stoker::augment {
namespace {

// An image whose last byte is followed by a PROT_NONE page (rows padded to stride but the last).
class GuardedImage {
 public:
  GuardedImage(int height, int width, int channels, std::size_t stride, std::mt19937& rng)
      : bytes_(static_cast<std::size_t>(height - 1) * stride + static_cast<std::size_t>(width) * channels) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = (bytes_ + page - 1) / page * page + page;
    base_ =
        static_cast<std::uint8_t*>(mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + mapped_ - page, page, PROT_NONE), 0);
    data_ = base_ + mapped_ - page - bytes_;
    for (std::size_t i = 0; i < bytes_; ++i) data_[i] = static_cast<std::uint8_t>(rng());
    view_ = PixelSource{data_, height, width, channels, stride};
  }
  ~GuardedImage() { munmap(base_, mapped_); }
  GuardedImage(const GuardedImage&) = delete;
  GuardedImage& operator=(const GuardedImage&) = delete;
  const PixelSource& view() const { return view_; }

 private:
  std::size_t bytes_, mapped_ = 0;
  std::uint8_t* base_ = nullptr;
  std::uint8_t* data_ = nullptr;
  PixelSource view_;
};

// A Keras-like transform (rotation, shear, zoom, shift about the centre) of a source onto an
// output, or, with wild set, any matrix: large scales, negative steps, far translations.
Affine random_affine(std::mt19937& rng, int src_h, int src_w, int out_h, int out_w, bool wild) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Affine a;
  if (wild) {
    for (double& m : a.m) m = u(rng) * 3.0;
    a.m[2] = u(rng) * 2.5 * src_w;
    a.m[5] = u(rng) * 2.5 * src_h;
    return a;
  }
  const double theta = u(rng) * 0.6, shear = u(rng) * 0.5;
  const double zx = 1.0 + 0.3 * u(rng), zy = 1.0 + 0.3 * u(rng);
  const double sx = static_cast<double>(src_w) / out_w, sy = static_cast<double>(src_h) / out_h;
  // out -> src: x_s = m0 x + m1 y + m2, y_s = m3 x + m4 y + m5.
  a.m[0] = std::cos(theta) * zx * sx;
  a.m[1] = -std::sin(theta + shear) * zy * sx;
  a.m[3] = std::sin(theta) * zx * sy;
  a.m[4] = std::cos(theta + shear) * zy * sy;
  const double cx = 0.5 * (out_w - 1), cy = 0.5 * (out_h - 1);
  a.m[2] = 0.5 * (src_w - 1) - a.m[0] * cx - a.m[1] * cy + u(rng) * 0.4 * src_w;
  a.m[5] = 0.5 * (src_h - 1) - a.m[3] * cx - a.m[4] * cy + u(rng) * 0.4 * src_h;
  return a;
}

// Matrices whose coordinates land exactly on pixel centres and edges: identity, integer shifts,
// mirror images, half-pixel steps, and maps of everything outside the source.
std::vector<Affine> exact_affines(int src_h, int src_w) {
  std::vector<Affine> out;
  auto add = [&](double m0, double m1, double m2, double m3, double m4, double m5) {
    Affine a;
    a.m[0] = m0, a.m[1] = m1, a.m[2] = m2, a.m[3] = m3, a.m[4] = m4, a.m[5] = m5;
    out.push_back(a);
  };
  add(1, 0, 0, 0, 1, 0);
  add(1, 0, -3, 0, 1, 2);
  add(-1, 0, src_w - 1, 0, -1, src_h - 1);
  add(0.5, 0, -0.5, 0, 0.5, 0.25);
  add(0, 1, 0, 1, 0, 0);
  add(1, 0, src_w + 5.0, 0, 1, 0);              // right of the source
  add(1, 0, 0, 0, 1, -2.0 * src_h - 7.0);       // above it
  add(0, 0, -1e6, 0, 0, 1e6);                   // one point far outside
  add(1e-9, 0, src_w - 1, 0, 1e-9, src_h - 1);  // just inside the last pixel
  add(2e4, 0, 0, 0, -2e4, 0);                   // large steps that still fit the kernels' 32-bit lanes
  add(2e6, 0, 0, 0, 1, 0);                      // rows that do not (the scalar loop's)
  add(1, 0, 0, 3e6, 0, 0);
  return out;
}

struct Case {
  int channels, fill, order;
  bool truncate, lut;
};

std::string describe(const Case& c, const PixelSource& s, int oh, int ow, const Affine& a) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "cn=%d fill=%d order=%d trunc=%d lut=%d src=%dx%d stride=%zu out=%dx%d m=[%g %g %g; %g %g %g]",
                c.channels, c.fill, c.order, c.truncate, c.lut, s.height, s.width, s.row_stride, oh, ow, a.m[0], a.m[1],
                a.m[2], a.m[3], a.m[4], a.m[5]);
  return buf;
}

// Runs isa and the scalar loop on one job; returns the number of differing bytes.
int compare(WarpIsa isa, const Case& c, const PixelSource& src, int out_h, int out_w, const Affine& a,
            const std::uint8_t* lut) {
  AugmentPlan plan;
  plan.out_height = out_h;
  plan.out_width = out_w;
  plan.channels = c.channels;
  plan.fill_mode = static_cast<FillMode>(c.fill);
  plan.cval = 77.0f;
  plan.interpolation_order = c.order;
  const std::size_t n = static_cast<std::size_t>(out_h) * out_w * c.channels;
  std::vector<std::uint8_t> expected(n + 64, 0xAB), actual(n + 64, 0xAB);
  WarpJob job;
  job.plan = &plan;
  job.src = src;
  job.affine = a;
  job.truncate = c.truncate;
  job.lut = c.lut ? lut : nullptr;
  job.out = expected.data();
  warp_with(WarpIsa::Scalar, job);
  job.out = actual.data();
  warp_with(isa, job);
  int diff = 0;
  for (std::size_t i = 0; i < n + 64; ++i) {
    if (expected[i] != actual[i]) {
      if (diff == 0) {
        const std::size_t px = i / c.channels;
        ADD_FAILURE() << warp_isa_name(isa) << ": " << describe(c, src, out_h, out_w, a)
                      << " first difference at x=" << px % out_w << " y=" << px / out_w << " c=" << i % c.channels
                      << ": " << int(expected[i]) << " vs " << int(actual[i]) << (i >= n ? " (past the output)" : "");
      }
      ++diff;
    }
  }
  return diff;
}

class VectorWarp : public ::testing::TestWithParam<WarpIsa> {
 protected:
  void SetUp() override {
    if (!warp_isa_available(GetParam())) GTEST_SKIP() << warp_isa_name(GetParam()) << " not supported by this CPU";
  }
};

std::vector<std::uint8_t> random_lut(std::mt19937& rng) {
  std::vector<std::uint8_t> lut(256);
  for (auto& v : lut) v = static_cast<std::uint8_t>(rng());
  return lut;
}

TEST_P(VectorWarp, MatchesScalarOnRandomMatrices) {
  std::mt19937 rng(1234);
  const std::vector<std::uint8_t> lut = random_lut(rng);
  const int sizes[][2] = {{1, 1}, {1, 9}, {11, 1}, {2, 2}, {3, 5}, {17, 13}, {64, 48}, {101, 77}};
  const int outs[][2] = {{1, 1}, {7, 9}, {33, 17}, {31, 47}};
  int cases = 0;
  for (const int cn : {1, 3, 4}) {
    for (const auto& sz : sizes) {
      for (const std::size_t pad : {std::size_t{0}, std::size_t{5}, std::size_t{64}}) {
        const GuardedImage img(sz[0], sz[1], cn, static_cast<std::size_t>(sz[1]) * cn + pad, rng);
        for (int fill = 0; fill < 4; ++fill) {
          for (const int order : {0, 1}) {
            for (const auto& o : outs) {
              for (int k = 0; k < 6; ++k) {
                const Case c{cn, fill, order, (k & 1) != 0, k % 3 == 0};
                const Affine a = random_affine(rng, sz[0], sz[1], o[0], o[1], k >= 4);
                EXPECT_EQ(compare(GetParam(), c, img.view(), o[0], o[1], a, lut.data()), 0);
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 3000);
}

TEST_P(VectorWarp, MatchesScalarOnExactAndOutsideMatrices) {
  std::mt19937 rng(99);
  const std::vector<std::uint8_t> lut = random_lut(rng);
  const int sizes[][2] = {{1, 1}, {1, 6}, {6, 1}, {4, 4}, {9, 23}, {40, 31}};
  for (const int cn : {1, 3, 4}) {
    for (const auto& sz : sizes) {
      for (const std::size_t pad : {std::size_t{0}, std::size_t{3}}) {
        const GuardedImage img(sz[0], sz[1], cn, static_cast<std::size_t>(sz[1]) * cn + pad, rng);
        for (const Affine& a : exact_affines(sz[0], sz[1])) {
          for (int fill = 0; fill < 4; ++fill) {
            for (const int order : {0, 1}) {
              for (const bool truncate : {false, true}) {
                const Case c{cn, fill, order, truncate, truncate};
                // Outputs larger than the source reach past its far edge exactly.
                EXPECT_EQ(compare(GetParam(), c, img.view(), sz[0] + 3, sz[1] + 19, a, lut.data()), 0);
                EXPECT_EQ(compare(GetParam(), c, img.view(), 5, 37, a, lut.data()), 0);
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(VectorWarp, MatchesScalarAtTheSeedSize) {
  std::mt19937 rng(7);
  const std::vector<std::uint8_t> lut = random_lut(rng);
  for (const int cn : {1, 3, 4}) {
    const GuardedImage img(333, 300, cn, static_cast<std::size_t>(300) * cn, rng);
    for (int fill = 0; fill < 4; ++fill) {
      for (int k = 0; k < 4; ++k) {
        const Case c{cn, fill, k == 3 ? 0 : 1, k == 1, k == 1};
        const Affine a = random_affine(rng, 333, 300, 299, 299, false);
        EXPECT_EQ(compare(GetParam(), c, img.view(), 299, 299, a, lut.data()), 0);
      }
    }
  }
}

// The whole augmenter with the kernel forced, on the seed's augmentation and its variants.
TEST_P(VectorWarp, AugmenterOutputUnchanged) {
  std::mt19937 rng(5);
  const int h = 180, w = 241;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 7 + rng() % 16) & 255);
  const ImageView src{pixels.data(), h, w, 3, static_cast<std::size_t>(w) * 3};
  for (const FillMode fill : {FillMode::Nearest, FillMode::Constant, FillMode::Reflect}) {
    AugmentSpec spec = keras_example_augmentation(99, 101);
    spec.fill_mode = fill;
    spec.cval = 30.0f;
    const Augmenter aug(spec);
    const std::size_t bytes = aug.output_shape().bytes();
    std::vector<std::byte> expected(bytes), actual(bytes);
    const WarpIsa chosen = warp_isa();
    for (std::int64_t id = 0; id < 40; ++id) {
      const SampleContext ctx{3, 1, id};
      set_warp_isa(WarpIsa::Scalar);
      aug.apply(src, ctx, expected.data());
      set_warp_isa(GetParam());
      aug.apply(src, ctx, actual.data());
      EXPECT_EQ(std::memcmp(expected.data(), actual.data(), bytes), 0) << "sample " << id;
    }
    set_warp_isa(chosen);
  }
}

// Brightness (or no photometric step) with float or NCHW outputs: the warp applies the table and
// the output affine follows row by row; bit-identical to the per-pixel reference on warps.
TEST(AugmenterOutputs, TablePhotometricMatchesTheReferenceInEveryFormat) {
  std::mt19937 rng(11);
  int warps = 0;
  for (const int cn : {1, 3, 4}) {
    const int h = 71, w = 88;
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(h) * w * cn);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(rng());
    const ImageView src{pixels.data(), h, w, cn, static_cast<std::size_t>(w) * cn};
    for (const DType dtype : {DType::U8, DType::F32}) {
      for (const Layout layout : {Layout::NHWC, Layout::NCHW}) {
        for (const bool brightness : {true, false}) {
          AugmentSpec spec = keras_example_augmentation(45, 53);
          spec.channels = cn;
          spec.dtype = dtype;
          spec.layout = layout;
          if (!brightness) spec.brightness_range.reset();
          // Normalisations with and without the swap of red and blue, or a rescale (float only).
          if (dtype == DType::F32 && cn == 3) {
            spec.normalization = layout == Layout::NCHW ? ChannelNormalization::torch() : ChannelNormalization::caffe();
          } else if (dtype == DType::F32) {
            spec.rescale = 1.0 / 255;
          }
          const Augmenter aug(spec);
          const std::size_t bytes = aug.output_shape().bytes();
          std::vector<std::byte> fast(bytes), ref(bytes);
          for (std::int64_t id = 0; id < 12; ++id) {
            const SampleContext ctx{2, 0, id};
            if (is_resize_only(aug.params(ctx, h, w))) continue;
            aug.apply(src, ctx, fast.data());
            aug.apply_reference(src, ctx, ref.data());
            EXPECT_EQ(std::memcmp(fast.data(), ref.data(), bytes), 0)
                << "cn " << cn << " f32 " << (dtype == DType::F32) << " nchw " << (layout == Layout::NCHW)
                << " brightness " << brightness << " sample " << id;
            ++warps;
          }
        }
      }
    }
  }
  EXPECT_GT(warps, 200);
}

// f16 and bf16 outputs on the CPU: each value is the f32 output's, rounded as it is stored
// (core/half.hpp, as the CUDA kernels round), bit for bit, on every path of the executor: the
// warp's table (brightness), the per-value table (contrast), the row pass (saturation, hue), the
// sample-wise standardisation, with and without a normalisation, NHWC and NCHW, fast and reference.
TEST(AugmenterOutputs, HalfPrecisionIsTheFloatOutputRoundedAsStored) {
  std::mt19937 rng(23);
  const int h = 61, w = 77, cn = 3;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(h) * w * cn);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(rng());
  const ImageView src{pixels.data(), h, w, cn, static_cast<std::size_t>(w) * cn};
  int compared = 0;
  for (int path = 0; path < 4; ++path) {
    for (const Layout layout : {Layout::NHWC, Layout::NCHW}) {
      AugmentSpec spec = keras_example_augmentation(40, 47);
      spec.layout = layout;
      if (path == 1) spec.contrast = 0.4;
      if (path == 2) spec.saturation = 0.5, spec.hue = 0.1;
      if (path == 3) spec.samplewise_center = spec.samplewise_std_normalization = true;
      if (path != 3) spec.normalization = ChannelNormalization::torch();
      spec.dtype = DType::F32;
      const Augmenter f32(spec);
      std::vector<std::byte> want(f32.output_shape().bytes());
      for (const DType half : {DType::F16, DType::BF16}) {
        spec.dtype = half;
        const Augmenter aug(spec);
        ASSERT_EQ(aug.output_shape().bytes(), want.size() / 2);
        std::vector<std::byte> got(aug.output_shape().bytes());
        for (std::int64_t id = 0; id < 6; ++id) {
          const SampleContext ctx{4, 1, id};
          for (const bool reference : {false, true}) {
            SCOPED_TRACE("path " + std::to_string(path) + (layout == Layout::NCHW ? " nchw " : " nhwc ") +
                         to_string(half) + " sample " + std::to_string(id) + (reference ? " reference" : ""));
            reference ? f32.apply_reference(src, ctx, want.data()) : f32.apply(src, ctx, want.data());
            reference ? aug.apply_reference(src, ctx, got.data()) : aug.apply(src, ctx, got.data());
            const float* v = reinterpret_cast<const float*>(want.data());
            const std::uint16_t* bits = reinterpret_cast<const std::uint16_t*>(got.data());
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < got.size() / 2; ++i) {
              const std::uint16_t expected = half == DType::F16 ? convert::f16_bits(v[i]) : convert::bf16_bits(v[i]);
              wrong += bits[i] != expected;
            }
            EXPECT_EQ(wrong, 0u);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 4 * 2 * 2 * 6 * 2);
}

INSTANTIATE_TEST_SUITE_P(Kernels, VectorWarp, ::testing::Values(WarpIsa::Avx2, WarpIsa::Avx512),
                         [](const ::testing::TestParamInfo<WarpIsa>& info) { return warp_isa_name(info.param); });

TEST(WarpDispatch, PicksTheWidestSupportedKernel) {
  const WarpIsa expected = warp_isa_available(WarpIsa::Avx512) ? WarpIsa::Avx512
                           : warp_isa_available(WarpIsa::Avx2) ? WarpIsa::Avx2
                                                               : WarpIsa::Scalar;
  EXPECT_EQ(warp_isa(), expected);
  EXPECT_TRUE(warp_isa_available(WarpIsa::Scalar));
}

}  // namespace
}  // namespace stoker::augment
