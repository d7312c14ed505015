// The AVX-512 warp (F, BW, VL, VBMI): warp_avx2.cpp's method and integers on 16 output pixels
// per step, with mask registers for the fill-mode lanes and the row's last pixels (masked
// stores), one byte permute to pack the pixels, and the brightness table as two 128-byte
// permutes per 64 values.
#include "warp.hpp"

#ifdef STOKER_WARP_X86

// GCC 12's AVX-512 headers start results from _mm512_undefined_epi32() (a self-initialised
// variable), which -Wmaybe-uninitialized reports at every inlined use.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>

namespace stoker::augment {
namespace {

#define STOKER_AVX512_TARGET target("avx512f,avx512bw,avx512vl,avx512vbmi")
#define STOKER_AVX512 __attribute__((STOKER_AVX512_TARGET, always_inline)) inline

struct Avx512Image {
  const std::uint8_t* data;
  __m512i stride, last_row, read_limit, qx_max, qy_max;
};

STOKER_AVX512 __m512i offsets(const Avx512Image& im, __m512i sx, __m512i sy, int cn) {
  __m512i x = sx;
  if (cn == 3) x = _mm512_add_epi32(_mm512_slli_epi32(sx, 1), sx);
  if (cn == 4) x = _mm512_slli_epi32(sx, 2);
  return _mm512_add_epi32(_mm512_mullo_epi32(sy, im.stride), x);
}

STOKER_AVX512 __m512i next_row(const Avx512Image& im, __m512i off, __m512i sy) {
  return _mm512_mask_add_epi32(off, _mm512_cmpgt_epi32_mask(im.last_row, sy), off, im.stride);
}

STOKER_AVX512 __m512i gather32(const Avx512Image& im, __m512i off) {
  const __m512i at = _mm512_min_epi32(off, im.read_limit);
  const __m512i shift = _mm512_slli_epi32(_mm512_sub_epi32(off, at), 3);
  return _mm512_srlv_epi32(_mm512_i32gather_epi32(at, im.data, 1), shift);
}

// Two 64-bit gathers (pixels 0-7, 8-15) at off.
STOKER_AVX512 void gather64(const Avx512Image& im, __m512i off, bool near_end, __m512i& lo, __m512i& hi) {
  if (!near_end) {
    lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(off), im.data, 1);
    hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(off, 1), im.data, 1);
    return;
  }
  const __m512i at = _mm512_min_epi32(off, im.read_limit);
  const __m512i shift = _mm512_slli_epi32(_mm512_sub_epi32(off, at), 3);
  lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(at), im.data, 1);
  hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(at, 1), im.data, 1);
  lo = _mm512_srlv_epi64(lo, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(shift)));
  hi = _mm512_srlv_epi64(hi, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(shift, 1)));
}

STOKER_AVX512 __m512i lerp_words(__m512i taps, __m512i left, __m512i right, __m512i fx_words) {
  const __m512i a = _mm512_shuffle_epi8(taps, left), b = _mm512_shuffle_epi8(taps, right);
  const __m512i v = _mm512_add_epi16(_mm512_slli_epi16(a, 8), _mm512_mullo_epi16(_mm512_sub_epi16(b, a), fx_words));
  return _mm512_xor_si512(v, _mm512_set1_epi16(static_cast<short>(0x8000)));
}

STOKER_AVX512 __m512i lerp_lanes(__m512i v, __m512i f) {
  const __m512i m255 = _mm512_set1_epi32(255);
  const __m512i l = _mm512_and_si512(v, m255), r = _mm512_and_si512(_mm512_srli_epi32(v, 8), m255);
  return _mm512_add_epi32(_mm512_slli_epi32(l, 8), _mm512_mullo_epi32(_mm512_sub_epi32(r, l), f));
}

// Lane i of the result is lane first + i / 2 (pairs) or first + 2 (i / 4) + odd (quads) of v.
STOKER_AVX512 __m512i pairs(__m512i v, int first) {
  const __m512i idx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
  return _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(first)), v);
}
STOKER_AVX512 __m512i quads(__m512i v, int first) {
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  return _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(first)), v);
}

// Eight pixels (64-bit lanes: left and right tap) of the top and bottom rows -> their channels
// as words, two pixels per 128-bit lane.
template <int CN>
STOKER_AVX512 __m512i blend8(__m512i top_taps, __m512i bottom_taps, __m512i fx_words, __m512i wy_even, __m512i wy_odd,
                             __m512i rounding) {
  const __m512i left =
      _mm512_broadcast_i32x4(CN == 3 ? _mm_setr_epi8(0, -1, 1, -1, 2, -1, -1, -1, 8, -1, 9, -1, 10, -1, -1, -1)
                                     : _mm_setr_epi8(0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1));
  const __m512i right =
      _mm512_broadcast_i32x4(CN == 3 ? _mm_setr_epi8(3, -1, 4, -1, 5, -1, -1, -1, 11, -1, 12, -1, 13, -1, -1, -1)
                                     : _mm_setr_epi8(4, -1, 5, -1, 6, -1, 7, -1, 12, -1, 13, -1, 14, -1, 15, -1));
  const __m512i top = lerp_words(top_taps, left, right, fx_words);
  const __m512i bottom = lerp_words(bottom_taps, left, right, fx_words);
  __m512i even = _mm512_madd_epi16(_mm512_unpacklo_epi16(top, bottom), wy_even);
  __m512i odd = _mm512_madd_epi16(_mm512_unpackhi_epi16(top, bottom), wy_odd);
  even = _mm512_srli_epi32(_mm512_add_epi32(even, rounding), 16);
  odd = _mm512_srli_epi32(_mm512_add_epi32(odd, rounding), 16);
  return _mm512_packus_epi32(even, odd);
}

