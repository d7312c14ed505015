// Keeps a GPU fed: a Loader filling pinned batch buffers, a ring of device buffers allocated once,
// cudaMemcpyAsync of the uint8 batches on a dedicated copy stream (one event per batch), an
// optional stage on the GPU (conversion or the CUDA augmentation executor) and device batches
// handed to the consumer, who waits on an event, never on the host.
//
//   stoker::GpuFeed feed(dataset, loader_options, {.depth = 3, .stage = stage});
//   feed.begin_epoch(0);
//   while (auto b = feed.next()) {
//     b->wait_on(train_stream);                  // cudaStreamWaitEvent, no host sync
//     train_step(b->data(), b->device_labels(), train_stream);
//   }                                            // releasing b records an event on train_stream:
//                                                // its slot is refilled only after that work
//
// A feeder thread takes host batches from the loader, copies them into free ring slots and runs
// the stage; the copy of batch k+1 overlaps the stage and the consumer's work on batch k. Host
// batches go back to the loader as soon as their copy has completed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "stoker/core/cuda.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/device_stage.hpp"
#include "stoker/pipeline/loader.hpp"

namespace stoker {

struct GpuFeedOptions {
  // The CUDA device of the feed's streams and memory; -1 = the calling thread's current device.
  // The caller's current device is the same after construction as before.
  int device = -1;
  int depth = 3;  // device slots in the ring (>= 1; 2+ lets copies overlap the consumer's work)
  // Device memory the feed may take (ring + stage workspaces), 0 = what the ring needs. A budget
  // smaller than one slot fails at construction with the numbers; a budget smaller than `depth`
  // slots lowers the depth to what fits.
  std::size_t device_budget_bytes = 0;
  // Runs on each copied batch (make_convert_stage, CudaAugmenter). Null: the batch as copied.
  std::shared_ptr<const DeviceStage> stage;
  // Record timing events around each batch's host-to-device copy (DeviceBatch::copy_events), for
  // measuring copy/compute overlap.
  bool record_copy_timing = false;
};

struct GpuFeedStats {
  std::uint64_t batches_copied = 0;
  std::uint64_t bytes_to_device = 0;  // pixels + labels + ids
  double consumer_wait_seconds = 0;   // next() blocked waiting for a copied batch
  double feeder_wait_seconds = 0;     // the feeder waited for a free slot (consumer-bound)
  LoaderStats loader;                 // the host side (its consumer wait is the feeder's)
};

namespace detail {
class FeedCore;
}

// A batch in device memory, lent to the consumer. Move-only; destroying it (or release()) gives
// its slot back. Stays valid if the GpuFeed is destroyed first.
class DeviceBatch {
 public:
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  ~DeviceBatch();

  int size() const noexcept;                         // samples
  const SampleShape& sample_shape() const noexcept;  // dtype and layout included
  DType dtype() const noexcept { return sample_shape().dtype; }
  Layout layout() const noexcept { return sample_shape().layout; }
  const void* data() const noexcept;    // device: size() * sample_shape().bytes()
  void* mutable_data() const noexcept;  // the consumer may work in place
  std::size_t bytes() const noexcept;
  int label_width() const noexcept;
  std::span<const float> labels() const noexcept;             // host copy
  std::span<const std::int64_t> sample_ids() const noexcept;  // host copy
  std::span<const std::uint8_t> padding() const noexcept;     // host copy of Batch::padding()
  const float* device_labels() const noexcept;                // size() * label_width()
  const std::int64_t* device_sample_ids() const noexcept;
  std::uint64_t epoch() const noexcept;
  std::int64_t index() const noexcept;

