#include "placement.hpp"

#include <cstdio>

#include "stoker/core/error.hpp"

namespace stoker::training {

bool keep_gpu_feed(const Features& validation, const TrainingData& data, const TrainOptions& o, Sources& sources,
                   trainer::Model& backbone, std::shared_ptr<trainer::CudnnBackend>& gpu, DeviceChoice& device,
                   TrainObserver& observer) {
  const double error = sources.gpu_error(validation, o.loader.batch_size);
  if (error <= kGpuAgreementLimit) return true;
  const std::string why = disagreement(
      "cuda:" + std::to_string(device.index) + ": features from the GPU feed differ from the CPU path's", error);
  if (!device.automatic) throw Error(why);
  device.fall_back_to_cpu(why);
  observer.on_warning(why);
  gpu.reset();
  backbone.set_backend(nullptr);
  // The loader now shares the cores with the backbone: tuned again, and the new choice said.
  const std::string retuned = choose_loader_threads(data, o, sources, backbone, false);
  if (!retuned.empty()) observer.on_loader_retuned(retuned);
  sources.make(nullptr);
  return false;
}

std::string place_fine_tuning(trainer::TrainableTop& top, const trainer::Model& below, int batch,
                              const DeviceChoice& device, std::shared_ptr<trainer::CudnnBackend>& below_gpu,
                              TrainObserver& observer) {
  below_gpu.reset();
  try {
    trainer::GpuTrainOptions go;
    go.max_batch = batch;
    top.run_on_gpu(go);
    const trainer::TrainableTop::GpuGradientCheck check = top.check_gpu_gradients();
    if (!(check.gpu <= check.limit(kGpuAgreementLimit))) {
      char rounding[64];
      std::snprintf(rounding, sizeof rounding, " (bf16 rounding alone: %.3g)", check.rounding);
      throw Error(disagreement("the GPU trainer's gradients differ from the CPU backward's", check.gpu,
                               check.limit(kGpuAgreementLimit)) +
                  rounding);
    }
    if (!top.boundary_is_input()) {
      trainer::CudnnBackendOptions bo;
      bo.max_batch = batch;
      std::shared_ptr<trainer::CudnnBackend> g = trainer::make_cudnn_backend(below.graph(), bo);
      const double e = trainer::relative_error_to_cpu(below.graph(), *g);
      if (!(e <= kGpuAgreementLimit))
        throw Error(disagreement("the frozen part on the GPU differs from the CPU backend", e));
      below_gpu = std::move(g);
    }
    return "on the GPU: " + top.executor() + (below_gpu ? "; the frozen part on " + below_gpu->name() : "");
  } catch (const Error& e) {
    if (!device.automatic) throw;
    refuse_cpu_after_gpu_fault();  // after a sticky CUDA error: the original error, not the CPU
    top.run_on_cpu();
    below_gpu.reset();
    const std::string why = std::string("fine-tuning: ") + e.what();
    observer.on_warning(why);
    return "on the CPU backend (the GPU failed its setup or check, see the warning)";
  }
}

}  // namespace stoker::training
