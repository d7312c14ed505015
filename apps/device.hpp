// --device: which processor runs the model.
#pragma once

#include <string>

namespace stoker::app {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;
  std::string description;
};

// "auto" | "cpu" | "cuda" | "cuda:N". Throws InvalidArgument with a one-line reason when the
// request cannot be met (no GPU, or no GPU backend in this build).
DeviceChoice choose_device(const std::string& request);

// Number of CUDA devices the runtime sees (0 without a driver, a GPU, or a CUDA build).
int cuda_devices() noexcept;

}  // namespace stoker::app
