// The CPU executor's affine warp of a uint8 image (interleaved, 1, 3 or 4 channels) into the
// output, with an optional per-value table (brightness) applied as rows are written. Three
// implementations of one integer arithmetic (pixel.hpp's fixed-point coordinates and bilinear
// weights): the scalar loop, the reference and the fallback, and AVX2 and AVX-512 kernels that
// step 8 or 16 output pixels at a time. All three give bit-identical images; warp() picks the
// best one the CPU supports at run time.
#pragma once

#include <cstdint>

#include "pixel.hpp"
#include "stoker/augment/plan.hpp"

namespace stoker::augment {

enum class WarpIsa { Scalar, Avx2, Avx512 };

const char* warp_isa_name(WarpIsa isa);

// Whether this build has the kernel and this CPU can run it (Scalar: always).
bool warp_isa_available(WarpIsa isa);

// One warp: src -> out (plan.out_height x plan.out_width x channels, rows packed).
// truncate: round the bilinear result down (Keras truncates before brightness).
// lut (optional, 256 entries, the same for every channel): applied to every stored value.
struct WarpJob {
  const AugmentPlan* plan = nullptr;
  PixelSource src;
  Affine affine;
  bool truncate = false;
  const std::uint8_t* lut = nullptr;
  std::uint8_t* out = nullptr;
};

// The kernel the augmenter uses: the best available one unless set_warp_isa() chose another.
void warp(const WarpJob& job);
WarpIsa warp_isa();
// For benchmarks and tests: make warp() use isa (which must be available) in this process.
void set_warp_isa(WarpIsa isa);

// Each implementation directly (the isa must be available).
void warp_with(WarpIsa isa, const WarpJob& job);

// The scalar loop for output rows [y_begin, y_end), columns [x_begin, x_end), without the table:
// the vector kernels' fallback for rows whose coordinates leave their 32-bit range and for the
// pixels that a fill mode sends to sample_fixed().
void warp_rows_scalar(const WarpJob& job, int y_begin, int y_end, int x_begin, int x_end);

// Reads every cache line of the source once, in order, before a vector warp: a rotated or sheared
// row reads the source along a slanted line, which the hardware prefetchers do not follow, so a
// source that is not in the cache (decoded a while ago, or by another core) would arrive one miss
// at a time. In order it streams at the memory's bandwidth (562 KB: ~25 us on a 2-core Xeon,
// where it halves the time of a warp from a cold source; software prefetches alone did half as
// well). Skipped for a source over 4x the output's bytes, of which the warp reads only a part.
void load_source_into_cache(const WarpJob& job);

// The table over n values.
void apply_lut_row(const std::uint8_t* lut, std::uint8_t* values, int n);

#if defined(__x86_64__) && defined(__GNUC__)
#define STOKER_WARP_X86 1
void warp_avx2(const WarpJob& job);
void warp_avx512(const WarpJob& job);
#endif

}  // namespace stoker::augment
