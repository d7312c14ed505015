// CPU-only fast path of the photometric steps (augmenter.cpp): one output row at a time, the
// channels in separate float arrays, branch-free loops that GCC vectorises across pixels.
//
// Bit-identical to augment::photometric() (pixel.hpp) pixel by pixel: every value goes through
// the same IEEE float operations in the same order; only the control flow differs (a branch
// becomes "compute both sides, select one", a division whose result the original skips divides
// by 1.0 instead and is then discarded). The per-value steps (channel shift, brightness,
// contrast) are a 256-entry table built by photometric() itself. GCC's ISO mode (-std=c++20)
// keeps -ffp-contract=off, so no multiply-add is fused here either: do not build this with
// -ffast-math or -ffp-contract=fast. augmenter.cpp compiles process_row() twice on x86-64,
// for the baseline and for AVX2 (which has no FMA instructions); vector width does not change
// any value. tests/augment/colour_jitter_test.cpp pins the equality for both.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "hd_math.hpp"
#include "pixel.hpp"
#include "stoker/core/half.hpp"

namespace stoker::augment::rows {

// c ? a : b as a bitwise select. GCC turns a plain ?: whose arm is a constant into a branch when
// a conversion or a division follows it (it folds that operation into the constant arm), and then
// does not vectorise the loop; masks it cannot see through.
inline float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return std::bit_cast<float>((m & std::bit_cast<std::uint32_t>(a)) | (~m & std::bit_cast<std::uint32_t>(b)));
}

// The per-image constants of photometric().
struct PhotometricConstants {
  float value[256];  // channel shift, brightness and contrast of one value: photometric(..., cn = 1)
  bool saturation = false;
  bool hue = false;
  float saturation_factor = 1.0f;
  float hue_shift = 0.0f;
};

inline PhotometricConstants photometric_constants(const SampleParams& s, const WarpStats& st, float cmean, int cn) {
  PhotometricConstants k;
  for (int v = 0; v < 256; ++v) {
    float x = static_cast<float>(v);
    photometric(s, st, cmean, 1, &x);  // cn = 1: the per-value steps only, as each channel sees them
    k.value[v] = x;
  }
  k.saturation = cn >= 3 && s.has_saturation;
  k.hue = cn >= 3 && s.has_hue;
  k.saturation_factor = s.saturation;
  k.hue_shift = s.hue;
  return k;
}

// pil_blend(d, v, f) without branches: its "t <= 0 -> 0, t >= 255 -> 255, else floor" is
// floor_pos of t clamped to [0, 255] (floor_pos(0) == 0, floor_pos(255) == 255).
inline float blend_clip(float d, float v, float f) {
  float t = hd::add(d, hd::mul(f, hd::add(v, -d)));
  t = select(t <= 0.0f, 0.0f, t);
  t = select(t >= 255.0f, 255.0f, t);
  return floor_pos(t);
}

// PIL's ImageEnhance.Color on a row: pil_luma of the truncated values, then pil_blend() towards
// it.
inline void saturation_row(float* __restrict r, float* __restrict g, float* __restrict b, int n, float f) {
  for (int x = 0; x < n; ++x) {
    const float l =
        static_cast<float>(pil_luma(static_cast<int>(r[x]), static_cast<int>(g[x]), static_cast<int>(b[x])));
    r[x] = blend_clip(l, r[x], f);
    g[x] = blend_clip(l, g[x], f);
    b[x] = blend_clip(l, b[x], f);
  }
}

