// Tests that pin the augmenter's semantics: neutral parameters, exact geometric cases, fill
// modes, photometric steps, the slow reference against the fast path, the parameter draw and
// determinism across thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "params.hpp"
#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/transform.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

using augment::SampleParams;

ImageView view_of(const cv::Mat& m) {
  return ImageView{m.ptr<std::uint8_t>(), m.rows, m.cols, m.channels(), static_cast<std::size_t>(m.step)};
}

// The seed's augmentation: rotation 30, shifts 0.4, shear 0.4, zoom 0.25, h-flip,
// brightness [0.5, 1.5].
AugmentSpec seed_spec(int h, int w) { return keras_example_augmentation(h, w); }

SampleParams neutral(int h, int w) {
  SampleParams p;
  p.crop_w = static_cast<float>(w);
  p.crop_h = static_cast<float>(h);
  return p;
}

cv::Mat run(const Augmenter& a, const cv::Mat& src, const SampleParams& p) {
  const SampleShape sh = a.output_shape();
  cv::Mat out(sh.height, sh.width, CV_8UC(sh.channels));
  a.apply_with(view_of(src), p, SampleContext{}, reinterpret_cast<std::byte*>(out.data));
  return out;
}

cv::Mat run(const Augmenter& a, const cv::Mat& src, const SampleContext& ctx) {
  const SampleShape sh = a.output_shape();
  cv::Mat out(sh.height, sh.width, CV_8UC(sh.channels));
  a.apply(view_of(src), ctx, reinterpret_cast<std::byte*>(out.data));
  return out;
}

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(AugmentSemantics, NeutralParametersReproduceThePlainResizeExactly) {
  const cv::Mat src = test::make_pattern_rgb(97, 131, 1);
  for (const bool keep_aspect : {false, true}) {
    for (const int order : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "keep_aspect_ratio " << keep_aspect << " order " << order);
      AugmentSpec s;
      s.height = 40;
      s.width = 56;
      s.interpolation_order = order;
      if (keep_aspect) s.center_crop = CenterCrop{1.0, true};
      const Augmenter aug(s);
      const cv::Mat got = run(aug, src, SampleContext{7, 1, 3});
      // The warp's own resize: centre_nearest / opencv_linear (Pillow's filters are the loader's, not the warp's).
      const ResizeTransform plain(40, 56, order == 1 ? Interpolation::OpenCvLinear : Interpolation::CentreNearest,
                                  keep_aspect);
      cv::Mat want(40, 56, CV_8UC3);
      plain.apply(view_of(src), SampleContext{}, reinterpret_cast<std::byte*>(want.data));
      EXPECT_TRUE(same(got, want));
      if (order == 1 && !keep_aspect) {
        cv::Mat cvr;
        cv::resize(src, cvr, cv::Size(56, 40), 0, 0, cv::INTER_LINEAR);
        EXPECT_TRUE(same(got, cvr));
      }
    }
  }
  // The validation pipeline of the seed's augmentation is the plain resize too.
  const Augmenter val(seed_spec(40, 56).validation());
  cv::Mat cvr;
  cv::resize(src, cvr, cv::Size(56, 40), 0, 0, cv::INTER_LINEAR);
  for (int id = 0; id < 5; ++id) EXPECT_TRUE(same(run(val, src, SampleContext{1, 2, id}), cvr));
}

TEST(AugmentSemantics, Rotation90OfASquareImageEqualsCvRotate) {
  const cv::Mat src = test::make_pattern_rgb(33, 33, 0);
  for (const FillMode mode : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (const int order : {0, 1}) {
      AugmentSpec s;
      s.height = s.width = 33;
      s.fill_mode = mode;
      s.interpolation_order = order;
      const Augmenter aug(s);
      SampleParams p = neutral(33, 33);
      p.theta = 90;
      cv::Mat want;
      cv::rotate(src, want, cv::ROTATE_90_COUNTERCLOCKWISE);  // Keras' positive angles turn content anticlockwise
      EXPECT_TRUE(same(run(aug, src, p), want)) << to_string(mode) << " order " << order;
      p.theta = -90;
      cv::rotate(src, want, cv::ROTATE_90_CLOCKWISE);
      EXPECT_TRUE(same(run(aug, src, p), want)) << to_string(mode) << " order " << order;
      p.theta = 180;
      cv::rotate(src, want, cv::ROTATE_180);
      EXPECT_TRUE(same(run(aug, src, p), want)) << to_string(mode) << " order " << order;
    }
  }
}

