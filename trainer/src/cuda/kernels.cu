// The cuDNN backend's own kernels: input/output conversion, the conv epilogue and element-wise
// ops (affine), zero padding (of pixels and of channels), pooling, global average pooling,
// concatenation, softmax. NHWC, values stored as fp16 or bf16, math in float32. Grid-stride loops;
// one launcher per kernel.
#include <cstdint>

#include "kernel_support.hpp"
#include "kernels.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

template <typename In, typename Out>
__global__ void convert_kernel(const In* in, Out* out, std::size_t n) {
  GRID_STRIDE(std::size_t, i, n) store(out, i, load(in, i));
}

template <typename T, typename I>
__global__ void affine_kernel(const T* x, const T* z, T* y, I total, int channels, const float* scale,
                              const float* bias, float z_scale, ActParams act) {
  GRID_STRIDE(I, e, total) {
    const int c = static_cast<int>(e % static_cast<I>(channels));
    store(y, e, affine_value(load(x, e), scale, bias, c, z != nullptr, z ? load(z, e) : 0.0f, z_scale, act));
  }
}

template <typename T, typename I>
__global__ void depthwise_kernel(const T* x, const float* __restrict__ wt, const float* __restrict__ bias, const T* z,
                                 float z_scale, T* y, I total, DepthwiseGeometry g, ActParams act) {
  GRID_STRIDE(I, e, total) {  // neighbouring threads: neighbouring channels of one pixel
    const float acc = depthwise_sum(Loader<T>{x}, wt, g, e);
    store(y, e,
          affine_value(acc, nullptr, bias, static_cast<int>(e % static_cast<I>(g.oc)), z != nullptr,
                       z ? load(z, e) : 0.0f, z_scale, act));
  }
}

template <typename T, typename I>
__global__ void pad_kernel(const T* x, T* y, I total, PadGeometry g) {
  GRID_STRIDE(I, e, total) {
    I src = 0;
    if (pad_source(g, e, &src)) y[e] = x[src];
    else store(y, e, 0.0f);
  }
}

template <typename T, typename I>
__global__ void copy_channels_kernel(const T* x, I xc, T* y, I yc, I total) {
  GRID_STRIDE(I, e, total) {
    const I k = e % yc;
    if (k < xc) y[e] = x[e / yc * xc + k];
    else store(y, e, 0.0f);
  }
}

template <typename T, typename I>
__global__ void pool_kernel(const T* x, T* y, I total, PoolGeometry g, bool is_max) {
  GRID_STRIDE(I, e, total) store(y, e, pool_value(Loader<T>{x}, g, is_max, e));
}

template <typename T, typename I>
__global__ void gap_kernel(const T* x, T* y, I total, int hw, int c, ActParams act) {
  GRID_STRIDE(I, e, total) store(y, e, apply_act(gap_value(Loader<T>{x}, hw, c, e), act));
}

template <typename T, typename I>
__global__ void gmp_kernel(const T* x, T* y, I total, int hw, int c, ActParams act) {
  GRID_STRIDE(I, e, total) store(y, e, apply_act(gmp_value(Loader<T>{x}, hw, c, e), act));
}

template <typename T, typename I>
__global__ void mul_kernel(const T* a, const T* b, T* y, I total, I per, int c, bool channel_broadcast, ActParams act) {
  GRID_STRIDE(I, e, total) {
    store(y, e, apply_act(load(a, e) * load(b, mul_source(e, per, c, channel_broadcast)), act));
  }
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, T* y, std::size_t rows, int c, float epsilon, const float* scale,
                                  const float* bias, ActParams act) {
  GRID_STRIDE(std::size_t, r, rows) {  // one thread per row
    const std::size_t base = r * static_cast<std::size_t>(c);
    const RowStats s = layer_norm_stats(Loader<T>{x}, base, c, epsilon);
    for (int j = 0; j < c; ++j)
      store(y, base + j, apply_act(layer_norm_value(load(x, base + j), s, scale, bias, j), act));
  }
}

template <typename T, typename I>
__global__ void concat_kernel(const T* x, T* y, I total, int ck, int oc, int offset) {
  GRID_STRIDE(I, e, total) y[concat_destination(e, ck, oc, offset)] = x[e];
}

