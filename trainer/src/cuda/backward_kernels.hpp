// Internal: the GPU trainer's backward kernels (backward_kernels.cu), one launcher each. Values
// are in the storage type (F16 or BF16), gradients float32; a kernel ADDS its input gradients
// (a value read by several ops sums them) and OVERWRITES its parameter gradients. Each computes a
// gradient element by gathering (backward_math.hpp), so no atomics and run-to-run equal sums.
// Launch failures throw CudaError.
#pragma once

#include <cstddef>

#include <stoker/core/cuda.hpp>
#include <stoker/core/image.hpp>

#include "ops/backward_math.hpp"

namespace stoker::trainer::cudnn {
using namespace ops;  // the per-element math the kernels and their host twins share
}  // namespace stoker::trainer::cudnn

namespace stoker::trainer::cudnn::gpu {

// dst[i] += src[i] for n storage values.
void add_storage(DType storage, const void* src, float* dst, std::size_t n, StreamHandle stream);

// Zero padding (or the explicit padding of a convolution): dx += the elements of dy the input was
// copied to. dy_type: F32 (a gradient) or the storage type (cuDNN's backward-data result).
void pad_backward(DType dy_type, const void* dy, float* dx, std::size_t images, PadGeometry g, StreamHandle stream);

// y = act(x · scale[c] + bias[c] + z_scale · z): dv = dy · act'(…) into dv (may be null),
// dx += dv · scale (dx may be null), dz += z_scale · dv (may be null). x, z, y: storage type.
void affine_backward(DType storage, const void* x, const void* z, const void* y, const float* dy, float* dx, float* dz,
                     float* dv, std::size_t total, int channels, const float* scale, const float* bias, float z_scale,
                     ActParams act, StreamHandle stream);

// out[j] = Σ_rows a[r·c + j] · b[r·c + j], in backward_math.hpp's block order: b null for ones, else of
// b_type (F32 or the storage type). `partial` holds ceil(rows / kSumRows) × c floats.
void column_sums(const float* a, const void* b, DType b_type, std::size_t rows, int c, float* partial, float* out,
                 StreamHandle stream);

// Depthwise convolution: dx += the input gradient; dw = the weights' gradient [kh][kw][oc]
// (partial: ceil(pixels / kSumRows) × kh·kw·oc floats, pixels = images·oh·ow).
void depthwise_backward_input(const float* dy, const float* weights, float* dx, std::size_t images, DepthwiseGeometry g,
                              StreamHandle stream);
void depthwise_backward_weights(DType storage, const void* x, const float* dy, std::size_t images, DepthwiseGeometry g,
                                float* partial, float* dw, StreamHandle stream);

// Concatenation: dx += this input's columns [offset, offset + ck) of dy (rows × oc).
void concat_backward(const float* dy, float* dx, std::size_t rows, int ck, int oc, int offset, StreamHandle stream);

// Max / average pooling and global pooling: dx += the input's gradient.
void pool_backward(DType storage, bool is_max, const void* x, const float* dy, float* dx, std::size_t images,
                   PoolGeometry g, StreamHandle stream);
void global_pool_backward(DType storage, bool is_max, const void* x, const float* dy, float* dx, std::size_t images,
                          int hw, int c, StreamHandle stream);

// y = a · b (b per image and channel with channel_broadcast): da += dy · b, db += dy · a (summed
// over the image's pixels when broadcast). da or db may be null.
void mul_backward(DType storage, const void* a, const void* b, const float* dy, float* da, float* db, std::size_t total,
                  std::size_t per, int c, bool channel_broadcast, StreamHandle stream);

// Softmax over rows of n (y its output): dx += y · (dy − Σ dy · y).
void softmax_backward(DType storage, const void* y, const float* dy, float* dx, std::size_t rows, int n,
                      StreamHandle stream);

// Layer normalization of rows of c: dx += the input gradient (may be null); xhat receives the
// normalised values (float32, for the scale's gradient).
void layer_norm_backward(DType storage, const void* x, const float* dy, float* dx, float* xhat, std::size_t rows, int c,
                         float epsilon, const float* scale, StreamHandle stream);

}  // namespace stoker::trainer::cudnn::gpu