template <int CN>
STOKER_AVX512 __m512i bilinear16(const Avx512Image& im, __m512i cx, __m512i cy, __m512i rounding) {
  const __m512i m255 = _mm512_set1_epi32(255);
  const __m512i sx = _mm512_srli_epi32(cx, 8), fx = _mm512_and_si512(cx, m255);
  const __m512i sy = _mm512_srli_epi32(cy, 8), fy = _mm512_and_si512(cy, m255);
  const __m512i off0 = offsets(im, sx, sy, CN), off1 = next_row(im, off0, sy);
  if constexpr (CN == 1) {
    const __m512i top = lerp_lanes(gather32(im, off0), fx), bottom = lerp_lanes(gather32(im, off1), fx);
    const __m512i v =
        _mm512_add_epi32(_mm512_slli_epi32(top, 8), _mm512_mullo_epi32(_mm512_sub_epi32(bottom, top), fy));
    return _mm512_srli_epi32(_mm512_add_epi32(v, rounding), 16);
  } else {
    const bool near_end = _mm512_cmpgt_epi32_mask(off1, im.read_limit) != 0;
    __m512i t_lo, t_hi, b_lo, b_hi;
    gather64(im, off0, near_end, t_lo, t_hi);
    gather64(im, off1, near_end, b_lo, b_hi);
    const __m512i fxw = _mm512_or_si512(fx, _mm512_slli_epi32(fx, 16));
    const __m512i wy = _mm512_or_si512(_mm512_sub_epi32(_mm512_set1_epi32(256), fy), _mm512_slli_epi32(fy, 16));
    const __m512i r = _mm512_add_epi32(rounding, _mm512_set1_epi32(1 << 23));
    const __m512i lo = blend8<CN>(t_lo, b_lo, pairs(fxw, 0), quads(wy, 0), quads(wy, 1), r);
    const __m512i hi = blend8<CN>(t_hi, b_hi, pairs(fxw, 8), quads(wy, 8), quads(wy, 9), r);
    // 64-bit lanes [p0p1 p8p9 | p2p3 p10p11 | ...] -> p0 .. p15.
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi16(lo, hi));
  }
}

template <int CN>
STOKER_AVX512 __m512i nearest16(const Avx512Image& im, __m512i cx, __m512i cy) {
  const __m512i half = _mm512_set1_epi32(128);
  const __m512i ix = _mm512_srli_epi32(_mm512_add_epi32(cx, half), 8);
  const __m512i iy = _mm512_srli_epi32(_mm512_add_epi32(cy, half), 8);
  return gather32(im, offsets(im, ix, iy, CN));
}

// Stores n <= 16 pixels (one 32-bit lane each) packed.
template <int CN>
STOKER_AVX512 void store_pixels(std::uint8_t* o, __m512i px, int n) {
  if constexpr (CN != 4) {
    alignas(64) static constexpr std::uint8_t kPack[64] = {
        0,  1,  2,  4,  5,  6,  8,  9,  10, 12, 13, 14, 16, 17, 18, 20, 21, 22, 24, 25, 26, 28,
        29, 30, 32, 33, 34, 36, 37, 38, 40, 41, 42, 44, 45, 46, 48, 49, 50, 52, 53, 54, 56, 57,
        58, 60, 61, 62, 0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};
    const __m512i pack =
        CN == 3 ? _mm512_load_si512(kPack)
                : _mm512_setr_epi32(0x0c080400, 0x1c181410, 0x2c282420, 0x3c383430, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    px = _mm512_permutexvar_epi8(pack, px);
  }
  const int bytes = n * CN;
  const __mmask64 mask = bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
  _mm512_mask_storeu_epi8(o, mask, px);
}

__attribute__((STOKER_AVX512_TARGET)) void lut_avx512(const std::uint8_t* lut, std::uint8_t* values, int n) {
  const __m512i t0 = _mm512_loadu_si512(lut), t1 = _mm512_loadu_si512(lut + 64);
  const __m512i t2 = _mm512_loadu_si512(lut + 128), t3 = _mm512_loadu_si512(lut + 192);
  for (int i = 0; i < n; i += 64) {
    const __mmask64 mask = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(mask, values + i);
    const __m512i low = _mm512_permutex2var_epi8(t0, v, t1), high = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_mask_storeu_epi8(values + i, mask, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high));
  }
}

