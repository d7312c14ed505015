// GPU tests of GpuFeed (skip without a device; run on the emulated device of a
// STOKER_CUDA_EMULATION build): batches equal the CPU loader's, the conversion and augmentation
// stages, copy/compute overlap (measured with events on a GPU, ordered by a held stream on the
// emulated device), 1,000 batches without memory growth, shutdown mid-epoch with no pending
// stream work, budgets and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <unistd.h>
#include <vector>

#include "gpu_test_util.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/convert.hpp"
#include "stoker/pipeline/gpu_feed.hpp"
#if defined(STOKER_CUDA_EMULATION)
#include "stoker/core/detail/cuda_emulation.hpp"
#endif

namespace stoker {
namespace {

class GpuFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
  // `count` JPEGs of varied sizes in two classes.
  Dataset make_dataset(int count, int size = 48) {
    std::vector<Sample> samples;
    for (int i = 0; i < count; ++i) {
      const auto file = dir_ / ("img" + std::to_string(i) + ".jpg");
      test::write_jpeg(file, test::make_pattern_rgb(size + (i % 5) * 3, size + (i % 7) * 2, i));
      samples.push_back({file.string(), i % 2});
    }
    return dataset_from_list(std::move(samples), {"a", "b"});
  }
  static LoaderOptions loader_options(int batch, int size) {
    LoaderOptions o;
    o.batch_size = batch;
    o.image_height = o.image_width = size;
    o.interpolation = Interpolation::Bilinear;
    o.threads = 2;
    o.prefetch = 3;
    o.seed = 11;
    return o;
  }
  // Consumer work that reads nothing of a batch: on a GPU, `gpu_reps` conversions of a 12 MB
  // image; on the emulated device (host code, a thousand times slower) 16 of a 192 KiB one.
  static SampleShape work_shape() {
    return cuda_is_emulated() ? SampleShape{256, 256, 3, DType::U8, Layout::NHWC}
                              : SampleShape{2048, 2048, 3, DType::U8, Layout::NHWC};
  }
  static int work_reps(int gpu_reps) { return cuda_is_emulated() ? 16 : gpu_reps; }
  template <typename T>
  static std::vector<T> download(const void* p, std::size_t count) {
    std::vector<T> out(count);
    const Stream s;
    copy_to_host_async(out.data(), p, count * sizeof(T), s.get());
    s.synchronize();
    return out;
  }
  test::TempDir dir_;
};

TEST_F(GpuFeedTest, BatchesEqualTheCpuLoaders) {
  const Dataset ds = make_dataset(37);
  const LoaderOptions lo = loader_options(8, 32);
  GpuFeed feed(ds, lo, {.depth = 3});
  Loader cpu(ds, lo);
  std::printf("%s\n", feed.describe().c_str());
  EXPECT_EQ(feed.depth(), 3);
  EXPECT_GT(feed.device_bytes(), 3 * 8 * 32 * 32 * 3u);
  const Stream consumer;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    feed.begin_epoch(epoch);
    cpu.begin_epoch(epoch);
    int batches = 0;
    while (auto b = feed.next()) {
      auto h = cpu.next();
      ASSERT_TRUE(h.has_value());
      b->wait_on(consumer.get());
      consumer.synchronize();
      ASSERT_EQ(b->size(), h->size());
      EXPECT_EQ(b->dtype(), DType::U8);
      EXPECT_EQ(b->epoch(), epoch);
      EXPECT_EQ(b->index(), h->index());
      const auto px = download<std::uint8_t>(b->data(), b->bytes());
      EXPECT_EQ(std::memcmp(px.data(), h->pixels(), b->bytes()), 0);
      EXPECT_TRUE(std::equal(b->sample_ids().begin(), b->sample_ids().end(), h->sample_ids().begin()));
      EXPECT_TRUE(std::equal(b->labels().begin(), b->labels().end(), h->labels().begin()));
      EXPECT_EQ(download<std::int64_t>(b->device_sample_ids(), static_cast<std::size_t>(b->size())),
                std::vector<std::int64_t>(h->sample_ids().begin(), h->sample_ids().end()));
      EXPECT_EQ(download<float>(b->device_labels(), b->labels().size()),
                std::vector<float>(h->labels().begin(), h->labels().end()));
      ++batches;
    }
    EXPECT_FALSE(cpu.next().has_value());
    EXPECT_EQ(batches, 5);
    EXPECT_FALSE(feed.next().has_value());
  }
}

