// Internal: the cuDNN backend's own CUDA kernels (everything that is not a convolution), one
// launcher each: device pointers, the storage type (F16 or BF16) of the values, an explicit stream.
// Launch failures throw CudaError. Declared for host code; defined in kernels.cu.
#pragma once

#include <cstddef>

#include <stoker/core/cuda.hpp>
#include <stoker/core/image.hpp>

#include "ops/forward_math.hpp"

namespace stoker::trainer::cudnn {
using namespace ops;  // the per-element math the kernels and their host twins share
}  // namespace stoker::trainer::cudnn

namespace stoker::trainer::cudnn::gpu {

// n values of in_type (F32, F16, BF16) -> storage type.
void convert_input(const void* in, DType in_type, void* out, DType storage, std::size_t n, StreamHandle stream);
// n storage values -> float32.
void to_float(const void* in, DType storage, float* out, std::size_t n, StreamHandle stream);

// y[e] = act(x[e] * scale[c] + bias[c] + z_scale * z[e]), c = e % channels; scale, bias, z may be
// null; y may be x (in place).
void affine(DType storage, const void* x, const void* z, void* y, std::size_t total, int channels, const float* scale,
            const float* bias, float z_scale, ActParams act, StreamHandle stream);

// Depthwise convolution (ops/forward_math.hpp's depthwise_sum), float32 weights [kh][kw][oc] and
// accumulation; y = act(conv + bias[o] + z_scale * z), rounded once.
void depthwise(DType storage, const void* x, const float* weights, const float* bias, const void* z, float z_scale,
               void* y, std::size_t images, DepthwiseGeometry g, ActParams act, StreamHandle stream);

// Zero padding: images × h × w × c -> images × oh × ow × c with the input at (top, left).
void pad(DType storage, const void* x, void* y, std::size_t images, int h, int w, int c, int oh, int ow, int top,
         int left, StreamHandle stream);

// Channels widened with zeros or narrowed: pixels × xc -> pixels × yc, y[p][k] = x[p][k] for
// k < xc, 0 beyond (a convolution cuDNN runs only on channels padded to 8: conv_channel_padding.cpp).
void copy_channels(DType storage, const void* x, int xc, void* y, int yc, std::size_t pixels, StreamHandle stream);

// Max / average pooling (average over the window's pixels inside the input, like TensorFlow).
void pool(DType storage, bool max, const void* x, void* y, std::size_t images, PoolGeometry g, StreamHandle stream);

// Global average pooling: images × hw × c -> images × c, then act.
void global_average(DType storage, const void* x, void* y, std::size_t images, int hw, int c, ActParams act,
                    StreamHandle stream);

// Global max pooling: images × hw × c -> images × c, then act.
void global_max(DType storage, const void* x, void* y, std::size_t images, int hw, int c, ActParams act,
                StreamHandle stream);

// y[e] = act(a[e] * b[mul_source(e)]): b of the same size, or (channel_broadcast) per image and
// channel of `per` = h × w × c values per image.
void multiply(DType storage, const void* a, const void* b, void* y, std::size_t total, std::size_t per, int c,
              bool channel_broadcast, ActParams act, StreamHandle stream);

// Layer normalization of each row of c values (ops/forward_math.hpp's layer_norm_stats/value), then act;
// scale/bias may be null. One thread per row.
void layer_norm(DType storage, const void* x, void* y, std::size_t rows, int c, float epsilon, const float* scale,
                const float* bias, ActParams act, StreamHandle stream);

// Copies rows × ck values into columns [offset, offset + ck) of rows × oc.
void concat_part(DType storage, const void* x, void* y, std::size_t rows, int ck, int oc, int offset,
                 StreamHandle stream);

// Softmax over each row of n values, in place (float32 math).
void softmax_rows(DType storage, void* y, std::size_t rows, int n, StreamHandle stream);

}  // namespace stoker::trainer::cudnn::gpu
