// Internal to builds with STOKER_CUDA_EMULATION (see docs/gpu.md, "The emulated device"): the
// host emulation of the CUDA runtime runs each "kernel" as a host function queued on a stream,
// in stream order, on that stream's worker thread.
#pragma once

#include <functional>

#include "stoker/core/cuda.hpp"

namespace stoker::emulation {

// A launch's grid or block size (CUDA's dim3).
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

// Queues `kernel` on `stream` (null: the legacy default stream) like a kernel launch: it runs
// after the work queued before it, and work queued later runs after it. It must not throw. As a
// CUDA launch, it does not fail by itself: an invalid configuration (an empty grid, a block of
// more than 1024 threads), a destroyed stream or a faulted device leaves its error as the calling
// thread's last error and queues nothing; STOKER_CUDA_CHECK_LAUNCH reports it.
void launch(StreamHandle stream, Dim grid, Dim block, std::function<void()> kernel);
void launch(StreamHandle stream, std::function<void()> kernel);  // one block of one thread

// Makes the next launch fault with `code` instead of running (700: cudaErrorIllegalAddress). As
// on a GPU the error shows at the calls after it (a synchronisation, a query, the next launch),
// and a sticky one (is_sticky_cuda_error) makes every later call of the process fail with it.
// STOKER_EMULATED_FAULT=700 (or 700@N: the N-th launch) arms it from the environment.
void fail_next_launch(int code);
// Tests only: the emulated device works again after a fault (a GPU needs a new process).
void reset_after_fault();

}  // namespace stoker::emulation
