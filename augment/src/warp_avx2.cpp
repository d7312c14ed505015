// The AVX2 warp: 8 output pixels per step, the same integers as the scalar loop (warp.cpp).
//
// Coordinates. X(x) = X0 + x DX is 64-bit fixed point (pixel.hpp) but the kernel only needs
// q = X >> 24: the tap (q >> 8) and the bilinear weight (q & 255). Writing X0 = A 2^24 + t and
// DX = H 2^24 + L (t, L in [0, 2^24)) gives, exactly, q(x0 + k) = A + k H + ((t + k L) >> 24),
// all in 32 bits once a row's q is known to fit (rows that do not go to the scalar loop).
// Clamping q to [0, (n - 1) 2^8] is clamping X to [0, (n - 1) 2^32] (both bounds are multiples of
// 2^24), which is fill_mode='nearest' and keeps every gather inside the image for the others.
//
// Taps. A bilinear pixel reads two horizontal neighbours at once (one 64-bit gather per row for 3
// and 4 channels, 32-bit for 1). Near the end of the image that read is moved back so that it
// ends inside the image, and the bytes are shifted into place; where the right tap does not exist
// (the last column, reached only by clamping) its weight is 0, so what was read there does not
// count.
//
// Arithmetic. top = (a << 8) + (b - a) fx is computed in 16-bit lanes (exact: the wrapped result
// is the true one, which lies in [0, 65280]); (top (256 - fy) + bot fy + bias) >> 16 with
// _mm256_madd_epi16 on top - 2^15 and bot - 2^15 (signed words), adding 2^23 back.
//
// Fill modes. nearest: the clamp. constant: cval where X or Y is outside [0, n - 1]. Pixels on
// the last 1/256 px before the far edge (where q cannot tell X = (n - 1) 2^32 from beyond) and,
// for reflect and wrap, every pixel not strictly inside go through sample_fixed().
#include "warp.hpp"

#ifdef STOKER_WARP_X86

#include <immintrin.h>

#include <cstddef>
#include <cstring>

namespace stoker::augment {
namespace {

#define STOKER_AVX2 __attribute__((target("avx2"), always_inline)) inline

// The image's constants as vectors.
struct Avx2Image {
  const std::uint8_t* data;
  __m256i stride, last_row, read_limit, qx_max, qy_max;
};

STOKER_AVX2 __m256i offsets(const Avx2Image& im, __m256i sx, __m256i sy, int cn) {
  __m256i x = sx;
  if (cn == 3) x = _mm256_add_epi32(_mm256_slli_epi32(sx, 1), sx);
  if (cn == 4) x = _mm256_slli_epi32(sx, 2);
  return _mm256_add_epi32(_mm256_mullo_epi32(sy, im.stride), x);
}

// The row below a tap row (the same row on the last one: its weight is then 0).
STOKER_AVX2 __m256i next_row(const Avx2Image& im, __m256i off, __m256i sy) {
  return _mm256_add_epi32(off, _mm256_and_si256(_mm256_cmpgt_epi32(im.last_row, sy), im.stride));
}

// 32-bit reads at off, moved back inside the image where they would pass its end.
STOKER_AVX2 __m256i gather32(const Avx2Image& im, __m256i off) {
  const __m256i at = _mm256_min_epi32(off, im.read_limit);
  const __m256i shift = _mm256_slli_epi32(_mm256_sub_epi32(off, at), 3);
  return _mm256_srlv_epi32(_mm256_i32gather_epi32(reinterpret_cast<const int*>(im.data), at, 1), shift);
}

// Two 64-bit gathers (pixels 0-3, 4-7) at off.
STOKER_AVX2 void gather64(const Avx2Image& im, __m256i off, bool near_end, __m256i& lo, __m256i& hi) {
  const auto* base = reinterpret_cast<const long long*>(im.data);
  if (!near_end) {
    lo = _mm256_i32gather_epi64(base, _mm256_castsi256_si128(off), 1);
    hi = _mm256_i32gather_epi64(base, _mm256_extracti128_si256(off, 1), 1);
    return;
  }
  const __m256i at = _mm256_min_epi32(off, im.read_limit);
  const __m256i shift = _mm256_slli_epi32(_mm256_sub_epi32(off, at), 3);
  lo = _mm256_i32gather_epi64(base, _mm256_castsi256_si128(at), 1);
  hi = _mm256_i32gather_epi64(base, _mm256_extracti128_si256(at, 1), 1);
  lo = _mm256_srlv_epi64(lo, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(shift)));
  hi = _mm256_srlv_epi64(hi, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(shift, 1)));
}

