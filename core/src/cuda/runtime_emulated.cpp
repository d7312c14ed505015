// The CUDA runtime subset of cuda.hpp emulated on the host (STOKER_CUDA_EMULATION; the runtime
// behind runtime.hpp in place of runtime_cuda.cpp). It exists so that the GPU feed's and the
// CUDA executor's host logic — stream order, events, slot reuse, epochs, shutdown, memory
// accounting — runs in CI on machines without a GPU, under the sanitizers. Not a performance
// model and not a check of device code: kernels run as host functions (emulation::launch), and
// "device" memory is host memory.
//
// Semantics kept from CUDA: each stream runs its operations in order on its own worker thread,
// concurrently with the host and with other streams; an event records the point its stream has
// reached when record() was called, and a stream told to wait on it waits for that point only
// (a later record does not move it); the legacy default stream (null) is one more stream; device
// memory has a fixed capacity (STOKER_EMULATED_DEVICE_MIB, default 4096) and running out throws
// BadAlloc as cudaMalloc's failure does.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/detail/cuda_emulation.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The completion of one point in a stream's work.
struct Ticket {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point when;

  void complete() {
    {
      std::lock_guard lock(m);
      done = true;
      when = Clock::now();
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard lock(m);
    return done;
  }
};

}  // namespace

// The handle types cuda.hpp declares: a stream is a queue with a worker thread; an event holds
// the ticket of its latest record.
struct CUstream_st {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::uint64_t pushed = 0, finished = 0;  // operations queued and run so far
  bool stopping = false;
  std::thread worker;

  CUstream_st() : worker([this] { loop(); }) {}
  ~CUstream_st() {  // runs what is queued, then ends
    {
      std::lock_guard lock(m);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard lock(m);
      queue.push_back(std::move(op));
      ++pushed;
    }
    cv.notify_all();
  }
  // cudaStreamSynchronize: waits for what was queued before the call, not for later work.
  void synchronize() {
    std::unique_lock lock(m);
    const std::uint64_t target = pushed;
    cv.wait(lock, [&] { return finished >= target; });
  }
  bool idle() {
    std::lock_guard lock(m);
    return finished == pushed;
  }

 private:
  void loop() {
    std::unique_lock lock(m);
    for (;;) {
      cv.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) return;  // stopping, and everything ran
      std::function<void()> op = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      op();
      lock.lock();
      ++finished;
      cv.notify_all();
    }
  }
};

struct CUevent_st {
  std::mutex m;
  std::shared_ptr<Ticket> latest;  // null: never recorded
  bool timing = false;

  std::shared_ptr<Ticket> ticket() {
    std::lock_guard lock(m);
    return latest;
  }
};

