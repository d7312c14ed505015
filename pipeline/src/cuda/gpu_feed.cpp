// GpuFeed: the feeder thread, the ring of device slots and the DeviceBatch handles (gpu_feed.hpp).
// Only the wrappers of cuda.hpp touch the runtime, so this file builds without CUDA (the
// constructor then throws "built without CUDA").
//
// Slot life: Free → (feeder) copy on the copy stream after the slot's `reusable` event, `copied`
// event, stage on the stage stream, `ready` event → Ready (queued for next()) → Held by a
// DeviceBatch → release records `reusable` on the consumer's stream → Free.
#include "stoker/pipeline/gpu_feed.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../polled_wait.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
constexpr std::size_t kAlign = 256;
std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string mib(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes / (1024 * 1024)) + " MiB)";
}

}  // namespace

namespace detail {

struct FeedSlot {
  DeviceBuffer input;                 // uint8 batch as the loader made it
  DeviceBuffer output;                // the stage's output (empty without a stage)
  DeviceBuffer meta;                  // sample ids (int64) then labels (float)
  PinnedBuffer meta_host;             // staging of meta; also the DeviceBatch's host copies
  std::vector<std::uint8_t> padding;  // host only: the loader's Batch::padding()
  Event copied;                       // copy stream: pixels + meta are on the device
  Event ready;                        // the consumer waits on this (stage done, or = copied)
  Event reusable;                     // recorded at release: the consumer's work on the slot is done
  std::unique_ptr<DeviceStageSlot> stage;
  std::unique_ptr<Event> copy_start, copy_end;  // timing (GpuFeedOptions::record_copy_timing)
  // Last stream given to wait_on. A flag, not a null check: null is the legacy default stream, a
  // valid consumer stream. The thread that gave it: a per-thread default stream is that thread's.
  StreamHandle consumer = nullptr;
  bool has_consumer = false;
  std::thread::id reader;
  int size = 0;
  std::uint64_t epoch = 0;
  std::int64_t index = 0;
};

// One entry of the delivery queue: a filled slot, the end of the epoch, or an error.
struct Delivery {
  int slot = -1;
  bool end = false;
  std::exception_ptr error;
};

class FeedCore : public std::enable_shared_from_this<FeedCore> {
 public:
  FeedCore(Dataset dataset, LoaderOptions loader, GpuFeedOptions options);
  ~FeedCore();

  void start();  // the feeder thread (after shared ownership exists)
  // From the epoch's first batch, or (resume) from the state's next batch of its epoch. With
  // `while_waiting`, the waits call it about every `interval` without the lock (GpuFeed's overloads).
  void begin_epoch(std::uint64_t epoch, const LoaderState* resume = nullptr,
                   const std::function<void()>& while_waiting = {}, std::chrono::milliseconds interval = {});
  LoaderState state() const;
  std::optional<DeviceBatch> next(const std::function<void()>& while_waiting = {},
                                  std::chrono::milliseconds interval = {});
  // `given`: record the slot's reuse event on `consumer` (null = the legacy default stream);
  // otherwise on the last wait_on stream, or after the feed's own work.
  void release(int slot, StreamHandle consumer, bool given) noexcept;
  void shutdown();
  bool idle() const { return copy_.idle() && stage_.idle(); }

  // A default stream (null, per-thread) names the current device's: the feed's device is made
  // current while it is used (DeviceGuard on this), and the caller's given back after.
  int device_for(StreamHandle stream) const { return is_default_stream(stream) ? device_ : -1; }