// (a << 8) + (b - a) fx in words, minus 2^15 (a signed word for madd).
STOKER_AVX2 __m256i lerp_words(__m256i taps, __m256i left, __m256i right, __m256i fx_words) {
  const __m256i a = _mm256_shuffle_epi8(taps, left), b = _mm256_shuffle_epi8(taps, right);
  const __m256i v = _mm256_add_epi16(_mm256_slli_epi16(a, 8), _mm256_mullo_epi16(_mm256_sub_epi16(b, a), fx_words));
  return _mm256_xor_si256(v, _mm256_set1_epi16(static_cast<short>(0x8000)));
}

// Lanes a, a, b, b, c, c, d, d and a x4, b x4 of v.
STOKER_AVX2 __m256i pairs(__m256i v, int a, int b, int c, int d) {
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(a, a, b, b, c, c, d, d));
}
STOKER_AVX2 __m256i quads(__m256i v, int a, int b) {
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(a, a, a, a, b, b, b, b));
}

// The pair (left, left + 1) of one channel byte in each 32-bit lane, interpolated by f.
STOKER_AVX2 __m256i lerp_lanes(__m256i v, __m256i f) {
  const __m256i m255 = _mm256_set1_epi32(255);
  const __m256i l = _mm256_and_si256(v, m255), r = _mm256_and_si256(_mm256_srli_epi32(v, 8), m255);
  return _mm256_add_epi32(_mm256_slli_epi32(l, 8), _mm256_mullo_epi32(_mm256_sub_epi32(r, l), f));
}

// Four pixels (64-bit lanes holding the left and the right tap) of the top and bottom rows ->
// their channels as words [p0 | p1 || p2 | p3] (4 words a pixel).
template <int CN>
STOKER_AVX2 __m256i blend4(__m256i top_taps, __m256i bottom_taps, __m256i fx_words, __m256i wy_even, __m256i wy_odd,
                           __m256i rounding) {
  const __m256i left = CN == 3 ? _mm256_setr_epi8(0, -1, 1, -1, 2, -1, -1, -1, 8, -1, 9, -1, 10, -1, -1, -1, 0, -1, 1,
                                                  -1, 2, -1, -1, -1, 8, -1, 9, -1, 10, -1, -1, -1)
                               : _mm256_setr_epi8(0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1, 0, -1, 1,
                                                  -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1);
  const __m256i right = CN == 3 ? _mm256_setr_epi8(3, -1, 4, -1, 5, -1, -1, -1, 11, -1, 12, -1, 13, -1, -1, -1, 3, -1,
                                                   4, -1, 5, -1, -1, -1, 11, -1, 12, -1, 13, -1, -1, -1)
                                : _mm256_setr_epi8(4, -1, 5, -1, 6, -1, 7, -1, 12, -1, 13, -1, 14, -1, 15, -1, 4, -1, 5,
                                                   -1, 6, -1, 7, -1, 12, -1, 13, -1, 14, -1, 15, -1);
  const __m256i top = lerp_words(top_taps, left, right, fx_words);
  const __m256i bottom = lerp_words(bottom_taps, left, right, fx_words);
  __m256i even = _mm256_madd_epi16(_mm256_unpacklo_epi16(top, bottom), wy_even);
  __m256i odd = _mm256_madd_epi16(_mm256_unpackhi_epi16(top, bottom), wy_odd);
  even = _mm256_srli_epi32(_mm256_add_epi32(even, rounding), 16);
  odd = _mm256_srli_epi32(_mm256_add_epi32(odd, rounding), 16);
  return _mm256_packus_epi32(even, odd);
}