template <typename T>
__global__ void softmax_kernel(T* y, std::size_t rows, int n) {
  GRID_STRIDE(std::size_t, r, rows) {  // one thread per row: heads are small
    T* row = y + r * n;
    float m = -INFINITY;
    for (int j = 0; j < n; ++j) m = fmaxf(m, load(row, j));
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += expf(load(row, j) - m);
    for (int j = 0; j < n; ++j) store(row, j, expf(load(row, j) - m) / sum);
  }
}

}  // namespace

void convert_input(const void* in, DType in_type, void* out, DType storage, std::size_t n, StreamHandle stream) {
  if (n == 0) return;
  dispatch(storage, "convert_input", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* o = static_cast<T*>(out);
    switch (in_type) {
      case DType::F32: LAUNCH(n, stream, convert_kernel)(static_cast<const float*>(in), o, n); break;
      case DType::F16: LAUNCH(n, stream, convert_kernel)(static_cast<const Half*>(in), o, n); break;
      case DType::BF16: LAUNCH(n, stream, convert_kernel)(static_cast<const BFloat16*>(in), o, n); break;
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
    LAUNCH(n, stream, convert_kernel)(static_cast<const T*>(in), out, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("convert_kernel (to float)");
}

void affine(DType storage, const void* x, const void* z, void* y, std::size_t total, int channels, const float* scale,
            const float* bias, float z_scale, ActParams act, StreamHandle stream) {
  if (total == 0) return;
  dispatch(storage, "affine", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    const T* zz = static_cast<const T*>(z);
    T* yy = static_cast<T*>(y);
    if (fits32(total)) {
      LAUNCH(total, stream, affine_kernel<T, std::uint32_t>)
      (xx, zz, yy, static_cast<std::uint32_t>(total), channels, scale, bias, z_scale, act);
    } else {
      LAUNCH(total, stream, affine_kernel<T, std::size_t>)(xx, zz, yy, total, channels, scale, bias, z_scale, act);
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("affine_kernel");
}

void depthwise(DType storage, const void* x, const float* weights, const float* bias, const void* z, float z_scale,
               void* y, std::size_t images, DepthwiseGeometry g, ActParams act, StreamHandle stream) {
  const std::size_t total = images * g.oh * g.ow * g.oc;
  if (total == 0) return;
  const std::size_t in_total = images * g.h * g.w * g.c;
  dispatch(storage, "depthwise", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    const T* zz = static_cast<const T*>(z);
    T* yy = static_cast<T*>(y);
    if (fits32(total, in_total)) {
      LAUNCH(total, stream, depthwise_kernel<T, std::uint32_t>)
      (xx, weights, bias, zz, z_scale, yy, static_cast<std::uint32_t>(total), g, act);
    } else {
      LAUNCH(total, stream, depthwise_kernel<T, std::size_t>)(xx, weights, bias, zz, z_scale, yy, total, g, act);
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("depthwise_kernel");
}

void pad(DType storage, const void* x, void* y, std::size_t images, int h, int w, int c, int oh, int ow, int top,
         int left, StreamHandle stream) {
  const std::size_t total = images * oh * ow * c;
  if (total == 0) return;
  const PadGeometry g{h, w, c, oh, ow, top, left};
  dispatch(storage, "pad", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(total, images * h * w * c))
      LAUNCH(total, stream, pad_kernel<T, std::uint32_t>)(xx, yy, static_cast<std::uint32_t>(total), g);
    else LAUNCH(total, stream, pad_kernel<T, std::size_t>)(xx, yy, total, g);
  });
  STOKER_CUDA_CHECK_LAUNCH("pad_kernel");
}

void copy_channels(DType storage, const void* x, int xc, void* y, int yc, std::size_t pixels, StreamHandle stream) {
  const std::size_t total = pixels * static_cast<std::size_t>(yc);
  if (total == 0) return;
  dispatch(storage, "copy_channels", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(total, pixels * static_cast<std::size_t>(xc))) {
      const auto x32 = static_cast<std::uint32_t>(xc), y32 = static_cast<std::uint32_t>(yc);
      LAUNCH(total, stream, copy_channels_kernel<T, std::uint32_t>)
      (xx, x32, yy, y32, static_cast<std::uint32_t>(total));
    } else {
      const auto x64 = static_cast<std::size_t>(xc), y64 = static_cast<std::size_t>(yc);
      LAUNCH(total, stream, copy_channels_kernel<T, std::size_t>)(xx, x64, yy, y64, total);
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("copy_channels_kernel");
}

void pool(DType storage, bool max, const void* x, void* y, std::size_t images, PoolGeometry g, StreamHandle stream) {
  const std::size_t total = images * g.oh * g.ow * g.c;
  if (total == 0) return;
  dispatch(storage, "pool", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(total, images * g.h * g.w * g.c))
      LAUNCH(total, stream, pool_kernel<T, std::uint32_t>)(xx, yy, static_cast<std::uint32_t>(total), g, max);
    else LAUNCH(total, stream, pool_kernel<T, std::size_t>)(xx, yy, total, g, max);
  });
  STOKER_CUDA_CHECK_LAUNCH("pool_kernel");
}

void global_average(DType storage, const void* x, void* y, std::size_t images, int hw, int c, ActParams act,
                    StreamHandle stream) {
  const std::size_t total = images * c;
  if (total == 0) return;
  dispatch(storage, "global_average", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(images * hw * c))
      LAUNCH(total, stream, gap_kernel<T, std::uint32_t>)(xx, yy, static_cast<std::uint32_t>(total), hw, c, act);
    else LAUNCH(total, stream, gap_kernel<T, std::size_t>)(xx, yy, total, hw, c, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("gap_kernel");
}

void global_max(DType storage, const void* x, void* y, std::size_t images, int hw, int c, ActParams act,
                StreamHandle stream) {
  const std::size_t total = images * c;
  if (total == 0) return;
  dispatch(storage, "global_max", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(images * hw * c))
      LAUNCH(total, stream, gmp_kernel<T, std::uint32_t>)(xx, yy, static_cast<std::uint32_t>(total), hw, c, act);
    else LAUNCH(total, stream, gmp_kernel<T, std::size_t>)(xx, yy, total, hw, c, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("gmp_kernel");
}

void multiply(DType storage, const void* a, const void* b, void* y, std::size_t total, std::size_t per, int c,
              bool channel_broadcast, ActParams act, StreamHandle stream) {
  if (total == 0) return;
  dispatch(storage, "multiply", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* aa = static_cast<const T*>(a);
    const T* bb = static_cast<const T*>(b);
    T* yy = static_cast<T*>(y);
    if (fits32(total)) {
      LAUNCH(total, stream, mul_kernel<T, std::uint32_t>)
      (aa, bb, yy, static_cast<std::uint32_t>(total), static_cast<std::uint32_t>(per), c, channel_broadcast, act);
    } else {
      LAUNCH(total, stream, mul_kernel<T, std::size_t>)(aa, bb, yy, total, per, c, channel_broadcast, act);
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("mul_kernel");
}

void layer_norm(DType storage, const void* x, void* y, std::size_t rows, int c, float epsilon, const float* scale,
                const float* bias, ActParams act, StreamHandle stream) {
  if (rows == 0) return;
  dispatch(storage, "layer_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(rows, stream, layer_norm_kernel)
    (static_cast<const T*>(x), static_cast<T*>(y), rows, c, epsilon, scale, bias, act);
  });
  STOKER_CUDA_CHECK_LAUNCH("layer_norm_kernel");
}

void concat_part(DType storage, const void* x, void* y, std::size_t rows, int ck, int oc, int offset,
                 StreamHandle stream) {
  const std::size_t total = rows * ck;
  if (total == 0) return;
  dispatch(storage, "concat_part", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xx = static_cast<const T*>(x);
    T* yy = static_cast<T*>(y);
    if (fits32(rows * oc))
      LAUNCH(total, stream, concat_kernel<T, std::uint32_t>)(xx, yy, static_cast<std::uint32_t>(total), ck, oc, offset);
    else LAUNCH(total, stream, concat_kernel<T, std::size_t>)(xx, yy, total, ck, oc, offset);
  });
  STOKER_CUDA_CHECK_LAUNCH("concat_kernel");
}

void softmax_rows(DType storage, void* y, std::size_t rows, int n, StreamHandle stream) {
  if (rows == 0) return;
  dispatch(storage, "softmax_rows", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(rows, stream, softmax_kernel)(static_cast<T*>(y), rows, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("softmax_kernel");
}

}  // namespace stoker::trainer::cudnn::gpu
