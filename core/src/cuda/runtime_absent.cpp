// The runtime behind cuda.hpp in a build without CUDA: nothing that needs a GPU works, and each
// entry point says so with a CudaError ("... built without CUDA"), except the queries, which
// answer that there is no device. Nothing aborts.
#include <string>

#include "runtime.hpp"
#include "stoker/core/cuda.hpp"

namespace stoker {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw CudaError(std::string(what) +
                      ": stoker was built without CUDA (configure with a CUDA toolkit, "
                      "STOKER_CUDA=ON); the CPU path is still available",
                  -1);
}

}  // namespace

bool built_with_cuda() noexcept { return false; }
bool cuda_is_emulated() noexcept { return false; }

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

void event_synchronize(EventHandle) { no_cuda("event_synchronize"); }
float elapsed_ms(EventHandle, EventHandle) { no_cuda("elapsed_ms"); }
void stream_wait(StreamHandle, EventHandle) { no_cuda("stream_wait"); }
void stream_synchronize(StreamHandle) { no_cuda("stream_synchronize"); }
void copy_to_device_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("copy_to_device_async"); }
void copy_to_host_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("copy_to_host_async"); }
void memset_device_async(void*, int, std::size_t, StreamHandle) { no_cuda("memset_device_async"); }
void check_launch(const char* kernel, const char*, int) { no_cuda(kernel); }

// The owners can never hold a handle or a pointer here: creating one throws.
StreamHandle runtime::create_stream() { no_cuda("Stream"); }
void runtime::destroy_stream(StreamHandle) noexcept {}
bool runtime::stream_idle(StreamHandle) { return true; }
EventHandle runtime::create_event(bool) { no_cuda("Event"); }
void runtime::destroy_event(EventHandle) noexcept {}
void runtime::record_event(EventHandle, StreamHandle) { no_cuda("Event::record"); }
bool runtime::event_done(EventHandle) { return true; }
void* runtime::device_alloc(std::size_t) { no_cuda("device memory"); }
void runtime::device_free(void*, std::size_t) noexcept {}
void* runtime::pinned_alloc(std::size_t) { no_cuda("pinned host memory"); }
void runtime::pinned_free(void*) noexcept {}

}  // namespace stoker
