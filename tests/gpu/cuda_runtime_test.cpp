// The runtime's error handling and device rules (skip without a device; run on the emulated
// device of a STOKER_CUDA_EMULATION build and on a GPU):
// - a query answering cudaErrorNotReady leaves no error behind for the next launch check;
// - a launch with a bad configuration throws CudaError naming its kernel;
// - after a sticky fault (emulated device only) every GPU object reports the original error;
// - a GpuFeed on another device leaves the caller's current device alone, and its default-stream
//   consumers are the feed device's (TwoDevices.*, with two devices: STOKER_EMULATED_DEVICES=2).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch_probe.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/convert.hpp"
#include "stoker/pipeline/gpu_feed.hpp"
#include "test_support.hpp"
#if defined(STOKER_CUDA_EMULATION)
#include "stoker/core/detail/cuda_emulation.hpp"
#endif

namespace stoker {
namespace {

#if defined(STOKER_HAVE_CUDA) || defined(STOKER_CUDA_EMULATION)

class CudaErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

// `b`'s first `n` ints, once the work on it has completed.
std::vector<int> download(const DeviceBuffer& b, int n) {
  std::vector<int> out(static_cast<std::size_t>(n));
  const Stream s;
  copy_to_host_async(out.data(), b.get(), out.size() * sizeof(int), s.get());
  s.synchronize();
  return out;
}

// Stream::idle() and Event::done() answering "not yet" (cudaErrorNotReady) must not leave that
// answer as the thread's last error: the feeder queries its events between launches, and the next
// launch check would report "device not ready" for a launch that worked.
TEST_F(CudaErrors, NotReadyQueriesLeaveNoErrorForTheNextLaunchCheck) {
  const Stream stream;
  const Event recorded;
  test::launch_probe_sleep(300, stream.get());
  recorded.record(stream);
  EXPECT_FALSE(stream.idle());
  EXPECT_FALSE(recorded.done());
  const Stream other;
  DeviceBuffer out(64 * sizeof(int));
  EXPECT_NO_THROW(test::launch_probe_fill(out.as<int>(), 64, 32, other.get()));
  EXPECT_NO_THROW(STOKER_CUDA_CHECK_LAUNCH("nothing launched since"));
  stream.synchronize();
  other.synchronize();
  EXPECT_TRUE(stream.idle());
  EXPECT_TRUE(recorded.done());
  const std::vector<int> v = download(out, 64);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i);
}

// A launch with an invalid configuration throws at its launch check, naming the kernel (a block of
// 2048 threads, an empty grid: cudaErrorInvalidConfiguration), and leaves nothing behind.
TEST_F(CudaErrors, BadLaunchThrowsCudaErrorNamingTheKernel) {
  const Stream stream;
  DeviceBuffer out(4096 * sizeof(int));
  for (const auto& [n, block] : {std::pair{4096, 2048}, std::pair{0, 256}}) {
    SCOPED_TRACE("n " + std::to_string(n) + ", block " + std::to_string(block));
    try {
      test::launch_probe_fill(out.as<int>(), n, block, stream.get());
      ADD_FAILURE() << "the launch did not fail";
    } catch (const CudaError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), 9) << what;  // cudaErrorInvalidConfiguration
      EXPECT_NE(what.find("launch of probe_fill_kernel"), std::string::npos) << what;
      EXPECT_NE(what.find("cudaErrorInvalidConfiguration"), std::string::npos) << what;
    }
  }
  // The error was read and cleared: a good launch afterwards passes its check and runs.
  EXPECT_NO_THROW(test::launch_probe_fill(out.as<int>(), 4096, 256, stream.get()));
  stream.synchronize();
  const std::vector<int> v = download(out, 4096);
  EXPECT_EQ(v[4095], 4095);
  EXPECT_TRUE(cuda_context_lost_reason().empty());
}

#endif

#if defined(STOKER_CUDA_EMULATION)
// A fault that corrupts the context (here an illegal address, injected on the emulated device)
// shows at the next synchronisation; from then on every CUDA user in the process says that the
// context is unusable since that error, not some later symptom.
class StickyFault : public CudaErrors {
 protected:
  void TearDown() override { emulation::reset_after_fault(); }
};