  // The event that completes when the batch is in device memory (and the stage has run).
  EventHandle ready_event() const noexcept;
  // Timing events recorded on the copy stream before and after this batch's copy; null unless
  // GpuFeedOptions::record_copy_timing.
  EventHandle copy_start_event() const noexcept;
  EventHandle copy_end_event() const noexcept;
  // Makes `consumer` wait for ready_event() (cudaStreamWaitEvent: the host never blocks) and
  // remembers it: release() records the slot's reuse event on the last stream given here. A null
  // handle is the legacy default stream (stream 0), a consumer stream like any other; it and
  // per_thread_default_stream() are the default streams of the feed's device, whatever device is
  // current in the calling thread.
  void wait_on(StreamHandle consumer) const;
  // Gives the slot back: its buffers are overwritten only after the work enqueued so far on the
  // last stream given to wait_on (release()) or on `consumer` (release(consumer); null = the legacy
  // default stream) has completed. release() without any wait_on: after the feed's own work.
  // Only the one stream is waited for: work on other streams must be ordered before it. Released
  // from another thread than wait_on's, a per-thread default stream still means wait_on's thread's
  // (the reuse event goes on the legacy default stream, which follows it).
  void release() noexcept;
  void release(StreamHandle consumer) noexcept;

 private:
  friend class detail::FeedCore;
  DeviceBatch(std::shared_ptr<detail::FeedCore> core, int slot) noexcept;
  std::shared_ptr<detail::FeedCore> core_;
  int slot_ = -1;
};

class GpuFeed {
 public:
  // Requires a CUDA device (CudaError with the reason otherwise: no GPU, driver too old, built
  // without CUDA). Builds the Loader with pinned batch buffers (an allocator given in `loader`
  // must be pinned) and takes all device memory now: BadAlloc with the numbers when it does not fit.
  GpuFeed(Dataset dataset, LoaderOptions loader, GpuFeedOptions options = {});
  ~GpuFeed();  // stops the feeder, waits for the feed's streams; outstanding DeviceBatches stay valid
  GpuFeed(const GpuFeed&) = delete;
  GpuFeed& operator=(const GpuFeed&) = delete;

  void begin_epoch(std::uint64_t epoch);
  // begin_epoch(), calling `while_waiting` about every `interval` while the feeder finishes its
  // batch and the loader the abandoned epoch's samples (as Loader's overload; where a binding
  // looks for Ctrl-C). What it throws leaves with no epoch begun.
  void begin_epoch(std::uint64_t epoch, const std::function<void()>& while_waiting, std::chrono::milliseconds interval);
  // The batches next() has delivered, as Loader::state() counts them (the loader itself runs
  // ahead), and the continuation from such a state: as Loader::resume.
  LoaderState state() const;
  void resume(const LoaderState& state);
  void resume(const LoaderState& state, const std::function<void()>& while_waiting, std::chrono::milliseconds interval);
  // The next batch in plan order; nullopt at the end of the epoch. Throws what the loader throws
  // (DecodeError under BadSamplePolicy::Fail), and Error when the consumer holds every slot.
  std::optional<DeviceBatch> next();
  // next(), calling `while_waiting` about every `interval` while no batch is ready, without the
  // feed's lock. What it throws leaves next() at once and the feed as it was.
  std::optional<DeviceBatch> next(const std::function<void()>& while_waiting, std::chrono::milliseconds interval);

  // Stops feeding and waits until no work of the feed is pending on its streams. Idempotent.
  void shutdown();
  bool idle() const;  // both streams idle (cudaStreamQuery)

  std::size_t batches_per_epoch() const noexcept;
  int depth() const noexcept;                 // slots in the ring (after the budget)
  std::size_t device_bytes() const noexcept;  // device memory taken at construction
  std::size_t slot_device_bytes() const noexcept;
  std::size_t pinned_bytes() const noexcept;  // loader batch buffers + staging
  int loader_threads() const noexcept;        // the host loader's decode threads
  SampleShape input_shape() const noexcept;   // what the loader produces
  SampleShape output_shape() const noexcept;  // what next() delivers
  std::string describe() const;               // one line: depth, bytes, stage, device
  GpuFeedStats stats() const;
  // The loader's skipped samples of the current epoch (Loader::skipped): it runs up to depth()
  // batches ahead of next(), so the list is complete once next() has returned nullopt.
  std::vector<SkippedSample> skipped() const;

 private:
  std::shared_ptr<detail::FeedCore> core_;
};

}  // namespace stoker