  // First, so that no stream is created before the device is known to be usable.
  bool device_checked_ = (require_cuda_device("GpuFeed"), true);
  GpuFeedOptions options_;
  std::unique_ptr<Loader> loader_;
  std::shared_ptr<PinnedHostAllocator> pinned_;
  int device_ = 0;
  int batch_size_ = 0;  // samples a slot holds: the loader's batch_capacity()
  int label_width_ = 0;
  SampleShape in_shape_, out_shape_;
  std::size_t in_bytes_ = 0, out_bytes_ = 0, meta_bytes_ = 0, workspace_bytes_ = 0, slot_bytes_ = 0;
  std::size_t device_bytes_ = 0, staging_bytes_ = 0;
  std::string budget_note_;
  Stream copy_, stage_;
  std::vector<std::unique_ptr<FeedSlot>> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> free_;
  std::deque<Delivery> ready_;
  int held_ = 0;
  bool active_ = false;     // an epoch is being fed
  bool exhausted_ = false;  // the loader said the epoch is over (or failed)
  bool ended_ = false;      // next() saw the end
  // Batches of this epoch: what the loader will deliver, and what next() has handed out. The
  // feeder needs a free slot to learn from the loader that the epoch is over; when the consumer
  // holds every slot after the last batch, these counts tell next() instead.
  std::size_t epoch_batches_ = 0, delivered_ = 0;
  bool busy_ = false;  // the feeder is working outside the lock
  bool stop_ = false;
  bool stopped_ = false;
  std::uint64_t generation_ = 0;
  std::exception_ptr fatal_;  // the feeder could not start (cudaSetDevice): every call rethrows it
  std::uint64_t batches_ = 0, bytes_ = 0;
  double consumer_wait_ = 0, feeder_wait_ = 0;

 private:
  void feeder();
  void submit(FeedSlot& s, const Batch& host);
  std::thread thread_;
};

FeedCore::FeedCore(Dataset dataset, LoaderOptions loader, GpuFeedOptions options) : options_(std::move(options)) {
  if (options_.depth < 1)
    throw InvalidArgument("GpuFeed: depth must be >= 1, received " + std::to_string(options_.depth));
  device_ = current_device();
  if (loader.allocator && std::strcmp(loader.allocator->name(), "pinned") != 0) {
    throw InvalidArgument(std::string("GpuFeed: the loader's allocator must give pinned memory, received '") +
                          loader.allocator->name() + "' (leave it unset: the feed supplies one)");
  }
  if (!loader.allocator) {
    pinned_ = std::make_shared<PinnedHostAllocator>();
    loader.allocator = pinned_;
  }
  loader_ = std::make_unique<Loader>(std::move(dataset), std::move(loader));
  batch_size_ = loader_->batch_capacity();  // the ring's slots hold what a host batch can
  in_shape_ = loader_->sample_shape();
  label_width_ = loader_->label_width();
  out_shape_ = options_.stage ? options_.stage->output_shape(in_shape_) : in_shape_;

  // What one slot needs, then the depth the budget allows, then the card.
  const auto b = static_cast<std::size_t>(batch_size_);
  in_bytes_ = round_up(in_shape_.bytes() * b);
  out_bytes_ = options_.stage ? round_up(out_shape_.bytes() * b) : 0;
  meta_bytes_ = round_up(b * sizeof(std::int64_t) + b * static_cast<std::size_t>(label_width_) * sizeof(float));
  workspace_bytes_ = options_.stage ? round_up(options_.stage->workspace_bytes(in_shape_, batch_size_)) : 0;
  slot_bytes_ = in_bytes_ + out_bytes_ + meta_bytes_ + workspace_bytes_;
  const std::string parts = " (pixels " + std::to_string(in_bytes_) + ", stage output " + std::to_string(out_bytes_) +
                            ", labels + ids " + std::to_string(meta_bytes_) + ", stage workspace " +
                            std::to_string(workspace_bytes_) + ")";
  int depth = options_.depth;
  if (options_.device_budget_bytes > 0) {
    if (options_.device_budget_bytes < slot_bytes_) {
      throw InvalidArgument("GpuFeed: a device budget of " + mib(options_.device_budget_bytes) +
                            " cannot hold one batch of " + std::to_string(batch_size_) + " x " +
                            std::to_string(in_shape_.height) + "x" + std::to_string(in_shape_.width) + "x" +
                            std::to_string(in_shape_.channels) + ": one slot needs " + mib(slot_bytes_) + parts);
    }
    const auto fits = static_cast<int>(std::min<std::size_t>(options_.device_budget_bytes / slot_bytes_, 1 << 20));
    if (fits < depth) {
      budget_note_ = "depth lowered from " + std::to_string(depth) + " to " + std::to_string(fits) +
                     " by the device budget of " + mib(options_.device_budget_bytes);
      depth = fits;
    }
  }
  device_bytes_ = slot_bytes_ * static_cast<std::size_t>(depth);
  const DeviceMemoryInfo mem = device_memory_info();
  if (device_bytes_ > mem.free) {
    throw BadAlloc("GpuFeed: the ring needs " + mib(device_bytes_) + " = " + std::to_string(depth) + " slots x " +
                   mib(slot_bytes_) + parts + ", but the device has " + mib(mem.free) + " free of " + mib(mem.total) +
                   "; lower depth or batch size");
  }
  for (int i = 0; i < depth; ++i) {
    auto s = std::make_unique<FeedSlot>();
    s->input = DeviceBuffer(in_bytes_, "the GpuFeed ring (pixels)");
    if (out_bytes_) s->output = DeviceBuffer(out_bytes_, "the GpuFeed ring (stage output)");
    s->meta = DeviceBuffer(meta_bytes_, "the GpuFeed ring (labels and ids)");
    s->meta_host = PinnedBuffer(meta_bytes_, "the GpuFeed label staging");
    s->padding.reserve(static_cast<std::size_t>(batch_size_));  // submit() does not allocate
    if (options_.stage) s->stage = options_.stage->make_slot(in_shape_, batch_size_);
    if (options_.record_copy_timing) {
      s->copy_start = std::make_unique<Event>(true);
      s->copy_end = std::make_unique<Event>(true);
    }
    slots_.push_back(std::move(s));
    free_.push_back(i);
  }
  staging_bytes_ = meta_bytes_ * static_cast<std::size_t>(depth);
}

FeedCore::~FeedCore() {
  try {
    shutdown();
  } catch (...) {
    // A failing stream at teardown (driver shutdown) must not escape a destructor.
  }
  // The last DeviceBatch may have been released just now with work still queued on its consumer
  // stream: the slots' memory is freed below only after that work (each slot's `reusable`).
  for (const auto& s : slots_) {
    try {
      s->reusable.synchronize();
    } catch (...) {}
  }
}

void FeedCore::start() {
  thread_ = std::thread([this] { feeder(); });
}

void FeedCore::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    ready_.clear();
    cv_.notify_all();
  }
  // The streams first: the loader's pinned batch buffers must outlive any copy still reading them.
  std::exception_ptr failed;
  try {
    copy_.synchronize();
    stage_.synchronize();
  } catch (...) {
    failed = std::current_exception();
  }
  loader_.reset();  // joins the decode tasks, frees the pinned batch buffers
  if (failed) std::rethrow_exception(failed);
}

