// Pillow's Image.resize for uint8 images, pixel for pixel: what Keras' load_img does after PIL
// decodes a file. NEAREST is Pillow's affine nearest (source position a/2 + x*a accumulated in
// double, a = box width / output width, truncated); the other filters are Pillow's two-pass
// convolution (horizontal first, clipped to uint8, then vertical) with its filter supports scaled
// by the downscale factor (so antialiased when shrinking), its 22-bit fixed-point coefficients and
// its rounding. Channels are resampled independently (Pillow's L, RGB and CMYK modes; Pillow
// premultiplies RGBA by its alpha first, which this does not).
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/core/image.hpp"
#include "stoker/pipeline/transform.hpp"

namespace stoker {

// The source region to resample, in source pixels (Pillow's box argument): the whole image by
// default. Keras' keep_aspect_ratio passes its centre crop here, so filters still read the pixels
// just outside the box, as Pillow's do.
struct ResampleBox {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// True for the interpolations pil_resize implements: nearest, bilinear, bicubic, lanczos, box, hamming.
bool is_pil_filter(Interpolation i) noexcept;

// Resizes src (1, 3 or 4 channels) to out_height x out_width into dst (rows dst_stride bytes apart,
// src.channels channels). box.x1 == 0 means the whole image. Throws InvalidArgument for another
// interpolation, channel count, an empty image or a box outside it. Thread-safe; the coefficient
// tables of the last few sizes are kept per thread.
void pil_resize(const ImageView& src, int out_height, int out_width, Interpolation filter, std::uint8_t* dst,
                std::size_t dst_stride, ResampleBox box = {});

}  // namespace stoker
