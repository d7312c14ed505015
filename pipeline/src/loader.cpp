#include "stoker/pipeline/loader.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <typeinfo>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include "batch_buffers.hpp"
#include "polled_wait.hpp"
#include "stoker/cache/cache_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/plan.hpp"

namespace stoker {

LabelMode parse_label_mode(const std::string& name) {
  if (name == "binary") return LabelMode::Binary;
  if (name == "categorical") return LabelMode::Categorical;
  if (name == "sparse") return LabelMode::Sparse;
  if (name == "none") return LabelMode::None;
  throw InvalidArgument("label mode must be binary, categorical, sparse or none, received '" + name + "'");
}

BadSamplePolicy parse_bad_sample_policy(const std::string& name) {
  if (name == "fail") return BadSamplePolicy::Fail;
  if (name == "skip") return BadSamplePolicy::Skip;
  throw InvalidArgument("bad-sample policy must be fail or skip, received '" + name + "'");
}

Interpolation parse_interpolation(const std::string& name) {
  if (name == "nearest") return Interpolation::Nearest;
  if (name == "bilinear") return Interpolation::Bilinear;
  if (name == "bicubic") return Interpolation::Bicubic;
  if (name == "lanczos") return Interpolation::Lanczos;
  if (name == "box") return Interpolation::Box;
  if (name == "hamming") return Interpolation::Hamming;
  if (name == "area") return Interpolation::Area;
  if (name == "centre_nearest") return Interpolation::CentreNearest;
  if (name == "opencv_linear") return Interpolation::OpenCvLinear;
  throw InvalidArgument(
      "interpolation must be nearest, bilinear, bicubic, lanczos, box, hamming, area, centre_nearest or "
      "opencv_linear, received '" +
      name + "'");
}

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t elapsed_ns(Clock::time_point since) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

// A spin-wait hint to the core (lets the sibling hyper-thread run), nothing where there is none.
inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr std::size_t kPage = 4096;
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

class AlignedHostAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(kPage, round_up(std::max<std::size_t>(bytes, 1), kPage));
    if (!p) throw BadAlloc("cannot allocate " + std::to_string(bytes) + " bytes of host memory for batch buffers");
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
  const char* name() const noexcept override { return "host"; }
};

// TBB starts default_concurrency - 1 workers, expecting the calling thread to help. Our tasks are
// enqueued and run by workers only, so raise the process-wide worker limit to what the largest live
// loader needs. Only ever raised, so concurrent loaders do not throttle each other.
void ensure_tbb_workers(int workers) {
  static std::mutex mu;
  static std::unique_ptr<tbb::global_control> control;
  static int current = 0;
  std::lock_guard lock(mu);
  const int wanted = std::max(workers + 1, static_cast<int>(std::thread::hardware_concurrency()));
  if (wanted <= current) return;
  control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, wanted);
  current = wanted;
}

}  // namespace

// oneTBB's task pool is not instrumented for ThreadSanitizer (Debian's libtbb), so it does not see
// that a task runs after it was enqueued: what the submitting thread wrote in a slot before would
// look like a race with the task that fills it. These two say it; nothing outside a TSan build.
#if defined(__SANITIZE_THREAD__)
#define STOKER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STOKER_TSAN 1
#endif
#endif
#ifdef STOKER_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void handed_to_a_task(void* p) { __tsan_release(p); }
inline void taken_by_the_task(void* p) { __tsan_acquire(p); }
#else
inline void handed_to_a_task(void*) {}
inline void taken_by_the_task(void*) {}
#endif

namespace detail {

// Returns a block of batch memory to the allocator that made it.
struct BlockDeleter {
  std::shared_ptr<HostAllocator> allocator;
  std::size_t bytes = 0;
  void operator()(std::byte* p) const noexcept { allocator->deallocate(p, bytes); }
};

// What went wrong with one sample of a batch. Only the sample's own read or decode failure (a
// DecodeError naming its file) is a bad sample that BadSamplePolicy::Skip leaves out; anything else
// (out of memory, a cache or transform error, a misconfiguration) stops the epoch under either
// policy, and next() throws it as the type it was thrown with.
struct SampleFailure {
  std::exception_ptr error;  // null: the sample is in its slot
  bool bad_sample = false;
  std::string reason;  // a bad sample's DecodeError::reason()
};

// One batch buffer and the state of the batch being filled in it.
struct Slot {
  enum class State { Free, Filling, Ready, Held };
  std::byte* pixels = nullptr;
  std::vector<float> labels;
  std::vector<std::int32_t> classes;
  std::vector<std::int64_t> ids;
  std::vector<std::uint8_t> padding;    // per position: a repeat evening out the ranks (Sharding)
  std::vector<SampleFailure> failures;  // per position

  State state = State::Free;
  std::int64_t batch_index = -1;
  std::uint64_t epoch = 0;
  int planned = 0;  // samples assigned to this batch
  int size = 0;     // samples delivered (after skipped ones are compacted away)
  std::atomic<int> pending{0};
  std::exception_ptr error;  // the first failure in batch order that stops the epoch
  std::vector<SkippedSample> skipped;
};

struct ThreadScratch {
  explicit ThreadScratch(DecodeLimits limits) : decoder(limits) {}
  ImageDecoder decoder;
  std::vector<std::uint8_t> file;
};

class LoaderCore : public std::enable_shared_from_this<LoaderCore> {
 public:
  LoaderCore(Dataset dataset, LoaderOptions options);
  ~LoaderCore();

  // first_batch: resume(); while_waiting: Loader::begin_epoch's
  void begin_epoch(std::uint64_t epoch, std::int64_t first_batch = 0, const std::function<void()>& while_waiting = {},
                   std::chrono::milliseconds interval = {});
  std::optional<Batch> next(const std::function<void()>& while_waiting, std::chrono::milliseconds interval);
  LoaderState state() const;
  std::uint64_t digest() const;
  void release(int slot) noexcept;
  void shutdown() noexcept;