// Fills slot `si` from a host batch: GPU-side wait for the slot's previous consumer, the copies,
// the stage. Called by the feeder thread only.
void FeedCore::submit(FeedSlot& s, const Batch& host) {
  const auto n = static_cast<std::size_t>(host.size());
  // Host staging of this slot: its previous copy (if any) must have read it. Normally long done.
  s.copied.synchronize();
  auto* ids = s.meta_host.as<std::int64_t>();
  auto* labels = reinterpret_cast<float*>(ids + batch_size_);
  std::copy_n(host.sample_ids().data(), n, ids);
  std::copy_n(host.labels().data(), n * static_cast<std::size_t>(label_width_), labels);
  s.padding.assign(host.padding().begin(), host.padding().end());
  s.size = host.size();
  s.epoch = host.epoch();
  s.index = host.index();
  s.consumer = nullptr;
  s.has_consumer = false;

  copy_.wait(s.reusable);  // the consumer's work on this slot's last batch has finished
  const std::size_t pixel_bytes = in_shape_.bytes() * n;
  if (s.copy_start) s.copy_start->record(copy_);
  copy_to_device_async(s.input.get(), host.pixels(), pixel_bytes, copy_.get());
  copy_to_device_async(s.meta.get(), s.meta_host.get(), meta_bytes_, copy_.get());
  if (s.copy_end) s.copy_end->record(copy_);
  s.copied.record(copy_);
  if (s.stage) {
    stage_.wait(s.copied);
    DeviceStageInput in;
    in.pixels = s.input.as<std::uint8_t>();
    in.shape = in_shape_;
    in.size = s.size;
    in.sample_ids = std::span<const std::int64_t>(ids, n);
    in.seed = loader_->options().seed;
    in.epoch = s.epoch;
    s.stage->run(in, s.output.get(), stage_.get());
    s.ready.record(stage_);
  } else {
    s.ready.record(copy_);
  }
  std::lock_guard lock(mu_);
  batches_ += 1;
  bytes_ += pixel_bytes + meta_bytes_;
}