// Expected index of coordinate i on an axis of n under each fill mode (scipy.ndimage).
int expected_index(int i, int n, FillMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case FillMode::Constant: return -1;
    case FillMode::Nearest: return std::clamp(i, 0, n - 1);
    case FillMode::Reflect: {  // d c b a | a b c d | d c b a
      int j = ((i % (2 * n)) + 2 * n) % (2 * n);
      return j < n ? j : 2 * n - 1 - j;
    }
    case FillMode::Wrap: {  // period n - 1: the first and the last pixel overlap
      const int period = n - 1;
      return ((i % period) + period) % period;
    }
  }
  return -1;
}

TEST(AugmentSemantics, IntegerShiftMovesPixelsExactlyAndFillsByMode) {
  const int h = 9, w = 11;
  cv::Mat src(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) src.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 20, y * 25, (x * 7 + y * 13) % 251);
  for (const FillMode mode : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (const int order : {0, 1}) {
      for (const auto& [tx, ty] : std::vector<std::pair<int, int>>{{3, -2}, {-4, 5}, {13, -20}, {-25, 9}}) {
        SCOPED_TRACE(::testing::Message() << to_string(mode) << " order " << order << " tx " << tx << " ty " << ty);
        AugmentSpec s;
        s.height = h;
        s.width = w;
        s.fill_mode = mode;
        s.cval = 77;
        s.interpolation_order = order;
        const Augmenter aug(s);
        SampleParams p = neutral(h, w);
        p.tx = static_cast<float>(tx);  // Keras: the output at x shows the input at x + tx
        p.ty = static_cast<float>(ty);
        const cv::Mat got = run(aug, src, p);
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            const int ix = expected_index(x + tx, w, mode), iy = expected_index(y + ty, h, mode);
            const cv::Vec3b want = (ix < 0 || iy < 0) ? cv::Vec3b(77, 77, 77) : src.at<cv::Vec3b>(iy, ix);
            ASSERT_EQ(got.at<cv::Vec3b>(y, x), want) << "at " << x << "," << y;
          }
        }
      }
    }
  }
}

TEST(AugmentSemantics, FlippingTwiceIsTheIdentityAndAFlipIsCvFlip) {
  const cv::Mat src = test::make_pattern_rgb(31, 45, 2);
  AugmentSpec s;
  s.height = 31;
  s.width = 45;
  const Augmenter aug(s);
  for (const auto& [fh, fv, code] :
       std::vector<std::tuple<bool, bool, int>>{{true, false, 1}, {false, true, 0}, {true, true, -1}}) {
    SampleParams p = neutral(31, 45);
    p.flip_horizontal = fh;
    p.flip_vertical = fv;
    const cv::Mat once = run(aug, src, p);
    cv::Mat want;
    cv::flip(src, want, code);
    EXPECT_TRUE(same(once, want));
    EXPECT_TRUE(same(run(aug, once, p), src));
    // Through the warp path as well (a tiny rotation forces the warp; 0.0 degrees of shear is neutral).
    SampleParams q = p;
    q.theta = 360;  // a full turn: warp path, same pixels up to rounding of cos/sin
    const cv::Mat twice = run(aug, run(aug, src, q), q);
    EXPECT_LE(cv::norm(twice, src, cv::NORM_INF), 1.0);
  }
}

