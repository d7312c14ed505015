#include "device.hpp"

#include "stoker/error.hpp"

#if defined(STOKER_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace stoker::app {

int cuda_devices() noexcept {
#if defined(STOKER_HAVE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return 0;
#endif
}

DeviceChoice choose_device(const std::string& request) {
  if (request == "cpu") return {false, 0, "cpu"};
  const int gpus = cuda_devices();
  if (request == "auto") {
    // The cuDNN trainer backend is not part of this build yet, so the model runs on the CPU.
    return {false, 0, gpus > 0 ? "cpu (a GPU is present, but the cuDNN backend is not built yet)" : "cpu (no GPU found)"};
  }
  if (request.rfind("cuda", 0) == 0) {
    int index = 0;
    if (request.size() > 4) {
      if (request[4] != ':' || request.size() == 5) throw InvalidArgument("--device must be auto, cpu, cuda or cuda:N, received '" + request + "'");
      try {
        index = std::stoi(request.substr(5));
      } catch (...) {
        throw InvalidArgument("--device must be auto, cpu, cuda or cuda:N, received '" + request + "'");
      }
    }
    if (gpus == 0) throw InvalidArgument("--device " + request + ": no CUDA device is present (use --device cpu)");
    if (index < 0 || index >= gpus) {
      throw InvalidArgument("--device " + request + ": there are " + std::to_string(gpus) + " CUDA devices");
    }
    throw InvalidArgument("--device " + request + ": the cuDNN trainer backend is not built yet; use --device cpu");
  }
  throw InvalidArgument("--device must be auto, cpu, cuda or cuda:N, received '" + request + "'");
}

}  // namespace stoker::app