  const Slot& slot(int i) const { return *slots_[static_cast<std::size_t>(i)]; }

  Dataset dataset_;
  LoaderOptions options_;
  std::shared_ptr<const SampleTransform> transform_;
  SampleShape shape_;
  int decode_min_height_ = 0, decode_min_width_ = 0;  // the decoder's DCT-scaling floor (0: full size)
  int label_width_ = 0;
  int threads_ = 1;
  int batch_capacity_ = 0;  // samples a batch buffer holds: min(batch_size, samples_per_epoch_)
  std::size_t slot_bytes_ = 0;
  std::size_t buffer_bytes_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  Sharding sharding_;
  std::size_t samples_per_epoch_ = 0;  // this rank's

  std::unique_ptr<SampleCache> cache_;  // null without CacheKind
  bool cache_outputs_ = false;          // decoded cache of the transform's output (see CacheKey)
  bool decode_parts_ = true;            // decode only what the transform reads (not when caching images)

  struct Counters {
    std::atomic<std::uint64_t> files{0}, bytes{0}, decoded{0}, skipped{0}, batches{0}, cache_hits{0}, cache_misses{0};
    std::atomic<std::uint64_t> read_ns{0}, decode_ns{0}, transform_ns{0}, wait_ns{0};
    std::atomic<std::uint64_t> partial_decodes{0};
  } counters_;

  mutable std::mutex mu_;
  std::vector<SkippedSample> skipped_;  // current epoch

 private:
  // One sample's task: queued by refill_locked(), handed to the arena by submit_queued() with mu_
  // released, since a worker publishing a finished batch needs mu_ and would otherwise wait for the
  // whole submission.
  struct SampleTask {
    int slot, position;
    std::uint32_t sample;
    std::uint64_t generation;
  };
  // What the arena runs for a task: a named type, so that ThreadSanitizer's reports of reading it
  // (written by the enqueuing thread, handed over by oneTBB's uninstrumented task pool) can be told
  // apart from what the task does (scripts/tsan.supp).
  struct TaskRunner {
    LoaderCore* core;
    SampleTask t;
    void operator()() const { core->run_sample(t.slot, t.position, t.sample, t.generation); }
  };

  void refill_locked();
  void submit_queued(std::unique_lock<std::mutex>& lock);
  void wait_briefly_for_a_batch(std::unique_lock<std::mutex>& lock);
  void cancel_locked();
  void run_sample(int slot, int position, std::uint32_t sample, std::uint64_t generation);
  void process_sample(Slot& s, int position, std::uint32_t sample);
  void finish_batch(int slot, std::uint64_t generation);
  void move_sample(Slot& s, int from, int to);

  // All batch buffers, one block; freed by its allocator even if construction fails halfway.
  std::unique_ptr<std::byte, BlockDeleter> memory_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> free_slots_;
  std::deque<int> submitted_;       // slots in batch order, not yet delivered
  std::vector<SampleTask> queued_;  // filled slots' samples not yet handed to the arena (capacity: all slots')

  tbb::task_arena arena_;
  tbb::enumerable_thread_specific<std::unique_ptr<ThreadScratch>> scratch_;