TEST(AugmentSemantics, BrightnessScalesAndChannelShiftShiftsAsSpecified) {
  cv::Mat src(8, 8, CV_8UC3);
  cv::randu(src, 10, 201);
  src.at<cv::Vec3b>(0, 0) = cv::Vec3b(10, 10, 10);
  src.at<cv::Vec3b>(0, 1) = cv::Vec3b(200, 200, 200);
  AugmentSpec s;
  s.height = s.width = 8;
  const Augmenter aug(s);
  for (const float b : {0.5f, 1.0f, 1.37f, 2.0f}) {
    SampleParams p = neutral(8, 8);
    p.has_brightness = true;
    p.brightness = b;
    const cv::Mat got = run(aug, src, p);
    for (int i = 0; i < 8 * 8 * 3; ++i) {
      // PIL's ImageEnhance.Brightness on uint8: truncate(v * b), clipped.
      ASSERT_EQ(got.data[i], static_cast<int>(std::min(255.0f, std::floor(src.data[i] * b)))) << "brightness " << b;
    }
  }
  for (const float cs : {30.0f, -25.5f, 300.0f}) {
    SampleParams p = neutral(8, 8);
    p.has_channel_shift = true;
    p.channel_shift = cs;
    const cv::Mat got = run(aug, src, p);
    for (int i = 0; i < 8 * 8 * 3; ++i) {
      // Keras' apply_channel_shift: clip(x + intensity, min(x), max(x)).
      const float want = std::clamp(src.data[i] + cs, 10.0f, 200.0f);
      ASSERT_EQ(got.data[i], static_cast<int>(want + 0.5f)) << "shift " << cs;
    }
  }
}

std::vector<cv::Mat> sample_images() {
  std::vector<cv::Mat> out;
  out.push_back(test::make_pattern_rgb(150, 200, 0));
  out.push_back(test::make_pattern_rgb(181, 121, 1));
  if (const auto dir = test::shared_data_dir()) {
    for (const char* name : {"catsdogs/cat/cat.1.jpg", "catsdogs/dog/dog.10.jpg"}) {
      cv::Mat bgr = cv::imread((*dir / name).string(), cv::IMREAD_COLOR);
      if (bgr.empty()) continue;
      cv::Mat rgb;
      cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
      out.push_back(rgb);
    }
  }
  return out;
}

