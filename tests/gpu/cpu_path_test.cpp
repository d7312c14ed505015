// CPU tests of the GPU feed (run in CI, no GPU needed): the CUDA executor's per-pixel path compiled
// for the host against the CPU executor; the conversion math; the no-GPU error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "batch_math.hpp"
#include "gpu_test_util.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/convert.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

#if defined(STOKER_TESTS_HAVE_CUDA_HEADERS)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace stoker {
namespace {

using test::augment_cases;
using test::max_abs_diff;
using test::source_images;
using test::tolerance;
using test::view_of;

constexpr int kOutH = 24, kOutW = 32;

// The kernel's body on the host (CudaAugmenter::run_on_host) against the CPU executor, fast path
// (Augmenter::apply_with) and reference path (apply_reference_with), for parameters drawn by the
// executor over many sample ids: every fill mode x interpolation with flips, crops, photometric
// steps with the statistics pass, sample-wise standardisation, normalisation to NCHW.
TEST(CudaExecutorHostPath, MatchesCpuExecutorForRandomParameters) {
  const auto images = source_images(6);
  for (const auto& c : augment_cases(kOutH, kOutW)) {
    SCOPED_TRACE(c.name);
    auto cpu = std::make_shared<Augmenter>(c.spec);
    const CudaAugmenter gpu(cpu);
    const SampleShape shape = gpu.output_shape();
    const std::size_t n_el = shape.elements(), bytes = shape.bytes();
    std::vector<ImageView> views;
    std::vector<augment::SampleParams> params;
    for (int id = 0; id < 48; ++id) {
      const cv::Mat& m = images[static_cast<std::size_t>(id) % images.size()];
      views.push_back(view_of(m));
      params.push_back(cpu->params(SampleContext{1234, 3, id}, m.rows, m.cols));
    }
    std::vector<std::byte> got(bytes * views.size());
    gpu.run_on_host(views, params, got.data());
    std::vector<std::byte> fast(bytes), ref(bytes);
    double worst_fast = 0, worst_ref = 0;
    for (std::size_t i = 0; i < views.size(); ++i) {
      const SampleContext ctx{1234, 3, static_cast<std::int64_t>(i)};
      cpu->apply_with(views[i], params[i], ctx, fast.data());
      cpu->apply_reference_with(views[i], params[i], ctx, ref.data());
      const std::byte* g = got.data() + bytes * i;
      worst_fast = std::max(worst_fast, max_abs_diff(shape.dtype, g, fast.data(), n_el));
      worst_ref = std::max(worst_ref, max_abs_diff(shape.dtype, g, ref.data(), n_el));
    }
    EXPECT_LE(worst_ref, tolerance(*cpu, false)) << "vs the reference executor";
    EXPECT_LE(worst_fast, tolerance(*cpu, true)) << "vs the fast CPU executor";
  }
}

// Hand-made parameters: every flip combination and crop boxes at the borders, on both paths
// (crop + resize only, and a warp), every fill mode.
TEST(CudaExecutorHostPath, FlipsAndCropsEveryFillMode) {
  const cv::Mat src = test::make_pattern_rgb(45, 61, 2);
  for (FillMode fill : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (int order : {0, 1}) {
      auto cpu = std::make_shared<Augmenter>(test::base_spec(kOutH, kOutW, fill, order));
      const CudaAugmenter gpu(cpu);
      const std::size_t bytes = gpu.output_shape().bytes();
      std::vector<augment::SampleParams> params;
      for (int flips = 0; flips < 4; ++flips) {
        for (int crop = 0; crop < 3; ++crop) {
          for (bool warp : {false, true}) {
            augment::SampleParams p;
            p.flip_horizontal = flips & 1;
            p.flip_vertical = flips & 2;
            const float boxes[3][4] = {{0, 0, 61, 45}, {0, 0, 30, 20}, {31, 25, 30, 20}};
            p.crop_x = boxes[crop][0], p.crop_y = boxes[crop][1], p.crop_w = boxes[crop][2], p.crop_h = boxes[crop][3];
            if (warp) p.theta = 17.5f, p.tx = 3.25f, p.zx = 1.3f, p.zy = 0.8f;
            params.push_back(p);
          }
        }
      }
      std::vector<ImageView> views(params.size(), view_of(src));
      std::vector<std::byte> got(bytes * params.size()), fast(bytes), ref(bytes);
      gpu.run_on_host(views, params, got.data());
      for (std::size_t i = 0; i < params.size(); ++i) {
        SCOPED_TRACE(std::string(to_string(fill)) + " order " + std::to_string(order) + " case " + std::to_string(i));
        cpu->apply_with(views[i], params[i], {}, fast.data());
        cpu->apply_reference_with(views[i], params[i], {}, ref.data());
        EXPECT_LE(max_abs_diff(DType::U8, got.data() + bytes * i, fast.data(), bytes), 1.0);
        EXPECT_EQ(std::memcmp(got.data() + bytes * i, ref.data(), bytes), 0) << "the kernel path is the reference path";
      }
    }
  }
}

// bf16 / f16 output is the f32 output rounded once (round to nearest even).
TEST(CudaExecutorHostPath, HalfOutputsAreRoundedFloatOutput) {
  AugmentSpec s = test::base_spec(kOutH, kOutW, FillMode::Reflect, 1);
  s.rotation_range = 30;
  s.horizontal_flip = true;
  s.brightness_range = Range{0.6, 1.4};
  s.dtype = DType::F32;
  s.layout = Layout::NCHW;
  s.normalization = ChannelNormalization::minus_one_to_one();
  auto cpu = std::make_shared<Augmenter>(s);
  const CudaAugmenter f32(cpu), bf16(cpu, DType::BF16), f16(cpu, DType::F16);
  EXPECT_EQ(bf16.output_shape().dtype, DType::BF16);
  EXPECT_EQ(bf16.output_shape().layout, Layout::NCHW);
  const auto images = source_images(4);
  std::vector<ImageView> views;
  std::vector<augment::SampleParams> params;
  for (int i = 0; i < 4; ++i) {
    views.push_back(view_of(images[static_cast<std::size_t>(i)]));
    params.push_back(
        cpu->params({7, 0, i}, images[static_cast<std::size_t>(i)].rows, images[static_cast<std::size_t>(i)].cols));
  }
  const std::size_t n = f32.output_shape().elements() * 4;
  std::vector<float> a(n);
  std::vector<std::uint16_t> b(n), h(n);
  f32.run_on_host(views, params, a.data());
  bf16.run_on_host(views, params, b.data());
  f16.run_on_host(views, params, h.data());
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], convert::bf16_bits(a[i])) << i;
    ASSERT_EQ(h[i], convert::f16_bits(a[i])) << i;
  }
  EXPECT_THROW(CudaAugmenter(cpu, DType::U8), InvalidArgument);
}