// state() counts the batches the consumer got (the loader runs ahead), and a feed resumed from it,
// after every position of an epoch, delivers what the uninterrupted feed delivers next.
TEST_F(GpuFeedTest, ResumesWhereTheConsumerStopped) {
  const Dataset ds = make_dataset(29);
  LoaderOptions lo = loader_options(4, 24);
  lo.shuffle = true;
  const Stream consumer;
  auto ids_after = [&](GpuFeed& feed, std::vector<std::vector<std::int64_t>>& out) {
    while (auto b = feed.next()) {
      b->wait_on(consumer.get());
      consumer.synchronize();
      out.emplace_back(b->sample_ids().begin(), b->sample_ids().end());
    }
  };
  GpuFeed whole(ds, lo, {.depth = 2});
  whole.begin_epoch(3);
  std::vector<std::vector<std::int64_t>> reference;
  ids_after(whole, reference);
  ASSERT_EQ(reference.size(), 8u);
  for (std::size_t stop = 0; stop <= reference.size(); ++stop) {
    LoaderState state;
    {
      GpuFeed first(ds, lo, {.depth = 2});
      first.begin_epoch(3);
      for (std::size_t i = 0; i < stop; ++i) ASSERT_TRUE(first.next().has_value());
      state = first.state();
    }
    EXPECT_EQ(state.epoch, 3u);
    EXPECT_EQ(state.next_batch, static_cast<std::int64_t>(stop)) << "counted at the consumer, not the loader";
    LoaderOptions other = lo;
    other.threads = 1;  // another thread count: the same batches
    GpuFeed resumed(ds, other, {.depth = 3});
    resumed.resume(state);
    std::vector<std::vector<std::int64_t>> rest;
    ids_after(resumed, rest);
    EXPECT_EQ(rest, std::vector<std::vector<std::int64_t>>(reference.begin() + static_cast<std::ptrdiff_t>(stop),
                                                           reference.end()))
        << "stopped after " << stop;
  }
  LoaderOptions reseeded = lo;
  reseeded.seed = 12;
  GpuFeed stranger(ds, reseeded, {.depth = 2});
  EXPECT_THROW(stranger.resume(whole.state()), InvalidArgument);
}

TEST_F(GpuFeedTest, ConvertStageMatchesHostReference) {
  const Dataset ds = make_dataset(20);
  const LoaderOptions lo = loader_options(6, 40);
  const auto spec =
      ConvertSpec::normalize(DType::BF16, Layout::NCHW, {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f});
  GpuFeed feed(ds, lo, {.depth = 2, .stage = make_convert_stage(spec)});
  EXPECT_EQ(feed.output_shape().dtype, DType::BF16);
  Loader cpu(ds, lo);
  feed.begin_epoch(0);
  cpu.begin_epoch(0);
  const Stream consumer;
  int batches = 0;
  while (auto b = feed.next()) {
    auto h = cpu.next();
    ASSERT_TRUE(h.has_value()) << "the feed delivered more batches than the loader";
    ASSERT_EQ(b->size(), h->size());
    b->wait_on(consumer.get());
    consumer.synchronize();
    const auto got = download<std::uint16_t>(b->data(), b->bytes() / 2);
    std::vector<std::uint16_t> want(got.size());
    convert_batch_host(spec, cpu.sample_shape(), h->size(), reinterpret_cast<const std::uint8_t*>(h->pixels()),
                       want.data());
    EXPECT_EQ(got, want);
    ++batches;
  }
  EXPECT_FALSE(cpu.next().has_value());
  EXPECT_EQ(batches, 4);
}