TEST_F(StickyFault, EveryLaterFailureReportsTheOriginalError) {
  const Stream stream;
  DeviceBuffer out(256 * sizeof(int));
  emulation::fail_next_launch(700);                                // cudaErrorIllegalAddress
  test::launch_probe_fill(out.as<int>(), 256, 128, stream.get());  // the launch itself succeeds
  std::string original;
  try {
    stream.synchronize();
    FAIL() << "the fault did not show at the synchronisation";
  } catch (const CudaError& e) {
    original = e.what();
    EXPECT_EQ(e.code(), 700);
    EXPECT_NE(original.find("cudaErrorIllegalAddress"), std::string::npos) << original;
    EXPECT_NE(original.find("cudaStreamSynchronize"), std::string::npos) << original;
    EXPECT_NE(original.find("unusable"), std::string::npos) << original;
  }
  const std::string lost = cuda_context_lost_reason();
  ASSERT_FALSE(lost.empty());
  EXPECT_NE(lost.find("cudaErrorIllegalAddress"), std::string::npos) << lost;
  EXPECT_NE(cuda_unavailable_reason().find("the CUDA context is unusable since"), std::string::npos);

  // Later calls, of any kind, report the original error with its code.
  auto expect_original = [&](const char* what, auto&& call) {
    SCOPED_TRACE(what);
    try {
      call();
      ADD_FAILURE() << "did not fail";
    } catch (const CudaError& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), 700) << m;
      EXPECT_NE(m.find("the CUDA context is unusable since"), std::string::npos) << m;
      EXPECT_NE(m.find("cudaErrorIllegalAddress"), std::string::npos) << m;
    }
  };
  expect_original("a device buffer", [] { DeviceBuffer b(1024, "scratch"); });
  expect_original("a stream", [] { Stream s; });
  expect_original("a launch", [&] { test::launch_probe_fill(out.as<int>(), 256, 128, stream.get()); });
  expect_original("require_cuda_device", [] { require_cuda_device("GpuFeed"); });
  test::TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 4; ++i) {
    const auto file = dir / ("img" + std::to_string(i) + ".jpg");
    test::write_jpeg(file, test::make_pattern_rgb(32, 32, i));
    samples.push_back({file.string(), i % 2});
  }
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.image_height = lo.image_width = 32;
  expect_original("a GpuFeed", [&] { GpuFeed feed(dataset_from_list(samples, {"a", "b"}), lo); });
}

// A fault in a feed's stage: next() reports it (the original error, or the context unusable since
// it), never an unrelated symptom.
TEST_F(StickyFault, FeedReportsTheFault) {
  test::TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 16; ++i) {
    const auto file = dir / ("img" + std::to_string(i) + ".jpg");
    test::write_jpeg(file, test::make_pattern_rgb(32, 32, i));
    samples.push_back({file.string(), i % 2});
  }
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.image_height = lo.image_width = 32;
  lo.threads = 2;
  GpuFeed feed(dataset_from_list(samples, {"a", "b"}), lo,
               {.depth = 2, .stage = make_convert_stage(ConvertSpec::rescale(DType::F32, Layout::NCHW, 1.0f / 255))});
  emulation::fail_next_launch(700);
  feed.begin_epoch(0);
  std::string error;
  try {
    while (auto b = feed.next()) event_synchronize(b->ready_event());
  } catch (const CudaError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("cudaErrorIllegalAddress"), std::string::npos) << "next() reported: " << error;
  EXPECT_FALSE(cuda_context_lost_reason().empty());
}
#endif

#if defined(STOKER_HAVE_CUDA) || defined(STOKER_CUDA_EMULATION)
// A feed on another device than the caller's: the caller's current device (which PyTorch shares)
// is the same after construction, next() and release; a null consumer stream is the feed device's
// legacy default stream.
class TwoDevices : public CudaErrors {
 protected:
  void SetUp() override {
    CudaErrors::SetUp();
    if (IsSkipped()) return;
    if (cuda_device_count() < 2) GTEST_SKIP() << "one CUDA device (emulated: STOKER_EMULATED_DEVICES=2)";
  }
};

