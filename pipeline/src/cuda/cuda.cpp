// CUDA runtime wrappers (see cuda.hpp). Compiled by the host compiler; without STOKER_HAVE_CUDA
// every entry point that needs the runtime throws "built without CUDA".
#include "stoker/pipeline/cuda.hpp"

#include <cstdio>
#include <string>

#if defined(STOKER_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace stoker {
namespace {

[[maybe_unused]] std::string gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

#if !defined(STOKER_HAVE_CUDA)
[[noreturn]] void no_cuda(const char* what) {
  throw CudaError(std::string(what) + ": stoker was built without CUDA (configure with a CUDA toolkit, "
                                      "STOKER_CUDA=ON); the CPU path is still available",
                  -1);
}
#endif

}  // namespace

bool cuda_is_emulated() noexcept { return false; }

bool built_with_cuda() noexcept {
#if defined(STOKER_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

#if defined(STOKER_HAVE_CUDA)

namespace {

std::string hint(cudaError_t code) {
  switch (code) {
    case cudaErrorNoDevice: return " (no CUDA-capable GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    case cudaErrorInsufficientDriver: {
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime);
      if (driver == 0) {
        return " (no NVIDIA driver is installed: libcuda.so.1 could not be loaded, so this machine has no usable "
               "GPU)";
      }
      return " (the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." +
             std::to_string(driver % 1000 / 10) + " but stoker was built with CUDA runtime " +
             std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
             ": update the driver or build with an older toolkit)";
    }
    case cudaErrorMemoryAllocation: return " (out of device or pinned host memory)";
    case cudaErrorNotSupported:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorNoKernelImageForDevice:
      return " (this GPU or driver cannot run the code stoker was compiled for: check CMAKE_CUDA_ARCHITECTURES)";
    default: return "";
  }
}

}  // namespace

std::string cuda_error_message(int code, const char* call, const char* file, int line) {
  const auto c = static_cast<cudaError_t>(code);
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(c) + " (" +
         std::to_string(code) + "): " + cudaGetErrorString(c) + hint(c);
}

void cuda_check(int code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls are not blamed for it
  if (code == cudaErrorMemoryAllocation) {
    throw BadAlloc(cuda_error_message(code, call, file, line));
  }
  throw CudaError(cuda_error_message(code, call, file, line), code);
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + hint(e);
  }
  if (n == 0) return "no CUDA-capable GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)";
  return "";
}

void require_cuda_device(const char* who) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    throw CudaError(std::string(who) + ": " + why + "; the CPU path is still available",
                    e != cudaSuccess ? static_cast<int>(e) : static_cast<int>(cudaErrorNoDevice));
  }
}

int current_device() {
  int dev = 0;
  STOKER_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}
void set_device(int device) { STOKER_CUDA_CHECK(cudaSetDevice(device)); }

std::string cuda_device_description() {
  int dev = 0;
  STOKER_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  STOKER_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return std::string(prop.name) + ", " + gib(prop.totalGlobalMem) + ", sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, driver " +
         std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", runtime " +
         std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
}

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo m;
  STOKER_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

// ---- Stream / Event ------------------------------------------------------------------------------

Stream::Stream() {
  cudaStream_t s = nullptr;
  STOKER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  s_ = s;
}
Stream::~Stream() {
  // Tolerates driver shutdown (static destruction order): the error is ignored, never thrown.
  if (s_) cudaStreamDestroy(s_);
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}
void Stream::wait(const Event& e) const { stream_wait(s_, e.get()); }
void Stream::synchronize() const { stream_synchronize(s_); }
void stream_synchronize(StreamHandle stream) { STOKER_CUDA_CHECK(cudaStreamSynchronize(stream)); }
bool Stream::idle() const {
  const cudaError_t e = cudaStreamQuery(s_);
  if (e == cudaErrorNotReady) return false;
  STOKER_CUDA_CHECK(e);
  return true;
}

Event::Event(bool timing) {
  cudaEvent_t e = nullptr;
  STOKER_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  e_ = e;
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(other.e_, nullptr);
  }
  return *this;
}
void Event::record(StreamHandle stream) const { STOKER_CUDA_CHECK(cudaEventRecord(e_, stream)); }
bool Event::done() const {
  const cudaError_t e = cudaEventQuery(e_);
  if (e == cudaErrorNotReady) return false;
  STOKER_CUDA_CHECK(e);
  return true;
}
void Event::synchronize() const { event_synchronize(e_); }
void event_synchronize(EventHandle event) { STOKER_CUDA_CHECK(cudaEventSynchronize(event)); }
float Event::elapsed_ms(const Event& start, const Event& end) { return stoker::elapsed_ms(start.e_, end.e_); }
float elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0.0f;
  STOKER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  return ms;
}