STOKER_AVX512 __m512i q_lanes(long long X, __m512i k_hi, __m512i k_lo) {
  constexpr int kShift = kCoordBits - kWeightBits;
  const __m512i whole = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(X >> kShift)), k_hi);
  const __m512i frac = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(X & ((1 << kShift) - 1))), k_lo);
  return _mm512_add_epi32(whole, _mm512_srli_epi32(frac, kShift));
}

bool row_fits(long long x0, long long dx, int steps) {
  auto fits = [](long long X) {
    const long long q = X >> (kCoordBits - kWeightBits);
    return q > -(1LL << 30) && q < (1LL << 30);
  };
  return fits(x0) && fits(x0 + static_cast<long long>(steps - 1) * dx);
}

template <int CN>
__attribute__((STOKER_AVX512_TARGET)) void warp_image_avx512(const WarpJob& job) {
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
  Avx512Image im;
  im.data = ps.data;
  im.stride = _mm512_set1_epi32(static_cast<int>(ps.row_stride));
  im.last_row = _mm512_set1_epi32(ps.height - 1);
  im.read_limit = _mm512_set1_epi32(static_cast<int>(image_end - read_bytes));
  im.qx_max = _mm512_set1_epi32((ps.width - 1) << kWeightBits);
  im.qy_max = _mm512_set1_epi32((ps.height - 1) << kWeightBits);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i cval = _mm512_set1_epi32(static_cast<int>(cval_u8(p) * 0x01010101u));
  const __m512i rounding = _mm512_set1_epi32(job.truncate ? 0 : 1 << (2 * kWeightBits - 1));
  const int padded = (width + 15) & ~15;
  constexpr int kShift = kCoordBits - kWeightBits;
  if (image_fits) load_source_into_cache(job);
  for (int y = 0; y < p.out_height; ++y) {
    const FixedRow r = fixed_row(job.affine, y);
    std::uint8_t* row = job.out + static_cast<std::size_t>(y) * width * CN;
    if (!image_fits || !row_fits(r.x0, r.dx, padded) || !row_fits(r.y0, r.dy, padded)) {
      warp_rows_scalar(job, y, y + 1, 0, width);
    } else {
      const __m512i kdx_hi = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(r.dx >> kShift)));
      const __m512i kdx_lo = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(r.dx & ((1 << kShift) - 1))));
      const __m512i kdy_hi = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(r.dy >> kShift)));
      const __m512i kdy_lo = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(r.dy & ((1 << kShift) - 1))));
      for (int x = 0; x < width; x += 16) {
        const long long X = r.x0 + static_cast<long long>(x) * r.dx, Y = r.y0 + static_cast<long long>(x) * r.dy;
        const __m512i qx = q_lanes(X, kdx_hi, kdx_lo), qy = q_lanes(Y, kdy_hi, kdy_lo);
        const __m512i cx = _mm512_min_epi32(_mm512_max_epi32(qx, zero), im.qx_max);
        const __m512i cy = _mm512_min_epi32(_mm512_max_epi32(qy, zero), im.qy_max);
        const int n = width - x < 16 ? width - x : 16;
        unsigned to_scalar = 0;
        __mmask16 outside = 0;
        if (mode != FillMode::Nearest) {
          const __mmask16 in_range = _mm512_cmpeq_epi32_mask(qx, cx) & _mm512_cmpeq_epi32_mask(qy, cy);
          const __mmask16 far_edge = _mm512_cmpeq_epi32_mask(qx, im.qx_max) | _mm512_cmpeq_epi32_mask(qy, im.qy_max);
          if (mode == FillMode::Constant) {
            outside = static_cast<__mmask16>(~in_range);
            to_scalar = in_range & far_edge;
          } else {
            to_scalar = static_cast<__mmask16>(~in_range) | far_edge;
          }
          to_scalar &= (1u << n) - 1;
        }
        __m512i px = bilinear ? bilinear16<CN>(im, cx, cy, rounding) : nearest16<CN>(im, cx, cy);
        if (mode == FillMode::Constant) px = _mm512_mask_mov_epi32(px, outside, cval);
        store_pixels<CN>(row + static_cast<std::size_t>(x) * CN, px, n);
        while (to_scalar) {
          const int k = __builtin_ctz(to_scalar);
          to_scalar &= to_scalar - 1;
          sample_fixed(ps, p, X + k * r.dx, Y + k * r.dy, job.truncate, row + static_cast<std::size_t>(x + k) * CN);
        }
      }
    }
    if (job.lut) lut_avx512(job.lut, row, width * CN);
  }
}

}  // namespace

void warp_avx512(const WarpJob& job) {
  switch (job.src.channels) {
    case 1: warp_image_avx512<1>(job); break;
    case 3: warp_image_avx512<3>(job); break;
    default: warp_image_avx512<4>(job); break;
  }
}

}  // namespace stoker::augment

#endif  // STOKER_WARP_X86
