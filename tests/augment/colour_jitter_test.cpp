// The CPU executor's colour-jitter path (saturation, hue: the photometric steps that are not a
// function of the single value) against the slow per-pixel reference executor, bit for bit.
// apply_with() runs these steps row by row in vectorised, branch-free loops
// (augment/src/photometric_rows.hpp); apply_reference_with() calls augment::photometric() per
// pixel, the code the CUDA kernel shares. Any difference, even in the last bit of a float
// output, fails here. The geometry is a warp (bit-identical in both executors) or, for the
// colour-grid images, a same-size resize (a copy in both). The row kernels themselves are also
// checked on every 24-bit colour in each instruction-set variant the executor may pick (baseline
// x86-64 and AVX2), since the executor only runs the one this machine selects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "params.hpp"
#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/pipeline/transform.hpp"

#include "../../augment/src/photometric_rows.hpp"  // the CPU executor's row kernels

namespace stoker {
namespace {

using augment::SampleParams;

ImageView view_of(const cv::Mat& m) {
  return ImageView{m.ptr<std::uint8_t>(), m.rows, m.cols, m.channels(), static_cast<std::size_t>(m.step)};
}

// Random pixels, a third of them drawn from a few values (0, 1, 127, 128, 254, 255) so that grey
// pixels, black pixels, ties between the largest channels and the clipping ends are common.
cv::Mat random_image(int h, int w, int cn, std::mt19937& rng) {
  cv::Mat m(h, w, CV_8UC(cn));
  static constexpr std::uint8_t kSpecial[] = {0, 1, 127, 128, 254, 255};
  std::uniform_int_distribution<int> any(0, 255), pick(0, 5), kind(0, 5);
  for (int y = 0; y < h; ++y) {
    std::uint8_t* row = m.ptr<std::uint8_t>(y);
    for (int x = 0; x < w; ++x) {
      const int k = kind(rng);
      const std::uint8_t grey = static_cast<std::uint8_t>(any(rng));
      for (int c = 0; c < cn; ++c) {
        std::uint8_t v = static_cast<std::uint8_t>(any(rng));
        if (k == 0) v = kSpecial[pick(rng)];
        if (k == 1) v = grey;                  // R = G = B
        if (k == 2 && c > 0) v = row[x * cn];  // ties with the first channel
        row[x * cn + c] = v;
      }
    }
  }
  return m;
}

// Warp geometry: a small rotation and zoom (the reference and the fast warp agree exactly).
SampleParams warp_params(int src_h, int src_w, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  SampleParams p;
  p.crop_w = static_cast<float>(src_w);
  p.crop_h = static_cast<float>(src_h);
  p.theta = 3.0f + 10.0f * u(rng);
  p.zx = 1.0f + 0.1f * u(rng);
  p.zy = 1.0f + 0.1f * u(rng);
  p.flip_horizontal = u(rng) > 0;
  return p;
}

// Photometric steps `mask` (bit 0 channel shift, 1 brightness, 2 contrast, 3 saturation, 4 hue)
// with random factors; `extreme` picks the ends of the ranges instead.
void set_photometric(SampleParams& p, int mask, bool extreme, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const auto either = [&](float a, float b) { return u(rng) < 0.5f ? a : b; };
  p.has_channel_shift = mask & 1;
  p.channel_shift = extreme ? either(-255.0f, 255.0f) : -40.0f + 80.0f * u(rng);  // fractional
  p.has_brightness = mask & 2;
  p.brightness = extreme ? either(0.0f, 2.0f) : 0.3f + 1.4f * u(rng);
  p.has_contrast = mask & 4;
  p.contrast = extreme ? either(0.0f, 2.0f) : 2.0f * u(rng);
  p.has_saturation = mask & 8;
  p.saturation = extreme ? either(0.0f, 3.0f) : 2.5f * u(rng);
  p.has_hue = mask & 16;
  p.hue = extreme ? either(-0.5f, 0.5f) : -0.5f + u(rng);
}

struct Output {
  DType dtype;
  Layout layout;
  int norm;  // 0 none, 1 torch, 2 caffe (BGR swap), 3 sample-wise std, 4 preprocessing_function
};

std::string describe(const Output& o, int cn) {
  return std::string(o.dtype == DType::U8 ? "u8" : "f32") + (o.layout == Layout::NCHW ? " NCHW" : " NHWC") + " norm " +
         std::to_string(o.norm) + " channels " + std::to_string(cn);
}

AugmentSpec spec_for(const Output& o, int h, int w, int cn) {
  AugmentSpec s;
  s.height = h;
  s.width = w;
  s.channels = cn;
  s.dtype = o.dtype;
  s.layout = o.layout;
  switch (o.norm) {
    case 1: s.normalization = ChannelNormalization::torch(); break;
    case 2: s.normalization = ChannelNormalization::caffe(); break;
    case 3:
      s.rescale = 1.0 / 255;
      s.samplewise_std_normalization = true;
      break;
    case 4:
      s.preprocessing_function = [](float* px, int hh, int ww, int c, const SampleContext&) {
        for (int i = 0; i < hh * ww * c; ++i) px[i] = 0.5f * px[i] + 1.0f;
      };
      break;
    default: break;
  }
  return s;
}

std::vector<Output> outputs(int cn) {
  std::vector<Output> out;
  for (const Layout layout : {Layout::NHWC, Layout::NCHW}) {
    out.push_back({DType::U8, layout, 0});
    for (int norm = 0; norm <= 4; ++norm) {
      if (norm == 2 && cn < 3) continue;
      out.push_back({DType::F32, layout, norm});
    }
  }
  return out;
}

// apply_with against apply_reference_with, memcmp of the whole output.
bool bit_identical(const Augmenter& aug, const cv::Mat& src, const SampleParams& p) {
  const std::size_t bytes = aug.output_shape().bytes();
  std::vector<std::byte> fast(bytes, std::byte{0xA5}), ref(bytes, std::byte{0x5A});
  aug.apply_with(view_of(src), p, SampleContext{3, 1, 7}, fast.data());
  aug.apply_reference_with(view_of(src), p, SampleContext{3, 1, 7}, ref.data());
  return std::memcmp(fast.data(), ref.data(), bytes) == 0;
}

TEST(ColourJitter, FastPathIsBitIdenticalToThePerPixelReference) {
  std::mt19937 rng(20240611);
  const int sizes[][4] = {{37, 53, 31, 45}, {61, 29, 57, 33}, {18, 99, 23, 71}};  // source h, w; output h, w
  int compared = 0;
  for (const int cn : {1, 3, 4}) {
    for (const auto& sz : sizes) {
      const cv::Mat src = random_image(sz[0], sz[1], cn, rng);
      for (const Output& o : outputs(cn)) {
        const Augmenter aug(spec_for(o, sz[2], sz[3], cn));
        for (int mask = 0; mask < 32; ++mask) {
          for (int draw = 0; draw < 3; ++draw) {
            SampleParams p = warp_params(sz[0], sz[1], rng);
            set_photometric(p, mask, draw == 2, rng);
            ASSERT_TRUE(bit_identical(aug, src, p))
                << describe(o, cn) << " source " << sz[0] << "x" << sz[1] << " steps " << mask << " draw " << draw
                << " shift " << p.channel_shift << " brightness " << p.brightness << " contrast " << p.contrast
                << " saturation " << p.saturation << " hue " << p.hue;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 32 * 3 * (10 + 12 + 12));
}

// A quarter of the 24-bit colours (images of 1024 x 1024, one per high nibble of red 0, 5, 10,
// 15), output as float so that no rounding to uint8 can hide a difference.
TEST(ColourJitter, EveryColourIsBitIdenticalToThePerPixelReference) {
  AugmentSpec s;
  s.height = s.width = 1024;
  s.dtype = DType::F32;
  const Augmenter aug(s);
  SampleParams hue_only;
  hue_only.crop_w = hue_only.crop_h = 1024;  // same size, neutral geometry: a copy in both executors
  hue_only.has_hue = true;
  hue_only.hue = 0.3183f;
  SampleParams jitter = hue_only;
  jitter.has_saturation = true;
  jitter.saturation = 1.37f;
  jitter.hue = -0.4471f;
  SampleParams shifted = jitter;  // fractional values into saturation and hue
  shifted.has_channel_shift = true;
  shifted.channel_shift = -17.3f;
  cv::Mat src(1024, 1024, CV_8UC3);
  for (int hi = 0; hi < 16; hi += 5) {
    for (int y = 0; y < 1024; ++y) {
      for (int x = 0; x < 1024; ++x) {
        const int i = y * 1024 + x;  // 20 bits: red's low nibble, green, blue
        src.at<cv::Vec3b>(y, x) =
            cv::Vec3b(static_cast<std::uint8_t>(hi * 16 + (i >> 16)), static_cast<std::uint8_t>((i >> 8) & 255),
                      static_cast<std::uint8_t>(i & 255));
      }
    }
    EXPECT_TRUE(bit_identical(aug, src, hue_only)) << "hue, red " << hi * 16 << "..";
    EXPECT_TRUE(bit_identical(aug, src, jitter)) << "saturation + hue, red " << hi * 16 << "..";
    if (hi == 0 || hi == 15) {
      EXPECT_TRUE(bit_identical(aug, src, shifted)) << "channel shift + saturation + hue, red " << hi * 16 << "..";
    }
  }
}

// The row kernels as augmenter.cpp compiles them: flattened into one function per instruction set.
using RowFn = void (*)(const augment::rows::PhotometricConstants&, const augment::rows::RowTarget&, const std::uint8_t*,
                       int, float* const*);
[[gnu::flatten]] void row_baseline(const augment::rows::PhotometricConstants& k, const augment::rows::RowTarget& t,
                                   const std::uint8_t* warped, int y, float* const* plane) {
  augment::rows::process_row(k, t, warped, y, plane);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2"), gnu::flatten]] void row_avx2(const augment::rows::PhotometricConstants& k,
                                                    const augment::rows::RowTarget& t, const std::uint8_t* warped,
                                                    int y, float* const* plane) {
  augment::rows::process_row(k, t, warped, y, plane);
}
#endif

std::vector<std::pair<const char*, RowFn>> row_variants() {
  std::vector<std::pair<const char*, RowFn>> v{{"baseline", &row_baseline}};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2")) v.emplace_back("avx2", &row_avx2);
#endif
  return v;
}

// Every 24-bit colour, in rows of an odd width (the vector loops' remainders too), through each
// variant of the row kernel into interleaved floats, NCHW floats and NHWC uint8 (with an output
// affine), against photometric() and the affine per pixel.
TEST(ColourJitter, RowKernelsMatchPhotometricOnEveryColourInEveryVariant) {
  constexpr int kWidth = 4093, kCn = 3;
  constexpr int kColours = 1 << 24;
  augment::OutputAffine oa{};
  const float scale[3] = {1.0f / (0.229f * 255), 1.0f / (0.224f * 255), 1.0f / (0.225f * 255)};
  const float offset[3] = {-0.485f / 0.229f, -0.456f / 0.224f, -0.406f / 0.225f};
  for (int c = 0; c < kCn; ++c) {
    oa.scale[c] = scale[c];
    oa.offset[c] = offset[c];
    oa.source_channel[c] = 2 - c;  // swap_rb
  }
  augment::OutputAffine oa8{};
  for (int c = 0; c < kCn; ++c) oa8.scale[c] = 1.0f, oa8.offset[c] = 0.0f, oa8.source_channel[c] = c;

  augment::WarpStats st;
  st.min = 3;
  st.max = 250;
  st.luma_sum = 123456789;
  st.pixels = 1000000;
  std::vector<SampleParams> settings(3);
  settings[0].has_hue = true;
  settings[0].hue = 0.2113f;
  settings[1].has_saturation = true;
  settings[1].saturation = 0.6131f;
  settings[1].has_hue = true;
  settings[1].hue = -0.3779f;
  settings[2] = settings[1];
  settings[2].has_channel_shift = true;
  settings[2].channel_shift = 11.71f;
  settings[2].has_brightness = true;
  settings[2].brightness = 1.19f;
  settings[2].has_contrast = true;
  settings[2].contrast = 0.77f;
  settings[2].saturation = 1.9f;

  std::vector<std::uint8_t> in(static_cast<std::size_t>(kWidth) * kCn);
  std::vector<float> want(in.size()), got(in.size()), nchw(in.size()), want_nchw(in.size());
  std::vector<std::uint8_t> u8(in.size()), want_u8(in.size());
  std::vector<float> scratch(in.size());
  float* plane[3] = {scratch.data(), scratch.data() + kWidth, scratch.data() + 2 * kWidth};
  const auto variants = row_variants();
  for (std::size_t si = 0; si < settings.size(); ++si) {
    const SampleParams& s = settings[si];
    const float cmean = s.has_contrast ? augment::contrast_mean(s, st) : 0.0f;
    const augment::rows::PhotometricConstants k = augment::rows::photometric_constants(s, st, cmean, kCn);
    int mismatches = 0;
    for (int first = 0; first < kColours && mismatches == 0; first += kWidth) {
      const int n = std::min(kWidth, kColours - first);
      for (int x = 0; x < n; ++x) {
        const int colour = first + x;
        in[x * 3] = static_cast<std::uint8_t>(colour >> 16);
        in[x * 3 + 1] = static_cast<std::uint8_t>(colour >> 8);
        in[x * 3 + 2] = static_cast<std::uint8_t>(colour);
        float v[3];
        for (int c = 0; c < kCn; ++c) v[c] = in[x * 3 + c];
        augment::photometric(s, st, cmean, kCn, v);
        for (int c = 0; c < kCn; ++c) {
          want[x * 3 + c] = v[c];
          want_nchw[static_cast<std::size_t>(c) * n + x] =
              augment::hd::add(augment::hd::mul(v[2 - c], oa.scale[c]), oa.offset[c]);
          want_u8[x * 3 + c] =
              augment::hd::to_u8(augment::hd::add(augment::hd::mul(v[c], oa8.scale[c]), oa8.offset[c]));
        }
      }
      for (const auto& [name, fn] : variants) {
        augment::rows::RowTarget t;
        t.width = n;
        t.height = 1;
        t.channels = kCn;
        t.values = got.data();
        fn(k, t, in.data(), 0, plane);
        t.values = nullptr;
        t.float_output = true;
        t.nchw = true;
        t.oa = &oa;
        t.dst = reinterpret_cast<std::byte*>(nchw.data());
        fn(k, t, in.data(), 0, plane);
        t.float_output = false;
        t.nchw = false;
        t.oa = &oa8;
        t.dst = reinterpret_cast<std::byte*>(u8.data());
        fn(k, t, in.data(), 0, plane);
        const std::size_t m = static_cast<std::size_t>(n) * kCn;
        const bool values_ok = std::memcmp(got.data(), want.data(), m * sizeof(float)) == 0;
        const bool nchw_ok = std::memcmp(nchw.data(), want_nchw.data(), m * sizeof(float)) == 0;
        const bool u8_ok = std::memcmp(u8.data(), want_u8.data(), m) == 0;
        if (!values_ok || !nchw_ok || !u8_ok) {
          ++mismatches;
          std::size_t i = 0;
          while (i < m && std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
          ADD_FAILURE() << name << " setting " << si << " colours from " << first << ": values " << values_ok
                        << " nchw " << nchw_ok << " u8 " << u8_ok
                        << (i < m ? " first value difference at colour " + std::to_string(first + i / 3) + " channel " +
                                        std::to_string(i % 3) + ": " + std::to_string(got[i]) + " vs " +
                                        std::to_string(want[i])
                                  : std::string());
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker
