// The scalar warp (the reference the vector kernels must match bit for bit) and the run-time
// choice between the implementations.
#include "warp.hpp"

#include <atomic>
#include <cstddef>
#include <string>

#include "stoker/core/error.hpp"

namespace stoker::augment {
namespace {

// Steps through the shared fixed-point coordinates (pixel.hpp); pixels whose four taps lie
// inside the source take the inline path, the others (borders, fill modes, nearest
// interpolation) the shared per-pixel function.
template <int CN>
void rows_scalar(const WarpJob& job, int y_begin, int y_end, int x_begin, int x_end) {
  const AugmentPlan& p = *job.plan;
  const PixelSource& ps = job.src;
  constexpr int kOne = kWeightOne;
  const long long xlim = static_cast<long long>(ps.width - 1) << kCoordBits;
  const long long ylim = static_cast<long long>(ps.height - 1) << kCoordBits;
  const int bias = job.truncate ? 0 : (1 << (2 * kWeightBits - 1));
  const bool bilinear = p.interpolation_order == 1;
  const FillMode mode = p.fill_mode;
  const std::uint8_t cval = cval_u8(p);
  for (int y = y_begin; y < y_end; ++y) {
    const FixedRow r = fixed_row(job.affine, y);
    long long X = r.x0 + x_begin * r.dx, Y = r.y0 + x_begin * r.dy;
    std::uint8_t* o = job.out + (static_cast<std::size_t>(y) * p.out_width + x_begin) * CN;
    for (int x = x_begin; x < x_end; ++x, X += r.dx, Y += r.dy, o += CN) {
      if (!bilinear) {
        sample_fixed(ps, p, X, Y, job.truncate, o);
        continue;
      }
      long long xc = X, yc = Y;
      if (!(X >= 0 && X < xlim && Y >= 0 && Y < ylim)) {
        // Borders: nearest and constant inline (the same arithmetic as sample_fixed), the
        // others through the shared function.
        if (mode == FillMode::Nearest) {
          xc = X < 0 ? 0 : (X > xlim ? xlim : X);
          yc = Y < 0 ? 0 : (Y > ylim ? ylim : Y);
        } else if (mode == FillMode::Constant) {
          if (X < 0 || X > xlim || Y < 0 || Y > ylim) {
            for (int c = 0; c < CN; ++c) o[c] = cval;
            continue;
          }
        } else {
          sample_fixed(ps, p, X, Y, job.truncate, o);
          continue;
        }
      }
      const long long sx = xc >> kCoordBits, sy = yc >> kCoordBits;
      const int fx = static_cast<int>((xc >> (kCoordBits - kWeightBits)) & (kOne - 1));
      const int fy = static_cast<int>((yc >> (kCoordBits - kWeightBits)) & (kOne - 1));
      const std::uint8_t* p0 =
          ps.data + static_cast<std::size_t>(sy) * ps.row_stride + static_cast<std::size_t>(sx) * CN;
      const std::size_t right = sx + 1 < ps.width ? CN : 0;
      const std::uint8_t* p1 = sy + 1 < ps.height ? p0 + ps.row_stride : p0;
      for (int c = 0; c < CN; ++c) {
        // a * (1 - f) + b * f == (a << 8) + (b - a) * f: the same integers, half the multiplies.
        const int top = (p0[c] << kWeightBits) + (p0[c + right] - p0[c]) * fx;
        const int bot = (p1[c] << kWeightBits) + (p1[c + right] - p1[c]) * fx;
        o[c] = static_cast<std::uint8_t>(((top << kWeightBits) + (bot - top) * fy + bias) >> (2 * kWeightBits));
      }
    }
  }
}

void warp_scalar(const WarpJob& job) {
  const AugmentPlan& p = *job.plan;
  for (int y = 0; y < p.out_height; ++y) {
    warp_rows_scalar(job, y, y + 1, 0, p.out_width);
    if (job.lut) {
      apply_lut_row(job.lut, job.out + static_cast<std::size_t>(y) * p.out_width * p.channels,
                    p.out_width * p.channels);
    }
  }
}

WarpIsa best_available() {
  if (warp_isa_available(WarpIsa::Avx512)) return WarpIsa::Avx512;
  if (warp_isa_available(WarpIsa::Avx2)) return WarpIsa::Avx2;
  return WarpIsa::Scalar;
}

std::atomic<WarpIsa>& chosen_isa() {
  static std::atomic<WarpIsa> isa{best_available()};
  return isa;
}

}  // namespace

const char* warp_isa_name(WarpIsa isa) {
  switch (isa) {
    case WarpIsa::Scalar: return "scalar";
    case WarpIsa::Avx2: return "avx2";
    case WarpIsa::Avx512: return "avx512";
  }
  return "?";
}

bool warp_isa_available(WarpIsa isa) {
  switch (isa) {
    case WarpIsa::Scalar: return true;
#ifdef STOKER_WARP_X86
    case WarpIsa::Avx2: return __builtin_cpu_supports("avx2");
    case WarpIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
#endif
    default: return false;
  }
}

void warp_rows_scalar(const WarpJob& job, int y_begin, int y_end, int x_begin, int x_end) {
  switch (job.src.channels) {
    case 1: rows_scalar<1>(job, y_begin, y_end, x_begin, x_end); break;
    case 3: rows_scalar<3>(job, y_begin, y_end, x_begin, x_end); break;
    default: rows_scalar<4>(job, y_begin, y_end, x_begin, x_end); break;
  }
}

void load_source_into_cache(const WarpJob& job) {
  constexpr std::size_t kLine = 64;
  const PixelSource& src = job.src;
  const std::size_t row_bytes = static_cast<std::size_t>(src.width) * src.channels;
  const std::size_t out_bytes =
      static_cast<std::size_t>(job.plan->out_height) * job.plan->out_width * job.plan->channels;
  if (row_bytes * static_cast<std::size_t>(src.height) > 4 * out_bytes) return;
  unsigned sum = 0;
  for (int y = 0; y < src.height; ++y) {
    const std::uint8_t* row = src.data + static_cast<std::size_t>(y) * src.row_stride;
    for (std::size_t i = 0; i < row_bytes; i += kLine) sum += row[i];
    sum += row[row_bytes - 1];
  }
  asm volatile("" : : "r"(sum));  // the loads are the point: keep them
}

void apply_lut_row(const std::uint8_t* lut, std::uint8_t* values, int n) {
  for (int i = 0; i < n; ++i) values[i] = lut[values[i]];
}

void warp_with(WarpIsa isa, const WarpJob& job) {
  if (!warp_isa_available(isa)) throw InvalidArgument(std::string("warp: ") + warp_isa_name(isa) + " is not available");
  switch (isa) {
#ifdef STOKER_WARP_X86
    case WarpIsa::Avx2: warp_avx2(job); return;
    case WarpIsa::Avx512: warp_avx512(job); return;
#endif
    default: warp_scalar(job); return;
  }
}

void warp(const WarpJob& job) { warp_with(chosen_isa().load(std::memory_order_relaxed), job); }

WarpIsa warp_isa() { return chosen_isa().load(std::memory_order_relaxed); }

void set_warp_isa(WarpIsa isa) {
  if (!warp_isa_available(isa)) throw InvalidArgument(std::string("warp: ") + warp_isa_name(isa) + " is not available");
  chosen_isa().store(isa, std::memory_order_relaxed);
}

}  // namespace stoker::augment
