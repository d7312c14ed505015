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
//
// Also kept: the current device is per host thread (STOKER_EMULATED_DEVICES devices, default 1);
// streams and events belong to the device current at their creation, and the default streams
// (null / cudaStreamLegacy, cudaStreamPerThread) to the device current at each use; each thread
// has its own per-thread default stream, and the legacy default stream orders itself after the
// work of every per-thread default stream of its device, and they after it. The last error is
// per host thread: failing calls, queries answering cudaErrorNotReady and launches with a bad
// configuration leave their code there, and cudaGetLastError (cuda_check, check_launch) reads and
// clears it. A launch can be made to fault (emulation::fail_next_launch, STOKER_EMULATED_FAULT):
// an error such as cudaErrorIllegalAddress then shows at the calls after it, and every later call
// of the process answers it, as on a GPU.
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
#include <set>
#include <string>
#include <thread>
#include <vector>

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
  const int device;  // current when it was created
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::uint64_t pushed = 0, finished = 0;  // operations queued and run so far
  bool stopping = false;
  std::thread worker;

  explicit CUstream_st(int dev) : device(dev), worker([this] { loop(); }) {}
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
  int device = 0;  // current when it was created
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
constexpr int kSuccess = 0, kInvalidValue = 1, kMemoryAllocation = 2, kInvalidConfiguration = 9,
              kInsufficientDriver = 35, kNoDevice = 100, kInvalidDevice = 101, kInvalidResourceHandle = 400,
              kNotReady = 600;

