// 8-float vectors shared by the CPU kernels: GCC lowers them to AVX registers in the AVX2
// (x86-64-v3) clones and to SSE pairs otherwise.
#pragma once

#include <cstring>

// The 32-byte vector type is only passed between always-inline helpers; the ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace stoker::trainer::cpu {

typedef float v8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline __attribute__((always_inline)) void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }

}  // namespace stoker::trainer::cpu
