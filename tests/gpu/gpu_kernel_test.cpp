// GPU tests of the kernels (skip without a device): the CUDA augmentation executor against the CPU
// executor over every fill mode, flips, crops and photometric step (±1 grey level in u8, 1e-3 in
// float), against its own host emulation, and the conversion kernel against its host reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/convert.hpp"

namespace stoker {
namespace {

using test::max_abs_diff;
using test::view_of;

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

// Source images uploaded one buffer each (their own sizes).
struct DeviceSources {
  std::vector<DeviceBuffer> buffers;
  std::vector<DeviceImage> images;
};

DeviceSources upload(const std::vector<cv::Mat>& mats, const Stream& s) {
  DeviceSources d;
  for (const cv::Mat& m : mats) {
    const std::size_t pitch = static_cast<std::size_t>(m.cols) * 3 + 5;  // a stride that is not width * 3
    std::vector<std::uint8_t> host(pitch * static_cast<std::size_t>(m.rows), 0);
    for (int y = 0; y < m.rows; ++y)
      std::memcpy(host.data() + pitch * y, m.ptr(y), static_cast<std::size_t>(m.cols) * 3);
    DeviceBuffer b(host.size(), "test image");
    copy_to_device_async(b.get(), host.data(), host.size(), s.get());
    s.synchronize();
    d.images.push_back({b.as<std::uint8_t>(), m.rows, m.cols, pitch});
    d.buffers.push_back(std::move(b));
  }
  return d;
}

TEST_F(GpuKernels, AugmentationMatchesCpuExecutor) {
  constexpr int kOutH = 40, kOutW = 52;
  const auto mats = test::source_images(6);
  const Stream stream;
  const DeviceSources src = upload(mats, stream);
  for (const auto& c : test::augment_cases(kOutH, kOutW)) {
    SCOPED_TRACE(c.name);
    auto cpu = std::make_shared<Augmenter>(c.spec);
    const CudaAugmenter gpu(cpu);
    const SampleShape shape = gpu.output_shape();
    const int n = 36;
    std::vector<DeviceImage> images;
    std::vector<ImageView> views;
    std::vector<SampleContext> ctx;
    std::vector<augment::SampleParams> params;
    for (int i = 0; i < n; ++i) {
      const std::size_t k = static_cast<std::size_t>(i) % mats.size();
      images.push_back(src.images[k]);
      views.push_back(view_of(mats[k]));
      ctx.push_back({99, 2, 1000 + i});
      params.push_back(cpu->params(ctx.back(), mats[k].rows, mats[k].cols));
    }
    CudaAugmentWorkspace ws(n);
    DeviceBuffer out(shape.bytes() * n, "test output");
    // 0xff everywhere (NaN in f32): an element the kernel does not write cannot pass by chance.
    memset_device_async(out.get(), 0xff, shape.bytes() * n, stream.get());
    gpu.run(images, ctx, out.get(), ws, stream.get());  // parameters drawn by the executor
    std::vector<std::byte> got(shape.bytes() * n), host_emulation(shape.bytes() * n);
    copy_to_host_async(got.data(), out.get(), got.size(), stream.get());
    stream.synchronize();
    gpu.run_on_host(views, params, host_emulation.data());

    std::vector<std::byte> fast(shape.bytes()), ref(shape.bytes());
    double worst_fast = 0, worst_ref = 0, worst_emu = 0;
    for (int i = 0; i < n; ++i) {
      const std::byte* g = got.data() + shape.bytes() * i;
      cpu->apply(views[static_cast<std::size_t>(i)], ctx[static_cast<std::size_t>(i)], fast.data());
      cpu->apply_reference_with(views[static_cast<std::size_t>(i)], params[static_cast<std::size_t>(i)],
                                ctx[static_cast<std::size_t>(i)], ref.data());
      worst_fast = std::max(worst_fast, max_abs_diff(shape.dtype, g, fast.data(), shape.elements()));
      worst_ref = std::max(worst_ref, max_abs_diff(shape.dtype, g, ref.data(), shape.elements()));
      worst_emu = std::max(worst_emu,
                           max_abs_diff(shape.dtype, g, host_emulation.data() + shape.bytes() * i, shape.elements()));
    }
    RecordProperty(c.name + "_worst_vs_cpu", std::to_string(worst_fast));
    EXPECT_LE(worst_ref, test::tolerance(*cpu, false)) << "vs the reference executor";
    EXPECT_LE(worst_fast, test::tolerance(*cpu, true)) << "vs the CPU executor (Augmenter::apply)";
    EXPECT_LE(worst_emu, shape.dtype == DType::U8 ? 0.0 : 1e-4) << "vs its own host emulation";
  }
}

TEST_F(GpuKernels, Bfloat16NchwNormalisedEqualsHostEmulation) {
  AugmentSpec s = test::base_spec(64, 48, FillMode::Reflect, 1);
  s.rotation_range = 30;
  s.horizontal_flip = true;
  s.brightness_range = Range{0.6, 1.4};
  s.dtype = DType::F32;
  s.layout = Layout::NCHW;
  s.normalization = ChannelNormalization::torch();
  auto cpu = std::make_shared<Augmenter>(s);
  const auto mats = test::source_images(5);
  const Stream stream;
  const DeviceSources src = upload(mats, stream);
  for (DType dt : {DType::BF16, DType::F16}) {
    const CudaAugmenter gpu(cpu, dt);
    std::vector<ImageView> views;
    std::vector<augment::SampleParams> params;
    for (std::size_t i = 0; i < mats.size(); ++i) {
      views.push_back(view_of(mats[i]));
      params.push_back(cpu->params({3, 1, static_cast<std::int64_t>(i)}, mats[i].rows, mats[i].cols));
    }
    CudaAugmentWorkspace ws(8);
    const std::size_t n = gpu.output_shape().elements() * mats.size();
    DeviceBuffer out(n * 2, "test output");
    memset_device_async(out.get(), 0xff, n * 2, stream.get());
    gpu.run_with(src.images, params, out.get(), ws, stream.get());
    std::vector<std::uint16_t> got(n), want(n);
    copy_to_host_async(got.data(), out.get(), n * 2, stream.get());
    stream.synchronize();
    gpu.run_on_host(views, params, want.data());
    EXPECT_EQ(got, want) << to_string(dt);
  }
}

TEST_F(GpuKernels, WorkspaceReuseAcrossBatchesInFlight) {
  // Two batches enqueued back to back from one workspace: the second may not overwrite the
  // first's job table before its copy; both outputs must be right.
  AugmentSpec s = test::base_spec(32, 32, FillMode::Nearest, 1);
  s.rotation_range = 45;
  auto cpu = std::make_shared<Augmenter>(s);
  const CudaAugmenter gpu(cpu);
  const auto mats = test::source_images(3);
  const Stream stream;
  const DeviceSources src = upload(mats, stream);
  CudaAugmentWorkspace ws(3);
  const std::size_t bytes = gpu.output_shape().bytes() * 3;
  DeviceBuffer a(bytes), b(bytes);
  const std::vector<SampleContext> ca{{1, 0, 0}, {1, 0, 1}, {1, 0, 2}}, cb{{1, 5, 0}, {1, 5, 1}, {1, 5, 2}};
  gpu.run(src.images, ca, a.get(), ws, stream.get());
  gpu.run(src.images, cb, b.get(), ws, stream.get());
  std::vector<std::uint8_t> ga(bytes), gb(bytes), want(gpu.output_shape().bytes());
  copy_to_host_async(ga.data(), a.get(), bytes, stream.get());
  copy_to_host_async(gb.data(), b.get(), bytes, stream.get());
  stream.synchronize();
  for (int i = 0; i < 3; ++i) {
    cpu->apply(view_of(mats[static_cast<std::size_t>(i)]), ca[static_cast<std::size_t>(i)],
               reinterpret_cast<std::byte*>(want.data()));
    EXPECT_LE(max_abs_diff(DType::U8, ga.data() + want.size() * i, want.data(), want.size()), 1.0);
    cpu->apply(view_of(mats[static_cast<std::size_t>(i)]), cb[static_cast<std::size_t>(i)],
               reinterpret_cast<std::byte*>(want.data()));
    EXPECT_LE(max_abs_diff(DType::U8, gb.data() + want.size() * i, want.data(), want.size()), 1.0);
  }
}

// Samples of one batch against the host emulation (u8: equal; float: 1e-4, the sample-wise sums
// are reduced in another order on the device).
void expect_samples_match(const CudaAugmenter& gpu, const std::vector<std::byte>& got, const std::vector<cv::Mat>& mats,
                          const std::vector<std::size_t>& which_mat, const std::vector<augment::SampleParams>& params,
                          const std::vector<int>& samples) {
  const SampleShape shape = gpu.output_shape();
  std::vector<std::byte> want(shape.bytes());
  for (const int i : samples) {
    SCOPED_TRACE("sample " + std::to_string(i));
    const auto k = static_cast<std::size_t>(i);
    const ImageView v = view_of(mats[which_mat[k]]);
    gpu.run_on_host(std::span(&v, 1), std::span(&params[k], 1), want.data());
    std::size_t where = 0;
    const double d = max_abs_diff(shape.dtype, got.data() + shape.bytes() * k, want.data(), shape.elements(), &where);
    EXPECT_LE(d, shape.dtype == DType::U8 ? 0.0 : 1e-4) << "element " << where;
  }
}

// n samples cycling over the uploaded sources, with their contexts (seed, epoch, id = first_id + i)
// and the parameters the executor draws for them.
struct CyclingBatch {
  std::vector<DeviceImage> images;
  std::vector<std::size_t> which;  // source of each sample
  std::vector<SampleContext> ctx;
  std::vector<augment::SampleParams> params;
};

CyclingBatch cycling_batch(const Augmenter& cpu, const std::vector<cv::Mat>& mats, const DeviceSources& src, int n,
                           std::uint64_t seed, std::uint64_t epoch, std::int64_t first_id) {
  CyclingBatch b;
  for (int i = 0; i < n; ++i) {
    const std::size_t m = static_cast<std::size_t>(i) % mats.size();
    b.which.push_back(m);
    b.images.push_back(src.images[m]);
    b.ctx.push_back({seed, epoch, first_id + i});
    b.params.push_back(cpu.params(b.ctx.back(), mats[m].rows, mats[m].cols));
  }
  return b;
}

// Runs the batch on the device into a NaN-filled output and copies the result back.
std::vector<std::byte> run_on_device(const CudaAugmenter& gpu, const CyclingBatch& b, const Stream& stream) {
  const std::size_t bytes = gpu.output_shape().bytes() * b.images.size();
  CudaAugmentWorkspace ws(static_cast<int>(b.images.size()));
  DeviceBuffer out(bytes, "test output");
  memset_device_async(out.get(), 0xff, bytes, stream.get());
  gpu.run(b.images, b.ctx, out.get(), ws, stream.get());
  std::vector<std::byte> got(bytes);
  copy_to_host_async(got.data(), out.get(), got.size(), stream.get());
  stream.synchronize();
  return got;
}

TEST_F(GpuKernels, FullSizeBatchOffsetsAndStatistics) {
  // A training-size batch (256 x 3 x 299 x 299 f32 NCHW, sources of different sizes, the statistics
  // pass over 89401 pixels per sample): the first, a middle and the last samples are right.
  AugmentSpec s = test::base_spec(299, 299, FillMode::Reflect, 1);
  s.rotation_range = 30;
  s.zoom_range = AugmentSpec::zoom(0.2);
  s.horizontal_flip = true;
  s.contrast = 0.3;
  s.channel_shift_range = 20;
  s.dtype = DType::F32;
  s.layout = Layout::NCHW;
  s.samplewise_center = true;
  s.samplewise_std_normalization = true;
  s.rescale = 1.0 / 255.0;
  auto cpu = std::make_shared<Augmenter>(s);
  const CudaAugmenter gpu(cpu);
  std::vector<cv::Mat> mats;
  for (int i = 0; i < 4; ++i) mats.push_back(test::make_pattern_rgb(320 + 37 * i, 400 - 29 * i, i));
  const Stream stream;
  const DeviceSources src = upload(mats, stream);
  const CyclingBatch b = cycling_batch(*cpu, mats, src, 256, 11, 4, 5000);
  const std::vector<std::byte> got = run_on_device(gpu, b, stream);
  expect_samples_match(gpu, got, mats, b.which, b.params, {0, 1, 129, 254, 255});
}

TEST_F(GpuKernels, BatchesBeyondTheGridYLimit) {
  // 65537 samples: more than gridDim.y allows in one launch; the chunks must land at their offsets.
  AugmentSpec s = test::base_spec(3, 2, FillMode::Nearest, 1);
  s.rotation_range = 40;
  s.horizontal_flip = true;
  auto cpu = std::make_shared<Augmenter>(s);
  const CudaAugmenter gpu(cpu);
  const std::vector<cv::Mat> mats = test::source_images(2);
  const Stream stream;
  const DeviceSources src = upload(mats, stream);
  const CyclingBatch b = cycling_batch(*cpu, mats, src, 65537, 21, 0, 0);
  const std::vector<std::byte> got = run_on_device(gpu, b, stream);
  expect_samples_match(gpu, got, mats, b.which, b.params, {0, 1, 65533, 65534, 65535, 65536});
}

TEST_F(GpuKernels, WorkspaceReuseAcrossStreams) {
  // One workspace, two streams: the second batch's table copy must wait (on the GPU) until the
  // first batch's kernels, still running on the other stream, have read the device table.
  AugmentSpec s = test::base_spec(299, 299, FillMode::Wrap, 1);
  s.rotation_range = 45;
  s.contrast = 0.4;
  s.brightness_range = Range{0.6, 1.4};
  auto cpu = std::make_shared<Augmenter>(s);
  const CudaAugmenter gpu(cpu);
  std::vector<cv::Mat> mats;
  for (int i = 0; i < 3; ++i) mats.push_back(test::make_pattern_rgb(330 + 11 * i, 310 + 23 * i, i));
  const Stream first, second;
  const DeviceSources src = upload(mats, first);
  const CyclingBatch one = cycling_batch(*cpu, mats, src, 192, 1, 0, 0),
                     two = cycling_batch(*cpu, mats, src, 192, 1, 9, 0);
  const SampleShape shape = gpu.output_shape();
  CudaAugmentWorkspace ws(192);
  DeviceBuffer a(shape.bytes() * 192, "test output a"), b(shape.bytes() * 192, "test output b");
  memset_device_async(a.get(), 0xff, a.bytes(), first.get());
  memset_device_async(b.get(), 0xff, b.bytes(), second.get());
  first.synchronize();
  second.synchronize();
  gpu.run(one.images, one.ctx, a.get(), ws, first.get());
  gpu.run(two.images, two.ctx, b.get(), ws, second.get());
  std::vector<std::byte> ga(a.bytes()), gb(b.bytes());
  copy_to_host_async(ga.data(), a.get(), ga.size(), first.get());
  copy_to_host_async(gb.data(), b.get(), gb.size(), second.get());
  first.synchronize();
  second.synchronize();
  {
    SCOPED_TRACE("first batch");
    expect_samples_match(gpu, ga, mats, one.which, one.params, {0, 95, 190, 191});
  }
  {
    SCOPED_TRACE("second batch");
    expect_samples_match(gpu, gb, mats, two.which, two.params, {0, 95, 190, 191});
  }
}

TEST_F(GpuKernels, ConversionMatchesHostReference) {
  const SampleShape in{37, 29, 3, DType::U8, Layout::NHWC};
  const int batch = 5;
  std::vector<std::uint8_t> src(in.elements() * batch);
  std::mt19937 rng(1);
  for (auto& v : src) v = static_cast<std::uint8_t>(rng());
  const Stream stream;
  DeviceBuffer d_in(src.size());
  copy_to_device_async(d_in.get(), src.data(), src.size(), stream.get());
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (Layout layout : {Layout::NHWC, Layout::NCHW}) {
      SCOPED_TRACE(std::string(to_string(dt)) + " " + to_string(layout));
      const auto spec = ConvertSpec::normalize(dt, layout, {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f});
      const std::size_t bytes = src.size() * dtype_size(dt);
      DeviceBuffer d_out(bytes);
      convert_batch(spec, in, batch, d_in.as<std::uint8_t>(), d_out.get(), stream.get());
      std::vector<std::byte> got(bytes), want(bytes);
      copy_to_host_async(got.data(), d_out.get(), bytes, stream.get());
      stream.synchronize();
      convert_batch_host(spec, in, batch, src.data(), want.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
    }
  }
}

TEST_F(GpuKernels, OutOfMemoryIsBadAllocWithTheNumbers) {
  try {
    DeviceBuffer huge(std::size_t{1} << 50, "an impossible buffer");
    FAIL() << "1 PiB allocated";
  } catch (const BadAlloc& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1125899906842624"), std::string::npos) << what;
    EXPECT_NE(what.find("free of"), std::string::npos) << what;
    EXPECT_NE(what.find("an impossible buffer"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(DeviceBuffer(1024, "after OOM the device still works"));
}

}  // namespace
}  // namespace stoker
