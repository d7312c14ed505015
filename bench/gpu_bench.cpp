// GPU benchmark (issue 5): prints a short table.
//  1. the CUDA augmentation kernel alone: 299x299, batch 256, uint8 in -> bf16 NCHW normalised out
//  2. warm-epoch batches: decoded cache -> pinned -> device -> CUDA augmentation, delivered into
//     device memory
//  3. achieved host-to-device bandwidth of the feed's copies vs a plain pinned cudaMemcpy of the
//     same size
//
//   gpu_bench [--size 299] [--batch 256] [--images 4096] [--iters 50] [--epochs 5] [--threads 0]
//             [--dir /tmp/stoker_gpu_bench]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/error.hpp"
#include "stoker/pipeline/cuda.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int size = 299;
  int batch = 256;
  int images = 4096;
  int iters = 50;
  int epochs = 5;
  int threads = 0;
  std::string dir = "/tmp/stoker_gpu_bench";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--size") a.size = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--images") a.images = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--dir") a.dir = v;
    else throw stoker::InvalidArgument("unknown option " + k);
  }
  return a;
}

// Keras-style training augmentation with torchvision normalisation, f32 spec (bf16 on the GPU).
stoker::AugmentSpec bench_spec(int size) {
  stoker::AugmentSpec s;
  s.height = s.width = size;
  s.rotation_range = 20;
  s.width_shift_range = stoker::ShiftRange::uniform(0.1);
  s.height_shift_range = stoker::ShiftRange::uniform(0.1);
  s.zoom_range = stoker::AugmentSpec::zoom(0.2);
  s.horizontal_flip = true;
  s.brightness_range = stoker::Range{0.8, 1.2};
  s.fill_mode = stoker::FillMode::Reflect;
  s.dtype = stoker::DType::F32;
  s.layout = stoker::Layout::NCHW;
  s.normalization = stoker::ChannelNormalization::torch();
  return s;
}

cv::Mat pattern(int h, int w, int seed) {
  cv::Mat m(h, w, CV_8UC3);
  std::mt19937 rng(static_cast<unsigned>(seed));
  const int fx = 1 + static_cast<int>(rng() % 7), fy = 1 + static_cast<int>(rng() % 5);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* p = m.ptr<std::uint8_t>(y) + 3 * x;
      p[0] = static_cast<std::uint8_t>((x * fx + y) & 255);
      p[1] = static_cast<std::uint8_t>((y * fy + 3 * x) & 255);
      p[2] = static_cast<std::uint8_t>(((x ^ y) + seed * 13) & 255);
    }
  cv::circle(m, {w / 2, h / 2}, std::min(h, w) / 4, cv::Scalar(250, 30, 90), -1);
  return m;
}

struct KernelResult {
  double gpu = 0;   // img/s by GPU events (kernels + job-table copies)
  double wall = 0;  // img/s by wall clock, host parameter draw included
};

