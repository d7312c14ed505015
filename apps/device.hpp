// --device: which processor runs the backbone.
#pragma once

#include <memory>
#include <string>

#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/trainer/model.hpp"

namespace stoker::app {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;
  std::string description;
};

// "auto" | "cpu" | "cuda" | "cuda:N". Throws InvalidArgument with a one-line reason when the
// request cannot be met (no usable GPU and why, no such index, a build without cuDNN). "auto"
// stays on the CPU: the cuDNN backend has not run on a GPU yet, so it is used only when asked for
// by name. A CUDA choice becomes the calling thread's current device and its description names
// the card.
DeviceChoice choose_device(const std::string& request);

// Puts the backbone on the chosen device: for CUDA the cuDNN backend (planned for `max_batch`
// samples), returned so that device batches can go to it directly; null for the CPU backend.
// Throws CudaError with the reason when the GPU cannot be used.
std::shared_ptr<trainer::CudnnBackend> place_backbone(trainer::Model& backbone, const DeviceChoice& device,
                                                      int max_batch);

}  // namespace stoker::app
