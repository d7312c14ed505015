// Internal: the cuDNN backend's stand-in on the emulated device (STOKER_CUDA_EMULATION).
#pragma once

#include <memory>

#include <stoker/trainer/cudnn_backend.hpp>

#include "plan.hpp"

namespace stoker::trainer::cudnn {

// The plan run by its host executor (fp16/bf16 rounding like the GPU), queued on the caller's
// stream; see emulated_backend.cpp.
std::shared_ptr<CudnnBackend> make_emulated_backend(Plan plan, const CudnnBackendOptions& options);

}  // namespace stoker::trainer::cudnn