TEST_F(GpuFeedTest, AugmentStageMatchesCpuExecutor) {
  const Dataset ds = make_dataset(24);
  const LoaderOptions lo = loader_options(8, 56);  // the sources: 56x56 from the loader
  AugmentSpec s = test::base_spec(48, 48, FillMode::Reflect, 1);
  s.rotation_range = 30;
  s.horizontal_flip = true;
  s.brightness_range = Range{0.7, 1.3};
  s.dtype = DType::F32;
  s.normalization = ChannelNormalization::minus_one_to_one();
  auto cpu_aug = std::make_shared<Augmenter>(s);
  auto gpu = std::make_shared<CudaAugmenter>(cpu_aug);
  GpuFeed feed(ds, lo, {.depth = 3, .stage = gpu});
  Loader cpu(ds, lo);
  const Stream consumer;
  for (std::uint64_t epoch : {0u, 4u}) {
    feed.begin_epoch(epoch);
    cpu.begin_epoch(epoch);
    int batches = 0;
    while (auto b = feed.next()) {
      auto h = cpu.next();
      ASSERT_TRUE(h.has_value()) << "the feed delivered more batches than the loader";
      ASSERT_EQ(b->size(), h->size());
      ++batches;
      b->wait_on(consumer.get());
      consumer.synchronize();
      const std::size_t per = gpu->output_shape().elements();
      const auto got = download<float>(b->data(), per * static_cast<std::size_t>(b->size()));
      std::vector<float> want(per);
      const SampleShape in = cpu.sample_shape();
      for (int i = 0; i < h->size(); ++i) {
        const ImageView v{reinterpret_cast<const std::uint8_t*>(h->pixels()) + in.bytes() * i, in.height, in.width, 3,
                          static_cast<std::size_t>(in.width) * 3};
        cpu_aug->apply(v, {lo.seed, epoch, h->sample_ids()[static_cast<std::size_t>(i)]},
                       reinterpret_cast<std::byte*>(want.data()));
        EXPECT_LE(test::max_abs_diff(DType::F32, got.data() + per * i, want.data(), per), 1e-3) << i;
      }
    }
    EXPECT_FALSE(cpu.next().has_value());
    EXPECT_EQ(batches, 3);
  }
}

#if defined(STOKER_CUDA_EMULATION)
// Work queued on a stream that blocks it until the host opens the gate. Gives up after a minute
// (and says so) rather than hang a broken feed's test forever.
class StreamGate {
 public:
  explicit StreamGate(StreamHandle stream) : state_(std::make_shared<State>()) {
    emulation::launch(stream, [state = state_] {
      std::unique_lock lock(state->m);
      state->gave_up = !state->cv.wait_for(lock, std::chrono::minutes(1), [&] { return state->open; });
    });
  }
  ~StreamGate() { open(); }
  void open() {
    std::lock_guard lock(state_->m);
    state_->open = true;
    state_->cv.notify_all();
  }
  bool gave_up() const {
    std::lock_guard lock(state_->m);
    return state_->gave_up;
  }

 private:
  struct State {
    std::mutex m;
    std::condition_variable cv;
    bool open = false, gave_up = false;
  };
  std::shared_ptr<State> state_;
};

// On the emulated device copies, kernels and the loader share the host's cores, so timings show no
// overlap; stream order does. The consumer's stream is held at a gate inside its work on batch k
// while the host waits for batch k+1 to be in device memory: a feed that ordered the copy of k+1
// after the consumer's work on k never gets there.
void expect_next_batch_copied_while_consumer_works(GpuFeed& feed, const Stream& consumer) {
  feed.begin_epoch(1);
  std::optional<DeviceBatch> current = feed.next();
  int pairs = 0;
  while (current) {
    current->wait_on(consumer.get());
    StreamGate work(consumer.get());  // the consumer's work on batch k, not finished until open()
    current->release(consumer.get());
    std::optional<DeviceBatch> next = feed.next();
    if (next) {
      event_synchronize(next->ready_event());  // batch k+1 is in device memory...
      EXPECT_FALSE(work.gave_up()) << "batch " << next->index() << " was copied only after the work on the one before";
      EXPECT_FALSE(consumer.idle()) << "...while the consumer's stream is still inside its work on batch "
                                    << current->index();
      ++pairs;
    }
    work.open();
    current = std::move(next);
  }
  consumer.synchronize();
  EXPECT_EQ(pairs, 5);
}
#endif

