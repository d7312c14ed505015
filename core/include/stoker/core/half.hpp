// One float stored as an element of a DType array: float16 and bfloat16 rounding, written once for
// the host and CUDA kernels (STOKER_HOST_DEVICE), so that every executor rounds alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "stoker/core/host_device.hpp"
#include "stoker/core/image.hpp"

namespace stoker::convert {

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
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {                                                    // below 2^-14: subnormal half (or zero)
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);           // < 2^-25: rounds to 0
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

// bfloat16 bits -> float (exact).
STOKER_HOST_DEVICE inline float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// binary16 bits -> float (exact, subnormals, infinities and NaN included).
STOKER_HOST_DEVICE inline float f16_value(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else {  // zero or subnormal: man * 2^-24, exact in float
    const float magnitude = static_cast<float>(man) * (1.0f / 16777216.0f);
    std::memcpy(&u, &magnitude, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
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

}  // namespace stoker::convert
