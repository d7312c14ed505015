// Which processor runs the backbone: the CPU backend, or a GPU's cuDNN backend once it has shown
// that it computes what the CPU backend computes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/trainer/model.hpp"

namespace stoker::training {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;
  bool automatic = false;  // chosen by "auto": a GPU that cannot be used falls back to the CPU
  std::string description;
  // Set when an "auto" choice fell back from the GPU to the CPU: why (for a warning).
  std::string fallback_reason;

  // The CPU, after `reason` ruled out the GPU of an "auto" choice. After a sticky CUDA error
  // (cuda_context_lost_reason()) it throws instead: refuse_cpu_after_gpu_fault().
  void fall_back_to_cpu(const std::string& reason);
};

// Throws CudaError with the original error when a sticky CUDA error has made the process's CUDA
// context unusable: the GPU objects already made would fail at every later call, so an "auto"
// choice stops there rather than go on with the CPU. Every fallback to the CPU calls it first.
void refuse_cpu_after_gpu_fault();

// "auto" | "cpu" | "cuda" | "cuda:N" | "cuda:N,M,..." | "cuda:all". "auto" takes a GPU when there is
// one and this build has the cuDNN backend, else the CPU (the description says why). Which GPU:
// the local_rank-th (the rank's place on its machine; 0 for one process) of the list, or of the
// machine's GPUs for "auto" and "cuda", wrapping around (ranks beyond the GPUs share them). Throws InvalidArgument with
// a one-line reason when an explicit request cannot be met (no usable GPU and why, no such index, a build without
// cuDNN). A CUDA choice becomes the calling thread's current device and its description names the card.
DeviceChoice choose_device(const std::string& request, int local_rank = 0);

// The GPUs "cuda:N,M,..." or "cuda:all" names (a one-rank-per-GPU run), in order; empty for every
// other request. InvalidArgument for a malformed list, or "all" without a GPU.
std::vector<int> requested_gpus(const std::string& request);

// Puts the backbone on the chosen device: for CUDA the cuDNN backend (planned for `max_batch`
// samples), returned so that device batches can go to it directly; null for the CPU backend.
// Before it is used, the cuDNN backend must compute what the CPU backend computes on two test
// inputs (relative error within kGpuAgreementLimit). When that check or the GPU's setup fails, an
// "auto" choice falls back to the CPU (`device` says so, with the reason in fallback_reason) and an
// explicit one throws: CudaError from CUDA/cuDNN, Error with both numbers for a disagreement.
std::shared_ptr<trainer::CudnnBackend> place_backbone(trainer::Model& backbone, DeviceChoice& device, int max_batch);

// The largest error, relative to the largest value, a correct half-precision path may show: at
// 224x224 it stays near 2e-3, but small inputs average fewer positions in the final pooling
// (MobileNetV2 at 64x64: a 2x2 map) and real photos at 64x64 reached 2.5e-2. A wrong computation
// (layout, indexing, a missed op, a swapped sample) is off by 0.2 or more.
inline constexpr double kGpuAgreementLimit = 5e-2;

// "<what> by <error> (limit <limit>)", for a check that failed.
std::string disagreement(const std::string& what, double error, double limit = kGpuAgreementLimit);

}  // namespace stoker::training