void FeedCore::feeder() {
  // Each host thread has its own current device: the copies, the stage's launches and its
  // allocations must go to the feed's device.
  try {
    set_device(device_);
  } catch (...) {
    // Without the device nothing can be fed: the error is kept for every next()/begin_epoch()
    // (a queued Delivery would be dropped by begin_epoch), and the feeder only waits for stop.
    std::unique_lock lock(mu_);
    fatal_ = std::current_exception();
    exhausted_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return stop_; });
    return;
  }
  // Host batches whose copy may still be running; they go back to the loader once it completed.
  struct Pending {
    Batch batch;
    const Event* event;  // the slot's `copied` (a later copy into the slot only waits longer)
  };
  std::deque<Pending> pending;
  const int max_hold = std::max(1, std::min(2, loader_->options().prefetch));
  auto reap = [&](bool all) {
    while (!pending.empty()) {
      if (all || static_cast<int>(pending.size()) >= max_hold) {
        pending.front().event->synchronize();
      } else if (!pending.front().event->done()) {
        break;
      }
      pending.pop_front();  // ~Batch: the pinned buffer goes back to the loader
    }
  };

  std::unique_lock lock(mu_);
  for (;;) {
    auto can_work = [&] { return stop_ || (active_ && !exhausted_ && !free_.empty()); };
    if (!can_work()) {
      // Nothing to do now: give every host batch back before sleeping, so the loader can decode ahead.
      lock.unlock();
      try {
        reap(true);
      } catch (...) {}
      lock.lock();
      const auto t0 = Clock::now();
      const bool consumer_bound = active_ && !exhausted_;
      cv_.wait(lock, can_work);
      if (consumer_bound) feeder_wait_ += seconds_since(t0);
    }
    if (stop_) break;
    const int si = free_.front();
    free_.pop_front();
    const std::uint64_t generation = generation_;
    busy_ = true;
    lock.unlock();

    Delivery d;
    d.slot = si;
    std::optional<Batch> host;
    try {
      reap(false);
      host = loader_->next();
      if (host) {
        submit(*slots_[static_cast<std::size_t>(si)], *host);
        const FeedSlot& s = *slots_[static_cast<std::size_t>(si)];
        pending.push_back({std::move(*host), &s.copied});
      } else {
        d.end = true;
      }
    } catch (...) {
      d.error = std::current_exception();
      // A copy or stage may have been enqueued from the host batch and into the slot: neither is
      // reused before that work has finished.
      // Re-recording `reusable` replaces what it held, the consumer's work from the slot's last
      // release (copy_ may not have waited on it yet): stage_ waits on that first.
      try {
        FeedSlot& s = *slots_[static_cast<std::size_t>(si)];
        if (host) copy_.synchronize();  // the host batch goes back to the loader below
        stage_.wait(s.reusable);
        s.reusable.record(stage_);
      } catch (...) {}
    }

    lock.lock();
    busy_ = false;
    if (d.end || d.error) {
      free_.push_front(si);
      d.slot = -1;
      exhausted_ = true;
    } else if (generation != generation_) {
      // The epoch was restarted while this batch was being copied: the slot is free again once
      // the work queued for it is done.
      FeedSlot& s = *slots_[static_cast<std::size_t>(si)];
      try {
        s.reusable.record(s.stage ? stage_ : copy_);
      } catch (...) {}
      free_.push_back(si);
      cv_.notify_all();
      continue;
    }
    if (generation == generation_) ready_.push_back(std::move(d));
    cv_.notify_all();
  }
  lock.unlock();
  try {
    reap(true);
  } catch (...) {}
}

