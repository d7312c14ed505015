// Internal: what the cuDNN backend's kernel files (kernels.cu, backward_kernels.cu) share — loads
// and stores of the storage types (fp16, bf16, float32) as float, launch sizes, the grid-stride
// loop, the launch and the dispatch on the storage type.
//
// The same kernel files build two ways. Under nvcc they are CUDA kernels. On the emulated device
// (STOKER_CUDA_EMULATION, no nvcc) the host compiler builds them (emulated_kernels.cpp): the
// storage types are 16-bit words rounded by stoker/core/half.hpp, and each launch queues one host
// "thread" on the stream that runs the kernel's whole grid-stride loop (blockIdx 0, a grid and a
// block of one). So the backend's and the trainer's launches, buffer offsets and stream order run
// in CI, under the sanitizers, with the kernels' own per-element code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <stoker/core/cuda.hpp>
#include <stoker/core/error.hpp>
#include <stoker/core/image.hpp>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <stoker/core/detail/cuda_emulation.hpp>
#include <stoker/core/half.hpp>
#endif

namespace stoker::trainer::cudnn::gpu {

#if defined(__CUDACC__)
using Half = __half;
using BFloat16 = __nv_bfloat16;
#define STOKER_KERNEL_FN __host__ __device__ __forceinline__
__host__ __device__ __forceinline__ float load(const Half* p, std::size_t i) { return __half2float(p[i]); }
__host__ __device__ __forceinline__ float load(const BFloat16* p, std::size_t i) { return __bfloat162float(p[i]); }
__host__ __device__ __forceinline__ void store(Half* p, std::size_t i, float v) { p[i] = __float2half_rn(v); }
__host__ __device__ __forceinline__ void store(BFloat16* p, std::size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
#else
// The storage types as the 16-bit words the GPU stores; rounding to nearest even as __float2half_rn
// and __float2bfloat16_rn.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};
#define __global__
#define STOKER_KERNEL_FN inline
inline float load(const Half* p, std::size_t i) { return convert::f16_value(p[i].bits); }
inline float load(const BFloat16* p, std::size_t i) { return convert::bf16_value(p[i].bits); }
inline void store(Half* p, std::size_t i, float v) { p[i].bits = convert::f16_bits(v); }
inline void store(BFloat16* p, std::size_t i, float v) { p[i].bits = convert::bf16_bits(v); }
#endif
STOKER_KERNEL_FN float load(const float* p, std::size_t i) { return p[i]; }
STOKER_KERNEL_FN void store(float* p, std::size_t i, float v) { p[i] = v; }

// Reads element i of a storage-typed array as float (the functor ops/forward_math.hpp's functions take).
template <typename T>
struct Loader {
  const T* p;
  STOKER_KERNEL_FN float operator()(std::size_t i) const { return load(p, i); }
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

#if defined(__CUDACC__)
#define GRID_STRIDE(I, i, n)                                                                                 \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))
// LAUNCH(n, stream, kernel)(arguments...): the kernel over n elements on the stream.
#define LAUNCH(n, stream, ...) __VA_ARGS__<<<blocks_for(n), kThreads, 0, (stream)>>>
#else
#define GRID_STRIDE(I, i, n) for (I i = 0; i < (n); ++i)

// The arguments are copied into the queued call, as a launch copies them to the device.
template <typename Kernel>
struct HostLaunch {
  StreamHandle stream;
  Kernel kernel;
  template <typename... Args>
  void operator()(Args... args) const {
    emulation::launch(stream, [kernel = kernel, args...] { kernel(args...); });
  }
};
template <typename Kernel>
HostLaunch<Kernel> host_launch(StreamHandle stream, Kernel kernel) {
  return {stream, kernel};
}
#define LAUNCH(n, stream, ...) host_launch((stream), [](auto... args) { __VA_ARGS__(args...); })
#endif

inline void check_storage(DType t, const char* who) {
  if (t != DType::F16 && t != DType::BF16)
    throw InvalidArgument(std::string(who) + ": storage type must be F16 or BF16, received " + to_string(t));
}

// Calls f(T*) with the storage type's pointer type.
template <typename F>
void dispatch(DType storage, const char* who, F&& f) {
  check_storage(storage, who);
  if (storage == DType::F16) f(static_cast<Half*>(nullptr));
  else f(static_cast<BFloat16*>(nullptr));
}

}  // namespace stoker::trainer::cudnn::gpu