// Copies of batch k+1 run while the consumer works on batch k. On a GPU every batch's copy
// interval (timing events on the copy stream) is compared with the consumer's work intervals
// (timing events on the consumer stream), all measured from one reference event; on the emulated
// device the order is checked instead (expect_next_batch_copied_while_consumer_works).
TEST_F(GpuFeedTest, CopiesOverlapConsumerWork) {
  const Dataset ds = make_dataset(96, 96);  // 6 batches per epoch
  LoaderOptions lo = loader_options(16, 128);
  lo.cache.kind = CacheKind::Decoded;  // warm epochs: the host side is a copy
  GpuFeed feed(ds, lo, {.depth = 2, .record_copy_timing = true});
  const Stream consumer;
  feed.begin_epoch(0);  // fills the cache
  while (auto b = feed.next()) {}
#if defined(STOKER_CUDA_EMULATION)
  expect_next_batch_copied_while_consumer_works(feed, consumer);
#else
  // Consumer work: repeated conversions of a scratch buffer (a few ms per batch).
  const SampleShape big = work_shape();
  DeviceBuffer scratch_in(big.bytes()), scratch_out(big.bytes() * 2);
  const auto work_spec = ConvertSpec::rescale(DType::F16, Layout::NCHW, 1.0f / 255.0f);
  const Event reference(true);
  reference.record(consumer);  // before the epoch starts, so every interval is after it
  reference.synchronize();     // elapsed_ms() needs both events completed (else cudaErrorNotReady)
  feed.begin_epoch(1);
  struct Interval {
    float start, end;
  };
  std::vector<Interval> copies;
  std::vector<std::unique_ptr<Event>> work_start, work_end;
  while (auto b = feed.next()) {
    b->wait_on(consumer.get());
    work_start.push_back(std::make_unique<Event>(true));
    work_end.push_back(std::make_unique<Event>(true));
    work_start.back()->record(consumer);
    for (int r = 0; r < 300; ++r) {  // ~12 us each on an H200: a few ms per batch
      convert_batch(work_spec, big, 1, scratch_in.as<std::uint8_t>(), scratch_out.get(), consumer.get());
    }
    work_end.back()->record(consumer);
    // This batch's copy events are re-recorded when its slot is reused: read them now (its copy
    // has completed: the consumer stream waited for it; the host waits only for that copy).
    event_synchronize(b->copy_end_event());
    copies.push_back(
        {elapsed_ms(reference.get(), b->copy_start_event()), elapsed_ms(reference.get(), b->copy_end_event())});
    b->release(consumer.get());
  }
  consumer.synchronize();
  std::vector<Interval> work;
  for (std::size_t k = 0; k < work_start.size(); ++k) {
    work.push_back(
        {elapsed_ms(reference.get(), work_start[k]->get()), elapsed_ms(reference.get(), work_end[k]->get())});
  }
  ASSERT_GE(work.size(), 3u);
  int overlapped = 0, pairs = 0;
  for (std::size_t k = 0; k + 1 < work.size(); ++k) {
    const Interval w = work[k], c = copies[k + 1];
    std::printf("batch %zu: work [%.3f, %.3f] ms, copy of %zu [%.3f, %.3f] ms\n", k, w.start, w.end, k + 1, c.start,
                c.end);
    ++pairs;
    if (c.start < w.end && c.end > w.start) ++overlapped;
  }
  std::printf("copies of k+1 overlapping the work on k: %d of %d\n", overlapped, pairs);
  RecordProperty("overlapped_pairs", overlapped);
  EXPECT_GE(overlapped * 2, pairs) << "fewer than half of the copies overlapped the consumer's work";
#endif
}

// A slot is refilled only after the consumer's work on its previous batch: with depth 1 every copy
// reuses the one slot, so the copy of batch k+1 must start after the consumer's work on batch k ends
// (timing events, one clock). Run with the legacy default stream (a null handle, whose reuse event
// used to be recorded on the feed's own stream instead) and with a created stream; both released by
// release() after wait_on, as a `while (auto b = feed.next())` loop does.
TEST_F(GpuFeedTest, SlotIsRefilledOnlyAfterConsumerWork) {
  const Dataset ds = make_dataset(20, 32);
  const LoaderOptions lo = loader_options(4, 32);  // 5 batches
  const SampleShape big = work_shape();
  DeviceBuffer scratch_in(big.bytes()), scratch_out(big.bytes() * 2);
  const auto work_spec = ConvertSpec::rescale(DType::F16, Layout::NCHW, 1.0f / 255.0f);
  GpuFeed feed(ds, lo, {.depth = 1, .record_copy_timing = true});
  const Stream created;
  for (const StreamHandle consumer : {static_cast<StreamHandle>(nullptr), created.get()}) {
    SCOPED_TRACE(consumer ? "created stream" : "legacy default stream");
    const Event reference(true);
    reference.record(consumer);
    reference.synchronize();  // elapsed_ms() needs both events completed (else cudaErrorNotReady)
    std::vector<float> copy_start;
    std::vector<std::unique_ptr<Event>> work_end;
    feed.begin_epoch(0);
    while (auto b = feed.next()) {
      event_synchronize(b->copy_end_event());  // this batch's copy (and so its start) completed
      copy_start.push_back(elapsed_ms(reference.get(), b->copy_start_event()));
      b->wait_on(consumer);
      for (int r = 0; r < work_reps(100); ++r) {  // about a millisecond of work reading nothing of the batch
        convert_batch(work_spec, big, 1, scratch_in.as<std::uint8_t>(), scratch_out.get(), consumer);
      }
      work_end.push_back(std::make_unique<Event>(true));
      work_end.back()->record(consumer);
    }  // ~DeviceBatch: release() after wait_on(consumer)
    event_synchronize(work_end.back()->get());
    ASSERT_EQ(copy_start.size(), 5u);
    for (std::size_t k = 0; k + 1 < copy_start.size(); ++k) {
      const float end = elapsed_ms(reference.get(), work_end[k]->get());
      std::printf("batch %zu: consumer work ends %.3f ms, copy of %zu starts %.3f ms\n", k, end, k + 1,
                  copy_start[k + 1]);
      EXPECT_GE(copy_start[k + 1], end - 1e-3f) << "the slot was overwritten while the consumer still used it";
    }
  }
}

