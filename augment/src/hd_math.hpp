// Makes the parameter draw and the per-pixel math compile for the host and for CUDA alike.
// Everything marked STOKER_HOST_DEVICE must stay free of OpenCV, the standard library's
// containers and exceptions: the CUDA executor calls the same functions from its kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "stoker/core/host_device.hpp"

namespace stoker::augment::hd {

// Float multiply/add that nvcc never fuses into an FMA, so the host and the device round alike
// (host builds use -std=c++20, which keeps GCC's -ffp-contract=off).
STOKER_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STOKER_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STOKER_HOST_DEVICE inline double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
STOKER_HOST_DEVICE inline double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// Round half to even, as OpenCV's cvRound (saturate_cast<int>(double)) does.
STOKER_HOST_DEVICE inline long long round_even(double v) {
#if defined(__CUDA_ARCH__)
  return __double2ll_rn(v);
#else
  return std::llrint(v);
#endif
}

STOKER_HOST_DEVICE inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
STOKER_HOST_DEVICE inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
STOKER_HOST_DEVICE inline int mini(int a, int b) { return a < b ? a : b; }
STOKER_HOST_DEVICE inline int maxi(int a, int b) { return a > b ? a : b; }
STOKER_HOST_DEVICE inline float minf(float a, float b) { return a < b ? a : b; }
STOKER_HOST_DEVICE inline float maxf(float a, float b) { return a > b ? a : b; }

// Rounds a non-negative float to the nearest integer, halves up, and saturates to [0, 255].
STOKER_HOST_DEVICE inline std::uint8_t to_u8(float v) {
  v = clampf(v, 0.0f, 255.0f);
  return static_cast<std::uint8_t>(static_cast<int>(v + 0.5f));
}

}  // namespace stoker::augment::hd