KernelResult kernel_alone(const Args& a) {
  auto cpu = std::make_shared<stoker::Augmenter>(bench_spec(a.size));
  const stoker::CudaAugmenter gpu(cpu, stoker::DType::BF16);
  const stoker::Stream stream;
  const std::size_t src_bytes = static_cast<std::size_t>(a.size) * a.size * 3;
  // 256 distinct uint8 sources, as a batch copied from the loader would be.
  std::vector<std::uint8_t> host(src_bytes * a.batch);
  for (int i = 0; i < a.batch; ++i) {
    const cv::Mat m = pattern(a.size, a.size, i);
    std::memcpy(host.data() + src_bytes * i, m.data, src_bytes);
  }
  stoker::DeviceBuffer src(host.size(), "bench sources"), out(gpu.output_shape().bytes() * a.batch, "bench output");
  stoker::copy_to_device_async(src.get(), host.data(), host.size(), stream.get());
  std::vector<stoker::DeviceImage> images;
  for (int i = 0; i < a.batch; ++i) {
    images.push_back({src.as<std::uint8_t>() + src_bytes * i, a.size, a.size, static_cast<std::size_t>(a.size) * 3});
  }
  std::vector<stoker::SampleContext> ctx(static_cast<std::size_t>(a.batch));
  stoker::CudaAugmentWorkspace ws0(a.batch), ws1(a.batch);
  auto run = [&](int it) {
    for (int i = 0; i < a.batch; ++i) ctx[static_cast<std::size_t>(i)] = {1, static_cast<std::uint64_t>(it), i};
    gpu.run(images, ctx, out.get(), it % 2 ? ws1 : ws0, stream.get());
  };
  for (int it = 0; it < 5; ++it) run(it);
  stream.synchronize();
  const stoker::Event t0(true), t1(true);
  const auto w0 = Clock::now();
  t0.record(stream);
  for (int it = 0; it < a.iters; ++it) run(it);
  t1.record(stream);
  stream.synchronize();
  const double wall = std::chrono::duration<double>(Clock::now() - w0).count();
  const double gpu_s = stoker::Event::elapsed_ms(t0, t1) / 1e3;
  const double n = static_cast<double>(a.iters) * a.batch;
  std::printf("# kernel alone: %.0f img/s by GPU events, %.0f img/s wall (host parameter draw included)\n", n / gpu_s,
              n / wall);
  return {n / gpu_s, n / wall};
}

fs::path make_dataset(const Args& a, stoker::Dataset& ds) {
  const fs::path dir = fs::path(a.dir) / ("images_" + std::to_string(a.images));
  fs::create_directories(dir);
  std::vector<stoker::Sample> samples;
  const int src = a.size + a.size / 8;  // decoded, then resized to the working size
  for (int i = 0; i < a.images; ++i) {
    const fs::path f = dir / ("img" + std::to_string(i) + ".jpg");
    if (!fs::exists(f)) {
      cv::Mat bgr;
      cv::cvtColor(pattern(src, src, i), bgr, cv::COLOR_RGB2BGR);
      cv::imwrite(f.string(), bgr, {cv::IMWRITE_JPEG_QUALITY, 90});
    }
    samples.push_back({f.string(), i % 2});
  }
  ds = stoker::dataset_from_list(std::move(samples), {"a", "b"});
  return dir;
}

stoker::LoaderOptions loader_options(const Args& a) {
  stoker::LoaderOptions lo;
  lo.batch_size = a.batch;
  lo.image_height = lo.image_width = a.size;
  lo.interpolation = stoker::Interpolation::Bilinear;
  lo.threads = a.threads;
  lo.prefetch = 4;
  lo.cache.kind = stoker::CacheKind::Decoded;
  lo.cache.budget_bytes = static_cast<std::size_t>(a.images) * a.size * a.size * 3 * 2 + (64u << 20);
  return lo;
}

struct EpochResult {
  double img_per_s = 0;
  double copy_gbps = 0;       // bytes / time inside the copies (copy events)
  double delivered_gbps = 0;  // pixel bytes delivered / wall time
  std::string describe;
};

// Warm epochs through a GpuFeed; the consumer waits on each batch's event and releases it.
EpochResult warm_epochs(const Args& a, const stoker::Dataset& ds, std::shared_ptr<const stoker::DeviceStage> stage,
                        bool timing) {
  stoker::GpuFeedOptions fo;
  fo.depth = 3;
  fo.stage = std::move(stage);
  fo.record_copy_timing = timing;
  stoker::GpuFeed feed(ds, loader_options(a), fo);
  const stoker::Stream consumer;
  feed.begin_epoch(0);  // cold: decode + fill the cache
  while (auto b = feed.next()) b->wait_on(consumer.get());
  consumer.synchronize();
  std::size_t images = 0, bytes = 0;
  double copy_ms = 0;
  const auto t0 = Clock::now();
  for (int e = 1; e <= a.epochs; ++e) {
    feed.begin_epoch(static_cast<std::uint64_t>(e));
    while (auto b = feed.next()) {
      b->wait_on(consumer.get());
      images += static_cast<std::size_t>(b->size());
      bytes += feed.input_shape().bytes() * static_cast<std::size_t>(b->size());
      if (timing) {
        // The copy's duration: wait for this batch's copy only (the feeder keeps copying ahead).
        stoker::event_synchronize(b->copy_end_event());
        copy_ms += stoker::elapsed_ms(b->copy_start_event(), b->copy_end_event());
      }
    }
  }
  consumer.synchronize();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  EpochResult r;
  r.img_per_s = static_cast<double>(images) / wall;
  r.copy_gbps = copy_ms > 0 ? static_cast<double>(bytes) / (copy_ms / 1e3) / 1e9 : 0.0;
  r.delivered_gbps = static_cast<double>(bytes) / wall / 1e9;
  r.describe = feed.describe();
  const auto st = feed.stats();
  std::printf("# %s\n# consumer wait %.3f s, feeder waited for slots %.3f s, loader transform %.3f s (summed)\n",
              r.describe.c_str(), st.consumer_wait_seconds, st.feeder_wait_seconds, st.loader.transform_seconds);
  return r;
}

