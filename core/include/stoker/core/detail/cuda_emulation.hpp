// Internal to builds with STOKER_CUDA_EMULATION (see docs/gpu.md, "The emulated device"): the
// host emulation of the CUDA runtime runs each "kernel" as a host function queued on a stream,
// in stream order, on that stream's worker thread.
#pragma once

#include <functional>

#include "stoker/core/cuda.hpp"

namespace stoker::emulation {

// Queues `kernel` on `stream` (null: the legacy default stream) like a kernel launch: it runs
// after the work queued before it, and work queued later runs after it. It must not throw.
void launch(StreamHandle stream, std::function<void()> kernel);

}  // namespace stoker::emulation