// Bilinear samples of 8 pixels at clamped q, one 32-bit lane each (channels in the low bytes).
template <int CN>
STOKER_AVX2 __m256i bilinear8(const Avx2Image& im, __m256i cx, __m256i cy, __m256i rounding) {
  const __m256i m255 = _mm256_set1_epi32(255);
  const __m256i sx = _mm256_srli_epi32(cx, 8), fx = _mm256_and_si256(cx, m255);
  const __m256i sy = _mm256_srli_epi32(cy, 8), fy = _mm256_and_si256(cy, m255);
  const __m256i off0 = offsets(im, sx, sy, CN), off1 = next_row(im, off0, sy);
  if constexpr (CN == 1) {
    const __m256i top = lerp_lanes(gather32(im, off0), fx), bottom = lerp_lanes(gather32(im, off1), fx);
    const __m256i v =
        _mm256_add_epi32(_mm256_slli_epi32(top, 8), _mm256_mullo_epi32(_mm256_sub_epi32(bottom, top), fy));
    return _mm256_srli_epi32(_mm256_add_epi32(v, rounding), 16);
  } else {
    const bool near_end = _mm256_movemask_epi8(_mm256_cmpgt_epi32(off1, im.read_limit)) != 0;
    __m256i t_lo, t_hi, b_lo, b_hi;
    gather64(im, off0, near_end, t_lo, t_hi);
    gather64(im, off1, near_end, b_lo, b_hi);
    const __m256i fxw = _mm256_or_si256(fx, _mm256_slli_epi32(fx, 16));
    const __m256i wy = _mm256_or_si256(_mm256_sub_epi32(_mm256_set1_epi32(256), fy), _mm256_slli_epi32(fy, 16));
    // The madd rounding term carries the 2^15 offsets back: 2^15 ((256 - fy) + fy) = 2^23.
    const __m256i r = _mm256_add_epi32(rounding, _mm256_set1_epi32(1 << 23));
    const __m256i lo = blend4<CN>(t_lo, b_lo, pairs(fxw, 0, 1, 2, 3), quads(wy, 0, 2), quads(wy, 1, 3), r);
    const __m256i hi = blend4<CN>(t_hi, b_hi, pairs(fxw, 4, 5, 6, 7), quads(wy, 4, 6), quads(wy, 5, 7), r);
    // Bytes [p0 p1 p4 p5 || p2 p3 p6 p7] -> p0 .. p7.
    return _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
  }
}

// Nearest-neighbour samples of 8 pixels at clamped q: the tap whose centre is nearest.
template <int CN>
STOKER_AVX2 __m256i nearest8(const Avx2Image& im, __m256i cx, __m256i cy) {
  const __m256i half = _mm256_set1_epi32(128);
  const __m256i ix = _mm256_srli_epi32(_mm256_add_epi32(cx, half), 8);
  const __m256i iy = _mm256_srli_epi32(_mm256_add_epi32(cy, half), 8);
  return gather32(im, offsets(im, ix, iy, CN));
}

// Stores n <= 8 pixels (one 32-bit lane each) packed.
template <int CN>
STOKER_AVX2 void store_pixels(std::uint8_t* o, __m256i px, int n) {
  if constexpr (CN == 4) {
    if (n == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), px);
      return;
    }
  } else {
    const __m256i pack = CN == 3 ? _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4,
                                                    5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1)
                                 : _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4,
                                                    8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i join =
        CN == 3 ? _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7) : _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
    px = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(px, pack), join);
    if (n == 8) {
      if constexpr (CN == 3) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(px));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + 16), _mm256_extracti128_si256(px, 1));
      } else {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(px));
      }
      return;
    }
  }
  alignas(32) std::uint8_t tmp[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), px);
  std::memcpy(o, tmp, static_cast<std::size_t>(n) * CN);
}

// q = X >> 24 of 8 pixels from the first one's X and k (DX >> 24), k (DX & (2^24 - 1)).
STOKER_AVX2 __m256i q_lanes(long long X, __m256i k_hi, __m256i k_lo) {
  constexpr int kShift = kCoordBits - kWeightBits;
  const __m256i whole = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(X >> kShift)), k_hi);
  const __m256i frac = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(X & ((1 << kShift) - 1))), k_lo);
  return _mm256_add_epi32(whole, _mm256_srli_epi32(frac, kShift));
}

bool row_fits(long long x0, long long dx, int steps) {
  auto fits = [](long long X) {
    const long long q = X >> (kCoordBits - kWeightBits);
    return q > -(1LL << 30) && q < (1LL << 30);
  };
  return fits(x0) && fits(x0 + static_cast<long long>(steps - 1) * dx);
}

