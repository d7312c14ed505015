// The public Loader: files → decoded, transformed samples → batches in buffers allocated once.
//
//   stoker::Loader loader(stoker::dataset_from_directory("data/train"), options);
//   for (std::uint64_t epoch = 0; epoch < 10; ++epoch) {
//     loader.begin_epoch(epoch);
//     while (auto batch = loader.next()) { use(batch->pixels(), batch->labels()); }
//   }
//
// Decoding runs on a oneTBB arena of `threads` workers, one task per sample, writing straight into
// the sample's slot of a batch buffer. At most `prefetch` batches are in flight ahead of the
// consumer; a slow consumer causes backpressure, never growth.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/cache/sample_cache.hpp"
#include "stoker/core/host_allocator.hpp"
#include "stoker/core/image.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/plan.hpp"
#include "stoker/pipeline/transform.hpp"

namespace stoker {

enum class LabelMode : std::uint8_t {
  Binary,       // one float per sample, 0 or 1 (exactly two classes)
  Categorical,  // one-hot floats, one per class (Keras' default)
  Sparse,       // the class index as one float per sample (classes() has it as int32 too)
  None,         // no labels
};

// What a bad sample does: one whose own file cannot be read or decoded (DecodeError naming that
// file). Any other failure while loading a sample (out of memory, a transform's InvalidArgument, a
// cache file's IoError) stops the epoch under either policy, and next() throws it with its type.
enum class BadSamplePolicy : std::uint8_t {
  Fail,  // the epoch stops; next() throws the DecodeError naming the file and the reason
  Skip,  // the sample is left out of its batch (the batch gets smaller) and counted
};

LabelMode parse_label_mode(const std::string& name);               // binary|categorical|sparse|none
BadSamplePolicy parse_bad_sample_policy(const std::string& name);  // fail|skip
// nearest|bilinear|bicubic|lanczos|box|hamming|area|centre_nearest|opencv_linear
Interpolation parse_interpolation(const std::string& name);

// The defaults are those of the settings' table (loader_settings.hpp: loader_options_from({}) gives
// these values, tested), which the command's flags and the Python keyword arguments share.
struct LoaderOptions {
  int batch_size = 32;
  // The default transform: resize to this size (Keras' target_size), uint8 NHWC RGB.
  int image_height = 224;
  int image_width = 224;
  Interpolation interpolation = Interpolation::Nearest;  // Keras' default
  bool keep_aspect_ratio = false;                        // centre-crop to the target aspect ratio before resizing
  // JPEGs are decoded shrunk in the DCT domain (TurboJPEG's 1/2, 1/4, 1/8 scaling) down to, but not
  // below, the transform's min_decode size: fast, but not the pixels PIL decodes. false decodes
  // every JPEG at full size, as PIL does: needed for pixel parity with Keras' load_img.
  bool dct_scaling = true;
  // Replaces the default transform (e.g. an augment::Augmenter); then image_* are not used.
  std::shared_ptr<const SampleTransform> transform;

  LabelMode label_mode = LabelMode::Sparse;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;  // drop the last, partial batch of an epoch

  int threads = 0;   // decode threads; 0 = the cores this process may use (affinity, cgroup quota)
  int prefetch = 4;  // batches decoded ahead of the consumer (>= 1)
  BadSamplePolicy on_bad_sample = BadSamplePolicy::Fail;
  DecodeLimits limits;
  std::shared_ptr<HostAllocator> allocator;  // null = aligned host memory
  // Encoded bytes or decoded pixels kept across epochs (and processes, with cache.file).
  CacheOptions cache;
  // This process's share of each epoch in a job of several (plan.hpp). Unset: what the launcher
  // set in the environment (sharding_from_environment(): torchrun, Slurm), rank 0 of 1 without.
  std::optional<Sharding> sharding;
  // Weighted sampling with or without replacement (PyTorch's WeightedRandomSampler, plan.hpp):
  // each epoch draws sampling.num_samples samples by weight from (seed, epoch), then shards the
  // draw as above. Empty weights (the default): every sample once per epoch. Part of the digest
  // a LoaderState is checked against.
  WeightedSampling sampling;
};

// Cumulative counters since construction (or reset_stats()). Times are busy time summed over
// threads, except consumer_wait_seconds: the time next() blocked waiting for data.
struct LoaderStats {
  std::uint64_t files_read = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t samples_decoded = 0;
  std::uint64_t samples_skipped = 0;
  std::uint64_t batches_delivered = 0;
  double read_seconds = 0;
  double decode_seconds = 0;
  double transform_seconds = 0;
  double consumer_wait_seconds = 0;
  std::uint64_t cache_hits = 0;  // samples served without reading their file (decoded: nor decoding)
  std::uint64_t cache_misses = 0;
  std::uint64_t cache_bytes_held = 0;  // RAM held by the cache now, bookkeeping included
  // JPEGs decoded only in the box the transform reads (SampleTransform::source_region).
  std::uint64_t samples_decoded_in_part = 0;
};

struct SkippedSample {
  std::int64_t sample_id = 0;
  std::string path;
  std::string reason;
};

// Where a loader stands, so that a restarted process continues with the same batches: the next
// batch of an epoch and what the epoch's batches depend on. One line of text (to_string / parse)
// to keep in a checkpoint.
struct LoaderState {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::int64_t next_batch = 0;  // batches of `epoch` delivered so far
  int rank = 0;
  int world_size = 1;
  std::uint64_t digest = 0;  // of the dataset and of the settings the batches depend on

  std::string to_string() const;
  static LoaderState parse(const std::string& text);  // InvalidArgument when malformed
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

namespace detail {
class LoaderCore;
}

// A filled batch, lent to the consumer. Destroying it (or release()) returns its buffer to the
// pool. It stays valid even if the Loader is destroyed first.
class Batch {
 public:
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  int size() const noexcept;  // samples in this batch (<= batch_size)
  const SampleShape& sample_shape() const noexcept;
  const std::byte* pixels() const noexcept;        // size() * sample_shape().bytes(), sample-major
  std::span<const float> labels() const noexcept;  // size() * label_width()
  int label_width() const noexcept;
  std::span<const std::int32_t> classes() const noexcept;     // class index per sample (-1: none)
  std::span<const std::int64_t> sample_ids() const noexcept;  // index into the dataset
  // 1 for a sample that only pads this rank's share to the common count (Sharding): a repeat of
  // a sample another rank (or this one) also has this epoch; evaluation should not count it.
  std::span<const std::uint8_t> padding() const noexcept;
  std::uint64_t epoch() const noexcept;
  std::int64_t index() const noexcept;  // position of this batch in its epoch
  void release() noexcept;

 private:
  friend class detail::LoaderCore;
  Batch(std::shared_ptr<detail::LoaderCore> core, int slot) noexcept;
  std::shared_ptr<detail::LoaderCore> core_;
  int slot_ = -1;
};

class Loader {
 public:
  // Validates the options (throws InvalidArgument naming the option) and allocates every batch
  // buffer up front, each as large as a batch can be (batch_capacity()). The dataset must not be
  // empty (DatasetError). Buffers whose bytes overflow are an InvalidArgument, and buffers larger
  // than the memory this process may use (the machine's, or its cgroup's limit) a BadAlloc, both
  // naming batch_size, prefetch, the sample's shape and the bytes, before anything is allocated.
  Loader(Dataset dataset, LoaderOptions options);
  ~Loader();  // stops decoding, joins every task; outstanding Batches stay valid
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) an epoch: its order comes from (seed, epoch). An unfinished previous
  // epoch is abandoned. Decoding of the first `prefetch` batches starts immediately.
  void begin_epoch(std::uint64_t epoch);
  // begin_epoch(), calling `while_waiting` about every `interval` while the samples of the
  // abandoned epoch that are being decoded finish (without the loader's lock). What it throws
  // leaves with no epoch begun: next() throws until begin_epoch() is called again.
  void begin_epoch(std::uint64_t epoch, const std::function<void()>& while_waiting, std::chrono::milliseconds interval);

  // The next batch of the current epoch, in plan order; std::nullopt at the end of the epoch.
  // Throws what stopped the epoch, with the type it was thrown with (DecodeError for a bad sample
  // under BadSamplePolicy::Fail; InvalidArgument, BadAlloc... from any sample under either policy;
  // stoker's own types say which file was loading), again on each call until begin_epoch(). Throws
  // Error if the consumer holds every buffer, and IoError at the end of an epoch when the cache file
  // (CacheOptions::file) cannot be written.
  std::optional<Batch> next();
  // next(), calling `while_waiting` about every `interval` while the batch is not ready, without
  // the loader's lock (where a binding looks for Ctrl-C). What it throws leaves next() at once and
  // the loader as it was: a later call waits for the same batch.
  std::optional<Batch> next(const std::function<void()>& while_waiting, std::chrono::milliseconds interval);

  // Stops decoding and joins every task, as the destructor does, leaving the object to be
  // destroyed. A next() waiting in another thread returns and throws Error saying so, as every
  // later begin_epoch(), resume() and next() does. Outstanding Batches stay valid.
  void close() noexcept;

  // The state after the batches next() has delivered in the current epoch (epoch 0, batch 0
  // before any). Continuing from it with resume() gives the batches an uninterrupted run would
  // have given next: the same samples, the same augmentation, pixel for pixel, whatever the
  // thread count (the plan and every draw are functions of (seed, epoch, sample)).
  LoaderState state() const;
  // Starts state.epoch at state.next_batch (begin_epoch for a later part of the epoch). Throws
  // InvalidArgument naming what differs when the state comes from another dataset, other
  // settings, another seed or another rank.
  void resume(const LoaderState& state);
  // resume(), calling `while_waiting` as begin_epoch()'s overload does.
  void resume(const LoaderState& state, const std::function<void()>& while_waiting, std::chrono::milliseconds interval);

  std::size_t batches_per_epoch() const noexcept;
  std::size_t samples_per_epoch() const noexcept;  // this rank's share, padding included
  const Sharding& sharding() const noexcept;       // as resolved at construction
  const Dataset& dataset() const noexcept;
  const LoaderOptions& options() const noexcept;
  SampleShape sample_shape() const noexcept;
  int label_width() const noexcept;
  int threads() const noexcept;
  std::size_t buffer_bytes() const noexcept;  // batch memory allocated at construction
  // The samples a batch buffer holds: batch_size, or samples_per_epoch() when fewer (a batch can
  // hold no more). The buffers are sized by it.
  int batch_capacity() const noexcept;

  LoaderStats stats() const noexcept;
  void reset_stats() noexcept;
  std::vector<SkippedSample> skipped() const;  // samples skipped in the current epoch
  // The cache's own counters and how its file was found; nullopt / empty without a cache.
  std::optional<CacheStats> cache_stats() const;
  std::string cache_status() const;

 private:
  std::shared_ptr<detail::LoaderCore> core_;
};

}  // namespace stoker