  std::condition_variable cv_;
  bool epoch_active_ = false;
  bool stopping_ = false;
  std::uint64_t epoch_ = 0;
  std::atomic<std::uint64_t> generation_{0};         // bumped to cancel in-flight work
  std::atomic<std::uint64_t> batches_published_{0};  // finished batches, for next() to watch before sleeping
  std::vector<std::uint32_t> order_;                 // this rank's samples of the epoch
  std::vector<std::uint8_t> padding_;                // per entry of order_
  std::int64_t next_submit_ = 0;
  std::int64_t next_deliver_ = 0;
  bool cache_saved_ = false;   // this epoch's end already wrote the cache file
  std::exception_ptr failed_;  // what stopped this epoch: next() throws it until begin_epoch()
  int inflight_batches_ = 0;
};

LoaderCore::LoaderCore(Dataset dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  const auto& o = options_;
  if (dataset_.empty()) throw DatasetError("the dataset is empty: no samples to load");
  if (dataset_.size() > UINT32_MAX) throw InvalidArgument("datasets over 4 billion samples are not supported");
  if (o.batch_size < 1) throw InvalidArgument("batch_size must be >= 1, received " + std::to_string(o.batch_size));
  if (o.prefetch < 1) throw InvalidArgument("prefetch must be >= 1, received " + std::to_string(o.prefetch));
  if (o.threads < 0) throw InvalidArgument("threads must be >= 0, received " + std::to_string(o.threads));
  if (o.limits.max_pixels < 1) {
    throw InvalidArgument("limits.max_pixels (max_image_pixels) must be >= 1, received " +
                          std::to_string(o.limits.max_pixels));
  }

  const auto classes = static_cast<int>(dataset_.class_names.size());
  switch (o.label_mode) {
    case LabelMode::Binary:
      if (classes != 2) {
        throw InvalidArgument("label mode 'binary' needs exactly 2 classes, the dataset has " +
                              std::to_string(classes));
      }
      label_width_ = 1;
      break;
    case LabelMode::Categorical: label_width_ = classes; break;
    case LabelMode::Sparse: label_width_ = 1; break;
    case LabelMode::None: label_width_ = 0; break;
  }
  if (o.label_mode != LabelMode::None) {
    for (const auto& s : dataset_.samples) {
      if (s.label < 0 || s.label >= classes) {
        throw InvalidArgument("sample " + sample_name(s) + " has no valid label (" + std::to_string(s.label) +
                              ") but label mode is not 'none'");
      }
    }
  }

  transform_ = o.transform ? o.transform
                           : std::make_shared<ResizeTransform>(o.image_height, o.image_width, o.interpolation,
                                                               o.keep_aspect_ratio);
  shape_ = transform_->output_shape();
  decode_min_height_ = o.dct_scaling ? transform_->min_decode_height() : 0;
  decode_min_width_ = o.dct_scaling ? transform_->min_decode_width() : 0;
  if (shape_.bytes() == 0) throw InvalidArgument("the transform's output shape is empty");

  sharding_ = o.sharding ? *o.sharding : sharding_from_environment();
  check_weighted_sampling(o.sampling, dataset_.size(), sharding_.mode);
  const std::size_t draws = draws_per_epoch(dataset_.size(), o.sampling);
  check_sharding(sharding_, draws);
  samples_per_epoch_ = samples_per_rank(draws, sharding_);
  const auto n = static_cast<std::int64_t>(samples_per_epoch_);
  batches_per_epoch_ = o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
  if (batches_per_epoch_ == 0) {
    throw InvalidArgument(
        "drop_last with batch_size " + std::to_string(o.batch_size) + " leaves no batch from " + std::to_string(n) +
        " samples" +
        (sharding_.world_size > 1 ? " (this rank's share of " + std::to_string(draws) + ")" : std::string()));
  }

  // What the batch buffers take, checked before anything is allocated: each batch as large as this
  // rank's batches can be, prefetch batches in flight + one with the consumer.
  const detail::BatchBuffers buffers = detail::plan_batch_buffers(
      {.shape = shape_,
       .batch_size = o.batch_size,
       .samples = samples_per_epoch_,
       .slots = static_cast<std::size_t>(o.prefetch) + 1,
       .per_sample = static_cast<std::size_t>(label_width_) * sizeof(float) + sizeof(std::int32_t) +
                     sizeof(std::int64_t) + sizeof(std::uint8_t) + sizeof(SampleFailure) + sizeof(SampleTask),
       .per_batch = sizeof(Slot) + sizeof(std::unique_ptr<Slot>) + sizeof(int),
       .page = kPage},
      detail::host_memory_bytes());
  batch_capacity_ = buffers.capacity;

  if (o.cache.kind != CacheKind::None) {
    // Decoded entries are the decoder's output, so they depend on its minimum (DCT-scaling) size,
    // 0x0 for full-size decoding (dct_scaling false); behind a deterministic uint8 transform they
    // are the transform's output, one copy from a slot, and still made from that decode. A cache
    // file written with the other setting has another key, so it is stale and rebuilt.
    const bool decoded = o.cache.kind == CacheKind::Decoded;
    const std::string identity = transform_->cache_identity();
    cache_outputs_ = decoded && !identity.empty() && shape_.dtype == DType::U8 && shape_.layout == Layout::NHWC;
    CacheKey key{o.cache.kind, decoded ? decode_min_height_ : 0, decoded ? decode_min_width_ : 0, 0};
    if (cache_outputs_) key.transform = std::max<std::uint64_t>(1, checksum64(identity.data(), identity.size()));
    decode_parts_ = !decoded || cache_outputs_;  // a cached image must be the whole image
    std::vector<std::string> paths;
    paths.reserve(dataset_.size());
    for (const auto& s : dataset_.samples) {
      paths.push_back(s.range ? member_source_id(s.path, s.member, s.range->offset) : s.path);
    }
    cache_ = std::make_unique<SampleCache>(o.cache, key, std::move(paths));
  }

  // 0: the cores this process may run on (its affinity mask / cgroup quota, as oneTBB sees them),
  // not every core of the machine.
  threads_ = o.threads > 0 ? o.threads : std::max(1, tbb::info::default_concurrency());
  ensure_tbb_workers(threads_);
  arena_.initialize(threads_, 0);  // no slot reserved for a master: workers run everything

  // Every batch buffer is allocated here, once, as planned above.
  auto allocator = o.allocator ? o.allocator : std::make_shared<AlignedHostAllocator>();
  const int slot_count = o.prefetch + 1;
  slot_bytes_ = buffers.slot_bytes;
  buffer_bytes_ = buffers.pixel_bytes;
  memory_ = {static_cast<std::byte*>(allocator->allocate(buffer_bytes_)), BlockDeleter{allocator, buffer_bytes_}};
  const auto per_batch = static_cast<std::size_t>(batch_capacity_);
  for (int i = 0; i < slot_count; ++i) {
    auto s = std::make_unique<Slot>();
    s->pixels = memory_.get() + slot_bytes_ * static_cast<std::size_t>(i);
    s->labels.resize(per_batch * static_cast<std::size_t>(label_width_));
    s->classes.resize(per_batch);
    s->ids.resize(per_batch);
    s->padding.resize(per_batch);
    s->failures.resize(per_batch);
    slots_.push_back(std::move(s));
    free_slots_.push_back(slot_count - 1 - i);
  }
  queued_.reserve(per_batch * static_cast<std::size_t>(slot_count));  // refill_locked() never allocates
}

LoaderCore::~LoaderCore() { shutdown(); }

void LoaderCore::shutdown() noexcept {
  std::unique_lock lock(mu_);
  stopping_ = true;
  cancel_locked();
  try {
    submit_queued(lock);  // samples left queued by a failed submission must still run to finish their batch
  } catch (...) {}
  cv_.wait(lock, [&] { return inflight_batches_ == 0; });
}

// Abandons the current epoch: in-flight samples see the new generation and stop early; ready but
// undelivered batches go back to the pool.
void LoaderCore::cancel_locked() {
  generation_.fetch_add(1);
  for (int si : submitted_) {
    Slot& s = *slots_[static_cast<std::size_t>(si)];
    if (s.state == Slot::State::Ready) {
      s.state = Slot::State::Free;
      free_slots_.push_back(si);
    }  // Filling slots are returned by their last task
  }
  submitted_.clear();
  next_submit_ = batches_per_epoch_;
  cv_.notify_all();
}

void LoaderCore::begin_epoch(std::uint64_t epoch, std::int64_t first_batch, const std::function<void()>& while_waiting,
                             std::chrono::milliseconds interval) {
  std::unique_lock lock(mu_);
  if (stopping_) throw Error("the loader was closed");
  cancel_locked();
  submit_queued(lock);    // samples left queued by a failed submission must still run to finish their batch
  epoch_active_ = false;  // until the abandoned epoch's samples are done: an interrupted wait begins none
  polled_wait(
      cv_, lock, [&] { return inflight_batches_ == 0; }, while_waiting, interval);
  if (stopping_) throw Error("the loader was closed");
  epoch_ = epoch;
  EpochPlan plan = epoch_plan(static_cast<std::uint32_t>(dataset_.size()), options_.seed, epoch, options_.shuffle,
                              sharding_, options_.sampling);
  order_ = std::move(plan.samples);
  padding_ = std::move(plan.padding);
  next_submit_ = first_batch;
  next_deliver_ = first_batch;
  cache_saved_ = false;
  failed_ = nullptr;
  skipped_.clear();
  epoch_active_ = true;
  refill_locked();
  submit_queued(lock);
}

void LoaderCore::refill_locked() {
  const std::int64_t n = static_cast<std::int64_t>(order_.size());
  while (!stopping_ && !free_slots_.empty() && next_submit_ < batches_per_epoch_) {
    const int si = free_slots_.back();
    free_slots_.pop_back();
    Slot& s = *slots_[static_cast<std::size_t>(si)];
    const std::int64_t begin = next_submit_ * options_.batch_size;
    const int count = static_cast<int>(std::min<std::int64_t>(options_.batch_size, n - begin));
    s.state = Slot::State::Filling;
    s.batch_index = next_submit_;
    s.epoch = epoch_;
    s.planned = count;
    s.size = 0;
    s.error = nullptr;
    s.skipped.clear();
    for (int p = 0; p < count; ++p) {
      s.failures[static_cast<std::size_t>(p)] = {};
      s.padding[static_cast<std::size_t>(p)] = padding_[static_cast<std::size_t>(begin + p)];
    }
    s.pending.store(count);
    submitted_.push_back(si);
    ++inflight_batches_;
    ++next_submit_;
    const std::uint64_t generation = generation_.load();
    for (int p = 0; p < count; ++p) queued_.push_back({si, p, order_[static_cast<std::size_t>(begin + p)], generation});
  }
}

void LoaderCore::submit_queued(std::unique_lock<std::mutex>& lock) {
  thread_local std::vector<SampleTask> tasks;
  if (queued_.empty()) return;
  tasks.assign(queued_.begin(), queued_.end());  // may allocate (a thread's first call): nothing sent yet
  queued_.clear();                               // keeps the capacity reserved at construction
  lock.unlock();
  std::size_t sent = 0;
  try {
    for (; sent < tasks.size(); ++sent) {
      const SampleTask t = tasks[sent];
      handed_to_a_task(this);
      arena_.enqueue(TaskRunner{this, t});
    }
  } catch (...) {
    // Out of memory: what was not sent goes back to the front of the queue for the next call.
    lock.lock();
    queued_.insert(queued_.begin(), tasks.begin() + static_cast<std::ptrdiff_t>(sent), tasks.end());
    tasks.clear();
    throw;
  }
  tasks.clear();
  lock.lock();
}

// A batch of cached samples is microseconds away: less than sleeping on cv_ and being woken costs
// (bench/handoff_bench, docs/benchmarks.md). So next() watches for a newly finished batch for a
// moment (16 pauses, then 12 yields, which let a decode thread have this core) before it sleeps.
void LoaderCore::wait_briefly_for_a_batch(std::unique_lock<std::mutex>& lock) {
  const std::uint64_t seen = batches_published_.load(std::memory_order_relaxed);
  lock.unlock();
  for (int i = 0; i < 28 && batches_published_.load(std::memory_order_relaxed) == seen; ++i) {
    if (i < 16) {
      cpu_pause();
    } else {
      std::this_thread::yield();
    }
  }
  lock.lock();
}

namespace {

// `error` again, of the same type, its message ending with the sample it was thrown for, so that
// "ResizeTransform expects 3 channels" says which file. Only stoker's own exception types can be
// rebuilt so; any other (std::bad_alloc, a caller's own type) is kept as it is.
std::exception_ptr naming_sample(const std::exception_ptr& error, const std::string& path) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    const std::string what = std::string(e.what()) + " (loading " + path + ")";
    const std::type_info& type = typeid(e);
    if (type == typeid(InvalidArgument)) return std::make_exception_ptr(InvalidArgument(what));
    if (type == typeid(IoError)) return std::make_exception_ptr(IoError(what));
    if (type == typeid(BadAlloc)) return std::make_exception_ptr(BadAlloc(what));
    if (type == typeid(DatasetError)) return std::make_exception_ptr(DatasetError(what));
    if (type == typeid(CudaError)) {
      return std::make_exception_ptr(CudaError(what, static_cast<const CudaError&>(e).code()));
    }
    if (type == typeid(Error)) return std::make_exception_ptr(Error(what));
  } catch (...) {}
  return error;
}

