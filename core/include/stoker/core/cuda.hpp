// Move-only owners of CUDA resources: streams, events, device memory, pinned host memory.
//
//   stoker::Stream copy;                              // non-blocking stream on the current device
//   stoker::DeviceBuffer buf(bytes, "batch ring");    // cudaMalloc, freed on destruction
//   stoker::Event done;                               // timing disabled unless asked
//   done.record(copy); other.wait(done);              // cudaStreamWaitEvent: no host sync
//
// The header compiles without the CUDA toolkit (the handle types are forward declarations that
// match cudaStream_t / cudaEvent_t). In a build without CUDA (STOKER_HAVE_CUDA undefined) every
// function that needs the runtime throws CudaError("... built without CUDA"), except
// cuda_device_count(), which returns 0. Nothing here aborts the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "stoker/core/error.hpp"
#include "stoker/core/host_allocator.hpp"

// The CUDA runtime's own handle types are pointers to these incomplete structs.
struct CUstream_st;
struct CUevent_st;

namespace stoker {

using StreamHandle = CUstream_st*;  // == cudaStream_t
using EventHandle = CUevent_st*;    // == cudaEvent_t

// The default streams of the current device: null or cudaStreamLegacy (1) is the legacy default
// stream, cudaStreamPerThread (2) the calling thread's own default stream (DLPack's stream 1 and 2).
inline StreamHandle legacy_default_stream() noexcept { return nullptr; }
inline StreamHandle per_thread_default_stream() noexcept { return reinterpret_cast<StreamHandle>(std::uintptr_t{2}); }
// True for the handles above: they name a stream of whichever device is current when they are used.
inline bool is_default_stream(StreamHandle s) noexcept { return reinterpret_cast<std::uintptr_t>(s) <= 2; }

// Throws CudaError when `code` (a cudaError_t) is not cudaSuccess: "<file>:<line>: <call> failed:
// <cudaGetErrorName>: <cudaGetErrorString>", with an explanation for the errors users meet first
// (no device, driver older than the runtime). Use through STOKER_CUDA_CHECK.
void cuda_check(int code, const char* call, const char* file, int line);
#define STOKER_CUDA_CHECK(call) ::stoker::cuda_check(static_cast<int>(call), #call, __FILE__, __LINE__)

// The message cuda_check would throw for `code` (for logs and tests).
std::string cuda_error_message(int code, const char* call, const char* file, int line);

// True when this build has the CUDA parts (STOKER_HAVE_CUDA, or the emulation below).
bool built_with_cuda() noexcept;
// True in a build with STOKER_CUDA_EMULATION: the runtime is emulated on the host (streams are
// threads, kernels host functions, device memory host memory) so that the GPU code's host logic
// runs in tests without a GPU. One emulated device; nothing is fast.
bool cuda_is_emulated() noexcept;
// Devices the runtime sees; 0 without CUDA support, without a driver, or without a GPU. Never throws.
int cuda_device_count() noexcept;
// Why cuda_device_count() is 0 ("" when it is not): no CUDA in the build, no driver, driver too old...
std::string cuda_unavailable_reason();
// Throws CudaError with cuda_unavailable_reason() when no device can be used. `who` prefixes it.
void require_cuda_device(const char* who);
// The calling thread's current device (cudaGetDevice) and setting it (cudaSetDevice). The
// current device is per host thread and shared with every other CUDA user of the thread (PyTorch).
int current_device();
void set_device(int device);

// Makes `device` current for a scope and gives the thread back its previous device after:
//   { DeviceGuard on(1); Stream s; }  // s lives on device 1; the caller's device is unchanged
// A negative `device` does nothing (no CUDA call). The destructor never throws.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to give back
};

// An error after which the CUDA context of the process is unusable and every later CUDA call
// fails (a "sticky" error: illegal address, launch failure, illegal instruction, misaligned
// address, hardware stack error, device assert, ...).
bool is_sticky_cuda_error(int code) noexcept;
// "" while the context is usable; after a sticky error, that first error's message. From then on
// require_cuda_device() and every failing check report "the CUDA context is unusable since <it>".
std::string cuda_context_lost_reason();
// "NVIDIA H200, 139.8 GiB, sm_90, driver 13.0, runtime 13.0" for the current device.
std::string cuda_device_description();

// Free and total memory of the current device, in bytes.
struct DeviceMemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};
DeviceMemoryInfo device_memory_info();

class Event;

class Stream {
 public:
  Stream();  // cudaStreamCreateWithFlags(cudaStreamNonBlocking) on the current device
  ~Stream();
  Stream(Stream&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamHandle get() const noexcept { return s_; }
  void wait(const Event& e) const;  // cudaStreamWaitEvent: work after this waits on the GPU
  void synchronize() const;         // host waits (tests, shutdown)
  bool idle() const;                // cudaStreamQuery == cudaSuccess

 private:
  StreamHandle s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);  // cudaEventDisableTiming unless timing
  ~Event();
  Event(Event&& other) noexcept : e_(std::exchange(other.e_, nullptr)) {}
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  EventHandle get() const noexcept { return e_; }
  void record(StreamHandle stream) const;
  void record(const Stream& stream) const { record(stream.get()); }
  bool done() const;         // cudaEventQuery; an event never recorded is done
  void synchronize() const;  // host wait
  // Milliseconds between two recorded timing events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  EventHandle e_ = nullptr;
};

// Milliseconds between two recorded timing events (cudaEventElapsedTime; negative if end is first).
float elapsed_ms(EventHandle start, EventHandle end);

// Host wait for a recorded event (cudaEventSynchronize).
void event_synchronize(EventHandle event);

// Makes `stream` wait for `event` on the GPU (cudaStreamWaitEvent); the host does not block.
void stream_wait(StreamHandle stream, EventHandle event);

// Host wait for all work queued on `stream` (cudaStreamSynchronize; null = the legacy default stream).
void stream_synchronize(StreamHandle stream);

// Device memory from cudaMalloc, taken once. Out of memory → BadAlloc naming the bytes asked, the
// free and total memory and `what`.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, const char* what = "device buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const noexcept { return p_; }
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const noexcept { return bytes_; }
  void reset() noexcept;

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory from cudaHostAlloc; failure throws (BadAlloc or CudaError), it never
// falls back to pageable memory.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(std::size_t bytes, const char* what = "pinned buffer");
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const noexcept { return p_; }
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// The Loader's batch memory in pinned host memory (LoaderOptions::allocator), so that
// cudaMemcpyAsync from a batch is a true DMA. Tracks the bytes it holds.
class PinnedHostAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override;  // cudaHostAlloc; throws BadAlloc / CudaError
  void deallocate(void* p, std::size_t bytes) noexcept override;
  const char* name() const noexcept override { return "pinned"; }
  std::size_t bytes_held() const noexcept { return held_; }

 private:
  std::size_t held_ = 0;
};

// Asynchronous copies on a stream (the host pointer should be pinned for true asynchrony).
void copy_to_device_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream);
void copy_to_host_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream);
void memset_device_async(void* dst, int value, std::size_t bytes, StreamHandle stream);
// Checks for a kernel launch error (cudaGetLastError, which also clears it) and throws like
// STOKER_CUDA_CHECK, the message naming `kernel`. The last error is per host thread: a query that
// answers cudaErrorNotReady (Stream::idle, Event::done) clears what it left there, so a launch
// check never reports another call's answer.
void check_launch(const char* kernel, const char* file, int line);
#define STOKER_CUDA_CHECK_LAUNCH(name) ::stoker::check_launch(name, __FILE__, __LINE__)

}  // namespace stoker
