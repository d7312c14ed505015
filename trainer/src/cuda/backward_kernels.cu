// The GPU trainer's backward kernels (backward_kernels.hpp): one thread per gradient element, the
// per-element functions of backward_math.hpp (which the host twin, train_host.cpp, runs too).
// Parameter gradients in two passes of fixed order (column_partial blocks, then the blocks summed
// in order), so a step's gradients are the same on every run. 64-bit indices throughout.
#include "backward_kernels.hpp"
#include "kernel_support.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

using I = std::size_t;

struct Ones {
  STOKER_KERNEL_FN float operator()(std::size_t) const { return 1.0f; }
};

template <typename T>
__global__ void add_storage_kernel(const T* src, float* dst, I n) {
  GRID_STRIDE(I, i, n) dst[i] += load(src, i);
}

template <typename T>
__global__ void pad_backward_kernel(const T* dy, float* dx, I total, PadGeometry g) {
  GRID_STRIDE(I, e, total) {
    I at = 0;
    if (pad_destination(g, e, &at)) dx[e] += load(dy, at);
  }
}

template <typename T>
__global__ void affine_backward_kernel(const T* x, const T* z, const T* y, const float* dy, float* dx, float* dz,
                                       float* dv_out, I total, int channels, const float* scale, const float* bias,
                                       float z_scale, ActParams act, bool linear) {
  const ActParams identity{};
  GRID_STRIDE(I, e, total) {
    const int c = static_cast<int>(e % static_cast<I>(channels));
    float dv = dy[e];
    if (!linear) {
      const float v = affine_value(load(x, e), scale, bias, c, z != nullptr, z ? load(z, e) : 0.0f, z_scale, identity);
      dv = act_backward(v, load(y, e), dv, act);
    }
    if (dv_out) dv_out[e] = dv;
    if (dx) dx[e] += scale ? dv * scale[c] : dv;
    if (dz) dz[e] += z_scale * dv;
  }
}

// Pass 1: partial[block · c + j] over rows [block · kSumRows, …); pass 2: out[j] = Σ blocks in order.
template <typename B>
__global__ void column_partial_kernel(const float* a, B b, I rows, int c, I blocks, float* partial) {
  GRID_STRIDE(I, k, blocks * static_cast<I>(c)) {
    const I block = k / static_cast<I>(c);
    const int j = static_cast<int>(k % static_cast<I>(c));
    const I r0 = block * kSumRows, r1 = r0 + kSumRows < rows ? r0 + kSumRows : rows;
    partial[k] = column_partial(Loader<float>{a}, b, c, j, r0, r1);
  }
}

__global__ void sum_blocks_kernel(const float* partial, I blocks, I n, float* out) {
  GRID_STRIDE(I, j, n) {
    float acc = 0.0f;
    for (I b = 0; b < blocks; ++b) acc += partial[b * n + j];
    out[j] = acc;
  }
}

__global__ void depthwise_input_kernel(const float* dy, const float* w, float* dx, I total, DepthwiseGeometry g) {
  GRID_STRIDE(I, e, total) dx[e] += depthwise_input_gradient(Loader<float>{dy}, w, g, e);
}

template <typename T>
__global__ void depthwise_weight_kernel(const T* x, const float* dy, I pixels, DepthwiseGeometry g, I blocks,
                                        float* partial) {
  const I n = static_cast<I>(g.kh) * g.kw * g.oc;
  GRID_STRIDE(I, k, blocks * n) {
    const I block = k / n;
    const I p0 = block * kSumRows, p1 = p0 + kSumRows < pixels ? p0 + kSumRows : pixels;
    partial[k] = depthwise_weight_partial(Loader<T>{x}, Loader<float>{dy}, g, static_cast<int>(k % n), p0, p1);
  }
}

__global__ void concat_backward_kernel(const float* dy, float* dx, I total, int ck, int oc, int offset) {
  GRID_STRIDE(I, e, total) dx[e] += dy[concat_destination(e, ck, oc, offset)];
}

template <typename T>
__global__ void pool_backward_kernel(const T* x, const float* dy, float* dx, I total, PoolGeometry g, bool is_max) {
  GRID_STRIDE(I, e, total) dx[e] += pool_input_gradient(Loader<T>{x}, Loader<float>{dy}, g, is_max, e);
}

template <typename T>
__global__ void global_pool_backward_kernel(const T* x, const float* dy, float* dx, I total, int hw, int c,
                                            bool is_max) {
  GRID_STRIDE(I, e, total) dx[e] += global_pool_input_gradient(Loader<T>{x}, Loader<float>{dy}, hw, c, is_max, e);
}