double plain_copy_gbps(std::size_t bytes, int iters) {
  stoker::PinnedBuffer host(bytes, "bench pinned");
  std::memset(host.get(), 1, bytes);
  stoker::DeviceBuffer dev(bytes, "bench device");
  const stoker::Stream s;
  stoker::copy_to_device_async(dev.get(), host.get(), bytes, s.get());
  s.synchronize();
  const stoker::Event t0(true), t1(true);
  t0.record(s);
  for (int i = 0; i < iters; ++i) stoker::copy_to_device_async(dev.get(), host.get(), bytes, s.get());
  t1.record(s);
  s.synchronize();
  return static_cast<double>(bytes) * iters / (stoker::Event::elapsed_ms(t0, t1) / 1e3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (stoker::cuda_device_count() == 0) {
      std::fprintf(stderr, "gpu_bench: %s\n", stoker::cuda_unavailable_reason().c_str());
      return 2;
    }
    std::printf("# device: %s\n", stoker::cuda_device_description().c_str());
    std::printf("# host threads: %u\n", std::thread::hardware_concurrency());
    const KernelResult k = kernel_alone(a);

    stoker::Dataset ds;
    make_dataset(a, ds);
    auto cpu = std::make_shared<stoker::Augmenter>(bench_spec(a.size));
    auto gpu = std::make_shared<stoker::CudaAugmenter>(cpu, stoker::DType::BF16);
    const EpochResult aug = warm_epochs(a, ds, gpu, false);
    const EpochResult raw = warm_epochs(a, ds, nullptr, true);
    const std::size_t batch_bytes = static_cast<std::size_t>(a.size) * a.size * 3 * a.batch;
    const double plain = plain_copy_gbps(batch_bytes, 30);

    std::printf("\n| measurement | value | reference |\n|---|---|---|\n");
    std::printf("| 1. augmentation kernel, %dx%d, batch %d, u8 -> bf16 NCHW normalised | %.0f img/s | PyTorch peer: torch_peer.log (goal >= 3x) |\n",
                a.size, a.size, a.batch, k.gpu);
    std::printf("| 1b. the same, wall clock with the host parameter draw (one stream, two workspaces) | %.0f img/s | |\n",
                k.wall);
    std::printf("| 2. warm epochs: decoded cache -> pinned -> device -> CUDA augmentation | %.0f img/s | copy-bound limit at plain bandwidth: %.0f img/s (goal >= 100000) |\n",
                aug.img_per_s, plain * 1e9 / (static_cast<double>(batch_bytes) / a.batch));
    std::printf("| 2b. warm epochs, uint8 only (no stage) | %.0f img/s | |\n", raw.img_per_s);
    std::printf("| 3. H2D bandwidth of the feed's copies (copy events) | %.1f GB/s | plain pinned cudaMemcpy of %zu bytes: %.1f GB/s, ratio %.2f (goal >= 0.8) |\n",
                raw.copy_gbps, batch_bytes, plain, raw.copy_gbps / plain);
    std::printf("| 3b. uint8 pixels delivered per wall second (no stage) | %.1f GB/s | ratio to plain %.2f |\n",
                raw.delivered_gbps, raw.delivered_gbps / plain);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
