// The cuDNN backend's own kernels: input/output conversion, the conv epilogue and element-wise
// ops (affine), zero padding, pooling, global average pooling, concatenation, softmax. NHWC,
// values stored as fp16 or bf16, math in float32. Grid-stride loops; one launcher per kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <stoker/error.hpp>

#include "kernels.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

__host__ __device__ __forceinline__ float load(const __half* p, std::size_t i) { return __half2float(p[i]); }
__host__ __device__ __forceinline__ float load(const __nv_bfloat16* p, std::size_t i) { return __bfloat162float(p[i]); }
__host__ __device__ __forceinline__ float load(const float* p, std::size_t i) { return p[i]; }
__host__ __device__ __forceinline__ void store(__half* p, std::size_t i, float v) { p[i] = __float2half_rn(v); }
__host__ __device__ __forceinline__ void store(__nv_bfloat16* p, std::size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__host__ __device__ __forceinline__ void store(float* p, std::size_t i, float v) { p[i] = v; }

// Reads element i of a storage-typed array as float (the functor op_math.hpp's functions take).
template <typename T>
struct Loader {
  const T* p;
  __host__ __device__ float operator()(std::size_t i) const { return load(p, i); }
};

constexpr int kThreads = 256;

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(b, 1), 65535u * 8u));
}

#define GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); i += std::size_t(gridDim.x) * blockDim.x)

template <typename In, typename Out>
__global__ void convert_kernel(const In* in, Out* out, std::size_t n) {
  GRID_STRIDE(i, n) store(out, i, load(in, i));
}

template <typename T>
__global__ void affine_kernel(const T* x, const T* z, T* y, std::size_t total, int channels, const float* scale,
                              const float* bias, float z_scale, ActParams act) {
  GRID_STRIDE(e, total) {
    const int c = static_cast<int>(e % static_cast<std::size_t>(channels));
    store(y, e, affine_value(load(x, e), scale, bias, c, z != nullptr, z ? load(z, e) : 0.0f, z_scale, act));
  }
}

template <typename T>
__global__ void depthwise_kernel(const T* x, const float* __restrict__ wt, const float* __restrict__ bias, const T* z,
                                 float z_scale, T* y, std::size_t total, DepthwiseGeometry g, ActParams act) {
  GRID_STRIDE(e, total) {  // neighbouring threads: neighbouring channels of one pixel
    const float acc = depthwise_sum(Loader<T>{x}, wt, g, e);
    store(y, e, affine_value(acc, nullptr, bias, static_cast<int>(e % g.oc), z != nullptr, z ? load(z, e) : 0.0f,
                             z_scale, act));
  }
}

template <typename T>
__global__ void pad_kernel(const T* x, T* y, std::size_t total, PadGeometry g) {
  GRID_STRIDE(e, total) {
    const long long src = pad_source(g, e);
    y[e] = src < 0 ? T(0.0f) : x[src];
  }
}

template <typename T>
__global__ void pool_kernel(const T* x, T* y, std::size_t total, PoolGeometry g, bool is_max) {
  GRID_STRIDE(e, total) store(y, e, pool_value(Loader<T>{x}, g, is_max, e));
}

template <typename T>
__global__ void gap_kernel(const T* x, T* y, std::size_t total, int hw, int c, ActParams act) {
  GRID_STRIDE(e, total) store(y, e, apply_act(gap_value(Loader<T>{x}, hw, c, e), act));
}

template <typename T>
__global__ void concat_kernel(const T* x, T* y, std::size_t total, int ck, int oc, int offset) {
  GRID_STRIDE(e, total) y[concat_destination(e, ck, oc, offset)] = x[e];
}

template <typename T>
__global__ void softmax_kernel(T* y, std::size_t rows, int n) {
  GRID_STRIDE(r, rows) {  // one thread per row: heads are small
    T* row = y + r * n;
    float m = -INFINITY;
    for (int j = 0; j < n; ++j) m = fmaxf(m, load(row, j));
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += expf(load(row, j) - m);
    for (int j = 0; j < n; ++j) store(row, j, expf(load(row, j) - m) / sum);
  }
}

void check_storage(DType t, const char* who) {
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

}  // namespace

void convert_input(const void* in, DType in_type, void* out, DType storage, std::size_t n, StreamHandle stream) {
  if (n == 0) return;
  dispatch(storage, "convert_input", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* o = static_cast<T*>(out);
    switch (in_type) {
      case DType::F32: convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const float*>(in), o, n); break;
      case DType::F16: convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __half*>(in), o, n); break;
      case DType::BF16:
        convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), o, n);
        break;
      default:
        throw InvalidArgument(std::string("cudnn backend: input type must be F32, F16 or BF16, received ") +
                              to_string(in_type));
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("convert_kernel");
}

void to_float(const void* in, DType storage, float* out, std::size_t n, StreamHandle stream) {
  if (n == 0) return;
  dispatch(storage, "to_float", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(in), out, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("convert_kernel (to float)");
}

void affine(DType storage, const void* x, const void* z, void* y, std::size_t total, int channels, const float* scale,
            const float* bias, float z_scale, ActParams act, StreamHandle stream) {
  if (total == 0) return;
  dispatch(storage, "affine", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    affine_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(z),
                                                              static_cast<T*>(y), total, channels, scale, bias,
                                                              z_scale, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("affine_kernel");
}

void depthwise(DType storage, const void* x, const float* weights, const float* bias, const void* z, float z_scale,
               void* y, std::size_t images, DepthwiseGeometry g, ActParams act, StreamHandle stream) {
  const std::size_t total = images * g.oh * g.ow * g.oc;
  if (total == 0) return;
  dispatch(storage, "depthwise", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    depthwise_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), weights, bias,
                                                                 static_cast<const T*>(z), z_scale, static_cast<T*>(y),
                                                                 total, g, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("depthwise_kernel");
}

void pad(DType storage, const void* x, void* y, std::size_t images, int h, int w, int c, int oh, int ow, int top,
         int left, StreamHandle stream) {
  const std::size_t total = images * oh * ow * c;
  if (total == 0) return;
  dispatch(storage, "pad", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    pad_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), total,
                                                           PadGeometry{h, w, c, oh, ow, top, left});
  });
  STOKER_CUDA_CHECK_LAUNCH("pad_kernel");
}

void pool(DType storage, bool max, const void* x, void* y, std::size_t images, PoolGeometry g, StreamHandle stream) {
  const std::size_t total = images * g.oh * g.ow * g.c;
  if (total == 0) return;
  dispatch(storage, "pool", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    pool_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), total, g, max);
  });
  STOKER_CUDA_CHECK_LAUNCH("pool_kernel");
}

void global_average(DType storage, const void* x, void* y, std::size_t images, int hw, int c, ActParams act,
                    StreamHandle stream) {
  const std::size_t total = images * c;
  if (total == 0) return;
  dispatch(storage, "global_average", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    gap_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), total, hw, c, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("gap_kernel");
}

void concat_part(DType storage, const void* x, void* y, std::size_t rows, int ck, int oc, int offset,
                 StreamHandle stream) {
  const std::size_t total = rows * ck;
  if (total == 0) return;
  dispatch(storage, "concat_part", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    concat_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), total, ck,
                                                              oc, offset);
  });
  STOKER_CUDA_CHECK_LAUNCH("concat_kernel");
}

void softmax_rows(DType storage, void* y, std::size_t rows, int n, StreamHandle stream) {
  if (rows == 0) return;
  dispatch(storage, "softmax_rows", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    softmax_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(static_cast<T*>(y), rows, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("softmax_kernel");
}

}  // namespace stoker::trainer::cudnn::gpu
