// Internal: the CPU backend's 3×3 depthwise convolution (depth multiplier 1), one output line.
#pragma once

namespace stoker::trainer::cpu {

struct DepthwiseGeometry {
  int h, w, c;  // input (one sample)
  int ow;       // output width
  int sh, sw;   // strides
  int dh, dw;   // dilation
  int pt, pl;   // leading padding
};

// y[ox, ch] = bias[ch] + sum over the 3×3 taps inside the image of x[iy, ix, ch] * k[ky, kx, ch]
// for output line oy. x is one sample (H × W × C), k is [3, 3, C], bias may be null.
void depthwise3x3_line(const float* x, const DepthwiseGeometry& g, int oy, const float* k, const float* bias, float* y);

}  // namespace stoker::trainer::cpu