void FeedCore::begin_epoch(std::uint64_t epoch, const LoaderState* resume, const std::function<void()>& while_waiting,
                           std::chrono::milliseconds interval) {
  std::unique_lock lock(mu_);
  if (stopped_ || stop_) throw Error("GpuFeed: begin_epoch() after shutdown()");
  if (fatal_) std::rethrow_exception(fatal_);
  ++generation_;
  active_ = false;
  polled_wait(
      cv_, lock, [&] { return !busy_; }, while_waiting, interval);
  // Batches copied but not delivered: their slots are free once their queued work is done.
  for (const Delivery& d : ready_) {
    if (d.slot < 0) continue;
    FeedSlot& s = *slots_[static_cast<std::size_t>(d.slot)];
    s.reusable.record(s.stage ? stage_ : copy_);
    free_.push_back(d.slot);
  }
  ready_.clear();
  lock.unlock();
  // The feeder is idle: nobody else calls the loader now.
  if (resume) loader_->resume(*resume, while_waiting, interval);
  else loader_->begin_epoch(epoch, while_waiting, interval);
  lock.lock();
  active_ = true;
  exhausted_ = false;
  ended_ = false;
  epoch_batches_ = loader_->batches_per_epoch();
  delivered_ = resume ? static_cast<std::size_t>(resume->next_batch) : 0;
  cv_.notify_all();
}

// The loader runs ahead of the consumer: its own state counts batches the feeder has taken.
LoaderState FeedCore::state() const {
  LoaderState st = loader_->state();
  std::lock_guard lock(mu_);
  st.next_batch = active_ ? static_cast<std::int64_t>(delivered_) : 0;
  return st;
}

std::optional<DeviceBatch> FeedCore::next(const std::function<void()>& while_waiting,
                                          std::chrono::milliseconds interval) {
  std::unique_lock lock(mu_);
  if (stopped_ || stop_) throw Error("GpuFeed: next() after shutdown()");
  if (fatal_) std::rethrow_exception(fatal_);
  if (!active_) throw Error("GpuFeed::next() called before begin_epoch()");
  if (ended_) return std::nullopt;
  if (ready_.empty() && held_ >= static_cast<int>(slots_.size())) {
    // (A batch the Skip policy emptied is not delivered: then the count never reaches the total
    // and this stays an error until a slot is released.)
    if (delivered_ >= epoch_batches_) {
      ended_ = true;
      return std::nullopt;
    }
    throw Error("GpuFeed: all " + std::to_string(slots_.size()) +
                " device slots are held by the consumer; release a DeviceBatch before asking for the next one "
                "(or raise depth)");
  }
  const auto t0 = Clock::now();
  polled_wait(
      cv_, lock, [&] { return !ready_.empty() || stop_ || fatal_; }, while_waiting, interval);
  consumer_wait_ += seconds_since(t0);
  if (stop_) throw Error("GpuFeed: shutting down");
  if (fatal_) std::rethrow_exception(fatal_);
  Delivery d = std::move(ready_.front());
  ready_.pop_front();
  if (d.error) {
    ended_ = true;
    std::rethrow_exception(d.error);
  }
  if (d.end) {
    ended_ = true;
    return std::nullopt;
  }
  ++held_;
  ++delivered_;
  return DeviceBatch(shared_from_this(), d.slot);
}

void FeedCore::release(int si, StreamHandle consumer, bool given) noexcept {
  FeedSlot& s = *slots_[static_cast<std::size_t>(si)];
  // The slot's buffers are rewritten only after what the consumer enqueued so far. Without a
  // consumer stream, after the feed's own work on it.
  StreamHandle after = given ? consumer : (s.has_consumer ? s.consumer : (s.stage ? stage_.get() : copy_.get()));
  // Another thread's per-thread default stream cannot be named here; the legacy default stream
  // follows every per-thread default stream's work queued before.
  if (!given && s.has_consumer && after == per_thread_default_stream() && s.reader != std::this_thread::get_id())
    after = legacy_default_stream();
  try {
    const DeviceGuard on(device_for(after));
    s.reusable.record(after);
  } catch (...) {
    // Recording failed (a consumer stream on another device, a broken context): the host waits
    // for the consumer's stream and everything the feed queued instead; `reusable` keeps an older,
    // completed record.
    try {
      const DeviceGuard on(device_for(after));
      stream_synchronize(after);
    } catch (...) {}
    try {
      copy_.synchronize();
      stage_.synchronize();
    } catch (...) {}
  }
  std::lock_guard lock(mu_);
  --held_;
  s.consumer = nullptr;
  s.has_consumer = false;
  free_.push_back(si);
  cv_.notify_all();
}

}  // namespace detail