TEST(CudaExecutorHostPath, RejectsWhatTheGpuCannotRun) {
  AugmentSpec s = test::base_spec(8, 8, FillMode::Nearest, 1);
  s.dtype = DType::F32;
  s.preprocessing_function = [](float*, int, int, int, const SampleContext&) {};
  EXPECT_THROW(CudaAugmenter(std::make_shared<Augmenter>(s)), InvalidArgument);
  EXPECT_THROW(CudaAugmenter(nullptr), InvalidArgument);
  auto u8 = std::make_shared<Augmenter>(test::base_spec(8, 8, FillMode::Nearest, 1));
  EXPECT_THROW(CudaAugmenter(u8, DType::BF16), InvalidArgument);
  const CudaAugmenter ok(u8);
  EXPECT_THROW(ok.output_shape(SampleShape{8, 8, 1, DType::U8, Layout::NHWC}), InvalidArgument);
  EXPECT_THROW(ok.output_shape(SampleShape{8, 8, 3, DType::F32, Layout::NHWC}), InvalidArgument);
}

TEST(DeviceStages, DeclareShapesAndWorkspaceBeforeTheFirstBatch) {
  const SampleShape u8{299, 299, 3, DType::U8, Layout::NHWC};
  const auto convert = make_convert_stage(ConvertSpec::rescale(DType::BF16, Layout::NCHW, 1.0f / 255.0f));
  EXPECT_EQ(convert->output_shape(u8), (SampleShape{299, 299, 3, DType::BF16, Layout::NCHW}));
  EXPECT_EQ(convert->workspace_bytes(u8, 256), 0u);
  EXPECT_THROW(convert->output_shape(SampleShape{299, 299, 3, DType::F32, Layout::NHWC}), InvalidArgument);

  AugmentSpec s = test::base_spec(224, 224, FillMode::Reflect, 1);
  s.dtype = DType::F32;
  s.layout = Layout::NCHW;
  const CudaAugmenter gpu(std::make_shared<Augmenter>(s), DType::F16);
  EXPECT_EQ(gpu.output_shape(u8), (SampleShape{224, 224, 3, DType::F16, Layout::NCHW}));
  EXPECT_EQ(gpu.workspace_bytes(u8, 256), 256 * sizeof(augment::SampleJob));
  EXPECT_STREQ(gpu.name(), "cuda-augment");
}