std::size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

TEST_F(GpuFeedTest, ThousandBatchesWithoutMemoryGrowth) {
  const Dataset ds = make_dataset(32, 40);
  LoaderOptions lo = loader_options(4, 40);
  lo.cache.kind = CacheKind::Decoded;
  AugmentSpec s = test::base_spec(32, 32, FillMode::Nearest, 1);
  s.rotation_range = 20;
  s.channel_shift_range = 20;  // the statistics pass too
  s.dtype = DType::F32;
  s.layout = Layout::NCHW;
  auto gpu = std::make_shared<CudaAugmenter>(std::make_shared<Augmenter>(s), DType::BF16);
  GpuFeed feed(ds, lo, {.depth = 3, .stage = gpu});
  const Stream consumer;
  std::size_t device_free_after_warmup = 0, rss_after_warmup = 0;
  int batches = 0;
  for (std::uint64_t epoch = 0; batches < 1000; ++epoch) {
    feed.begin_epoch(epoch);
    while (auto b = feed.next()) {
      b->wait_on(consumer.get());
      b->release(consumer.get());
      if (++batches == 100) {
        consumer.synchronize();
        device_free_after_warmup = device_memory_info().free;
        rss_after_warmup = resident_bytes();
      }
      if (batches == 1000) break;
    }
  }
  consumer.synchronize();
  const std::size_t device_free = device_memory_info().free, rss = resident_bytes();
  std::printf("after 100 batches: device free %zu, RSS %zu; after 1000: device free %zu, RSS %zu\n",
              device_free_after_warmup, rss_after_warmup, device_free, rss);
  // A few MiB of slack for the driver's own lazy allocations (module loading); a per-batch leak
  // over 900 batches is far more.
  EXPECT_LE(device_free_after_warmup, device_free + (4u << 20)) << "device memory grew during steady state";
  EXPECT_LE(rss, rss_after_warmup + (8u << 20)) << "host memory grew by more than 8 MiB";
  EXPECT_EQ(feed.stats().batches_copied >= 1000, true);
}

TEST_F(GpuFeedTest, ShutdownMidEpochLeavesNoPendingWork) {
  const Dataset ds = make_dataset(64, 64);
  const LoaderOptions lo = loader_options(8, 64);
  AugmentSpec s = test::base_spec(64, 64, FillMode::Constant, 1);
  s.rotation_range = 10;
  auto gpu = std::make_shared<CudaAugmenter>(std::make_shared<Augmenter>(s));
  const Stream consumer;
  std::optional<DeviceBatch> kept;
  {
    GpuFeed feed(ds, lo, {.depth = 3, .stage = gpu});
    feed.begin_epoch(0);
    kept = feed.next();
    ASSERT_TRUE(kept.has_value());
    auto second = feed.next();
    ASSERT_TRUE(second.has_value());
    second->release();
    feed.shutdown();
    EXPECT_TRUE(feed.idle()) << "work still pending on the feed's streams after shutdown()";
    EXPECT_THROW(feed.next(), Error);
    EXPECT_THROW(feed.begin_epoch(1), Error);
  }  // destroyed mid-epoch, one batch still held
  kept->wait_on(consumer.get());
  const auto px = download<std::uint8_t>(kept->data(), kept->bytes());
  EXPECT_EQ(px.size(), kept->bytes());
  kept.reset();
  // A feed destroyed without shutdown() mid-epoch, with batches still in the ring.
  {
    GpuFeed feed(ds, lo, {.depth = 3, .stage = gpu});
    feed.begin_epoch(0);
    auto b = feed.next();
  }
  SUCCEED();
}

