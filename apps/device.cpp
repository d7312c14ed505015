#include "device.hpp"

#include "stoker/error.hpp"
#include "stoker/pipeline/cuda.hpp"
#include "stoker/trainer/cudnn_backend.hpp"

namespace stoker::app {
namespace {

[[noreturn]] void bad_request(const std::string& request) {
  throw InvalidArgument("--device must be auto, cpu, cuda or cuda:N, received '" + request + "'");
}

}  // namespace

DeviceChoice choose_device(const std::string& request) {
  if (request == "cpu") return {false, 0, "cpu"};
  const int gpus = cuda_device_count();
  if (request == "auto") {
    return {false, 0, gpus > 0 ? "cpu (a GPU is present: --device cuda runs the backbone with cuDNN)" : "cpu (no GPU found)"};
  }
  if (request.rfind("cuda", 0) != 0) bad_request(request);
  int index = 0;
  if (request.size() > 4) {
    if (request[4] != ':' || request.size() == 5) bad_request(request);
    try {
      index = std::stoi(request.substr(5));
    } catch (...) {
      bad_request(request);
    }
  }
  if (gpus == 0) throw InvalidArgument("--device " + request + ": no CUDA device is present (use --device cpu)");
  if (index < 0 || index >= gpus) {
    throw InvalidArgument("--device " + request + ": there are " + std::to_string(gpus) + " CUDA devices");
  }
  return {true, index, "cuda:" + std::to_string(index) + " (cuDNN backend)"};
}

std::shared_ptr<trainer::CudnnBackend> place_backbone(trainer::Model& backbone, const DeviceChoice& device,
                                                      int max_batch) {
  if (!device.cuda) return nullptr;  // the Model's default backend is the CPU one
  set_device(device.index);           // streams and buffers made later (the GPU feed) go there too
  trainer::CudnnBackendOptions options;
  options.max_batch = max_batch;
  options.device = device.index;
  auto gpu = trainer::make_cudnn_backend(backbone.graph(), options);
  backbone.set_backend(gpu);
  return gpu;
}

}  // namespace stoker::app