Dataset small_dataset(const test::TempDir& dir, int count) {
  std::vector<Sample> samples;
  for (int i = 0; i < count; ++i) {
    const auto file = dir / ("img" + std::to_string(i) + ".jpg");
    test::write_jpeg(file, test::make_pattern_rgb(32, 32, i));
    samples.push_back({file.string(), i % 2});
  }
  return dataset_from_list(std::move(samples), {"a", "b"});
}

LoaderOptions small_options() {
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.image_height = lo.image_width = 32;
  lo.threads = 2;
  return lo;
}

TEST_F(TwoDevices, FeedOnDeviceOneLeavesTheCallerOnDeviceZero) {
  set_device(0);
  test::TempDir dir;
  GpuFeed feed(small_dataset(dir, 8), small_options(), {.device = 1, .depth = 2});
  EXPECT_EQ(current_device(), 0);
  feed.begin_epoch(0);
  int batches = 0;
  while (auto b = feed.next()) {
    b->wait_on(legacy_default_stream());  // device 1's legacy default stream, not the caller's
    EXPECT_EQ(current_device(), 0);
    ++batches;
  }  // release: the reuse event on device 1's legacy default stream
  EXPECT_EQ(batches, 4);
  EXPECT_EQ(current_device(), 0);
  {
    const DeviceGuard on(1);
    stream_synchronize(legacy_default_stream());
    EXPECT_EQ(current_device(), 1);
  }
  EXPECT_EQ(current_device(), 0);
}
#endif

#if defined(STOKER_CUDA_EMULATION)
// The slot of a batch read on a default stream is refilled only after the consumer's work queued
// there before the release, when the caller's current device is another one (null: the feed
// device's legacy default stream) and when the batch is released by another thread than the one
// that read it on its per-thread default stream. With one slot the next batch's copy waits for
// that work: held at a gate, the next batch must not be ready until it opens.
void expect_next_waits_for_gated_work(GpuFeed& feed, int feed_device, StreamHandle consumer, bool other_thread) {
  feed.begin_epoch(0);
  std::optional<DeviceBatch> b = feed.next();
  ASSERT_TRUE(b);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  {
    const DeviceGuard on(feed_device);  // the consumer's work goes to the feed's device
    b->wait_on(consumer);
    emulation::launch(consumer, [opened] { opened.wait_for(std::chrono::minutes(1)); });
  }
  if (other_thread) {
    std::thread([&] { b.reset(); }).join();  // released by another thread (device 0 current there)
  } else {
    b.reset();
  }
  std::optional<DeviceBatch> next = feed.next();  // queued: its copy waits for the slot on the GPU
  ASSERT_TRUE(next);
  auto copied = std::async(std::launch::async, [e = next->ready_event()] { event_synchronize(e); });
  EXPECT_EQ(copied.wait_for(std::chrono::milliseconds(400)), std::future_status::timeout)
      << "the slot was refilled while the consumer's work on it was still queued";
  gate.set_value();
  copied.get();
  const DeviceGuard on(feed_device);
  stream_synchronize(consumer);
}

TEST_F(TwoDevices, NullConsumerStreamIsTheFeedDevices) {
  set_device(0);
  test::TempDir dir;
  GpuFeed feed(small_dataset(dir, 8), small_options(), {.device = 1, .depth = 1});
  expect_next_waits_for_gated_work(feed, 1, legacy_default_stream(), false);
  EXPECT_EQ(current_device(), 0);
}

TEST_F(CudaErrors, PerThreadStreamReleasedFromAnotherThread) {
  const int device = cuda_device_count() - 1;  // device 1 with two: the caller stays on 0
  set_device(0);
  test::TempDir dir;
  GpuFeed feed(small_dataset(dir, 8), small_options(), {.device = device, .depth = 1});
  expect_next_waits_for_gated_work(feed, device, per_thread_default_stream(), true);
  EXPECT_EQ(current_device(), 0);
}
#endif

}  // namespace
}  // namespace stoker
