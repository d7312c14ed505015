// Internal to stoker::core: the seam between the CUDA owners of cuda.hpp (written once, in
// owners.cpp) and the runtime behind them. Exactly one runtime is linked:
//   runtime_cuda.cpp      the CUDA runtime (STOKER_HAVE_CUDA)
//   runtime_absent.cpp    a build without CUDA: everything throws CudaError("... built without CUDA")
//   runtime_emulated.cpp  the runtime emulated on the host (STOKER_CUDA_EMULATION; tests without a GPU)
// Each runtime file also defines the public free functions of cuda.hpp (cuda_check, stream_wait,
// the copies, the device queries...).
#pragma once

#include <cstddef>
#include <string>

#include "stoker/core/cuda.hpp"

namespace stoker::runtime {

StreamHandle create_stream();  // non-blocking, on the current device
void destroy_stream(StreamHandle stream) noexcept;
bool stream_idle(StreamHandle stream);  // all queued work finished

EventHandle create_event(bool timing);
void destroy_event(EventHandle event) noexcept;
void record_event(EventHandle event, StreamHandle stream);
bool event_done(EventHandle event);  // an event never recorded is done

// Null when the device (or the host, for pinned memory) is out of memory; other failures throw.
void* device_alloc(std::size_t bytes);
void device_free(void* p, std::size_t bytes) noexcept;
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p) noexcept;

// "1.50 GiB", for messages (owners.cpp).
std::string gib(std::size_t bytes);

// What cuda_check of the CUDA and emulated runtimes throws for a failed call (owners.cpp): BadAlloc
// for out of memory, else CudaError. The first sticky error is recorded; once one is, every
// failure reports "the CUDA context is unusable since <that error>" with its code.
[[noreturn]] void throw_failure(int code, const char* call, const char* file, int line);
// Throws that CudaError for `who` when a sticky error has been recorded (require_cuda_device).
void require_usable_context(const char* who);
// Forgets the recorded sticky error (the emulated device's reset_after_fault; tests only).
void forget_lost_context() noexcept;

}  // namespace stoker::runtime
