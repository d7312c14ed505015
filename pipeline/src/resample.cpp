// Pillow's resize (libImaging/Resample.c and the scaling branch of Geometry.c), written for the
// loader's hot path: the coefficient tables are built once per (filter, sizes, box) and kept per
// thread, the horizontal pass runs a fixed number of taps per output (windows padded with zero
// weights, which leave Pillow's integer sums unchanged) and the vertical pass accumulates whole
// rows so the compiler vectorises it. Pillow's arithmetic is kept exactly: double-precision
// weights normalised per output, rounded to 22-bit fixed point, sums started at one half and
// clipped to uint8 after each pass.
#include "stoker/pipeline/resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/error.hpp"

namespace stoker {

bool is_pil_filter(Interpolation i) noexcept {
  switch (i) {
    case Interpolation::Nearest:
    case Interpolation::Bilinear:
    case Interpolation::Bicubic:
    case Interpolation::Lanczos:
    case Interpolation::Box:
    case Interpolation::Hamming: return true;
    default: return false;
  }
}

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kPrecisionBits = 22;  // Pillow's 32 - 8 - 2
constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);

// Pillow's filters, in double; the literals' types (0.54f) are Pillow's.
double box_filter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }
double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}
double hamming_filter(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * kPi;
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * kPi;
  return std::sin(x) / x;
}
double lanczos_filter(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0; }

struct Filter {
  double (*weight)(double);
  double support;
};

Filter filter_of(Interpolation i) {
  switch (i) {
    case Interpolation::Box: return {box_filter, 0.5};
    case Interpolation::Bilinear: return {bilinear_filter, 1.0};
    case Interpolation::Hamming: return {hamming_filter, 1.0};
    case Interpolation::Bicubic: return {bicubic_filter, 2.0};
    case Interpolation::Lanczos: return {lanczos_filter, 3.0};
    default: break;
  }
  throw InvalidArgument(std::string("no resampling filter for interpolation ") + to_string(i));
}

// One axis' coefficients: output i reads source [start[i], start[i] + taps) with weights
// k[i * taps ...]; outside Pillow's own window the weights are 0.
struct Axis {
  Interpolation filter = Interpolation::Bilinear;
  int in = 0, lo = 0, hi = 0, out = 0;
  int taps = 0;
  std::vector<int> start;
  std::vector<std::int32_t> k;
  int first = 0, last = 0;  // the source range the windows cover
};