// Files the failure of the sample read from `path`. Never throws: it is a oneTBB task's last word.
void record_failure(SampleFailure& failure, const std::exception_ptr& error, const std::string& path) noexcept {
  failure.error = error;
  try {
    try {
      std::rethrow_exception(error);
    } catch (const DecodeError& e) {
      // A DecodeError about another file (one a transform reads itself) is not this sample's.
      failure.bad_sample = e.path() == path;
      if (failure.bad_sample) failure.reason = e.reason();
    } catch (...) {
      failure.error = naming_sample(error, path);
    }
  } catch (...) {
    // Out of memory while filing it: the error as thrown stops the epoch.
    failure.error = error;
    failure.bad_sample = false;
  }
}

}  // namespace

void LoaderCore::run_sample(int si, int position, std::uint32_t sample, std::uint64_t generation) {
  taken_by_the_task(this);
  Slot& s = *slots_[static_cast<std::size_t>(si)];
  if (generation == generation_.load()) {
    try {
      try {
        process_sample(s, position, sample);
      } catch (...) {
        if (cache_) cache_->check_file();  // a cache file cut short is the error, not what it read
        throw;
      }
      if (cache_) cache_->check_file();
    } catch (...) {
      record_failure(s.failures[static_cast<std::size_t>(position)], std::current_exception(),
                     sample_name(dataset_.samples[sample]));
    }
  }
  if (s.pending.fetch_sub(1) == 1) finish_batch(si, generation);
}