// ---- DeviceBatch -------------------------------------------------------------------------------

DeviceBatch::DeviceBatch(std::shared_ptr<detail::FeedCore> core, int slot) noexcept
    : core_(std::move(core)), slot_(slot) {}
DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept
    : core_(std::move(other.core_)), slot_(std::exchange(other.slot_, -1)) {}
DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}
DeviceBatch::~DeviceBatch() { release(); }

void DeviceBatch::release() noexcept {
  if (core_ && slot_ >= 0) core_->release(slot_, nullptr, false);
  core_.reset();
  slot_ = -1;
}
void DeviceBatch::release(StreamHandle consumer) noexcept {
  if (core_ && slot_ >= 0) core_->release(slot_, consumer, true);
  core_.reset();
  slot_ = -1;
}

namespace {
const detail::FeedSlot& slot_of(const std::shared_ptr<detail::FeedCore>& c, int i) {
  return *c->slots_[static_cast<std::size_t>(i)];
}
}  // namespace

int DeviceBatch::size() const noexcept { return slot_of(core_, slot_).size; }
const SampleShape& DeviceBatch::sample_shape() const noexcept { return core_->out_shape_; }
const void* DeviceBatch::data() const noexcept { return mutable_data(); }
void* DeviceBatch::mutable_data() const noexcept {
  const auto& s = slot_of(core_, slot_);
  return s.stage ? s.output.get() : s.input.get();
}
std::size_t DeviceBatch::bytes() const noexcept { return sample_shape().bytes() * static_cast<std::size_t>(size()); }
int DeviceBatch::label_width() const noexcept { return core_->label_width_; }
std::span<const float> DeviceBatch::labels() const noexcept {
  const auto& s = slot_of(core_, slot_);
  const auto* ids = s.meta_host.as<std::int64_t>();
  return {reinterpret_cast<const float*>(ids + core_->batch_size_),
          static_cast<std::size_t>(s.size) * static_cast<std::size_t>(core_->label_width_)};
}
std::span<const std::int64_t> DeviceBatch::sample_ids() const noexcept {
  const auto& s = slot_of(core_, slot_);
  return {s.meta_host.as<std::int64_t>(), static_cast<std::size_t>(s.size)};
}
std::span<const std::uint8_t> DeviceBatch::padding() const noexcept { return slot_of(core_, slot_).padding; }
const float* DeviceBatch::device_labels() const noexcept {
  return reinterpret_cast<const float*>(slot_of(core_, slot_).meta.as<std::int64_t>() + core_->batch_size_);
}
const std::int64_t* DeviceBatch::device_sample_ids() const noexcept {
  return slot_of(core_, slot_).meta.as<std::int64_t>();
}
std::uint64_t DeviceBatch::epoch() const noexcept { return slot_of(core_, slot_).epoch; }
std::int64_t DeviceBatch::index() const noexcept { return slot_of(core_, slot_).index; }
EventHandle DeviceBatch::ready_event() const noexcept { return slot_of(core_, slot_).ready.get(); }
EventHandle DeviceBatch::copy_start_event() const noexcept {
  const auto& s = slot_of(core_, slot_);
  return s.copy_start ? s.copy_start->get() : nullptr;
}
EventHandle DeviceBatch::copy_end_event() const noexcept {
  const auto& s = slot_of(core_, slot_);
  return s.copy_end ? s.copy_end->get() : nullptr;
}
void DeviceBatch::wait_on(StreamHandle consumer) const {
  auto& s = *core_->slots_[static_cast<std::size_t>(slot_)];
  {
    const DeviceGuard on(core_->device_for(consumer));
    stream_wait(consumer, s.ready.get());
  }
  s.consumer = consumer;
  s.has_consumer = true;
  s.reader = std::this_thread::get_id();
}

// ---- GpuFeed -----------------------------------------------------------------------------------

