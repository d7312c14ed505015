// Internal, CUDA only: what the cuDNN backend's kernel files share — loads and stores of the
// storage types (fp16, bf16, float32) as float, launch sizes, the grid-stride loop and the dispatch
// on the storage type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include <stoker/core/error.hpp>
#include <stoker/core/image.hpp>

namespace stoker::trainer::cudnn::gpu {

__host__ __device__ __forceinline__ float load(const __half* p, std::size_t i) { return __half2float(p[i]); }
__host__ __device__ __forceinline__ float load(const __nv_bfloat16* p, std::size_t i) { return __bfloat162float(p[i]); }
__host__ __device__ __forceinline__ float load(const float* p, std::size_t i) { return p[i]; }
__host__ __device__ __forceinline__ void store(__half* p, std::size_t i, float v) { p[i] = __float2half_rn(v); }
__host__ __device__ __forceinline__ void store(__nv_bfloat16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
__host__ __device__ __forceinline__ void store(float* p, std::size_t i, float v) { p[i] = v; }

// Reads element i of a storage-typed array as float (the functor op_math.hpp's functions take).
template <typename T>
struct Loader {
  const T* p;
  __host__ __device__ float operator()(std::size_t i) const { return load(p, i); }
};

constexpr int kThreads = 256;

inline unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(b, 1), 65535u * 8u));
}

// True when every index an op touches fits 32 bits (then its kernel divides in 32 bits).
inline bool fits32(std::size_t a, std::size_t b = 0) {
  return a < (std::size_t{1} << 31) && b < (std::size_t{1} << 31);
}

#define GRID_STRIDE(I, i, n)                                                                                 \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

inline void check_storage(DType t, const char* who) {
  if (t != DType::F16 && t != DType::BF16)
    throw InvalidArgument(std::string(who) + ": storage type must be F16 or BF16, received " + to_string(t));
}

// Calls f(T*) with the storage type's pointer type.
template <typename F>
void dispatch(DType storage, const char* who, F&& f) {
  check_storage(storage, who);
  if (storage == DType::F16) f(static_cast<__half*>(nullptr));
  else f(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace stoker::trainer::cudnn::gpu