void LoaderCore::process_sample(Slot& s, int position, std::uint32_t sample) {
  auto& local = scratch_.local();
  if (!local) local = std::make_unique<ThreadScratch>(options_.limits);
  const Sample& item = dataset_.samples[sample];
  // How errors name it: the file, or "shard.tar:member" (built only for archive members).
  const std::string member_name = item.range ? sample_name(item) : std::string();
  const std::string& name = item.range ? member_name : item.path;

  std::byte* slot = s.pixels + shape_.bytes() * static_cast<std::size_t>(position);
  std::optional<CachedSample> hit;
  if (cache_) {
    hit = cache_->find(sample);
    (hit ? counters_.cache_hits : counters_.cache_misses) += 1;
  }

  if (hit && cache_outputs_) {
    // The transform's output was cached: the warm path is one copy into the slot.
    const ImageView& cached = hit->decoded;
    if (cached.height != shape_.height || cached.width != shape_.width || cached.channels != shape_.channels) {
      // Only a cache file can hold such an entry: written by a transform with the same
      // cache_identity() but another output shape.
      auto dims = [](int h, int w, int c) {
        return std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c);
      };
      throw IoError(options_.cache.file.string() + ": the cached output is " +
                    dims(cached.height, cached.width, cached.channels) + ", the transform makes " +
                    dims(shape_.height, shape_.width, shape_.channels) +
                    " (its cache_identity() does not name its output shape); delete the cache file");
    }
    const auto t0 = Clock::now();
    std::memcpy(slot, cached.data, shape_.bytes());
    counters_.transform_ns += elapsed_ns(t0);
  } else {
    // Decoded hit: no read, no decode. Encoded hit: decode only. Miss: read and decode, then offer
    // the result to the cache (after a successful decode, so a bad file is never cached).
    const SampleContext ctx{options_.seed, s.epoch, static_cast<std::int64_t>(sample)};
    ImageView image;
    std::optional<CropBox> region;  // set when only this part of the image was decoded
    DecodedSize full;
    std::span<const std::uint8_t> bytes;
    SourceStamp stamp;
    if (hit && cache_->key().kind == CacheKind::Decoded) {
      image = hit->decoded;
    } else {
      if (hit) {
        bytes = hit->encoded;
      } else {
        const auto t0 = Clock::now();
        stamp =
            item.range ? read_file_range(item.path, *item.range, name, local->file) : read_file(item.path, local->file);
        counters_.read_ns += elapsed_ns(t0);
        counters_.files += 1;
        counters_.bytes += local->file.size();
        bytes = local->file;
      }
      const auto t0 = Clock::now();
      full = local->decoder.prepare(bytes, name, decode_min_height_, decode_min_width_);
      // Only the part the transform reads, unless the whole image is to be cached.
      if (decode_parts_) region = transform_->source_region(ctx, full.height, full.width);
      image = local->decoder.decode_prepared(region ? &*region : nullptr);
      if (local->decoder.decoded_part()) counters_.partial_decodes += 1;
      counters_.decode_ns += elapsed_ns(t0);
    }
    const auto t0 = Clock::now();
    if (region) {
      transform_->apply_part(image, *region, full.height, full.width, ctx, slot);
    } else {
      transform_->apply(image, ctx, slot);
    }
    counters_.transform_ns += elapsed_ns(t0);

    if (cache_ && !hit) {
      switch (cache_->key().kind) {
        case CacheKind::Encoded: cache_->admit_encoded(sample, bytes, stamp); break;
        case CacheKind::Decoded: {
          // Behind a deterministic transform the entry is its output: the slot's rows, any channel count.
          const std::size_t row = static_cast<std::size_t>(shape_.width) * static_cast<std::size_t>(shape_.channels);
          const ImageView output{reinterpret_cast<const std::uint8_t*>(slot), shape_.height, shape_.width,
                                 shape_.channels, row};
          cache_->admit_decoded(sample, cache_outputs_ ? output : image, stamp);
          break;
        }
        case CacheKind::None: break;
      }
    }
  }

  const auto p = static_cast<std::size_t>(position);
  s.classes[p] = item.label;
  s.ids[p] = sample;
  float* labels = s.labels.data() + p * static_cast<std::size_t>(label_width_);
  switch (options_.label_mode) {
    case LabelMode::Binary:
    case LabelMode::Sparse: labels[0] = static_cast<float>(item.label); break;
    case LabelMode::Categorical:
      std::fill(labels, labels + label_width_, 0.0f);
      labels[item.label] = 1.0f;
      break;
    case LabelMode::None: break;
  }
  counters_.decoded += 1;
}

