// Internal to stoker::augment: the CUDA executor's kernel launchers (cuda_augmenter.cu; a build
// without CUDA defines them in cuda_augmenter.cpp, the emulated device as host loops).
#pragma once

#include "batch_math.hpp"
#include "stoker/core/cuda.hpp"

namespace stoker::detail {

// The launchers (cuda_augmenter.cu). jobs: device table of n samples.
void launch_augment_stats(const augment::AugmentPlan& plan, augment::SampleJob* jobs, int n, bool warp_stats,
                          bool sample_stats, StreamHandle stream);
void launch_augment_batch(const augment::AugmentPlan& plan, const augment::BatchOutput& output,
                          const augment::SampleJob* jobs, int n, void* out, StreamHandle stream);

}  // namespace stoker::detail