// rgb_to_hsv, the hue rotation and hsv_to_rgb of photometric() on a row, without branches.
inline void hue_row(float* __restrict r, float* __restrict g, float* __restrict b, int n, float hue) {
  for (int x = 0; x < n; ++x) {
    const float R = r[x], G = g[x], B = b[x];
    // rgb_to_hsv
    const float mx = hd::maxf(R, hd::maxf(G, B)), mn = hd::minf(R, hd::minf(G, B));
    const float d = mx - mn;
    const float sat_q = d / select(mx > 0.0f, mx, 1.0f);
    const float sat = select(mx > 0.0f, sat_q, 0.0f);
    const bool max_r = mx == R, max_g = mx == G;
    const float num = select(max_r, G - B, select(max_g, B - R, R - G));
    const float q = num / select(d > 0.0f, d, 1.0f);
    const float h_r = select(q < 0.0f, q + 6.0f, q);   // (g - b) / d, wrapped
    const float h_gb = q + select(max_g, 2.0f, 4.0f);  // (b - r) / d + 2 or (r - g) / d + 4
    float h = select(d > 0.0f, select(max_r, h_r, h_gb) / 6.0f, 0.0f);
    // the rotation
    h += hue;
    h = select(h < 0.0f, h + 1.0f, h);
    h = select(h >= 1.0f, h - 1.0f, h);
    // hsv_to_rgb
    const float h6 = h * 6.0f;
    int i = static_cast<int>(h6);
    const float fr = h6 - static_cast<float>(i);
    i = i > 5 ? 5 : i;
    const float v = mx;
    const float p = v * (1.0f - sat), qv = v * (1.0f - sat * fr), t = v * (1.0f - sat * (1.0f - fr));
    // i:   0  1  2  3  4  5
    // r:   v  q  p  p  t  v
    // g:   t  v  v  q  p  p
    // b:   p  p  t  v  v  q
    r[x] = select(i == 0 || i == 5, v, select(i == 1, qv, select(i == 4, t, p)));
    g[x] = select(i == 1 || i == 2, v, select(i == 0, t, select(i == 3, qv, p)));
    b[x] = select(i == 3 || i == 4, v, select(i == 2, t, select(i == 5, qv, p)));
  }
}

// photometric() on one row of n interleaved uint8 pixels with cn channels: plane[c][x] receives
// channel c of pixel x.
inline void photometric_row(const PhotometricConstants& k, const std::uint8_t* in, int n, int cn, float* const* plane) {
  const float* lut = k.value;
  switch (cn) {
    case 1:
      for (int x = 0; x < n; ++x) plane[0][x] = lut[in[x]];
      break;
    case 3:
      for (int x = 0; x < n; ++x) {
        plane[0][x] = lut[in[3 * x]];
        plane[1][x] = lut[in[3 * x + 1]];
        plane[2][x] = lut[in[3 * x + 2]];
      }
      break;
    default:
      for (int x = 0; x < n; ++x)
        for (int c = 0; c < cn; ++c) plane[c][x] = lut[in[cn * x + c]];
      break;
  }
  if (k.saturation) saturation_row(plane[0], plane[1], plane[2], n, k.saturation_factor);
  if (k.hue) hue_row(plane[0], plane[1], plane[2], n, k.hue_shift);
}

// out[x] = plane[x] * scale + offset (OutputAffine), as float or through hd::to_u8, every
// `stride` elements.
inline void affine_row_f32(const float* __restrict plane, int n, float scale, float offset, float* __restrict out) {
  for (int x = 0; x < n; ++x) out[x] = hd::add(hd::mul(plane[x], scale), offset);
}
inline void affine_row_f32(const float* __restrict plane, int n, float scale, float offset, float* __restrict out,
                           int stride) {
  for (int x = 0; x < n; ++x) out[x * stride] = hd::add(hd::mul(plane[x], scale), offset);
}
inline void affine_row_u8(const float* __restrict plane, int n, float scale, float offset,
                          std::uint8_t* __restrict out) {
  for (int x = 0; x < n; ++x) {
    float v = hd::add(hd::mul(plane[x], scale), offset);
    v = select(v < 0.0f, 0.0f, v);  // hd::to_u8: clampf(v, 0, 255), + 0.5, truncate
    v = select(v > 255.0f, 255.0f, v);
    out[x] = static_cast<std::uint8_t>(static_cast<int>(v + 0.5f));
  }
}
inline void affine_row_u8(const float* __restrict plane, int n, float scale, float offset, std::uint8_t* __restrict out,
                          int stride) {
  for (int x = 0; x < n; ++x) {
    float v = hd::add(hd::mul(plane[x], scale), offset);
    v = select(v < 0.0f, 0.0f, v);
    v = select(v > 255.0f, 255.0f, v);
    out[x * stride] = static_cast<std::uint8_t>(static_cast<int>(v + 0.5f));
  }
}