void LoaderCore::move_sample(Slot& s, int from, int to) {
  const std::size_t bytes = shape_.bytes();
  std::memmove(s.pixels + bytes * static_cast<std::size_t>(to), s.pixels + bytes * static_cast<std::size_t>(from),
               bytes);
  const auto f = static_cast<std::size_t>(from), t = static_cast<std::size_t>(to),
             w = static_cast<std::size_t>(label_width_);
  std::copy_n(s.labels.data() + f * w, w, s.labels.data() + t * w);
  s.classes[t] = s.classes[f];
  s.ids[t] = s.ids[f];
  s.padding[t] = s.padding[f];
}

// Runs on the thread that finished the batch's last sample: the slot is exclusively ours until we
// publish it under the lock.
void LoaderCore::finish_batch(int si, std::uint64_t generation) {
  Slot& s = *slots_[static_cast<std::size_t>(si)];
  const bool current = generation == generation_.load();
  if (current) {
    const std::int64_t begin = s.batch_index * options_.batch_size;
    int out = 0;
    for (int p = 0; p < s.planned; ++p) {
      const SampleFailure& failure = s.failures[static_cast<std::size_t>(p)];
      if (!failure.error) {
        if (out != p) move_sample(s, p, out);
        ++out;
        continue;
      }
      if (failure.bad_sample && options_.on_bad_sample == BadSamplePolicy::Skip) {
        const std::uint32_t sample = order_[static_cast<std::size_t>(begin + p)];
        s.skipped.push_back({static_cast<std::int64_t>(sample), sample_name(dataset_.samples[sample]), failure.reason});
      } else if (!s.error) {
        s.error = failure.error;
      }
    }
    s.size = out;
  }
  std::lock_guard lock(mu_);
  if (current && generation == generation_.load()) {
    s.state = Slot::State::Ready;
    batches_published_.fetch_add(1, std::memory_order_relaxed);
  } else {
    s.state = Slot::State::Free;
    free_slots_.push_back(si);
  }
  --inflight_batches_;
  cv_.notify_all();
}

std::optional<Batch> LoaderCore::next(const std::function<void()>& while_waiting, std::chrono::milliseconds interval) {
  std::unique_lock lock(mu_);
  if (stopping_) throw Error("the loader was closed");
  if (!epoch_active_) throw Error("Loader::next() called before begin_epoch()");
  for (;;) {
    if (failed_) std::rethrow_exception(failed_);
    if (next_deliver_ >= batches_per_epoch_) {
      // A complete epoch: persist what the cache learned (no task is running now).
      if (cache_ && !cache_saved_) {
        cache_saved_ = true;
        cache_->save_if_changed();
      }
      return std::nullopt;
    }
    refill_locked();
    submit_queued(lock);
    if (submitted_.empty()) {
      throw Error("all " + std::to_string(slots_.size()) +
                  " batch buffers are held by the consumer; release a Batch before asking for the next one "
                  "(or raise prefetch)");
    }
    const int si = submitted_.front();
    Slot& s = *slots_[static_cast<std::size_t>(si)];
    if (s.state != Slot::State::Ready) {
      const auto t0 = Clock::now();
      wait_briefly_for_a_batch(lock);
      polled_wait(
          cv_, lock, [&] { return s.state == Slot::State::Ready || stopping_; }, while_waiting, interval);
      counters_.wait_ns += elapsed_ns(t0);
      if (stopping_) throw Error("the loader was closed while next() waited for a batch");
      // Another thread began an epoch meanwhile: look again at what is due now.
      if (submitted_.empty() || submitted_.front() != si) continue;
    }
    submitted_.pop_front();
    ++next_deliver_;
    // Skipped samples are recorded as the batch is delivered, so the record follows plan order.
    for (auto& k : s.skipped) skipped_.push_back(std::move(k));
    counters_.skipped += s.skipped.size();
    s.skipped.clear();
    if (s.error) {
      failed_ = std::exchange(s.error, nullptr);
      s.state = Slot::State::Free;
      free_slots_.push_back(si);
      cancel_locked();  // in-flight samples stop early; begin_epoch() or the destructor joins them
      std::rethrow_exception(failed_);
    }
    if (s.size == 0) {  // every sample of this batch was skipped
      s.state = Slot::State::Free;
      free_slots_.push_back(si);
      continue;
    }
    s.state = Slot::State::Held;
    counters_.batches += 1;
    refill_locked();
    submit_queued(lock);
    return Batch(shared_from_this(), si);
  }
}

void LoaderCore::release(int si) noexcept {
  std::unique_lock lock(mu_);
  Slot& s = *slots_[static_cast<std::size_t>(si)];
  s.state = Slot::State::Free;
  free_slots_.push_back(si);
  try {
    refill_locked();
    submit_queued(lock);
  } catch (...) {
    // Only allocation fails here; what was not submitted stays queued for the next next() call.
  }
}

LoaderState LoaderCore::state() const {
  std::lock_guard lock(mu_);
  LoaderState st;
  st.seed = options_.seed;
  st.epoch = epoch_;
  st.next_batch = epoch_active_ ? next_deliver_ : 0;
  st.rank = sharding_.rank;
  st.world_size = sharding_.world_size;
  st.digest = digest();
  return st;
}

