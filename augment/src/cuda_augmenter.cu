// The CUDA executor's kernels: a statistics pass (one block per sample, only when the photometric
// steps or the sample-wise standardisation need it) and the fused batch kernel (one thread per
// output pixel, every channel). Both call the functions of batch_math.hpp / pixel.hpp that the
// CPU executor's reference path and CudaAugmenter::run_on_host call.
#include "cuda_launch.hpp"
#include "stoker/augment/cuda_augmenter.hpp"

#include <cuda_runtime.h>

namespace stoker {
namespace {

using augment::AugmentPlan;
using augment::BatchOutput;
using augment::SampleJob;

constexpr int kStatsThreads = 256;
constexpr int kPixelThreads = 256;

// The sample's job, copied to shared memory by the whole block (SampleJob is a multiple of 8 bytes).
__device__ inline void load_job(const SampleJob* src, unsigned char* raw) {
  const auto* s = reinterpret_cast<const unsigned long long*>(src);
  auto* d = reinterpret_cast<unsigned long long*>(raw);
  for (unsigned k = threadIdx.x; k < sizeof(SampleJob) / 8; k += blockDim.x) d[k] = s[k];
  __syncthreads();
}

__global__ static void augment_stats_kernel(AugmentPlan p, SampleJob* jobs, bool warp_stats, bool sample_stats) {
  static_assert(sizeof(SampleJob) % 8 == 0, "SampleJob is copied as 8-byte words");
  __shared__ alignas(16) unsigned char raw[sizeof(SampleJob)];
  __shared__ int s_min[kStatsThreads], s_max[kStatsThreads];
  __shared__ unsigned long long s_luma[kStatsThreads];
  __shared__ double s_sum[kStatsThreads], s_sq[kStatsThreads];
  SampleJob* jg = jobs + blockIdx.x;
  load_job(jg, raw);
  SampleJob& j = *reinterpret_cast<SampleJob*>(raw);
  const int tid = static_cast<int>(threadIdx.x);
  const int w = p.out_width, hw = p.out_height * p.out_width, cn = p.channels;

  if (warp_stats && augment::needs_warp_stats(j.params)) {
    augment::StatsPartial part;
    std::uint8_t u[augment::kMaxChannels];
    for (int i = tid; i < hw; i += kStatsThreads) {
      augment::job_warp(p, j, i % w, i / w, u);
      part.add(u, cn);
    }
    s_min[tid] = part.min;
    s_max[tid] = part.max;
    s_luma[tid] = part.luma;
    __syncthreads();
    for (int stride = kStatsThreads / 2; stride > 0; stride >>= 1) {
      if (tid < stride) {
        s_min[tid] = min(s_min[tid], s_min[tid + stride]);
        s_max[tid] = max(s_max[tid], s_max[tid + stride]);
        s_luma[tid] += s_luma[tid + stride];
      }
      __syncthreads();
    }
    if (tid == 0) {
      augment::StatsPartial total;
      total.min = s_min[0];
      total.max = s_max[0];
      total.luma = s_luma[0];
      augment::finish_warp_stats(j, total);
    }
    __syncthreads();
  }

  if (sample_stats) {
    // Fixed-order tree reduction: the same sums on every run.
    double sum = 0.0, sq = 0.0;
    float v[augment::kMaxChannels];
    for (int i = tid; i < hw; i += kStatsThreads) {
      augment::job_values(p, j, i % w, i / w, v);
      for (int c = 0; c < cn; ++c) {
        const double r = __dmul_rn(static_cast<double>(v[c]), static_cast<double>(p.rescale));
        sum += r;
        sq += __dmul_rn(r, r);
      }
    }
    s_sum[tid] = sum;
    s_sq[tid] = sq;
    __syncthreads();
    for (int stride = kStatsThreads / 2; stride > 0; stride >>= 1) {
      if (tid < stride) {
        s_sum[tid] += s_sum[tid + stride];
        s_sq[tid] += s_sq[tid + stride];
      }
      __syncthreads();
    }
    if (tid == 0) augment::finish_sample_stats(p, j, s_sum[0], s_sq[0]);
    __syncthreads();
  }
  if (tid == 0) {
    jg->stats = j.stats;
    jg->cmean = j.cmean;
    jg->out = j.out;
  }
}

__global__ static void augment_batch_kernel(AugmentPlan p, BatchOutput o, const SampleJob* jobs, void* out) {
  __shared__ alignas(16) unsigned char raw[sizeof(SampleJob)];
  const int n = static_cast<int>(blockIdx.y);
  load_job(jobs + n, raw);
  const SampleJob& j = *reinterpret_cast<const SampleJob*>(raw);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= p.out_height * p.out_width) return;
  char* sample = static_cast<char*>(out) + static_cast<std::size_t>(n) * o.sample_elements * dtype_size(o.dtype);
  augment::job_output_pixel(p, o.dtype, j, i % p.out_width, i / p.out_width, sample);
}

}  // namespace

namespace detail {

void launch_augment_stats(const AugmentPlan& plan, SampleJob* jobs, int n, bool warp_stats, bool sample_stats,
                          StreamHandle stream) {
  augment_stats_kernel<<<static_cast<unsigned>(n), kStatsThreads, 0, stream>>>(plan, jobs, warp_stats, sample_stats);
  STOKER_CUDA_CHECK_LAUNCH("augment_stats_kernel");
}

void launch_augment_batch(const AugmentPlan& plan, const BatchOutput& output, const SampleJob* jobs, int n, void* out,
                          StreamHandle stream) {
  // gridDim.y is at most 65535: larger batches go in chunks of samples (jobs and output offset).
  constexpr int kMaxGridY = 65535;
  const int pixels = plan.out_height * plan.out_width;
  const std::size_t sample_bytes = output.sample_elements * dtype_size(output.dtype);
  for (int first = 0; first < n; first += kMaxGridY) {
    const int count = n - first < kMaxGridY ? n - first : kMaxGridY;
    const dim3 grid(static_cast<unsigned>((pixels + kPixelThreads - 1) / kPixelThreads), static_cast<unsigned>(count));
    augment_batch_kernel<<<grid, kPixelThreads, 0, stream>>>(
        plan, output, jobs + first, static_cast<char*>(out) + sample_bytes * static_cast<std::size_t>(first));
    STOKER_CUDA_CHECK_LAUNCH("augment_batch_kernel");
  }
}

}  // namespace detail
}  // namespace stoker