template <typename T>
__global__ void mul_backward_a_kernel(const T* b, const float* dy, float* da, I total, I per, int c, bool broadcast) {
  GRID_STRIDE(I, e, total) da[e] += dy[e] * load(b, mul_source(e, per, c, broadcast));
}

template <typename T>
__global__ void mul_backward_b_kernel(const T* a, const float* dy, float* db, I total, I per, int c, bool broadcast) {
  GRID_STRIDE(I, e, total) {
    db[e] += broadcast ? broadcast_mul_gradient(Loader<T>{a}, Loader<float>{dy}, per, c, e) : dy[e] * load(a, e);
  }
}

template <typename T>
__global__ void layer_norm_backward_kernel(const T* x, const float* dy, float* dx, float* xhat, I rows, int c,
                                           float epsilon, const float* scale) {
  GRID_STRIDE(I, r, rows) {  // one thread per row, as the forward
    const I base = r * static_cast<I>(c);
    const RowStats s = layer_norm_stats(Loader<T>{x}, base, c, epsilon);
    const LayerNormSums sums = layer_norm_sums(Loader<T>{x}, Loader<float>{dy}, base, c, s, scale);
    for (int j = 0; j < c; ++j) {
      const float v = load(x, base + j);
      xhat[base + j] = (v - s.mean) * s.rstd;
      if (dx) dx[base + j] += layer_norm_input_gradient(v, dy[base + j], s, sums, scale, j);
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const float* dy, float* dx, I rows, int n) {
  GRID_STRIDE(I, r, rows) {  // one thread per row, as the forward
    const I base = r * static_cast<I>(n);
    const float dot = softmax_row_dot(Loader<T>{y}, Loader<float>{dy}, base, n);
    for (int j = 0; j < n; ++j) dx[base + j] += load(y, base + j) * (dy[base + j] - dot);
  }
}

I blocks_of(I rows) { return (rows + kSumRows - 1) / kSumRows; }

}  // namespace

void add_storage(DType storage, const void* src, float* dst, std::size_t n, StreamHandle stream) {
  if (n == 0) return;
  dispatch(storage, "add_storage", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(n, stream, add_storage_kernel)(static_cast<const T*>(src), dst, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("add_storage_kernel");
}

void pad_backward(DType dy_type, const void* dy, float* dx, std::size_t images, PadGeometry g, StreamHandle stream) {
  const I total = images * g.h * g.w * g.c;
  if (total == 0) return;
  if (dy_type == DType::F32) {
    LAUNCH(total, stream, pad_backward_kernel)(static_cast<const float*>(dy), dx, total, g);
  } else {
    dispatch(dy_type, "pad_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      LAUNCH(total, stream, pad_backward_kernel)(static_cast<const T*>(dy), dx, total, g);
    });
  }
  STOKER_CUDA_CHECK_LAUNCH("pad_backward_kernel");
}

void affine_backward(DType storage, const void* x, const void* z, const void* y, const float* dy, float* dx, float* dz,
                     float* dv, std::size_t total, int channels, const float* scale, const float* bias, float z_scale,
                     ActParams act, StreamHandle stream) {
  if (total == 0) return;
  const bool linear = static_cast<ActKind>(act.kind) == ActKind::Linear;
  dispatch(storage, "affine_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(total, stream, affine_backward_kernel)
    (static_cast<const T*>(x), static_cast<const T*>(z), static_cast<const T*>(y), dy, dx, dz, dv, total, channels,
     scale, bias, z_scale, act, linear);
  });
  STOKER_CUDA_CHECK_LAUNCH("affine_backward_kernel");
}

void column_sums(const float* a, const void* b, DType b_type, std::size_t rows, int c, float* partial, float* out,
                 StreamHandle stream) {
  if (c == 0) return;
  const I blocks = blocks_of(rows);
  const I n = blocks * static_cast<I>(c);
  if (n > 0) {
    if (!b) {
      LAUNCH(n, stream, column_partial_kernel)(a, Ones{}, rows, c, blocks, partial);
    } else if (b_type == DType::F32) {
      LAUNCH(n, stream, column_partial_kernel)
      (a, Loader<float>{static_cast<const float*>(b)}, rows, c, blocks, partial);
    } else {
      dispatch(b_type, "column_sums", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        LAUNCH(n, stream, column_partial_kernel)(a, Loader<T>{static_cast<const T*>(b)}, rows, c, blocks, partial);
      });
    }
    STOKER_CUDA_CHECK_LAUNCH("column_partial_kernel");
  }
  LAUNCH(static_cast<I>(c), stream, sum_blocks_kernel)(partial, blocks, static_cast<I>(c), out);
  STOKER_CUDA_CHECK_LAUNCH("sum_blocks_kernel");
}

