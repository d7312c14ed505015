// uint8 NHWC batches → float32 / float16 / bfloat16, NHWC or NCHW, with a per-channel
// value * scale[c] + offset[c] (mean/std normalisation folded in). The per-element math below is
// shared by the CUDA kernel (convert_kernel.cu) and its host reference (convert_batch_host), so
// the two agree bit for bit.
//
//   auto spec = ConvertSpec::normalize(DType::BF16, Layout::NCHW, {123.675f, 116.28f, 103.53f},
//                                      {58.395f, 57.12f, 57.375f});
//   convert_batch(spec, shape, batch, device_u8, device_out, stream);   // on the GPU
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "stoker/core/cuda.hpp"
#include "stoker/core/half.hpp"
#include "stoker/core/host_device.hpp"
#include "stoker/core/image.hpp"

namespace stoker {

inline constexpr int kMaxConvertChannels = 4;

// What the conversion writes. out = u8 * scale[c] + offset[c], c the channel.
struct ConvertSpec {
  DType dtype = DType::F32;  // F32, F16, BF16 (U8 only with scale 1, offset 0: a layout change)
  Layout layout = Layout::NCHW;
  std::array<float, kMaxConvertChannels> scale{1, 1, 1, 1};
  std::array<float, kMaxConvertChannels> offset{0, 0, 0, 0};

  // (u8 - mean[c]) / std[c] (values on the 0..255 scale).
  static ConvertSpec normalize(DType dtype, Layout layout, std::array<float, 3> mean, std::array<float, 3> std);
  // u8 * factor (e.g. 1/255).
  static ConvertSpec rescale(DType dtype, Layout layout, float factor);

  SampleShape output_shape(const SampleShape& input) const {
    return {input.height, input.width, input.channels, dtype, layout};
  }
};

// Checks that `in` is uint8 NHWC with 1..4 channels and the spec is valid; throws InvalidArgument.
void check_convert(const ConvertSpec& spec, const SampleShape& in);

namespace convert {

// Plain numbers for the kernel (by value).
struct ConvertParams {
  int height = 0, width = 0, channels = 3;
  DType dtype = DType::F32;
  bool nchw = true;
  float scale[kMaxConvertChannels] = {1, 1, 1, 1};
  float offset[kMaxConvertChannels] = {0, 0, 0, 0};
};

ConvertParams make_params(const ConvertSpec& spec, const SampleShape& in);

// Element `e` of sample n (NHWC input order: e = (y * W + x) * C + c) → its output offset.
STOKER_HOST_DEVICE inline std::size_t output_offset(const ConvertParams& p, std::size_t n, std::size_t e) {
  const std::size_t hw = static_cast<std::size_t>(p.height) * p.width;
  const std::size_t per = hw * p.channels;
  if (!p.nchw) return n * per + e;
  const std::size_t pix = e / p.channels, c = e % p.channels;
  return n * per + c * hw + pix;
}

// value * scale + offset, never fused into an FMA (host and device round alike).
STOKER_HOST_DEVICE inline float value(const ConvertParams& p, int c, std::uint8_t u) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(static_cast<float>(u), p.scale[c]), p.offset[c]);
#else
  return static_cast<float>(u) * p.scale[c] + p.offset[c];
#endif
}

}  // namespace convert

// Host reference: the kernel's math in a loop. `in`: batch uint8 NHWC samples; `out`: the output.
void convert_batch_host(const ConvertSpec& spec, const SampleShape& in_shape, int batch, const std::uint8_t* in,
                        void* out);

// The GPU conversion: one kernel on `stream`, device pointers. Throws CudaError (or "built without
// CUDA").
void convert_batch(const ConvertSpec& spec, const SampleShape& in_shape, int batch, const std::uint8_t* in_device,
                   void* out_device, StreamHandle stream);

}  // namespace stoker