// What the batches depend on besides the seed, the epoch and the rank: the samples, the batch
// geometry, the label mode, the output and a deterministic transform's identity. (A random
// augmentation's parameters are not in it: give the resumed loader the same augmentation.)
std::uint64_t LoaderCore::digest() const {
  std::uint64_t h = mix64(0x4C4F4144ull);  // "LOAD"
  auto add = [&h](std::uint64_t v) { h = mix64(h ^ v); };
  auto add_text = [&add](const std::string& text) {
    std::uint64_t f = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : text) f = (f ^ c) * 0x100000001b3ull;
    add(f);
    add(text.size());
  };
  add(dataset_.size());
  // Paths relative to the samples' common folder: the same files reached through another path
  // (relative vs absolute, a moved dataset) are the same data.
  std::size_t common = dataset_.samples.empty() ? 0 : dataset_.samples.front().path.size();
  for (const Sample& sample : dataset_.samples) {
    const std::string& first = dataset_.samples.front().path;
    common = std::min(common, sample.path.size());
    common = static_cast<std::size_t>(std::mismatch(first.begin(), first.begin() + common, sample.path.begin()).first -
                                      first.begin());
  }
  if (!dataset_.samples.empty()) {
    const std::size_t slash = dataset_.samples.front().path.rfind('/', common == 0 ? 0 : common - 1);
    common = slash == std::string::npos || common == 0 ? 0 : slash + 1;
  }
  for (const Sample& sample : dataset_.samples) {
    add_text(sample.path.substr(common));
    add_text(sample.member);  // the tar member (empty for a file)
    add(static_cast<std::uint64_t>(static_cast<std::int64_t>(sample.label)));
  }
  add(static_cast<std::uint64_t>(options_.batch_size));
  add(options_.shuffle);
  add(options_.drop_last);
  add(static_cast<std::uint64_t>(options_.label_mode));
  add(static_cast<std::uint64_t>(shape_.height));
  add(static_cast<std::uint64_t>(shape_.width));
  add(static_cast<std::uint64_t>(shape_.channels));
  add(static_cast<std::uint64_t>(shape_.dtype));
  add(static_cast<std::uint64_t>(shape_.layout));
  add(static_cast<std::uint64_t>(sharding_.mode));
  add(sharding_.drop_remainder);
  add_text(transform_->cache_identity());
  if (options_.sampling.enabled()) {  // only then: a state saved without weights keeps its digest
    add(0x5745'4947'4854ull);         // "WEIGHT"
    for (const double w : options_.sampling.weights) add(std::bit_cast<std::uint64_t>(w));
    add(draws_per_epoch(dataset_.size(), options_.sampling));
    add(options_.sampling.replacement);
  }
  return h;
}

}  // namespace detail

// ---- LoaderState -------------------------------------------------------------------------------

std::string LoaderState::to_string() const {
  return "stoker-loader-state 1 seed=" + std::to_string(seed) + " epoch=" + std::to_string(epoch) +
         " next_batch=" + std::to_string(next_batch) + " rank=" + std::to_string(rank) +
         " world_size=" + std::to_string(world_size) + " digest=" + std::to_string(digest);
}

LoaderState LoaderState::parse(const std::string& text) {
  std::istringstream in(text);
  std::string magic, version;
  in >> magic >> version;
  if (magic != "stoker-loader-state" || version != "1") {
    throw InvalidArgument("not a stoker loader state (version 1): '" + text.substr(0, 60) + "'");
  }
  LoaderState st;
  static constexpr const char* kFields[] = {"seed", "epoch", "next_batch", "rank", "world_size", "digest"};
  unsigned seen = 0;  // a bit per field of kFields
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    const std::string key = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (eq == std::string::npos || ec != std::errc{} || end != value.data() + value.size()) {
      throw InvalidArgument("loader state: malformed field '" + field + "'");
    }
    const auto* known = std::find(std::begin(kFields), std::end(kFields), key);
    if (known == std::end(kFields)) throw InvalidArgument("loader state: unknown field '" + key + "'");
    const unsigned bit = 1u << (known - std::begin(kFields));
    if ((seen & bit) != 0) throw InvalidArgument("loader state: field '" + key + "' given twice");
    seen |= bit;
    // Each value within its type: a larger one would come back as another number.
    const std::uint64_t most = key == "rank" || key == "world_size" ? std::numeric_limits<int>::max()
                               : key == "next_batch"                ? std::numeric_limits<std::int64_t>::max()
                                                                    : std::numeric_limits<std::uint64_t>::max();
    if (v > most) throw InvalidArgument("loader state: " + key + " " + value + " is out of range");
    if (key == "seed") {
      st.seed = v;
    } else if (key == "epoch") {
      st.epoch = v;
    } else if (key == "next_batch") {
      st.next_batch = static_cast<std::int64_t>(v);
    } else if (key == "rank") {
      st.rank = static_cast<int>(v);
    } else if (key == "world_size") {
      st.world_size = static_cast<int>(v);
    } else {
      st.digest = v;
    }
  }
  for (std::size_t i = 0; i < std::size(kFields); ++i) {
    if ((seen & (1u << i)) == 0) throw InvalidArgument("loader state: no field '" + std::string(kFields[i]) + "'");
  }
  if (st.world_size < 1 || st.rank >= st.world_size) {
    throw InvalidArgument("loader state: rank " + std::to_string(st.rank) + " of world_size " +
                          std::to_string(st.world_size));
  }
  return st;
}

// ---- Batch -------------------------------------------------------------------------------------

Batch::Batch(std::shared_ptr<detail::LoaderCore> core, int slot) noexcept : core_(std::move(core)), slot_(slot) {}
Batch::Batch(Batch&& other) noexcept : core_(std::move(other.core_)), slot_(std::exchange(other.slot_, -1)) {}
Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}
Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (core_ && slot_ >= 0) core_->release(slot_);
  core_.reset();
  slot_ = -1;
}

