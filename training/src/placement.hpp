// Where a run's work goes besides the backbone (device.hpp places that one): the GPU feed checked
// against the CPU path, and the second phase's top and frozen part. Each check that fails keeps
// the CPU with the reason under --device auto and stops the run under an explicit --device cuda.
#pragma once

#include <memory>
#include <string>

#include "sources.hpp"
#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/trainer/fine_tune.hpp"
#include "stoker/training/device.hpp"

namespace stoker::training {

// The GPU feed and its CUDA augmentation, checked on the first validation features
// (Sources::gpu_error). True when they agree within kGpuAgreementLimit. Otherwise an explicit
// device throws Error with both numbers, and an "auto" one falls back to the CPU: `device` says
// so, the observer is warned, `gpu` and the backbone's cuDNN backend are dropped, the loader's
// threads are chosen again for sharing the cores and the sources are made on the CPU; false then
// (the validation features are to be computed again).
bool keep_gpu_feed(const Features& validation, const TrainingData& data, const TrainOptions& o, Sources& sources,
                   trainer::Model& backbone, std::shared_ptr<trainer::CudnnBackend>& gpu, DeviceChoice& device,
                   TrainObserver& observer);

// The second phase on the GPU the first phase ran on: the top trains through the GPU trainer
// (TrainableTop::run_on_gpu) after its gradients pass TrainableTop::check_gpu_gradients, and the
// frozen part runs on the cuDNN backend behind the GPU feed after the backbone's agreement check
// (kGpuAgreementLimit). Returns the setup's note; `below_gpu` is the frozen part's backend, or
// null for the CPU's.
std::string place_fine_tuning(trainer::TrainableTop& top, const trainer::Model& below, int batch,
                              const DeviceChoice& device, std::shared_ptr<trainer::CudnnBackend>& below_gpu,
                              TrainObserver& observer);

}  // namespace stoker::training