namespace stoker {
namespace {

// The CUDA error codes this emulation reports, with the runtime's names.
constexpr int kSuccess = 0, kInvalidValue = 1, kMemoryAllocation = 2, kInsufficientDriver = 35, kNoDevice = 100,
              kInvalidDevice = 101, kInvalidResourceHandle = 400, kNotReady = 600;

const char* error_name(int code) {
  switch (code) {
    case kSuccess: return "cudaSuccess";
    case kInvalidValue: return "cudaErrorInvalidValue";
    case kMemoryAllocation: return "cudaErrorMemoryAllocation";
    case kInsufficientDriver: return "cudaErrorInsufficientDriver";
    case kNoDevice: return "cudaErrorNoDevice";
    case kInvalidDevice: return "cudaErrorInvalidDevice";
    case kInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case kNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}

std::string hint(int code) {
  switch (code) {
    case kNoDevice: return " (no CUDA-capable GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    case kInsufficientDriver: return " (the NVIDIA driver is missing or older than the runtime)";
    case kMemoryAllocation: return " (out of device or pinned host memory)";
    default: return "";
  }
}

std::size_t device_capacity() {
  static const std::size_t bytes = [] {
    const char* env = std::getenv("STOKER_EMULATED_DEVICE_MIB");
    const long long mib = env && *env ? std::atoll(env) : 4096;
    return static_cast<std::size_t>(std::max(1LL, mib)) << 20;
  }();
  return bytes;
}
std::atomic<std::size_t> g_device_used{0};

CUstream_st& stream_of(StreamHandle s) {
  static CUstream_st legacy_default;
  return s ? *s : legacy_default;
}

void* host_block(std::size_t bytes) {
  constexpr std::size_t kAlign = 256;  // cudaMalloc's alignment
  return std::aligned_alloc(kAlign, (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
}

// A queued copy or memset, as the runtime does it: in stream order.
void queue_op(StreamHandle stream, std::function<void()> op) { stream_of(stream).push(std::move(op)); }

}  // namespace

namespace emulation {
void launch(StreamHandle stream, std::function<void()> kernel) { queue_op(stream, std::move(kernel)); }
}  // namespace emulation

std::string cuda_error_message(int code, const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + error_name(code) + " (" +
         std::to_string(code) + "): emulated CUDA runtime" + hint(code);
}

void cuda_check(int code, const char* call, const char* file, int line) {
  if (code == kSuccess) return;
  if (code == kMemoryAllocation) throw BadAlloc(cuda_error_message(code, call, file, line));
  throw CudaError(cuda_error_message(code, call, file, line), code);
}

bool built_with_cuda() noexcept { return true; }
bool cuda_is_emulated() noexcept { return true; }
int cuda_device_count() noexcept { return 1; }
std::string cuda_unavailable_reason() { return ""; }
void require_cuda_device(const char*) {}
int current_device() { return 0; }
void set_device(int device) {
  if (device != 0) STOKER_CUDA_CHECK(kInvalidDevice);
}
std::string cuda_device_description() {
  return "emulated CUDA device on the host (STOKER_CUDA_EMULATION; no GPU: timings are the host's), " +
         runtime::gib(device_capacity());
}
DeviceMemoryInfo device_memory_info() {
  const std::size_t used = g_device_used.load();
  return {device_capacity() - std::min(used, device_capacity()), device_capacity()};
}

void stream_synchronize(StreamHandle stream) { stream_of(stream).synchronize(); }

void event_synchronize(EventHandle event) {
  if (!event) STOKER_CUDA_CHECK(kInvalidResourceHandle);
  if (const auto t = event->ticket()) t->wait();
}
float elapsed_ms(EventHandle start, EventHandle end) {
  if (!start || !end || !start->timing || !end->timing) STOKER_CUDA_CHECK(kInvalidResourceHandle);
  const auto a = start->ticket(), b = end->ticket();
  if (!a || !b) STOKER_CUDA_CHECK(kInvalidResourceHandle);
  if (!a->is_done() || !b->is_done()) STOKER_CUDA_CHECK(kNotReady);
  return std::chrono::duration<float, std::milli>(b->when - a->when).count();
}

void stream_wait(StreamHandle stream, EventHandle event) {
  if (!event) STOKER_CUDA_CHECK(kInvalidResourceHandle);
  // The point recorded now; a later record of the same event does not change what this waits for.
  if (const auto t = event->ticket()) stream_of(stream).push([t] { t->wait(); });
}

// ---- the seam (runtime.hpp) ------------------------------------------------------------------------

StreamHandle runtime::create_stream() { return new CUstream_st; }
void runtime::destroy_stream(StreamHandle stream) noexcept { delete stream; }
bool runtime::stream_idle(StreamHandle stream) { return stream_of(stream).idle(); }

EventHandle runtime::create_event(bool timing) {
  auto* e = new CUevent_st;
  e->timing = timing;
  return e;
}
void runtime::destroy_event(EventHandle event) noexcept { delete event; }
void runtime::record_event(EventHandle event, StreamHandle stream) {
  if (!event) STOKER_CUDA_CHECK(kInvalidResourceHandle);
  auto t = std::make_shared<Ticket>();
  {
    std::lock_guard lock(event->m);
    event->latest = t;
  }
  stream_of(stream).push([t] { t->complete(); });
}
bool runtime::event_done(EventHandle event) {
  const auto t = event->ticket();
  return !t || t->is_done();
}

// Device memory is host memory counted against the emulated capacity.
void* runtime::device_alloc(std::size_t bytes) {
  const std::size_t before = g_device_used.fetch_add(bytes);
  void* p = nullptr;
  if (before + bytes > device_capacity() || before + bytes < before || !(p = host_block(bytes))) {
    g_device_used.fetch_sub(bytes);
    return nullptr;
  }
  return p;
}
void runtime::device_free(void* p, std::size_t bytes) noexcept {
  std::free(p);
  g_device_used.fetch_sub(bytes);
}
void* runtime::pinned_alloc(std::size_t bytes) { return host_block(bytes); }
void runtime::pinned_free(void* p) noexcept { std::free(p); }

// ---- copies ----------------------------------------------------------------------------------------

void copy_to_device_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  queue_op(stream, [=] { std::memcpy(dst, src, bytes); });
}
void copy_to_host_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  queue_op(stream, [=] { std::memcpy(dst, src, bytes); });
}
void memset_device_async(void* dst, int value, std::size_t bytes, StreamHandle stream) {
  queue_op(stream, [=] { std::memset(dst, value, bytes); });
}
void check_launch(const char*, const char*, int) {}  // emulated launches cannot fail later

}  // namespace stoker
