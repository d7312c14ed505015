// The conversion kernel: one thread per pixel of the batch, reading its C bytes (NHWC) and
// writing C values (NHWC, or one per channel plane for NCHW: coalesced per plane).
#include "stoker/pipeline/convert.hpp"

#include <cuda_runtime.h>

namespace stoker {
namespace {

__global__ static void convert_kernel(convert::ConvertParams p, const std::uint8_t* __restrict__ in, void* out,
                                      std::size_t pixels_total) {
  const std::size_t hw = static_cast<std::size_t>(p.height) * p.width;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < pixels_total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t n = i / hw, pix = i % hw;
    const std::size_t e0 = pix * p.channels;
    const std::uint8_t* src = in + n * hw * p.channels + e0;
    for (int c = 0; c < p.channels; ++c) {
      convert::store(p.dtype, out, convert::output_offset(p, n, e0 + c), convert::value(p, c, src[c]));
    }
  }
}

}  // namespace

void convert_batch(const ConvertSpec& spec, const SampleShape& in_shape, int batch, const std::uint8_t* in_device,
                   void* out_device, StreamHandle stream) {
  const convert::ConvertParams p = convert::make_params(spec, in_shape);
  if (batch <= 0) return;
  const std::size_t pixels =
      static_cast<std::size_t>(in_shape.height) * in_shape.width * static_cast<std::size_t>(batch);
  constexpr int kThreads = 256;
  const std::size_t want = (pixels + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(want < 65535u * 8u ? want : 65535u * 8u);
  convert_kernel<<<blocks, kThreads, 0, stream>>>(p, in_device, out_device, pixels);
  STOKER_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace stoker
