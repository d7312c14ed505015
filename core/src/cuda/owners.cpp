// The move-only CUDA owners of cuda.hpp, written once over the runtime seam (runtime.hpp): the
// same code runs on the CUDA runtime, without CUDA, and on the emulated device.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "runtime.hpp"
#include "stoker/core/cuda.hpp"

namespace stoker {

std::string runtime::gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

namespace {

// The first sticky error of the process: its code (0 while none) and cuda_check's message for it.
std::atomic<int> g_lost_code{0};
std::mutex g_lost_mutex;
std::string g_lost_message;

constexpr int kMemoryAllocation = 2;  // cudaErrorMemoryAllocation

std::string bytes_text(std::size_t bytes) { return std::to_string(bytes) + " bytes (" + runtime::gib(bytes) + ")"; }

void* pinned_or_throw(std::size_t bytes, const char* what) {
  void* p = runtime::pinned_alloc(bytes);
  if (!p) {
    throw BadAlloc("cannot allocate " + bytes_text(bytes) + " of pinned host memory for " + what +
                   " (page-locked memory is limited by RAM and ulimit -l; lower prefetch or batch size)");
  }
  return p;
}

}  // namespace

// ---- errors and the current device ------------------------------------------------------------------

bool is_sticky_cuda_error(int code) noexcept {
  switch (code) {
    case 214:  // cudaErrorECCUncorrectable
    case 226:  // cudaErrorContained
    case 700:  // cudaErrorIllegalAddress
    case 702:  // cudaErrorLaunchTimeout
    case 710:  // cudaErrorAssert
    case 714:  // cudaErrorHardwareStackError
    case 715:  // cudaErrorIllegalInstruction
    case 716:  // cudaErrorMisalignedAddress
    case 717:  // cudaErrorInvalidAddressSpace
    case 718:  // cudaErrorInvalidPc
    case 719:  // cudaErrorLaunchFailure
    case 721:  // cudaErrorTensorMemoryLeak
    case 911:  // cudaErrorExternalDevice
      return true;
    default: return false;
  }
}

std::string cuda_context_lost_reason() {
  if (g_lost_code.load() == 0) return "";
  std::lock_guard lock(g_lost_mutex);
  return g_lost_message;
}

void runtime::throw_failure(int code, const char* call, const char* file, int line) {
  const std::string where = std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: ";
  if (const int lost = g_lost_code.load(); lost != 0) {
    // Whatever this call answered, the reason is the error that broke the context.
    throw CudaError(where + "the CUDA context is unusable since " + cuda_context_lost_reason(), lost);
  }
  const std::string message = cuda_error_message(code, call, file, line);
  if (is_sticky_cuda_error(code)) {
    {
      std::lock_guard lock(g_lost_mutex);
      if (g_lost_code.load() == 0) {
        g_lost_message = message;
        g_lost_code.store(code);
      }
    }
    throw CudaError(message +
                        " (the CUDA context is now unusable: every later CUDA call of this process fails; start a "
                        "new process to use the GPU again)",
                    code);
  }
  if (code == kMemoryAllocation) throw BadAlloc(message);
  throw CudaError(message, code);
}

void runtime::require_usable_context(const char* who) {
  if (const int lost = g_lost_code.load(); lost != 0) {
    throw CudaError(std::string(who) + ": the CUDA context is unusable since " + cuda_context_lost_reason() +
                        "; start a new process to use the GPU again",
                    lost);
  }
}

void runtime::forget_lost_context() noexcept {
  std::lock_guard lock(g_lost_mutex);
  g_lost_message.clear();
  g_lost_code.store(0);
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  const int previous = current_device();
  if (previous != device) set_device(device);
  previous_ = previous;
}
DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  try {
    if (current_device() != previous_) set_device(previous_);
  } catch (...) {  // never throws: the caller's next CUDA call reports a broken context
  }
}

// ---- Stream / Event ------------------------------------------------------------------------------

Stream::Stream() : s_(runtime::create_stream()) {}
// Tolerates driver shutdown (static destruction order): a failure is ignored, never thrown.
Stream::~Stream() {
  if (s_) runtime::destroy_stream(s_);
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (s_) runtime::destroy_stream(s_);
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}
void Stream::wait(const Event& e) const { stream_wait(s_, e.get()); }
void Stream::synchronize() const { stream_synchronize(s_); }
bool Stream::idle() const { return !s_ || runtime::stream_idle(s_); }

Event::Event(bool timing) : e_(runtime::create_event(timing)) {}
Event::~Event() {
  if (e_) runtime::destroy_event(e_);
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (e_) runtime::destroy_event(e_);
    e_ = std::exchange(other.e_, nullptr);
  }
  return *this;
}
void Event::record(StreamHandle stream) const { runtime::record_event(e_, stream); }
bool Event::done() const { return !e_ || runtime::event_done(e_); }
void Event::synchronize() const {
  if (e_) event_synchronize(e_);
}
float Event::elapsed_ms(const Event& start, const Event& end) { return stoker::elapsed_ms(start.e_, end.e_); }

// ---- memory ----------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  p_ = runtime::device_alloc(bytes);
  if (!p_) {
    const DeviceMemoryInfo m = device_memory_info();
    throw BadAlloc("cannot allocate " + bytes_text(bytes) + " of device memory for " + what + ": " +
                   bytes_text(m.free) + " free of " + bytes_text(m.total));
  }
  bytes_ = bytes;
}
DeviceBuffer::~DeviceBuffer() { reset(); }
void DeviceBuffer::reset() noexcept {
  if (p_) runtime::device_free(p_, bytes_);
  p_ = nullptr;
  bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    p_ = std::exchange(other.p_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes, const char* what) : p_(pinned_or_throw(bytes, what)), bytes_(bytes) {}
PinnedBuffer::~PinnedBuffer() {
  if (p_) runtime::pinned_free(p_);
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (p_) runtime::pinned_free(p_);
    p_ = std::exchange(other.p_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void* PinnedHostAllocator::allocate(std::size_t bytes) {
  require_cuda_device("pinned batch buffers");
  void* p = pinned_or_throw(bytes, "the loader's batch buffers");
  held_ += bytes;
  return p;
}
void PinnedHostAllocator::deallocate(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  runtime::pinned_free(p);
  held_ -= bytes;
}

}  // namespace stoker