// Where finish() puts the photometric results of a row: through the output affine into the
// output (uint8 or float, NHWC or NCHW), or as interleaved floats into `values` when that is set
// (the input of Keras' standardize()).
struct RowTarget {
  const OutputAffine* oa = nullptr;
  std::byte* dst = nullptr;
  float* values = nullptr;
  int width = 0, height = 0, channels = 0;
  bool float_output = false, nchw = false;
  DType dtype = DType::F32;  // of a float output: f32, or f16/bf16 rounded as stored
};

// Row y of the planes (one float array per channel) into the target.
inline void store_row(const RowTarget& t, int y, float* const* plane) {
  const int cn = t.channels, w = t.width;
  const std::size_t row = static_cast<std::size_t>(y) * w;
  if (t.values) {
    float* v = t.values + row * cn;
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < cn; ++c) v[static_cast<std::size_t>(x) * cn + c] = plane[c][x];
    return;
  }
  const std::size_t plane_size = static_cast<std::size_t>(t.height) * w;
  for (int oc = 0; oc < cn; ++oc) {
    const float* in = plane[t.oa->source_channel[oc]];
    const float scale = t.oa->scale[oc], offset = t.oa->offset[oc];
    if (t.float_output && t.dtype != DType::F32) {
      const std::size_t first = t.nchw ? plane_size * oc + row : row * cn + oc, step = t.nchw ? 1 : cn;
      for (int x = 0; x < w; ++x)
        convert::store(t.dtype, t.dst, first + x * step, hd::add(hd::mul(in[x], scale), offset));
    } else if (t.float_output) {
      float* out = reinterpret_cast<float*>(t.dst);
      if (t.nchw) {
        affine_row_f32(in, w, scale, offset, out + plane_size * oc + row);
      } else {
        affine_row_f32(in, w, scale, offset, out + row * cn + oc, cn);
      }
    } else {
      std::uint8_t* out = reinterpret_cast<std::uint8_t*>(t.dst);
      if (t.nchw) {
        affine_row_u8(in, w, scale, offset, out + plane_size * oc + row);
      } else {
        affine_row_u8(in, w, scale, offset, out + row * cn + oc, cn);
      }
    }
  }
}

// photometric() on output row y of the warped uint8 image (interleaved), then stored; plane:
// `channels` scratch arrays of `width` floats.
inline void process_row(const PhotometricConstants& k, const RowTarget& t, const std::uint8_t* warped, int y,
                        float* const* plane) {
  const std::size_t row = static_cast<std::size_t>(y) * t.width;
  photometric_row(k, warped + row * t.channels, t.width, t.channels, plane);
  store_row(t, y, plane);
}

// Row y of uint8 values that are already the photometric results (the warp applied the table)
// into the target: the float of each value, as photometric() would have returned it.
inline void values_row(const RowTarget& t, const std::uint8_t* values, int y, float* const* plane) {
  const int cn = t.channels, w = t.width;
  const std::uint8_t* in = values + static_cast<std::size_t>(y) * w * cn;
  if (cn == 3) {
    for (int x = 0; x < w; ++x) {
      plane[0][x] = in[3 * x];
      plane[1][x] = in[3 * x + 1];
      plane[2][x] = in[3 * x + 2];
    }
  } else {
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < cn; ++c) plane[c][x] = in[cn * x + c];
  }
  store_row(t, y, plane);
}

}  // namespace stoker::augment::rows