const char* error_name(int code) {
  switch (code) {
    case kSuccess: return "cudaSuccess";
    case kInvalidValue: return "cudaErrorInvalidValue";
    case kMemoryAllocation: return "cudaErrorMemoryAllocation";
    case kInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case kInsufficientDriver: return "cudaErrorInsufficientDriver";
    case kNoDevice: return "cudaErrorNoDevice";
    case kInvalidDevice: return "cudaErrorInvalidDevice";
    case kInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case kNotReady: return "cudaErrorNotReady";
    case 700: return "cudaErrorIllegalAddress";
    case 710: return "cudaErrorAssert";
    case 714: return "cudaErrorHardwareStackError";
    case 715: return "cudaErrorIllegalInstruction";
    case 716: return "cudaErrorMisalignedAddress";
    case 719: return "cudaErrorLaunchFailure";
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

int device_count() {
  static const int n = [] {
    const char* env = std::getenv("STOKER_EMULATED_DEVICES");
    return env && *env ? std::clamp(std::atoi(env), 1, 16) : 1;
  }();
  return n;
}

// ---- errors ----------------------------------------------------------------------------------------

thread_local int t_last_error = kSuccess;  // cudaGetLastError's, per host thread
thread_local int t_device = 0;             // cudaGetDevice's, per host thread
std::atomic<int> g_fault{0};               // the fault the device hit: every later call answers it

// The next launch (or the launch-th, STOKER_EMULATED_FAULT=code@n) faults with the code armed here.
std::mutex g_arm_mutex;
int g_armed_code = 0;
long long g_armed_countdown = 0;
bool g_armed_from_env = false;

// cudaGetLastError: the thread's last error, cleared; after a fault the fault, which stays.
int take_last_error() {
  const int e = std::exchange(t_last_error, kSuccess);
  const int fault = g_fault.load();
  return fault ? fault : e;
}

// A failing call: its code stays as the thread's last error, as the runtime does, and is answered.
#define STOKER_EMULATED_FAIL(code, call) \
  (t_last_error = (code), ::stoker::cuda_check((code), (call), __FILE__, __LINE__))
// After a fault, every call answers it.
#define STOKER_EMULATED_CALL(call)                                             \
  do {                                                                         \
    if (const int fault_ = g_fault.load()) STOKER_EMULATED_FAIL(fault_, call); \
  } while (0)

// ---- streams -----------------------------------------------------------------------------------------

// Created streams that are not destroyed: a launch on another handle fails as CUDA's does.
std::mutex g_streams_mutex;
std::set<const CUstream_st*> g_live_streams;

// The legacy default stream of each device, and the per-thread default streams (all threads):
// work on the former waits for the work queued before on the latter, and the other way round.
std::mutex g_default_mutex;
std::vector<CUstream_st*> g_per_thread_streams;

CUstream_st& legacy_stream(int device) {
  static std::vector<std::unique_ptr<CUstream_st>> streams = [] {
    std::vector<std::unique_ptr<CUstream_st>> v;
    for (int d = 0; d < device_count(); ++d) v.push_back(std::make_unique<CUstream_st>(d));
    return v;
  }();
  return *streams[static_cast<std::size_t>(device)];
}

// This thread's default streams, one per device, made when first used; ended with the thread.
struct PerThreadStreams {
  std::vector<std::unique_ptr<CUstream_st>> by_device;
  PerThreadStreams() {
    legacy_stream(0);  // the legacy streams outlive every thread's own (static destruction order)
  }
  ~PerThreadStreams() {
    {
      std::lock_guard lock(g_default_mutex);
      for (const auto& s : by_device) {
        if (s) std::erase(g_per_thread_streams, s.get());
      }
    }
    by_device.clear();  // runs what they hold, then ends their workers
  }
  CUstream_st& get(int device) {
    if (by_device.empty()) by_device.resize(static_cast<std::size_t>(device_count()));
    auto& s = by_device[static_cast<std::size_t>(device)];
    if (!s) {
      s = std::make_unique<CUstream_st>(device);
      std::lock_guard lock(g_default_mutex);
      g_per_thread_streams.push_back(s.get());
    }
    return *s;
  }
};
thread_local PerThreadStreams t_streams;

enum class StreamKind { Legacy, PerThread, Created };
StreamKind kind_of(StreamHandle s) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  return v <= 1 ? StreamKind::Legacy : v == 2 ? StreamKind::PerThread : StreamKind::Created;
}
bool is_live(StreamHandle s) {
  std::lock_guard lock(g_streams_mutex);
  return g_live_streams.count(s) != 0;
}

// The stream a handle names now (the default streams: of the thread's current device).
CUstream_st& stream_of(StreamHandle s) {
  switch (kind_of(s)) {
    case StreamKind::Legacy: return legacy_stream(t_device);
    case StreamKind::PerThread: return t_streams.get(t_device);
    case StreamKind::Created: break;
  }
  return *s;
}
int device_of(StreamHandle s) { return kind_of(s) == StreamKind::Created ? s->device : t_device; }

// A point of `stream`'s work: completed when what was queued before it has run.
std::shared_ptr<Ticket> mark(CUstream_st& stream) {
  auto t = std::make_shared<Ticket>();
  stream.push([t] { t->complete(); });
  return t;
}

// Queues `op` in stream order, with the default streams' implicit ordering.
void queue_op(StreamHandle stream, std::function<void()> op) {
  switch (kind_of(stream)) {
    case StreamKind::Created: stream->push(std::move(op)); return;
    case StreamKind::Legacy: {
      CUstream_st& legacy = legacy_stream(t_device);
      std::lock_guard lock(g_default_mutex);
      std::vector<std::shared_ptr<Ticket>> before;
      for (CUstream_st* s : g_per_thread_streams) {
        if (s->device == legacy.device) before.push_back(mark(*s));
      }
      if (!before.empty()) {
        legacy.push([before] {
          for (const auto& t : before) t->wait();
        });
      }
      legacy.push(std::move(op));
      return;
    }
    case StreamKind::PerThread: {
      CUstream_st& own = t_streams.get(t_device);
      std::lock_guard lock(g_default_mutex);
      own.push([t = mark(legacy_stream(t_device))] { t->wait(); });
      own.push(std::move(op));
      return;
    }
  }
}

// A call on a stream: a destroyed one is an invalid handle.
void check_stream(StreamHandle stream, const char* call) {
  if (kind_of(stream) == StreamKind::Created && !is_live(stream)) STOKER_EMULATED_FAIL(kInvalidResourceHandle, call);
}

void* host_block(std::size_t bytes) {
  constexpr std::size_t kAlign = 256;  // cudaMalloc's alignment
  return std::aligned_alloc(kAlign, (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
}

// Arms STOKER_EMULATED_FAULT ("700" or "700@3": the third launch) once, at the first launch.
void arm_from_environment() {
  if (g_armed_from_env) return;
  g_armed_from_env = true;
  const char* env = std::getenv("STOKER_EMULATED_FAULT");
  if (!env || !*env) return;
  g_armed_code = std::atoi(env);
  const char* at = std::strchr(env, '@');
  g_armed_countdown = at ? std::max(1LL, std::atoll(at + 1)) : 1;
}

// True when this launch is the one armed to fault; then `code` is its error.
bool launch_faults(int& code) {
  std::lock_guard lock(g_arm_mutex);
  arm_from_environment();
  if (g_armed_code == 0 || --g_armed_countdown > 0) return false;
  code = std::exchange(g_armed_code, 0);
  return true;
}

}  // namespace

namespace emulation {
void launch(StreamHandle stream, std::function<void()> kernel) { launch(stream, {}, {}, std::move(kernel)); }

void launch(StreamHandle stream, Dim grid, Dim block, std::function<void()> kernel) {
  // A launch does not fail by itself: it leaves its error as the thread's last error and queues
  // nothing, and STOKER_CUDA_CHECK_LAUNCH reports it.
  if (const int fault = g_fault.load()) {
    t_last_error = fault;
    return;
  }
  const unsigned long long threads = 1ULL * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    t_last_error = kInvalidConfiguration;
    return;
  }
  if (kind_of(stream) == StreamKind::Created && !is_live(stream)) {
    t_last_error = kInvalidResourceHandle;
    return;
  }
  int code = 0;
  if (launch_faults(code)) {
    // The kernel does not run; its fault shows at the calls after it, as a GPU's does.
    queue_op(stream, [code] { g_fault.store(code); });
    return;
  }
  queue_op(stream, [k = std::move(kernel)] {
    if (g_fault.load() == 0) k();  // a faulted device runs nothing more
  });
}

void fail_next_launch(int code) {
  std::lock_guard lock(g_arm_mutex);
  arm_from_environment();
  g_armed_code = code;
  g_armed_countdown = 1;
}

void reset_after_fault() {
  {
    std::lock_guard lock(g_arm_mutex);
    g_armed_code = 0;
  }
  g_fault.store(0);
  t_last_error = kSuccess;
  runtime::forget_lost_context();
}
}  // namespace emulation

std::string cuda_error_message(int code, const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + error_name(code) + " (" +
         std::to_string(code) + "): emulated CUDA runtime" + hint(code);
}

void cuda_check(int code, const char* call, const char* file, int line) {
  if (code == kSuccess) return;
  take_last_error();  // as the CUDA runtime's cuda_check does
  runtime::throw_failure(code, call, file, line);
}

bool built_with_cuda() noexcept { return true; }
bool cuda_is_emulated() noexcept { return true; }
int cuda_device_count() noexcept { return device_count(); }
std::string cuda_unavailable_reason() {
  const std::string lost = cuda_context_lost_reason();
  return lost.empty() ? "" : "the CUDA context is unusable since " + lost;
}
void require_cuda_device(const char* who) { runtime::require_usable_context(who); }
int current_device() {
  STOKER_EMULATED_CALL("cudaGetDevice");
  return t_device;
}
void set_device(int device) {
  STOKER_EMULATED_CALL("cudaSetDevice");
  if (device < 0 || device >= device_count()) STOKER_EMULATED_FAIL(kInvalidDevice, "cudaSetDevice");
  t_device = device;
}
std::string cuda_device_description() {
  return "emulated CUDA device " + std::to_string(t_device) +
         " on the host (STOKER_CUDA_EMULATION; no GPU: timings are the host's), " + runtime::gib(device_capacity());
}
DeviceMemoryInfo device_memory_info() {
  STOKER_EMULATED_CALL("cudaMemGetInfo");
  const std::size_t used = g_device_used.load();
  return {device_capacity() - std::min(used, device_capacity()), device_capacity()};
}

void stream_synchronize(StreamHandle stream) {
  check_stream(stream, "cudaStreamSynchronize");
  stream_of(stream).synchronize();
  STOKER_EMULATED_CALL("cudaStreamSynchronize");  // a fault of the work waited for shows here
}

void event_synchronize(EventHandle event) {
  if (!event) STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaEventSynchronize");
  if (const auto t = event->ticket()) t->wait();
  STOKER_EMULATED_CALL("cudaEventSynchronize");
}
float elapsed_ms(EventHandle start, EventHandle end) {
  STOKER_EMULATED_CALL("cudaEventElapsedTime");
  if (!start || !end || !start->timing || !end->timing)
    STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaEventElapsedTime");
  const auto a = start->ticket(), b = end->ticket();
  if (!a || !b) STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaEventElapsedTime");
  if (!a->is_done() || !b->is_done()) STOKER_EMULATED_FAIL(kNotReady, "cudaEventElapsedTime");
  return std::chrono::duration<float, std::milli>(b->when - a->when).count();
}

void stream_wait(StreamHandle stream, EventHandle event) {
  STOKER_EMULATED_CALL("cudaStreamWaitEvent");
  if (!event) STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaStreamWaitEvent");
  check_stream(stream, "cudaStreamWaitEvent");
  // The point recorded now; a later record of the same event does not change what this waits for.
  if (const auto t = event->ticket()) queue_op(stream, [t] { t->wait(); });
}

// ---- the seam (runtime.hpp) ------------------------------------------------------------------------

StreamHandle runtime::create_stream() {
  STOKER_EMULATED_CALL("cudaStreamCreateWithFlags");
  auto* s = new CUstream_st(t_device);
  std::lock_guard lock(g_streams_mutex);
  g_live_streams.insert(s);
  return s;
}
void runtime::destroy_stream(StreamHandle stream) noexcept {
  {
    std::lock_guard lock(g_streams_mutex);
    g_live_streams.erase(stream);
  }
  delete stream;
}
bool runtime::stream_idle(StreamHandle stream) {
  STOKER_EMULATED_CALL("cudaStreamQuery");
  check_stream(stream, "cudaStreamQuery");
  if (stream_of(stream).idle()) return true;
  t_last_error = kNotReady;  // the runtime may leave a query's answer as the last error
  take_last_error();         // so it is cleared, or the next launch check would report it
  return false;
}

EventHandle runtime::create_event(bool timing) {
  STOKER_EMULATED_CALL("cudaEventCreateWithFlags");
  auto* e = new CUevent_st;
  e->timing = timing;
  e->device = t_device;
  return e;
}
void runtime::destroy_event(EventHandle event) noexcept { delete event; }
void runtime::record_event(EventHandle event, StreamHandle stream) {
  STOKER_EMULATED_CALL("cudaEventRecord");
  if (!event) STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaEventRecord");
  check_stream(stream, "cudaEventRecord");
  // An event and the stream it is recorded on belong to one device.
  if (device_of(stream) != event->device) STOKER_EMULATED_FAIL(kInvalidResourceHandle, "cudaEventRecord");
  auto t = std::make_shared<Ticket>();
  {
    std::lock_guard lock(event->m);
    event->latest = t;
  }
  queue_op(stream, [t] { t->complete(); });
}
bool runtime::event_done(EventHandle event) {
  STOKER_EMULATED_CALL("cudaEventQuery");
  const auto t = event->ticket();
  if (!t || t->is_done()) return true;
  t_last_error = kNotReady;  // as in stream_idle
  take_last_error();
  return false;
}

// Device memory is host memory counted against the emulated capacity.
void* runtime::device_alloc(std::size_t bytes) {
  STOKER_EMULATED_CALL("cudaMalloc");
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
void* runtime::pinned_alloc(std::size_t bytes) {
  STOKER_EMULATED_CALL("cudaHostAlloc");
  return host_block(bytes);
}
void runtime::pinned_free(void* p) noexcept { std::free(p); }

// ---- copies ----------------------------------------------------------------------------------------

void copy_to_device_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  STOKER_EMULATED_CALL("cudaMemcpyAsync");
  check_stream(stream, "cudaMemcpyAsync");
  queue_op(stream, [=] { std::memcpy(dst, src, bytes); });
}
void copy_to_host_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  STOKER_EMULATED_CALL("cudaMemcpyAsync");
  check_stream(stream, "cudaMemcpyAsync");
  queue_op(stream, [=] { std::memcpy(dst, src, bytes); });
}
void memset_device_async(void* dst, int value, std::size_t bytes, StreamHandle stream) {
  STOKER_EMULATED_CALL("cudaMemsetAsync");
  check_stream(stream, "cudaMemsetAsync");
  queue_op(stream, [=] { std::memset(dst, value, bytes); });
}
void check_launch(const char* kernel, const char* file, int line) {
  const int e = take_last_error();  // cudaGetLastError
  if (e != kSuccess) cuda_check(e, (std::string("launch of ") + kernel).c_str(), file, line);
}

}  // namespace stoker