namespace {
// The core is built with the feed's device current (its streams, events and memory go there),
// and the caller's current device is given back.
std::shared_ptr<detail::FeedCore> make_core(Dataset dataset, LoaderOptions loader, GpuFeedOptions options) {
  require_cuda_device("GpuFeed");
  const DeviceGuard on(options.device);
  auto core = std::make_shared<detail::FeedCore>(std::move(dataset), std::move(loader), std::move(options));
  core->start();
  return core;
}
}  // namespace

GpuFeed::GpuFeed(Dataset dataset, LoaderOptions loader, GpuFeedOptions options)
    : core_(make_core(std::move(dataset), std::move(loader), std::move(options))) {}
GpuFeed::~GpuFeed() {
  if (core_) {
    try {
      core_->shutdown();
    } catch (...) {}
  }
}

void GpuFeed::begin_epoch(std::uint64_t epoch) { core_->begin_epoch(epoch); }
void GpuFeed::begin_epoch(std::uint64_t epoch, const std::function<void()>& while_waiting,
                          std::chrono::milliseconds interval) {
  core_->begin_epoch(epoch, nullptr, while_waiting, interval);
}
void GpuFeed::resume(const LoaderState& state) { core_->begin_epoch(state.epoch, &state); }
void GpuFeed::resume(const LoaderState& state, const std::function<void()>& while_waiting,
                     std::chrono::milliseconds interval) {
  core_->begin_epoch(state.epoch, &state, while_waiting, interval);
}
LoaderState GpuFeed::state() const { return core_->state(); }
std::optional<DeviceBatch> GpuFeed::next() { return core_->next(); }
std::optional<DeviceBatch> GpuFeed::next(const std::function<void()>& while_waiting,
                                         std::chrono::milliseconds interval) {
  return core_->next(while_waiting, interval);
}
void GpuFeed::shutdown() { core_->shutdown(); }
bool GpuFeed::idle() const { return core_->idle(); }
std::size_t GpuFeed::batches_per_epoch() const noexcept {
  return core_->loader_ ? core_->loader_->batches_per_epoch() : 0;
}
int GpuFeed::depth() const noexcept { return static_cast<int>(core_->slots_.size()); }
std::size_t GpuFeed::device_bytes() const noexcept { return core_->device_bytes_; }
std::size_t GpuFeed::slot_device_bytes() const noexcept { return core_->slot_bytes_; }
std::size_t GpuFeed::pinned_bytes() const noexcept {
  return (core_->pinned_ ? core_->pinned_->bytes_held() : 0) + core_->staging_bytes_;
}
SampleShape GpuFeed::input_shape() const noexcept { return core_->in_shape_; }
SampleShape GpuFeed::output_shape() const noexcept { return core_->out_shape_; }

std::string GpuFeed::describe() const {
  const auto& c = *core_;
  std::string s = "GpuFeed: depth " + std::to_string(c.slots_.size()) + ", device " + mib(c.device_bytes_) + " (" +
                  mib(c.slot_bytes_) + " per slot), pinned " + mib(pinned_bytes()) + ", " +
                  std::to_string(c.batch_size_) + " x " + std::to_string(c.in_shape_.height) + "x" +
                  std::to_string(c.in_shape_.width) + "x" + std::to_string(c.in_shape_.channels) + " " +
                  to_string(c.in_shape_.dtype) + " -> " + to_string(c.out_shape_.dtype) + " " +
                  to_string(c.out_shape_.layout) +
                  (c.options_.stage ? std::string(" via ") + c.options_.stage->name() : "");
  if (!c.budget_note_.empty()) s += "; " + c.budget_note_;
  return s;
}

int GpuFeed::loader_threads() const noexcept { return core_->loader_ ? core_->loader_->threads() : 0; }

std::vector<SkippedSample> GpuFeed::skipped() const {
  return core_->loader_ ? core_->loader_->skipped() : std::vector<SkippedSample>{};
}

GpuFeedStats GpuFeed::stats() const {
  GpuFeedStats s;
  {
    std::lock_guard lock(core_->mu_);
    s.batches_copied = core_->batches_;
    s.bytes_to_device = core_->bytes_;
    s.consumer_wait_seconds = core_->consumer_wait_;
    s.feeder_wait_seconds = core_->feeder_wait_;
  }
  if (core_->loader_) s.loader = core_->loader_->stats();
  return s;
}

}  // namespace stoker