int Batch::size() const noexcept { return core_->slot(slot_).size; }
const SampleShape& Batch::sample_shape() const noexcept { return core_->shape_; }
const std::byte* Batch::pixels() const noexcept { return core_->slot(slot_).pixels; }
std::span<const float> Batch::labels() const noexcept {
  return {core_->slot(slot_).labels.data(), static_cast<std::size_t>(size() * core_->label_width_)};
}
int Batch::label_width() const noexcept { return core_->label_width_; }
std::span<const std::int32_t> Batch::classes() const noexcept {
  return {core_->slot(slot_).classes.data(), static_cast<std::size_t>(size())};
}
std::span<const std::int64_t> Batch::sample_ids() const noexcept {
  return {core_->slot(slot_).ids.data(), static_cast<std::size_t>(size())};
}
std::span<const std::uint8_t> Batch::padding() const noexcept {
  return {core_->slot(slot_).padding.data(), static_cast<std::size_t>(size())};
}
std::uint64_t Batch::epoch() const noexcept { return core_->slot(slot_).epoch; }
std::int64_t Batch::index() const noexcept { return core_->slot(slot_).batch_index; }

// ---- Loader ------------------------------------------------------------------------------------

Loader::Loader(Dataset dataset, LoaderOptions options)
    : core_(std::make_shared<detail::LoaderCore>(std::move(dataset), std::move(options))) {}

Loader::~Loader() {
  if (core_) core_->shutdown();
}

void Loader::begin_epoch(std::uint64_t epoch) { core_->begin_epoch(epoch); }
void Loader::begin_epoch(std::uint64_t epoch, const std::function<void()>& while_waiting,
                         std::chrono::milliseconds interval) {
  core_->begin_epoch(epoch, 0, while_waiting, interval);
}
LoaderState Loader::state() const { return core_->state(); }

void Loader::resume(const LoaderState& st) { resume(st, {}, {}); }
void Loader::resume(const LoaderState& st, const std::function<void()>& while_waiting,
                    std::chrono::milliseconds interval) {
  const LoaderState here = core_->state();
  auto refuse = [](const std::string& what) { throw InvalidArgument("cannot resume from this loader state: " + what); };
  if (st.digest != here.digest) {
    refuse(
        "it was saved with another dataset or other settings (batch size, labels, output, shuffle, sharding, sample "
        "weights)");
  }
  if (st.seed != here.seed)
    refuse("its seed is " + std::to_string(st.seed) + ", this loader's " + std::to_string(here.seed));
  if (st.rank != here.rank || st.world_size != here.world_size) {
    refuse("it is rank " + std::to_string(st.rank) + " of " + std::to_string(st.world_size) + ", this loader rank " +
           std::to_string(here.rank) + " of " + std::to_string(here.world_size));
  }
  if (st.next_batch < 0 || st.next_batch > core_->batches_per_epoch_) {
    refuse("its next batch " + std::to_string(st.next_batch) + " is outside the epoch's " +
           std::to_string(core_->batches_per_epoch_));
  }
  core_->begin_epoch(st.epoch, st.next_batch, while_waiting, interval);
}
std::optional<Batch> Loader::next() { return core_->next(nullptr, {}); }
std::optional<Batch> Loader::next(const std::function<void()>& while_waiting, std::chrono::milliseconds interval) {
  return core_->next(while_waiting, interval);
}
void Loader::close() noexcept { core_->shutdown(); }
std::size_t Loader::batches_per_epoch() const noexcept { return static_cast<std::size_t>(core_->batches_per_epoch_); }
std::size_t Loader::samples_per_epoch() const noexcept { return core_->samples_per_epoch_; }
const Sharding& Loader::sharding() const noexcept { return core_->sharding_; }
const Dataset& Loader::dataset() const noexcept { return core_->dataset_; }
const LoaderOptions& Loader::options() const noexcept { return core_->options_; }
SampleShape Loader::sample_shape() const noexcept { return core_->shape_; }
int Loader::label_width() const noexcept { return core_->label_width_; }
int Loader::threads() const noexcept { return core_->threads_; }
std::size_t Loader::buffer_bytes() const noexcept { return core_->buffer_bytes_; }
int Loader::batch_capacity() const noexcept { return core_->batch_capacity_; }

LoaderStats Loader::stats() const noexcept {
  const auto& c = core_->counters_;
  constexpr double kNs = 1e-9;
  LoaderStats s;
  s.files_read = c.files.load();
  s.bytes_read = c.bytes.load();
  s.samples_decoded = c.decoded.load();
  s.samples_skipped = c.skipped.load();
  s.batches_delivered = c.batches.load();
  s.read_seconds = static_cast<double>(c.read_ns.load()) * kNs;
  s.decode_seconds = static_cast<double>(c.decode_ns.load()) * kNs;
  s.transform_seconds = static_cast<double>(c.transform_ns.load()) * kNs;
  s.consumer_wait_seconds = static_cast<double>(c.wait_ns.load()) * kNs;
  s.cache_hits = c.cache_hits.load();
  s.cache_misses = c.cache_misses.load();
  s.samples_decoded_in_part = c.partial_decodes.load();
  if (core_->cache_) s.cache_bytes_held = core_->cache_->bytes_held();
  return s;
}

void Loader::reset_stats() noexcept {
  auto& c = core_->counters_;
  for (auto* a : {&c.files, &c.bytes, &c.decoded, &c.skipped, &c.batches, &c.cache_hits, &c.cache_misses, &c.read_ns,
                  &c.decode_ns, &c.transform_ns, &c.wait_ns, &c.partial_decodes}) {
    a->store(0);
  }
}

std::optional<CacheStats> Loader::cache_stats() const {
  if (!core_->cache_) return std::nullopt;
  return core_->cache_->stats();
}

std::string Loader::cache_status() const { return core_->cache_ ? core_->cache_->file_status() : std::string(); }

std::vector<SkippedSample> Loader::skipped() const {
  std::lock_guard lock(core_->mu_);
  return core_->skipped_;
}

}  // namespace stoker