TEST_F(GpuFeedTest, BudgetsAndHeldSlots) {
  const Dataset ds = make_dataset(16, 32);
  const LoaderOptions lo = loader_options(4, 32);
  try {
    GpuFeed feed(ds, lo, {.depth = 3, .device_budget_bytes = 1000});
    FAIL() << "a 1000-byte budget held a batch";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1000 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot hold one batch"), std::string::npos) << what;
    EXPECT_NE(what.find("one slot needs"), std::string::npos) << what;
  }
  GpuFeed probe(ds, lo, {.depth = 1});
  const std::size_t slot = probe.slot_device_bytes();
  GpuFeed feed(ds, lo, {.depth = 4, .device_budget_bytes = slot * 2 + slot / 2});
  EXPECT_EQ(feed.depth(), 2);
  EXPECT_EQ(feed.device_bytes(), slot * 2);
  EXPECT_NE(feed.describe().find("depth lowered from 4 to 2"), std::string::npos) << feed.describe();
  feed.begin_epoch(0);
  auto a = feed.next();
  auto b = feed.next();
  EXPECT_THROW(feed.next(), Error);  // the consumer holds every slot
  a.reset();
  auto c = feed.next();
  ASSERT_TRUE(c.has_value());
  b.reset();
  auto d = feed.next();  // the last of the epoch's 4 batches
  ASSERT_TRUE(d.has_value());
  // Every slot is held again, but the epoch is over: the end, not an error.
  EXPECT_FALSE(feed.next().has_value());
}

// The loader's resize, except that in epoch 0 sample `fail_id` throws InvalidArgument (a transform
// that cannot work on what it was given).
class FailingInEpochZero final : public SampleTransform {
 public:
  FailingInEpochZero(const LoaderOptions& o, std::int64_t fail_id)
      : resize_(o.image_height, o.image_width, o.interpolation), fail_id_(fail_id) {}
  SampleShape output_shape() const override { return resize_.output_shape(); }
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override {
    if (ctx.epoch == 0 && ctx.sample_id == fail_id_) throw InvalidArgument("the transform cannot take this image");
    resize_.apply(src, ctx, dst);
  }

 private:
  ResizeTransform resize_;
  std::int64_t fail_id_;
};

// The feeder thread hands what stopped the loader to next() as it was thrown: a transform's
// InvalidArgument under the skip policy stops the epoch with that type after the batches before
// it; the next epoch runs in full, and the feed shuts down cleanly.
TEST_F(GpuFeedTest, LoaderErrorsReachNextWithTheirType) {
  const Dataset ds = make_dataset(24, 32);
  LoaderOptions lo = loader_options(4, 32);  // 6 batches
  lo.shuffle = false;
  lo.on_bad_sample = BadSamplePolicy::Skip;
  lo.transform = std::make_shared<FailingInEpochZero>(lo, 9);  // in the third batch
  GpuFeed feed(ds, lo, {.depth = 2});
  const Stream consumer;
  feed.begin_epoch(0);
  int batches = 0;
  try {
    while (auto b = feed.next()) {
      b->wait_on(consumer.get());
      ++batches;
    }
    ADD_FAILURE() << "the epoch ended without an error after " << batches << " batches";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the transform cannot take this image (loading " + ds.samples[9].path + ")"), std::string::npos)
        << what;
  }
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(feed.stats().loader.samples_skipped, 0u);
  feed.begin_epoch(1);
  std::size_t samples = 0;
  while (auto b = feed.next()) {
    b->wait_on(consumer.get());
    samples += static_cast<std::size_t>(b->size());
  }
  EXPECT_EQ(samples, ds.size());
  consumer.synchronize();
  feed.shutdown();
  EXPECT_TRUE(feed.idle());
}

class PageableAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override { return ::operator new(bytes); }
  void deallocate(void* p, std::size_t) noexcept override { ::operator delete(p); }
  const char* name() const noexcept override { return "host"; }
};

TEST_F(GpuFeedTest, RefusesPageableBatchMemory) {
  LoaderOptions lo = loader_options(4, 32);
  lo.allocator = std::make_shared<PageableAllocator>();
  EXPECT_THROW(GpuFeed(make_dataset(4, 32), lo), InvalidArgument);
}

}  // namespace
}  // namespace stoker