TEST(AugmentSemantics, SlowReferenceAgreesWithTheFastPathWithinOneGreyLevel) {
  const std::vector<cv::Mat> images = sample_images();
  int compared = 0, warps_bit_exact = 0, warps = 0;
  for (const FillMode mode : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (const int order : {0, 1}) {
      for (const bool float_nchw : {false, true}) {
        AugmentSpec s = seed_spec(64, 72);
        s.fill_mode = mode;
        s.cval = 40;
        s.interpolation_order = order;
        s.vertical_flip = true;
        s.channel_shift_range = 20;
        if (float_nchw) {
          s.dtype = DType::F32;
          s.layout = Layout::NCHW;
          s.contrast = 0.3;
          s.saturation = 0.4;
          s.hue = 0.1;
          s.normalization = ChannelNormalization::torch();
          s.random_resized_crop = RandomResizedCrop{};
        }
        const Augmenter aug(s);
        const std::size_t n = aug.output_shape().elements();
        for (std::size_t k = 0; k < images.size(); ++k) {
          for (int id = 0; id < 6; ++id) {
            const SampleContext ctx{11, 2, static_cast<std::int64_t>(k * 100 + id)};
            std::vector<std::byte> fast(aug.output_shape().bytes()), ref(aug.output_shape().bytes());
            aug.apply(view_of(images[k]), ctx, fast.data());
            aug.apply_reference(view_of(images[k]), ctx, ref.data());
            double worst = 0;
            for (std::size_t i = 0; i < n; ++i) {
              const double a =
                  float_nchw ? reinterpret_cast<const float*>(fast.data())[i] : std::to_integer<int>(fast[i]);
              const double b =
                  float_nchw ? reinterpret_cast<const float*>(ref.data())[i] : std::to_integer<int>(ref[i]);
              worst = std::max(worst, std::abs(a - b));
            }
            // One grey level; for float outputs, one grey level after normalisation by std 0.224*255.
            const double bound = float_nchw ? 1.0 / (0.224 * 255) + 1e-5 : 1.0;
            EXPECT_LE(worst, bound) << to_string(mode) << " order " << order << " image " << k << " id " << id;
            const bool warp = !augment::is_resize_only(aug.params(ctx, images[k].rows, images[k].cols));
            warps += warp;
            warps_bit_exact += warp && worst == 0;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(warps, 100);
  EXPECT_EQ(warps_bit_exact, warps) << "the warp loop and the per-pixel function share their fixed-point math";
}

TEST(AugmentSemantics, DrawnParametersStayInTheirRangesAndCoverThem) {
  AugmentSpec s = seed_spec(299, 299);
  s.vertical_flip = true;
  s.channel_shift_range = 25;
  s.contrast = 0.2;
  const Augmenter aug(s);
  const int n = 20000;
  constexpr int kBins = 10;
  struct Hist {
    double lo, hi;
    int bins[kBins] = {};
    void add(double v) {
      ASSERT_GE(v, lo);
      ASSERT_LT(v, hi);
      bins[std::min(kBins - 1, static_cast<int>((v - lo) / (hi - lo) * kBins))]++;
    }
  };
  Hist theta{-30, 30}, tx{-0.4 * 299, 0.4 * 299}, ty{-0.4 * 299, 0.4 * 299}, shear{-0.4, 0.4}, zx{0.75, 1.25},
      zy{0.75, 1.25}, bright{0.5, 1.5}, shift{-25, 25}, contrast{0.8, 1.2};
  int flips_h = 0, flips_v = 0;
  for (int i = 0; i < n; ++i) {
    const SampleParams p = aug.params(SampleContext{2024, 0, i}, 400, 300);
    theta.add(p.theta), tx.add(p.tx), ty.add(p.ty), shear.add(p.shear), zx.add(p.zx), zy.add(p.zy);
    ASSERT_TRUE(p.has_brightness && p.has_channel_shift && p.has_contrast);
    bright.add(p.brightness), shift.add(p.channel_shift), contrast.add(p.contrast);
    flips_h += p.flip_horizontal, flips_v += p.flip_vertical;
  }
  for (const Hist* h : {&theta, &tx, &ty, &shear, &zx, &zy, &bright, &shift, &contrast}) {
    for (int b = 0; b < kBins; ++b) {
      // Expected n / 10 = 2000 per bin, binomial sd ~42: 5 sd either way.
      EXPECT_NEAR(h->bins[b], n / kBins, 220) << "range [" << h->lo << ", " << h->hi << ") bin " << b;
    }
  }
  EXPECT_NEAR(flips_h, n / 2, 400);
  EXPECT_NEAR(flips_v, n / 2, 400);
  // zx and zy are independent draws (Keras draws two values).
  int both_above = 0;
  for (int i = 0; i < 4000; ++i) {
    const SampleParams p = aug.params(SampleContext{5, 0, i}, 100, 100);
    both_above += p.zx > 1 && p.zy > 1;
  }
  EXPECT_NEAR(both_above, 1000, 120);
}

TEST(AugmentSemantics, IntegerAndListShiftsDrawLikeKeras) {
  AugmentSpec s;
  s.height = 50;
  s.width = 80;
  s.height_shift_range = ShiftRange::integer(4);           // numpy choice(4) * choice([-1, 1])
  s.width_shift_range = ShiftRange::choices({0.1, 0.25});  // fractions of the width
  const Augmenter aug(s);
  std::map<float, int> tx_seen, ty_seen;
  for (int i = 0; i < 8000; ++i) {
    const SampleParams p = aug.params(SampleContext{3, 1, i}, 50, 80);
    tx_seen[p.tx]++;  // Keras: tx comes from height_shift_range
    ty_seen[p.ty]++;
  }
  std::set<float> tx_values, ty_values;
  for (const auto& [v, count] : tx_seen) tx_values.insert(v);
  for (const auto& [v, count] : ty_seen) ty_values.insert(v);
  EXPECT_EQ(tx_values, (std::set<float>{-3, -2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(ty_values, (std::set<float>{-20, -8, 8, 20}));
  EXPECT_NEAR(tx_seen[0], 2000, 200);  // 0 has both signs: twice as likely
  EXPECT_NEAR(tx_seen[3], 1000, 150);
}

TEST(AugmentSemantics, SameSeedGivesBitIdenticalBatchesWithOneAndTwoThreads) {
  const std::vector<cv::Mat> images = sample_images();
  AugmentSpec s = seed_spec(96, 96);
  s.channel_shift_range = 10;
  s.random_resized_crop = RandomResizedCrop{};
  s.dtype = DType::F32;
  s.normalization = ChannelNormalization::minus_one_to_one();
  const Augmenter aug(s);
  const int samples = 64;
  const std::size_t bytes = aug.output_shape().bytes();
  auto batch = [&](int threads, std::uint64_t seed) {
    std::vector<std::byte> out(bytes * samples);
    tbb::task_arena arena(threads);
    arena.execute([&] {
      tbb::parallel_for(0, samples, [&](int i) {
        const cv::Mat& im = images[static_cast<std::size_t>(i) % images.size()];
        aug.apply(view_of(im), SampleContext{seed, 3, i}, out.data() + bytes * i);
      });
    });
    return out;
  };
  const std::vector<std::byte> one = batch(1, 99), two = batch(2, 99), again = batch(2, 99), other = batch(2, 100);
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, again);
  EXPECT_NE(one, other);
}

TEST(AugmentSemantics, ValidationModeAppliesOnlyTheDeterministicPart) {
  const cv::Mat src = test::make_pattern_rgb(120, 90, 0);
  AugmentSpec s = seed_spec(48, 48);
  s.random_resized_crop = RandomResizedCrop{{0.08, 1.0}, {0.75, 4.0 / 3.0}, CenterCrop{0.875, true}};
  const Augmenter val(s.validation());
  const cv::Mat a = run(val, src, SampleContext{1, 0, 0});
  EXPECT_TRUE(same(a, run(val, src, SampleContext{2, 5, 77})));
  // The centre crop: a 90x90 box (aspect of the output) then 7/8 of it, resized.
  const SampleParams p = val.params(SampleContext{}, 120, 90);
  EXPECT_EQ(p.crop_w, 79);  // round(90 * 0.875)
  EXPECT_EQ(p.crop_h, 79);
  EXPECT_EQ(p.crop_x, 5);
  EXPECT_EQ(p.crop_y, 20);
  EXPECT_FALSE(p.has_brightness);
  cv::Mat want;
  cv::resize(src(cv::Rect(5, 20, 79, 79)), want, cv::Size(48, 48), 0, 0, cv::INTER_LINEAR);
  EXPECT_TRUE(same(a, want));
}

TEST(AugmentSemantics, RandomResizedCropBoxesStayInsideAndFollowTheScaleRange) {
  AugmentSpec s;
  s.height = s.width = 64;
  s.random_resized_crop = RandomResizedCrop{{0.25, 0.5}, {0.5, 2.0}};
  const Augmenter aug(s);
  double min_area = 1, max_area = 0;
  for (int i = 0; i < 3000; ++i) {
    const SampleParams p = aug.params(SampleContext{8, 0, i}, 300, 400);
    ASSERT_GE(p.crop_x, 0);
    ASSERT_GE(p.crop_y, 0);
    ASSERT_LE(p.crop_x + p.crop_w, 400);
    ASSERT_LE(p.crop_y + p.crop_h, 300);
    const double area = p.crop_w * p.crop_h / (300.0 * 400.0);
    min_area = std::min(min_area, area), max_area = std::max(max_area, area);
    const double ratio = p.crop_w / p.crop_h;
    EXPECT_GT(ratio, 0.5 * 0.95);
    EXPECT_LT(ratio, 2.0 * 1.05);
  }
  EXPECT_GT(min_area, 0.24);
  EXPECT_LT(min_area, 0.27);
  EXPECT_LT(max_area, 0.52);
  EXPECT_GT(max_area, 0.48);
}

TEST(AugmentSemantics, OutputFormatsAndNormalisationPresets) {
  const cv::Mat src = test::make_pattern_rgb(40, 30, 1);
  AugmentSpec base;
  base.height = 20;
  base.width = 16;
  const Augmenter u8(base);
  const cv::Mat ref = run(u8, src, SampleContext{});
  struct Case {
    ChannelNormalization norm;
    bool nchw;
  };
  for (const Case& c : {Case{ChannelNormalization::minus_one_to_one(), false},
                        Case{ChannelNormalization::caffe(), true}, Case{ChannelNormalization::torch(), true}}) {
    AugmentSpec s = base;
    s.dtype = DType::F32;
    s.layout = c.nchw ? Layout::NCHW : Layout::NHWC;
    s.normalization = c.norm;
    const Augmenter aug(s);
    std::vector<float> out(aug.output_shape().elements());
    aug.apply(view_of(src), SampleContext{}, reinterpret_cast<std::byte*>(out.data()));
    for (int y = 0; y < 20; ++y) {
      for (int x = 0; x < 16; ++x) {
        for (int oc = 0; oc < 3; ++oc) {
          const int ic = c.norm.bgr ? 2 - oc : oc;
          const float v = ref.at<cv::Vec3b>(y, x)[ic];
          const float want = (v - c.norm.mean[oc]) / c.norm.std[oc];
          const std::size_t i = c.nchw ? (static_cast<std::size_t>(oc) * 20 + y) * 16 + x
                                       : (static_cast<std::size_t>(y) * 16 + x) * 3 + oc;
          ASSERT_NEAR(out[i], want, 1e-5f);
        }
      }
    }
  }
  // [-1, 1] really is x / 127.5 - 1 at the ends.
  AugmentSpec s = base;
  s.dtype = DType::F32;
  s.normalization = ChannelNormalization::minus_one_to_one();
  cv::Mat black(20, 16, CV_8UC3, cv::Scalar::all(0)), white(20, 16, CV_8UC3, cv::Scalar::all(255));
  const Augmenter aug(s);
  std::vector<float> out(aug.output_shape().elements());
  aug.apply(view_of(black), SampleContext{}, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_FLOAT_EQ(out[0], -1.0f);
  aug.apply(view_of(white), SampleContext{}, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_FLOAT_EQ(out[0], 1.0f);
}

TEST(AugmentSemantics, StandardisationFollowsKeras) {
  std::vector<cv::Mat> images;
  for (int v = 0; v < 4; ++v) images.push_back(test::make_pattern_rgb(30, 40, v));
  std::vector<ImageView> views;
  for (const cv::Mat& m : images) views.push_back(view_of(m));
  AugmentSpec s;
  s.height = 30;
  s.width = 40;
  s.dtype = DType::F32;
  s.rescale = 1.0 / 255;
  s.featurewise_center = true;
  s.featurewise_std_normalization = true;
  s.featurewise = fit_featurewise(s, views);
  const Augmenter aug(s);
  // Over the fitted images, every channel now has mean 0 and std 1.
  std::array<double, 3> sum{}, sq{};
  std::vector<float> out(aug.output_shape().elements());
  for (const ImageView& v : views) {
    aug.apply(v, SampleContext{}, reinterpret_cast<std::byte*>(out.data()));
    for (std::size_t i = 0; i < out.size(); ++i) sum[i % 3] += out[i], sq[i % 3] += out[i] * out[i];
  }
  const double count = 4.0 * 30 * 40;
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(sum[c] / count, 0.0, 1e-4);
    EXPECT_NEAR(sq[c] / count, 1.0, 1e-3);
  }
  // Sample-wise: each image on its own has mean 0, std 1 (over all channels).
  AugmentSpec w;
  w.height = 30;
  w.width = 40;
  w.dtype = DType::F32;
  w.samplewise_std_normalization = true;  // implies samplewise_center, as in Keras
  const Augmenter per_sample(w);
  per_sample.apply(views[1], SampleContext{}, reinterpret_cast<std::byte*>(out.data()));
  double m = 0, q = 0;
  for (const float v : out) m += v, q += static_cast<double>(v) * v;
  EXPECT_NEAR(m / out.size(), 0.0, 1e-4);
  EXPECT_NEAR(q / out.size(), 1.0, 1e-3);
}

TEST(AugmentSemantics, PreprocessingFunctionRunsOnTheAugmentedImageBeforeRescale) {
  const cv::Mat src = test::make_pattern_rgb(20, 20, 0);
  std::atomic<int> calls{0};
  AugmentSpec s;
  s.height = s.width = 20;
  s.dtype = DType::F32;
  s.rescale = 0.5;
  s.preprocessing_function = [&](float* px, int h, int w, int c, const SampleContext& ctx) {
    ++calls;
    EXPECT_EQ(h * w * c, 20 * 20 * 3);
    EXPECT_EQ(ctx.sample_id, 42);
    for (int i = 0; i < h * w * c; ++i) px[i] = 255.0f - px[i];  // invert, on the 0..255 scale
  };
  const Augmenter aug(s);
  std::vector<float> out(aug.output_shape().elements());
  aug.apply(view_of(src), SampleContext{0, 0, 42}, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_EQ(calls.load(), 1);
  for (int i = 0; i < 20 * 20 * 3; ++i) ASSERT_FLOAT_EQ(out[i], (255.0f - src.data[i]) * 0.5f);
}

TEST(AugmentSemantics, ColourJitterExtremes) {
  const cv::Mat src = test::make_pattern_rgb(16, 16, 0);
  AugmentSpec s;
  s.height = s.width = 16;
  const Augmenter aug(s);
  SampleParams p = neutral(16, 16);
  p.has_saturation = true;
  p.saturation = 0;  // grey: R = G = B = PIL's luma
  cv::Mat grey = run(aug, src, p);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) {
      const cv::Vec3b g = grey.at<cv::Vec3b>(y, x), v = src.at<cv::Vec3b>(y, x);
      ASSERT_EQ(g[0], g[1]);
      ASSERT_EQ(g[1], g[2]);
      ASSERT_EQ(g[0], augment::pil_luma(v[0], v[1], v[2]));
    }
  p = neutral(16, 16);
  p.has_contrast = true;
  p.contrast = 0;  // a flat image at the mean luma
  cv::Mat flat = run(aug, src, p);
  double mn, mx;
  cv::minMaxLoc(flat.reshape(1), &mn, &mx);
  EXPECT_EQ(mn, mx);
  p = neutral(16, 16);
  p.has_hue = true;
  p.hue = 0.5f;  // half a turn twice is the identity (within rounding)
  const cv::Mat once = run(aug, src, p);
  EXPECT_GT(cv::norm(once, src, cv::NORM_INF), 50);
  EXPECT_LE(cv::norm(run(aug, once, p), src, cv::NORM_INF), 2);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

TEST(AugmentSemantics, KerasAxisConventionsAndTheGeometricAlternative) {
  const cv::Mat src = test::make_pattern_rgb(20, 30, 0);  // non-square: the conventions differ
  cv::Mat half_turn;
  cv::rotate(src, half_turn, cv::ROTATE_180);
  for (const bool keras : {true, false}) {
    AugmentSpec s;
    s.height = 20;
    s.width = 30;
    s.keras_axis_conventions = keras;
    s.fill_mode = FillMode::Constant;
    const Augmenter aug(s);
    SampleParams p = neutral(20, 30);
    p.theta = 180;
    // Keras turns about (h/2 - 0.5, w/2 - 0.5) taken as (x, y): not the centre of a 20x30 image.
    EXPECT_EQ(same(run(aug, src, p), half_turn), !keras);
    // Which shift range moves columns: Keras' height_shift_range (tx), else width_shift_range.
    AugmentSpec t = s;
    t.height_shift_range = ShiftRange::choices({0.1});  // +-2 rows or +-2 columns...
    t.width_shift_range = ShiftRange::none();
    const SampleParams q = Augmenter(t).params(SampleContext{1, 0, 0}, 20, 30);
    if (keras) {
      EXPECT_EQ(std::abs(q.tx), 2.0f);  // 0.1 * height, along x
      EXPECT_EQ(q.ty, 0.0f);
    } else {
      EXPECT_EQ(q.tx, 0.0f);
      EXPECT_EQ(std::abs(q.ty), 2.0f);  // 0.1 * height, along y
    }
  }
}

}  // namespace
}  // namespace stoker
