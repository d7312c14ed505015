// The shared per-pixel math compiled by nvcc and run on a GPU: the future CUDA executor's
// building blocks give the CPU executor's results bit for bit. Built whenever nvcc is found
// (so CI checks that the headers compile for the device); skipped at run time without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "pixel.hpp"
#include "stoker/augment/augmenter.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

using namespace augment;

__global__ void warp_kernel(PixelSource src, AugmentPlan plan, SampleParams s, Affine a, std::uint8_t* out) {
  const int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x), y = static_cast<int>(blockIdx.y);
  if (x >= plan.out_width) return;
  std::uint8_t px[kMaxChannels];
  sample_geometry(src, plan, s, a, x, y, px);
  float v[kMaxChannels];
  for (int c = 0; c < src.channels; ++c) v[c] = px[c];
  photometric(s, WarpStats{}, 0.0f, src.channels, v);  // brightness needs no image statistics
  const OutputAffine oa = output_affine(plan, src.channels, 0.0f, 1.0f);
  for (int c = 0; c < src.channels; ++c) {
    out[output_index(plan, x, y, c)] = hd::to_u8(hd::add(hd::mul(v[oa.source_channel[c]], oa.scale[c]), oa.offset[c]));
  }
}

__global__ void draw_kernel(AugmentPlan plan, SampleParams* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = draw_params(plan, 7, 3, i, 300, 400);
}

// Field by field: the struct has padding bytes that memcmp would compare.
bool same_params(const SampleParams& a, const SampleParams& b) {
  return a.theta == b.theta && a.tx == b.tx && a.ty == b.ty && a.shear == b.shear && a.zx == b.zx && a.zy == b.zy &&
         a.flip_horizontal == b.flip_horizontal && a.flip_vertical == b.flip_vertical && a.crop_x == b.crop_x &&
         a.crop_y == b.crop_y && a.crop_w == b.crop_w && a.crop_h == b.crop_h &&
         a.has_channel_shift == b.has_channel_shift && a.channel_shift == b.channel_shift &&
         a.has_brightness == b.has_brightness && a.brightness == b.brightness && a.has_contrast == b.has_contrast &&
         a.contrast == b.contrast && a.has_saturation == b.has_saturation && a.saturation == b.saturation &&
         a.has_hue == b.has_hue && a.hue == b.hue;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(AugmentDevice, DrawOnTheDeviceEqualsTheHostDraw) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  AugmentSpec spec;
  spec.height = spec.width = 299;
  spec.rotation_range = 30;
  spec.width_shift_range = ShiftRange::uniform(0.4);
  spec.height_shift_range = ShiftRange::integer(20);
  spec.shear_range = 0.4;
  spec.zoom_range = AugmentSpec::zoom(0.25);
  spec.horizontal_flip = spec.vertical_flip = true;
  spec.brightness_range = Range{0.5, 1.5};
  spec.channel_shift_range = 10;
  spec.contrast = spec.saturation = 0.3;
  spec.hue = 0.1;
  const Augmenter aug(spec);
  const int n = 4096;
  SampleParams* d = nullptr;
  CUDA_OK(cudaMalloc(&d, sizeof(SampleParams) * n));
  draw_kernel<<<(n + 127) / 128, 128>>>(aug.plan(), d, n);
  CUDA_OK(cudaGetLastError());
  std::vector<SampleParams> got(n);
  CUDA_OK(cudaMemcpy(got.data(), d, sizeof(SampleParams) * n, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  for (int i = 0; i < n; ++i) {
    const SampleParams want = draw_params(aug.plan(), 7, 3, i, 300, 400);
    ASSERT_TRUE(same_params(got[i], want)) << "sample " << i;
  }
}

TEST(AugmentDevice, KernelOfTheSharedMathEqualsTheCpuExecutor) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const cv::Mat src = test::make_pattern_rgb(181, 243, 1);
  std::uint8_t* dsrc = nullptr;
  CUDA_OK(cudaMalloc(&dsrc, src.total() * 3));
  CUDA_OK(cudaMemcpy(dsrc, src.data, src.total() * 3, cudaMemcpyHostToDevice));
  const PixelSource ps{dsrc, src.rows, src.cols, 3, static_cast<std::size_t>(src.step)};
  for (const FillMode mode : {FillMode::Constant, FillMode::Nearest, FillMode::Reflect, FillMode::Wrap}) {
    for (const int order : {0, 1}) {
      AugmentSpec spec;
      spec.height = 120;
      spec.width = 96;
      spec.fill_mode = mode;
      spec.cval = 33;
      spec.interpolation_order = order;
      spec.rotation_range = 40;
      spec.width_shift_range = spec.height_shift_range = ShiftRange::uniform(0.5);
      spec.shear_range = 20;
      spec.zoom_range = Range{0.5, 1.6};
      spec.horizontal_flip = spec.vertical_flip = true;
      spec.brightness_range = Range{0.5, 1.5};
      const Augmenter aug(spec);
      std::uint8_t* dout = nullptr;
      const std::size_t bytes = aug.output_shape().bytes();
      CUDA_OK(cudaMalloc(&dout, bytes));
      for (int id = 0; id < 8; ++id) {
        const SampleContext ctx{5, 1, id};
        const SampleParams p = aug.params(ctx, src.rows, src.cols);
        warp_kernel<<<dim3((spec.width + 63) / 64, spec.height), 64>>>(ps, aug.plan(), p, aug.matrix(p), dout);
        CUDA_OK(cudaGetLastError());
        std::vector<std::uint8_t> got(bytes), want(bytes);
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
        aug.apply(ImageView{src.data, src.rows, src.cols, 3, static_cast<std::size_t>(src.step)}, ctx,
                  reinterpret_cast<std::byte*>(want.data()));
        int worst = 0;
        for (std::size_t i = 0; i < bytes; ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
        // Warps are bit-identical; the crop+resize-only case follows cv::resize within one level.
        EXPECT_LE(worst, is_resize_only(p) ? 1 : 0) << to_string(mode) << " order " << order << " id " << id;
      }
      CUDA_OK(cudaFree(dout));
    }
  }
  CUDA_OK(cudaFree(dsrc));
}

}  // namespace
}  // namespace stoker
