// The CUDA runtime behind cuda.hpp (STOKER_HAVE_CUDA): the seam of runtime.hpp and the free
// functions, compiled by the host compiler.
#include <cuda_runtime_api.h>

#include <string>

#include "runtime.hpp"
#include "stoker/core/cuda.hpp"

namespace stoker {

namespace {

std::string hint(cudaError_t code) {
  switch (code) {
    case cudaErrorNoDevice: return " (no CUDA-capable GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    case cudaErrorInsufficientDriver: {
      int driver = 0, runtime_version = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime_version);
      if (driver == 0) {
        return " (no NVIDIA driver is installed: libcuda.so.1 could not be loaded, so this machine has no usable "
               "GPU)";
      }
      return " (the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." +
             std::to_string(driver % 1000 / 10) + " but stoker was built with CUDA runtime " +
             std::to_string(runtime_version / 1000) + "." + std::to_string(runtime_version % 1000 / 10) +
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
  cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed for it
  runtime::throw_failure(code, call, file, line);
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
  if (const std::string lost = cuda_context_lost_reason(); !lost.empty()) {
    return "the CUDA context is unusable since " + lost;
  }
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
  runtime::require_usable_context(who);
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
  int driver = 0, runtime_version = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime_version);
  return std::string(prop.name) + ", " + runtime::gib(prop.totalGlobalMem) + ", sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, driver " +
         std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", runtime " +
         std::to_string(runtime_version / 1000) + "." + std::to_string(runtime_version % 1000 / 10);
}

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo m;
  STOKER_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

bool built_with_cuda() noexcept { return true; }
bool cuda_is_emulated() noexcept { return false; }

void stream_synchronize(StreamHandle stream) { STOKER_CUDA_CHECK(cudaStreamSynchronize(stream)); }
void stream_wait(StreamHandle stream, EventHandle event) { STOKER_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0)); }
void event_synchronize(EventHandle event) { STOKER_CUDA_CHECK(cudaEventSynchronize(event)); }
float elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0.0f;
  STOKER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  return ms;
}

// ---- the seam (runtime.hpp) ------------------------------------------------------------------------

StreamHandle runtime::create_stream() {
  cudaStream_t s = nullptr;
  STOKER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void runtime::destroy_stream(StreamHandle stream) noexcept { cudaStreamDestroy(stream); }
bool runtime::stream_idle(StreamHandle stream) {
  const cudaError_t e = cudaStreamQuery(stream);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // the answer may stay as the thread's last error: a launch check would report it
    return false;
  }
  STOKER_CUDA_CHECK(e);
  return true;
}

EventHandle runtime::create_event(bool timing) {
  cudaEvent_t e = nullptr;
  STOKER_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
void runtime::destroy_event(EventHandle event) noexcept { cudaEventDestroy(event); }
void runtime::record_event(EventHandle event, StreamHandle stream) {
  STOKER_CUDA_CHECK(cudaEventRecord(event, stream));
}
bool runtime::event_done(EventHandle event) {
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // as in stream_idle
    return false;
  }
  STOKER_CUDA_CHECK(e);
  return true;
}

void* runtime::device_alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  STOKER_CUDA_CHECK(e);
  return p;
}
void runtime::device_free(void* p, std::size_t) noexcept { cudaFree(p); }

void* runtime::pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  STOKER_CUDA_CHECK(e);
  return p;
}
void runtime::pinned_free(void* p) noexcept { cudaFreeHost(p); }

// ---- copies ----------------------------------------------------------------------------------------

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

}  // namespace stoker
