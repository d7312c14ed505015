#include "stoker/training/device.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>
#include <system_error>

#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/trainer/cudnn_backend.hpp"

namespace stoker::training {
namespace {

[[noreturn]] void bad_request(const std::string& request) {
  throw InvalidArgument("--device must be auto, cpu, cuda, cuda:N, a list cuda:N,M,... or cuda:all, received '" +
                        request + "'");
}

int parse_index(std::string_view text, const std::string& request) {
  int index = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) bad_request(request);
  return index;
}

}  // namespace

void DeviceChoice::fall_back_to_cpu(const std::string& reason) {
  refuse_cpu_after_gpu_fault();
  // The reason itself is in fallback_reason (a command prints it as a warning), not repeated here.
  *this = {false, 0, true, "cpu (auto: the GPU failed its setup or check, see the warning)", reason};
}

void refuse_cpu_after_gpu_fault() {
  if (cuda_context_lost_reason().empty()) return;
  // Every GPU object of the process now fails (the feed, the backend, their destructors): going
  // on without a word on the CPU would hide the fault behind later, unrelated errors. Throws
  // CudaError with the original error and its code.
  require_cuda_device("the GPU cannot be used, and --device auto does not go on with the CPU");
}

std::string disagreement(const std::string& what, double error, double limit) {
  char numbers[80];
  std::snprintf(numbers, sizeof numbers, " by %.3g (limit %.3g)", error, limit);
  return what + numbers;
}

std::vector<int> requested_gpus(const std::string& request) {
  if (!request.starts_with("cuda:")) return {};
  const std::string_view list = std::string_view(request).substr(5);
  if (list == "all") {
    std::vector<int> all(static_cast<std::size_t>(cuda_device_count()));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    if (all.empty())
      throw InvalidArgument("--device " + request + ": " + cuda_unavailable_reason() + " (use --device cpu)");
    return all;
  }
  std::vector<int> gpus;
  for (std::size_t start = 0;;) {
    const std::size_t comma = list.find(',', start);
    gpus.push_back(parse_index(list.substr(start, comma - start), request));
    if (comma == std::string_view::npos) return gpus;
    start = comma + 1;
  }
}

DeviceChoice choose_device(const std::string& request, int local_rank) {
  if (request == "cpu") return {false, 0, false, "cpu"};
  if (request == "auto") {
    refuse_cpu_after_gpu_fault();
    const int gpus = cuda_device_count();
    // A machine without a GPU is an ordinary one: the reason is for `stoker env`, not every run.
    if (gpus == 0) return {false, 0, true, "cpu (auto: no GPU found; stoker env says why)"};
    if (!trainer::built_with_cudnn()) return {false, 0, true, "cpu (auto: this stoker was built without cuDNN)"};
    const int index = local_rank % gpus;
    set_device(index);
    return {true, index, true,
            "cuda:" + std::to_string(index) + " (" + cuda_device_description() +
                "; cuDNN backend; chosen by --device auto)"};
  }
  if (request != "cuda" && !request.starts_with("cuda:")) bad_request(request);
  const std::vector<int> listed = requested_gpus(request);  // a malformed request is named first
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    throw InvalidArgument("--device " + request + ": " + cuda_unavailable_reason() + " (use --device cpu)");
  }
  // "cuda" under several ranks on a machine: the rank's own GPU, as LOCAL_RANK picks it.
  const int index = listed.empty() ? local_rank % gpus : listed[static_cast<std::size_t>(local_rank) % listed.size()];
  if (index < 0 || index >= gpus) {
    throw InvalidArgument("--device " + request + ": there are " + std::to_string(gpus) + " CUDA devices (0.." +
                          std::to_string(gpus - 1) + ")");
  }
  if (!trainer::built_with_cudnn()) {
    throw InvalidArgument("--device " + request +
                          ": this stoker was built without cuDNN (configure with "
                          "STOKER_CUDNN=ON); use --device cpu");
  }
  set_device(index);
  return {true, index, false, "cuda:" + std::to_string(index) + " (" + cuda_device_description() + "; cuDNN backend)"};
}

std::shared_ptr<trainer::CudnnBackend> place_backbone(trainer::Model& backbone, DeviceChoice& device, int max_batch) {
  if (!device.cuda) return nullptr;  // the Model's default backend is the CPU one
  try {
    set_device(device.index);  // streams and buffers made later (the GPU feed) go there too
    trainer::CudnnBackendOptions options;
    options.max_batch = max_batch;
    options.device = device.index;
    auto gpu = trainer::make_cudnn_backend(backbone.graph(), options);
    const double error = trainer::relative_error_to_cpu(backbone.graph(), *gpu);
    if (!(error <= kGpuAgreementLimit)) {
      throw Error(disagreement(
          "cuda:" + std::to_string(device.index) + ": the cuDNN backbone differs from the CPU reference", error));
    }
    backbone.set_backend(gpu);
    return gpu;
  } catch (const Error& e) {
    if (!device.automatic) throw;
    device.fall_back_to_cpu(e.what());
    return nullptr;
  }
}

}  // namespace stoker::training
