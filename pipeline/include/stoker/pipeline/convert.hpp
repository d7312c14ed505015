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

#include "stoker/host_device.hpp"
#include "stoker/pipeline/cuda.hpp"
#include "stoker/pipeline/image.hpp"


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

// IEEE float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN.
STOKER_HOST_DEVICE inline std::uint16_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// IEEE float -> binary16 bits, round to nearest even, with subnormals, overflow to infinity.
STOKER_HOST_DEVICE inline std::uint16_t f16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to 0
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // e in [102, 112]: shift 14..24
    const std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (a carry into the exponent is right).
  const std::uint32_t v = a - 0x38000000u;  // exponent 127 -> 15 bias
  const std::uint32_t r = v + 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

// Stores v as element `index` of a dtype-typed array.
STOKER_HOST_DEVICE inline void store(DType dtype, void* out, std::size_t index, float v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(out)[index] = v; break;
    case DType::F16: static_cast<std::uint16_t*>(out)[index] = f16_bits(v); break;
    case DType::BF16: static_cast<std::uint16_t*>(out)[index] = bf16_bits(v); break;
    case DType::U8: {
      const float c = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
      static_cast<std::uint8_t*>(out)[index] = static_cast<std::uint8_t>(static_cast<int>(c + 0.5f));
      break;
    }
  }
}

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
