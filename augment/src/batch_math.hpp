// The CUDA executor's per-sample table and per-pixel body, written once for the device and the
// host. The kernel (src/cuda_augmenter.cu) runs these functions on the GPU; CudaAugmenter::
// run_on_host runs the very same functions in loops, which is how CPU-only CI checks the kernel's
// math against the CPU executor (Augmenter::apply_with). Everything per pixel comes from pixel.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hd_math.hpp"
#include "params.hpp"
#include "pixel.hpp"
#include "stoker/augment/plan.hpp"
#include "stoker/core/image.hpp"
#include "stoker/pipeline/convert.hpp"

namespace stoker::augment {

// One sample of a batch: where its source is, its parameters, and what the statistics pass
// (when the photometric steps or sample-wise standardisation need one) found. Trivially copyable.
struct SampleJob {
  PixelSource src;  // device memory for the kernel, host memory for run_on_host
  SampleParams params;
  Affine affine;
  WarpStats stats;     // of the warped uint8 image (channel shift: min/max; contrast: luma sum)
  float cmean = 0.0f;  // contrast's grey level
  OutputAffine out;    // per output channel: value * scale + offset, and the source channel
};

STOKER_HOST_DEVICE inline bool needs_warp_stats(const SampleParams& s) { return s.has_channel_shift || s.has_contrast; }
STOKER_HOST_DEVICE inline bool needs_sample_stats(const AugmentPlan& p) {
  return p.samplewise_center || p.samplewise_std;
}

// The part of the job known before any pixel is read (the CPU executor's defaults: WarpStats of
// the whole output, no sample-wise statistics).
STOKER_HOST_DEVICE inline void init_job(const AugmentPlan& p, SampleJob& j) {
  j.affine = build_affine(p, j.params);
  j.stats = WarpStats{};
  j.stats.pixels = static_cast<std::uint64_t>(p.out_height) * static_cast<std::uint64_t>(p.out_width);
  j.cmean = 0.0f;
  j.out = output_affine(p, p.channels, 0.0f, 1.0f);
}

// Warped uint8 values of output pixel (x, y).
STOKER_HOST_DEVICE inline void job_warp(const AugmentPlan& p, const SampleJob& j, int x, int y, std::uint8_t* u) {
  sample_geometry(j.src, p, j.params, j.affine, x, y, u);
}

// Partial warp statistics; combine() is associative and commutative on integers, so any
// reduction order gives the same result.
struct StatsPartial {
  int min = 255;
  int max = 0;
  std::uint64_t luma = 0;

  STOKER_HOST_DEVICE void add(const std::uint8_t* u, int cn) {
    for (int c = 0; c < cn; ++c) {
      min = u[c] < min ? u[c] : min;
      max = u[c] > max ? u[c] : max;
    }
    luma += static_cast<std::uint64_t>(cn >= 3 ? pil_luma(u[0], u[1], u[2]) : u[0]);
  }
  STOKER_HOST_DEVICE void combine(const StatsPartial& o) {
    min = o.min < min ? o.min : min;
    max = o.max > max ? o.max : max;
    luma += o.luma;
  }
};

// Stores the reduced warp statistics as the CPU executor computes them (min/max only with a
// channel shift, the luma sum only with contrast).
STOKER_HOST_DEVICE inline void finish_warp_stats(SampleJob& j, const StatsPartial& s) {
  if (j.params.has_channel_shift) {
    j.stats.min = s.min;
    j.stats.max = s.max;
  }
  if (j.params.has_contrast) {
    j.stats.luma_sum = s.luma;
    j.cmean = contrast_mean(j.params, j.stats);
  }
}

// Values of output pixel (x, y) after the photometric steps (0..255 scale, input channel order).
STOKER_HOST_DEVICE inline void job_values(const AugmentPlan& p, const SampleJob& j, int x, int y, float* v) {
  std::uint8_t u[kMaxChannels];
  job_warp(p, j, x, y, u);
  for (int c = 0; c < p.channels; ++c) v[c] = static_cast<float>(u[c]);
  if (j.params.photometric()) photometric(j.params, j.stats, j.cmean, p.channels, v);
}

// Sample-wise statistics (Keras' standardize on rescaled values), from sums over every value.
STOKER_HOST_DEVICE inline void finish_sample_stats(const AugmentPlan& p, SampleJob& j, double sum, double sq) {
  const double n = static_cast<double>(p.out_height) * p.out_width * p.channels;
  const double m = sum / n;
  double var = sq / n - m * m;
  if (var < 0.0) var = 0.0;
  j.out = output_affine(p, p.channels, static_cast<float>(m), static_cast<float>(sqrt(var)));
}

// The whole output pixel (x, y) of a sample: every channel, into that sample's output.
STOKER_HOST_DEVICE inline void job_output_pixel(const AugmentPlan& p, DType dtype, const SampleJob& j, int x, int y,
                                                void* out_sample) {
  float v[kMaxChannels];
  job_values(p, j, x, y, v);
  for (int oc = 0; oc < p.channels; ++oc) {
    const float val = hd::add(hd::mul(v[j.out.source_channel[oc]], j.out.scale[oc]), j.out.offset[oc]);
    convert::store(dtype, out_sample, output_index(p, x, y, oc), val);
  }
}

}  // namespace stoker::augment