void stream_wait(StreamHandle stream, EventHandle event) { STOKER_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0)); }

// ---- memory ----------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    p_ = nullptr;
    throw BadAlloc(std::string("cannot allocate ") + std::to_string(bytes) + " bytes (" + gib(bytes) +
                   ") of device memory for " + what + ": " + std::to_string(free) + " bytes (" + gib(free) +
                   ") free of " + std::to_string(total) + " (" + gib(total) + ")");
  }
  if (e != cudaSuccess) p_ = nullptr;
  STOKER_CUDA_CHECK(e);
}
DeviceBuffer::~DeviceBuffer() { reset(); }
void DeviceBuffer::reset() noexcept {
  if (p_) cudaFree(p_);
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

namespace {
void* host_alloc_pinned(std::size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw BadAlloc(std::string("cannot allocate ") + std::to_string(bytes) + " bytes (" + gib(bytes) +
                   ") of pinned host memory for " + what +
                   " (page-locked memory is limited by RAM and ulimit -l; lower prefetch or batch size)");
  }
  STOKER_CUDA_CHECK(e);
  return p;
}
}  // namespace

PinnedBuffer::PinnedBuffer(std::size_t bytes, const char* what) : p_(host_alloc_pinned(bytes, what)), bytes_(bytes) {}
PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (p_) cudaFreeHost(p_);
    p_ = std::exchange(other.p_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void* PinnedHostAllocator::allocate(std::size_t bytes) {
  require_cuda_device("pinned batch buffers");
  void* p = host_alloc_pinned(bytes, "the loader's batch buffers");
  held_ += bytes;
  return p;
}
void PinnedHostAllocator::deallocate(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  cudaFreeHost(p);
  held_ -= bytes;
}

void copy_to_device_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  STOKER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}
void copy_to_host_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  STOKER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}
void memset_device_async(void* dst, int value, std::size_t bytes, StreamHandle stream) {
  STOKER_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream));
}
void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_check(e, (std::string("launch of ") + kernel).c_str(), file, line);
}

#else  // ---- built without CUDA ---------------------------------------------------------------------

std::string cuda_error_message(int code, const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: CUDA error " + std::to_string(code) +
         " (stoker was built without CUDA)";
}
void cuda_check(int code, const char* call, const char* file, int line) {
  if (code != 0) throw CudaError(cuda_error_message(code, call, file, line), code);
}
int cuda_device_count() noexcept { return 0; }
std::string cuda_unavailable_reason() { return "stoker was built without CUDA"; }
void require_cuda_device(const char* who) { no_cuda(who); }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
std::string cuda_device_description() { no_cuda("cuda_device_description"); }
DeviceMemoryInfo device_memory_info() { no_cuda("device_memory_info"); }

Stream::Stream() { no_cuda("Stream"); }
Stream::~Stream() = default;
Stream& Stream::operator=(Stream&& other) noexcept {
  s_ = std::exchange(other.s_, nullptr);
  return *this;
}
void Stream::wait(const Event&) const { no_cuda("Stream::wait"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::idle() const { return true; }

Event::Event(bool) { no_cuda("Event"); }
Event::~Event() = default;
Event& Event::operator=(Event&& other) noexcept {
  e_ = std::exchange(other.e_, nullptr);
  return *this;
}
void Event::record(StreamHandle) const { no_cuda("Event::record"); }
bool Event::done() const { return true; }
void Event::synchronize() const {}
void event_synchronize(EventHandle) { no_cuda("event_synchronize"); }
float Event::elapsed_ms(const Event&, const Event&) { no_cuda("Event::elapsed_ms"); }
float elapsed_ms(EventHandle, EventHandle) { no_cuda("elapsed_ms"); }
void stream_wait(StreamHandle, EventHandle) { no_cuda("stream_wait"); }
void stream_synchronize(StreamHandle) { no_cuda("stream_synchronize"); }

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what) {
  if (bytes != 0) no_cuda(what);
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::reset() noexcept {
  p_ = nullptr;
  bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  p_ = std::exchange(other.p_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
PinnedBuffer::PinnedBuffer(std::size_t, const char* what) { no_cuda(what); }
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  p_ = std::exchange(other.p_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
void* PinnedHostAllocator::allocate(std::size_t) { no_cuda("pinned batch buffers"); }
void PinnedHostAllocator::deallocate(void*, std::size_t) noexcept {}
void copy_to_device_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("copy_to_device_async"); }
void copy_to_host_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("copy_to_host_async"); }
void memset_device_async(void*, int, std::size_t, StreamHandle) { no_cuda("memset_device_async"); }
void check_launch(const char* kernel, const char*, int) { no_cuda(kernel); }

#endif

}  // namespace stoker