template <int CN>
__attribute__((target("avx2"))) void warp_image_avx2(const WarpJob& job) {
  const AugmentPlan& p = *job.plan;
  const PixelSource& ps = job.src;
  const int width = p.out_width;
  const bool bilinear = p.interpolation_order == 1;
  const FillMode mode = p.fill_mode;
  const int read_bytes = bilinear && CN > 1 ? 8 : 4;
  const long long image_end = static_cast<long long>(ps.height - 1) * static_cast<long long>(ps.row_stride) +
                              static_cast<long long>(ps.width) * CN;
  const bool image_fits =
      ps.width < (1 << 22) && ps.height < (1 << 22) && image_end < (1LL << 31) - 64 && image_end >= read_bytes;
  Avx2Image im;
  im.data = ps.data;
  im.stride = _mm256_set1_epi32(static_cast<int>(ps.row_stride));
  im.last_row = _mm256_set1_epi32(ps.height - 1);
  im.read_limit = _mm256_set1_epi32(static_cast<int>(image_end - read_bytes));
  im.qx_max = _mm256_set1_epi32((ps.width - 1) << kWeightBits);
  im.qy_max = _mm256_set1_epi32((ps.height - 1) << kWeightBits);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i cval = _mm256_set1_epi32(static_cast<int>(cval_u8(p) * 0x01010101u));
  const __m256i rounding = _mm256_set1_epi32(job.truncate ? 0 : 1 << (2 * kWeightBits - 1));
  const int padded = (width + 7) & ~7;
  constexpr int kShift = kCoordBits - kWeightBits;
  if (image_fits) load_source_into_cache(job);
  for (int y = 0; y < p.out_height; ++y) {
    const FixedRow r = fixed_row(job.affine, y);
    std::uint8_t* row = job.out + static_cast<std::size_t>(y) * width * CN;
    if (!image_fits || !row_fits(r.x0, r.dx, padded) || !row_fits(r.y0, r.dy, padded)) {
      warp_rows_scalar(job, y, y + 1, 0, width);
    } else {
      const __m256i kdx_hi = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(r.dx >> kShift)));
      const __m256i kdx_lo = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(r.dx & ((1 << kShift) - 1))));
      const __m256i kdy_hi = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(r.dy >> kShift)));
      const __m256i kdy_lo = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(r.dy & ((1 << kShift) - 1))));
      for (int x = 0; x < width; x += 8) {
        const long long X = r.x0 + static_cast<long long>(x) * r.dx, Y = r.y0 + static_cast<long long>(x) * r.dy;
        const __m256i qx = q_lanes(X, kdx_hi, kdx_lo), qy = q_lanes(Y, kdy_hi, kdy_lo);
        const __m256i cx = _mm256_min_epi32(_mm256_max_epi32(qx, zero), im.qx_max);
        const __m256i cy = _mm256_min_epi32(_mm256_max_epi32(qy, zero), im.qy_max);
        const int n = width - x < 8 ? width - x : 8;
        unsigned to_scalar = 0;
        __m256i outside = zero;
        if (mode != FillMode::Nearest) {
          const __m256i in_range = _mm256_and_si256(_mm256_cmpeq_epi32(qx, cx), _mm256_cmpeq_epi32(qy, cy));
          const __m256i far_edge =
              _mm256_or_si256(_mm256_cmpeq_epi32(qx, im.qx_max), _mm256_cmpeq_epi32(qy, im.qy_max));
          __m256i scalar_lanes;
          if (mode == FillMode::Constant) {
            outside = _mm256_xor_si256(in_range, _mm256_set1_epi32(-1));
            scalar_lanes = _mm256_and_si256(in_range, far_edge);
          } else {
            scalar_lanes = _mm256_or_si256(_mm256_xor_si256(in_range, _mm256_set1_epi32(-1)), far_edge);
          }
          to_scalar = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(scalar_lanes))) & ((1u << n) - 1);
        }
        __m256i px = bilinear ? bilinear8<CN>(im, cx, cy, rounding) : nearest8<CN>(im, cx, cy);
        if (mode == FillMode::Constant) px = _mm256_blendv_epi8(px, cval, outside);
        store_pixels<CN>(row + static_cast<std::size_t>(x) * CN, px, n);
        while (to_scalar) {
          const int k = __builtin_ctz(to_scalar);
          to_scalar &= to_scalar - 1;
          sample_fixed(ps, p, X + k * r.dx, Y + k * r.dy, job.truncate, row + static_cast<std::size_t>(x + k) * CN);
        }
      }
    }
    if (job.lut) apply_lut_row(job.lut, row, width * CN);
  }
}

}  // namespace

void warp_avx2(const WarpJob& job) {
  switch (job.src.channels) {
    case 1: warp_image_avx2<1>(job); break;
    case 3: warp_image_avx2<3>(job); break;
    default: warp_image_avx2<4>(job); break;
  }
}

}  // namespace stoker::augment

#endif  // STOKER_WARP_X86