void depthwise_backward_input(const float* dy, const float* weights, float* dx, std::size_t images, DepthwiseGeometry g,
                              StreamHandle stream) {
  const I total = images * g.h * g.w * g.c;
  if (total == 0) return;
  LAUNCH(total, stream, depthwise_input_kernel)(dy, weights, dx, total, g);
  STOKER_CUDA_CHECK_LAUNCH("depthwise_input_kernel");
}

void depthwise_backward_weights(DType storage, const void* x, const float* dy, std::size_t images, DepthwiseGeometry g,
                                float* partial, float* dw, StreamHandle stream) {
  const I pixels = images * g.oh * g.ow;
  const I blocks = blocks_of(pixels);
  const I n = static_cast<I>(g.kh) * g.kw * g.oc;
  if (blocks > 0) {
    dispatch(storage, "depthwise_backward_weights", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      LAUNCH(blocks * n, stream, depthwise_weight_kernel)(static_cast<const T*>(x), dy, pixels, g, blocks, partial);
    });
    STOKER_CUDA_CHECK_LAUNCH("depthwise_weight_kernel");
  }
  LAUNCH(n, stream, sum_blocks_kernel)(partial, blocks, n, dw);
  STOKER_CUDA_CHECK_LAUNCH("sum_blocks_kernel");
}

void concat_backward(const float* dy, float* dx, std::size_t rows, int ck, int oc, int offset, StreamHandle stream) {
  const I total = rows * static_cast<I>(ck);
  if (total == 0) return;
  LAUNCH(total, stream, concat_backward_kernel)(dy, dx, total, ck, oc, offset);
  STOKER_CUDA_CHECK_LAUNCH("concat_backward_kernel");
}

void pool_backward(DType storage, bool is_max, const void* x, const float* dy, float* dx, std::size_t images,
                   PoolGeometry g, StreamHandle stream) {
  const I total = images * g.h * g.w * g.c;
  if (total == 0) return;
  dispatch(storage, "pool_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(total, stream, pool_backward_kernel)(static_cast<const T*>(x), dy, dx, total, g, is_max);
  });
  STOKER_CUDA_CHECK_LAUNCH("pool_backward_kernel");
}

void global_pool_backward(DType storage, bool is_max, const void* x, const float* dy, float* dx, std::size_t images,
                          int hw, int c, StreamHandle stream) {
  const I total = images * static_cast<I>(hw) * static_cast<I>(c);
  if (total == 0) return;
  dispatch(storage, "global_pool_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(total, stream, global_pool_backward_kernel)(static_cast<const T*>(x), dy, dx, total, hw, c, is_max);
  });
  STOKER_CUDA_CHECK_LAUNCH("global_pool_backward_kernel");
}

void mul_backward(DType storage, const void* a, const void* b, const float* dy, float* da, float* db, std::size_t total,
                  std::size_t per, int c, bool channel_broadcast, StreamHandle stream) {
  if (total == 0) return;
  dispatch(storage, "mul_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (da)
      LAUNCH(total, stream, mul_backward_a_kernel)(static_cast<const T*>(b), dy, da, total, per, c, channel_broadcast);
    if (db) {
      const I n = channel_broadcast ? total / per * static_cast<I>(c) : total;
      LAUNCH(n, stream, mul_backward_b_kernel)(static_cast<const T*>(a), dy, db, n, per, c, channel_broadcast);
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("mul_backward kernels");
}

void softmax_backward(DType storage, const void* y, const float* dy, float* dx, std::size_t rows, int n,
                      StreamHandle stream) {
  if (rows == 0) return;
  dispatch(storage, "softmax_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(rows, stream, softmax_backward_kernel)(static_cast<const T*>(y), dy, dx, rows, n);
  });
  STOKER_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

void layer_norm_backward(DType storage, const void* x, const float* dy, float* dx, float* xhat, std::size_t rows, int c,
                         float epsilon, const float* scale, StreamHandle stream) {
  if (rows == 0) return;
  dispatch(storage, "layer_norm_backward", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    LAUNCH(rows, stream, layer_norm_backward_kernel)(static_cast<const T*>(x), dy, dx, xhat, rows, c, epsilon, scale);
  });
  STOKER_CUDA_CHECK_LAUNCH("layer_norm_backward_kernel");
}

}  // namespace stoker::trainer::cudnn::gpu