std::shared_ptr<const Axis> build_axis(Interpolation filter, int in, int lo, int hi, int out) {
  auto a = std::make_shared<Axis>();
  a->filter = filter;
  a->in = in, a->lo = lo, a->hi = hi, a->out = out;
  const Filter f = filter_of(filter);
  const double scale = static_cast<double>(hi - lo) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = f.support * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  a->taps = std::min(ksize, in);
  a->start.resize(static_cast<std::size_t>(out));
  a->k.assign(static_cast<std::size_t>(out) * static_cast<std::size_t>(a->taps), 0);
  std::vector<double> w(static_cast<std::size_t>(ksize));
  a->first = in;
  a->last = 0;
  for (int xx = 0; xx < out; ++xx) {
    const double center = lo + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(0, static_cast<int>(center - support + 0.5));
    const int count = std::min(in, static_cast<int>(center + support + 0.5)) - xmin;
    double ww = 0.0;
    for (int x = 0; x < count; ++x) {
      w[static_cast<std::size_t>(x)] = f.weight((x + xmin - center + 0.5) * ss);
      ww += w[static_cast<std::size_t>(x)];
    }
    const int s = std::max(0, std::min(xmin, in - a->taps));
    a->start[static_cast<std::size_t>(xx)] = s;
    std::int32_t* k = a->k.data() + static_cast<std::size_t>(xx) * static_cast<std::size_t>(a->taps);
    for (int x = 0; x < count; ++x) {
      double v = w[static_cast<std::size_t>(x)];
      if (ww != 0.0) v /= ww;
      k[xmin - s + x] =
          static_cast<std::int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    a->first = std::min(a->first, s);
    a->last = std::max(a->last, s + a->taps);
  }
  return a;
}

// The last few axes this thread used (a loader sees one or two source sizes per dataset; photos
// of mixed sizes rebuild, which costs about as much as one output row).
std::shared_ptr<const Axis> axis(Interpolation filter, int in, int lo, int hi, int out) {
  constexpr std::size_t kKept = 16;
  thread_local std::vector<std::shared_ptr<const Axis>> kept;
  thread_local std::size_t next = 0;
  for (const auto& a : kept) {
    if (a->filter == filter && a->in == in && a->lo == lo && a->hi == hi && a->out == out) return a;
  }
  auto a = build_axis(filter, in, lo, hi, out);
  if (kept.size() < kKept) {
    kept.push_back(a);
  } else {
    kept[next] = a;
    next = (next + 1) % kKept;
  }
  return a;
}

inline std::uint8_t clip8(std::int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// rows source rows from row0, each resampled along x into out rows of ax.out pixels. Taps > 0 is
// the window length known at compile time (unrolled), 0 reads it from ax.
template <int C, int Taps>
void horizontal_rows(const ImageView& src, int row0, int rows, const Axis& ax, std::uint8_t* out,
                     std::size_t out_stride) {
  const int taps = Taps > 0 ? Taps : ax.taps, width = ax.out;
  const int* const start = ax.start.data();
  const std::int32_t* const kk = ax.k.data();
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* const in = src.row(row0 + y);
    std::uint8_t* const o = out + static_cast<std::size_t>(y) * out_stride;
    for (int x = 0; x < width; ++x) {
      const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(start[x]) * C;
      const std::int32_t* k = kk + static_cast<std::ptrdiff_t>(x) * taps;
      std::int32_t acc[C];
      for (int c = 0; c < C; ++c) acc[c] = kHalf;
      for (int t = 0; t < taps; ++t) {
        for (int c = 0; c < C; ++c) acc[c] += static_cast<std::int32_t>(p[t * C + c]) * k[t];
      }
      for (int c = 0; c < C; ++c) o[x * C + c] = clip8(acc[c]);
    }
  }
}

template <int C>
void horizontal_pass(const ImageView& src, int row0, int rows, const Axis& ax, std::uint8_t* out,
                     std::size_t out_stride) {
  switch (ax.taps) {  // the common windows: bilinear/hamming 3..9, bicubic 5..13, lanczos 7..19
    case 3: return horizontal_rows<C, 3>(src, row0, rows, ax, out, out_stride);
    case 5: return horizontal_rows<C, 5>(src, row0, rows, ax, out, out_stride);
    case 7: return horizontal_rows<C, 7>(src, row0, rows, ax, out, out_stride);
    case 9: return horizontal_rows<C, 9>(src, row0, rows, ax, out, out_stride);
    case 11: return horizontal_rows<C, 11>(src, row0, rows, ax, out, out_stride);
    case 13: return horizontal_rows<C, 13>(src, row0, rows, ax, out, out_stride);
    default: return horizontal_rows<C, 0>(src, row0, rows, ax, out, out_stride);
  }
}

// One output row of the vertical pass: n values, each a weighted sum of the same column of taps
// rows. Whole rows at a time, so the loops vectorise; the AVX2 clone has 8-wide int32 multiplies.
// (Not under ThreadSanitizer: the clones' ifunc resolver would run before its runtime starts, and
// every program linking the pipeline would crash while it is loaded.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void vertical_row(const std::uint8_t* const* rows, const std::int32_t* k, int taps, int n, std::int32_t* acc,
                  std::uint8_t* out) {
  for (int i = 0; i < n; ++i) acc[i] = kHalf;
  for (int t = 0; t < taps; ++t) {
    const std::int32_t w = k[t];
    if (w == 0) continue;
    const std::uint8_t* r = rows[t];
    for (int i = 0; i < n; ++i) acc[i] += static_cast<std::int32_t>(r[i]) * w;
  }
  for (int i = 0; i < n; ++i) {
    const std::int32_t v = acc[i] >> kPrecisionBits;
    out[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

// The rows of in hold source rows from row0.
void vertical_pass(const std::uint8_t* in, std::size_t in_stride, int row0, const Axis& ay, int row_values,
                   std::uint8_t* out, std::size_t out_stride) {
  thread_local std::vector<std::int32_t> acc;
  thread_local std::vector<const std::uint8_t*> rows;
  acc.resize(static_cast<std::size_t>(row_values));
  rows.resize(static_cast<std::size_t>(ay.taps));
  for (int y = 0; y < ay.out; ++y) {
    const int s = ay.start[static_cast<std::size_t>(y)] - row0;
    for (int t = 0; t < ay.taps; ++t)
      rows[static_cast<std::size_t>(t)] = in + static_cast<std::size_t>(s + t) * in_stride;
    vertical_row(rows.data(), ay.k.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(ay.taps), ay.taps,
                 row_values, acc.data(), out + static_cast<std::size_t>(y) * out_stride);
  }
}

template <int C>
void convolve(const ImageView& src, int out_h, int out_w, Interpolation filter, std::uint8_t* dst,
              std::size_t dst_stride, const ResampleBox& b) {
  const bool need_h = out_w != src.width || b.x0 != 0 || b.x1 != out_w;
  const bool need_v = out_h != src.height || b.y0 != 0 || b.y1 != out_h;
  const std::size_t row_bytes = static_cast<std::size_t>(out_w) * C;
  if (!need_h && !need_v) {
    for (int y = 0; y < out_h; ++y) std::memcpy(dst + static_cast<std::size_t>(y) * dst_stride, src.row(y), row_bytes);
    return;
  }
  const auto ay = axis(filter, src.height, b.y0, b.y1, out_h);
  if (!need_v) {
    horizontal_pass<C>(src, 0, out_h, *axis(filter, src.width, b.x0, b.x1, out_w), dst, dst_stride);
    return;
  }
  if (!need_h) {
    vertical_pass(src.data, src.row_stride, 0, *ay, src.width * C, dst, dst_stride);
    return;
  }
  thread_local std::vector<std::uint8_t> tmp;
  const auto ax = axis(filter, src.width, b.x0, b.x1, out_w);
  // The Pillow these vectors come from (13.0) runs the vertical pass first when shrinking
  // vertically and not horizontally (observed: every such case matches only that order). When it
  // shrinks both ways it mostly runs horizontal first, but not always, by a rule not found yet:
  // those sizes can differ from Pillow, by one grey level for bilinear (more for the filters with
  // negative lobes, whose intermediate clipping depends on the order).
  const bool vertical_first = out_h < src.height && out_w >= src.width;  // the image's sizes, not the box's
  if (vertical_first) {
    const std::size_t cols = static_cast<std::size_t>(ax->last - ax->first) * C;
    tmp.resize(cols * static_cast<std::size_t>(out_h));
    vertical_pass(src.data + static_cast<std::size_t>(ax->first) * C, src.row_stride, 0, *ay, static_cast<int>(cols),
                  tmp.data(), cols);
    // The horizontal pass reads columns from ax->first: shift the view so its indices stay the source's.
    const ImageView mid{tmp.data() - static_cast<std::ptrdiff_t>(ax->first) * C, out_h, src.width, C, cols};
    horizontal_pass<C>(mid, 0, out_h, *ax, dst, dst_stride);
    return;
  }
  const int rows = ay->last - ay->first;
  tmp.resize(row_bytes * static_cast<std::size_t>(rows));
  horizontal_pass<C>(src, ay->first, rows, *ax, tmp.data(), row_bytes);
  vertical_pass(tmp.data(), row_bytes, ay->first, *ay, out_w * C, dst, dst_stride);
}

// Pillow's NEAREST resize: its affine scaling with the source position accumulated in double.
void nearest_positions(int in, int lo, int hi, int out, int scale, std::vector<int>& pos) {
  pos.resize(static_cast<std::size_t>(out));
  const double a = static_cast<double>(hi - lo) / out;
  double p = lo + a * 0.5;
  for (int i = 0; i < out; ++i) {
    const int v = p < 0.0 ? 0 : static_cast<int>(p);
    pos[static_cast<std::size_t>(i)] = std::min(v, in - 1) * scale;
    p += a;
  }
}

template <int C>
void nearest(const ImageView& src, int out_h, int out_w, std::uint8_t* dst, std::size_t dst_stride,
             const ResampleBox& b) {
  thread_local std::vector<int> xs, ys;
  nearest_positions(src.width, b.x0, b.x1, out_w, C, xs);
  nearest_positions(src.height, b.y0, b.y1, out_h, 1, ys);
  // For 3 channels pixels are copied as 4-byte words, the 4th byte overwritten by the next pixel;
  // so not the row's last pixel, nor pixels read from the source row's last pixel.
  int words = 0;
  if constexpr (C == 3) {
    words = out_w - 1;
    while (words > 0 && xs[static_cast<std::size_t>(words - 1)] + 4 > src.width * 3) --words;
  }
  const int* const offsets = xs.data();  // plain locals: uint8_t stores may alias the vectors' internals
  const std::size_t row_bytes = static_cast<std::size_t>(out_w) * C;
  for (int y = 0; y < out_h; ++y) {
    std::uint8_t* o = dst + static_cast<std::size_t>(y) * dst_stride;
    if (y > 0 && ys[static_cast<std::size_t>(y)] == ys[static_cast<std::size_t>(y - 1)]) {  // upscaling repeats rows
      std::memcpy(o, o - dst_stride, row_bytes);
      continue;
    }
    const std::uint8_t* in = src.row(ys[static_cast<std::size_t>(y)]);
    int x = 0;
    for (; x < words; ++x) std::memcpy(o + 3 * x, in + offsets[x], 4);
    for (; x < out_w; ++x) std::memcpy(o + C * x, in + offsets[x], C);
  }
}

template <int C>
void resize_channels(const ImageView& src, int out_h, int out_w, Interpolation filter, std::uint8_t* dst,
                     std::size_t dst_stride, const ResampleBox& b) {
  if (filter == Interpolation::Nearest) {
    const bool whole = b.x0 == 0 && b.y0 == 0 && b.x1 == src.width && b.y1 == src.height;
    if (whole && out_h == src.height && out_w == src.width) {
      for (int y = 0; y < out_h; ++y) {
        std::memcpy(dst + static_cast<std::size_t>(y) * dst_stride, src.row(y), static_cast<std::size_t>(out_w) * C);
      }
      return;
    }
    nearest<C>(src, out_h, out_w, dst, dst_stride, b);
    return;
  }
  convolve<C>(src, out_h, out_w, filter, dst, dst_stride, b);
}

}  // namespace

void pil_resize(const ImageView& src, int out_height, int out_width, Interpolation filter, std::uint8_t* dst,
                std::size_t dst_stride, ResampleBox box) {
  if (!is_pil_filter(filter)) {
    throw InvalidArgument(std::string("pil_resize: interpolation must be nearest, bilinear, bicubic, lanczos, box or "
                                      "hamming, received ") +
                          to_string(filter));
  }
  if (src.empty() || out_height <= 0 || out_width <= 0) {
    throw InvalidArgument("pil_resize: empty image (" + std::to_string(src.height) + "x" + std::to_string(src.width) +
                          " to " + std::to_string(out_height) + "x" + std::to_string(out_width) + ")");
  }
  // An empty box (Keras' keep_aspect_ratio crop of a 1-pixel-wide image) is Pillow's too: its
  // scale is 0, so every output samples around the box's position.
  if (box.x1 == 0 && box.y1 == 0 && box.x0 == 0 && box.y0 == 0) box = {0, 0, src.width, src.height};
  if (box.x0 < 0 || box.y0 < 0 || box.x1 > src.width || box.y1 > src.height || box.x0 > box.x1 || box.y0 > box.y1) {
    throw InvalidArgument("pil_resize: box (" + std::to_string(box.x0) + ", " + std::to_string(box.y0) + ", " +
                          std::to_string(box.x1) + ", " + std::to_string(box.y1) + ") is not inside the " +
                          std::to_string(src.width) + "x" + std::to_string(src.height) + " image");
  }
  switch (src.channels) {
    case 1: resize_channels<1>(src, out_height, out_width, filter, dst, dst_stride, box); return;
    case 3: resize_channels<3>(src, out_height, out_width, filter, dst, dst_stride, box); return;
    case 4: resize_channels<4>(src, out_height, out_width, filter, dst, dst_stride, box); return;
    default: throw InvalidArgument("pil_resize expects 1, 3 or 4 channels, received " + std::to_string(src.channels));
  }
}

}  // namespace stoker