// ---- conversion math ---------------------------------------------------------------------------

TEST(ConvertMath, HalfAndBfloat16KnownValues) {
  EXPECT_EQ(convert::f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(convert::f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(convert::f16_bits(0.0f), 0x0000);
  EXPECT_EQ(convert::f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(convert::f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(convert::f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(convert::f16_bits(65520.0f), 0x7c00);
  EXPECT_EQ(convert::f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(convert::f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even
  EXPECT_EQ(convert::f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(convert::f16_bits(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(convert::f16_bits(0.1f), 0x2e66);
  EXPECT_EQ(convert::f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(convert::f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(convert::f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(convert::f16_bits(NAN) & 0x7c00, 0x7c00);
  EXPECT_NE(convert::f16_bits(NAN) & 0x03ff, 0);
  EXPECT_EQ(convert::bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(convert::bf16_bits(-1.0f), 0xbf80);
  EXPECT_EQ(convert::bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(convert::bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(convert::bf16_bits(INFINITY), 0x7f80);
  EXPECT_NE(convert::bf16_bits(NAN) & 0x007f, 0);
}

#if defined(STOKER_TESTS_HAVE_CUDA_HEADERS)
// The device code's conversions equal CUDA's own round-to-nearest conversions (host versions).
TEST(ConvertMath, MatchesCudaIntrinsicsOnRandomFloats) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t u = bits(rng);
    if (i % 4 == 0) u = (u & 0x8fffffffu) | 0x30000000u;  // dense around half's range
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const __half h = __float2half_rn(f);
    const __nv_bfloat16 b = __float2bfloat16_rn(f);
    std::uint16_t hb, bb;
    std::memcpy(&hb, &h, 2);
    std::memcpy(&bb, &b, 2);
    ASSERT_EQ(convert::f16_bits(f), hb) << f;
    ASSERT_EQ(convert::bf16_bits(f), bb) << f;
  }
}
#endif

TEST(ConvertMath, HostReferenceLayoutsAndNormalisation) {
  const SampleShape in{3, 5, 3, DType::U8, Layout::NHWC};
  const int batch = 2;
  std::vector<std::uint8_t> src(in.elements() * batch);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const auto spec =
      ConvertSpec::normalize(DType::F32, Layout::NCHW, {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f});
  std::vector<float> nchw(src.size());
  convert_batch_host(spec, in, batch, src.data(), nchw.data());
  for (int n = 0; n < batch; ++n)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 5; ++x)
        for (int c = 0; c < 3; ++c) {
          const float v = src[((static_cast<std::size_t>(n) * 3 + y) * 5 + x) * 3 + c];
          const float mean[3] = {123.675f, 116.28f, 103.53f}, stdev[3] = {58.395f, 57.12f, 57.375f};
          const float want = (v - mean[c]) / stdev[c];
          EXPECT_NEAR(nchw[((static_cast<std::size_t>(n) * 3 + c) * 3 + y) * 5 + x], want, 1e-5);
        }
  auto nhwc_spec = spec;
  nhwc_spec.layout = Layout::NHWC;
  std::vector<float> nhwc(src.size());
  convert_batch_host(nhwc_spec, in, batch, src.data(), nhwc.data());
  for (std::size_t i = 0; i < src.size(); ++i) {
    const int c = static_cast<int>(i % 3);
    EXPECT_EQ(nhwc[i], static_cast<float>(src[i]) * spec.scale[c] + spec.offset[c]);
  }
  auto bf = ConvertSpec::rescale(DType::BF16, Layout::NHWC, 1.0f / 255.0f);
  std::vector<std::uint16_t> b(src.size());
  convert_batch_host(bf, in, batch, src.data(), b.data());
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(b[i], convert::bf16_bits(src[i] * (1.0f / 255.0f)));

  EXPECT_THROW(convert_batch_host(spec, SampleShape{3, 5, 3, DType::F32, Layout::NHWC}, 1, src.data(), nchw.data()),
               InvalidArgument);
  EXPECT_THROW(convert_batch_host(spec, SampleShape{3, 5, 5, DType::U8, Layout::NHWC}, 1, src.data(), nchw.data()),
               InvalidArgument);
  EXPECT_THROW(ConvertSpec::normalize(DType::F32, Layout::NCHW, {0, 0, 0}, {1, 0, 1}), InvalidArgument);
}

// ---- without a GPU -----------------------------------------------------------------------------

TEST(CudaAvailability, DeviceCountNeverThrows) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    try {
      require_cuda_device("the test");
      FAIL() << "require_cuda_device did not throw without a device";
    } catch (const CudaError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("the test"), std::string::npos) << what;
      EXPECT_NE(what.find("CPU path"), std::string::npos) << what;
      std::printf("no GPU here: %s\n", what.c_str());
    }
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
  }
}

TEST(CudaAvailability, ErrorsCarryTheCallTheCodeAndAHint) {
  if (!built_with_cuda()) {
    EXPECT_THROW(STOKER_CUDA_CHECK(1), CudaError);
    EXPECT_EQ(cuda_device_count(), 0);
    EXPECT_THROW(Stream(), CudaError);
    return;
  }
  EXPECT_NO_THROW(STOKER_CUDA_CHECK(0));
  try {
    STOKER_CUDA_CHECK(35);  // cudaErrorInsufficientDriver
    FAIL();
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), 35);
    EXPECT_NE(what.find("cpu_path_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find(": 35 failed: "), std::string::npos) << what;  // the call as written
    EXPECT_NE(what.find("cudaErrorInsufficientDriver"), std::string::npos) << what;
    EXPECT_NE(what.find("driver"), std::string::npos) << what;
  }
  try {
    STOKER_CUDA_CHECK(100);  // cudaErrorNoDevice
    FAIL();
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA-capable GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(STOKER_CUDA_CHECK(2), BadAlloc);  // cudaErrorMemoryAllocation
}

TEST(GpuFeedWithoutGpu, ConstructionGivesAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; this checks the no-GPU error";
  test::TempDir dir;
  test::write_jpeg(dir / "a.jpg", test::make_pattern_rgb(32, 32));
  Dataset ds = dataset_from_list({{(dir / "a.jpg").string(), 0}}, {"x"});
  LoaderOptions lo;
  lo.batch_size = 1;
  lo.image_height = lo.image_width = 16;
  try {
    GpuFeed feed(ds, lo);
    FAIL() << "GpuFeed constructed without a GPU";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GpuFeed"), std::string::npos) << what;
    EXPECT_NE(what.find("CPU path"), std::string::npos) << what;
  }
  // The CPU path stays usable.
  Loader cpu(ds, lo);
  cpu.begin_epoch(0);
  EXPECT_TRUE(cpu.next().has_value());
  // Pinned memory is never replaced by pageable memory silently.
  PinnedHostAllocator pinned;
  EXPECT_THROW(pinned.allocate(4096), CudaError);
}

}  // namespace
}  // namespace stoker
