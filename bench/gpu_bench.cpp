// GPU benchmark: prints a short table.
//  1. the CUDA augmentation kernel alone: 299x299, batch 256, uint8 in -> bf16 NCHW normalised out
//  2. warm-epoch batches: decoded cache -> pinned -> device -> CUDA augmentation, delivered into
//     device memory
//  3. achieved host-to-device bandwidth of the feed's copies vs a plain pinned cudaMemcpy of the
//     same size
//
//   gpu_bench [--size 299] [--batch 256] [--images 8192] [--iters 100] [--reps 5] [--epochs 5]
//             [--threads 0] [--dir /tmp/stoker_gpu_bench]
//
// Every figure is measured after a warm-up; (1), (1c) and the plain copy are the median of --reps
// repetitions timed with CUDA events on the stream doing the work; (2) is all warm epochs by the
// wall clock, stopped after the consumer stream has synchronised. GB/s are 1e9 bytes per second.
// The dataset for (2)/(3) is generated into --dir (synthetic JPEGs, 9/8 of --size) on first use. Exit
// status: 0 when every measurement ran and its checks passed, 1 on an error or a failed check
// (the table is still printed), 2 without a usable GPU.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/core/half.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int size = 299;
  int batch = 256;
  int images = 8192;  // 32 batches per epoch: epoch boundaries weigh like in a real run
  int iters = 100;
  int reps = 5;
  int epochs = 5;
  int threads = 0;
  std::string dir = "/tmp/stoker_gpu_bench";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw stoker::InvalidArgument("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--size") a.size = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--images") a.images = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--dir") a.dir = v;
    else throw stoker::InvalidArgument("unknown option " + k);
  }
  if (a.size < 8 || a.size > 4096 || a.batch < 1 || a.batch > 65535 || a.images < a.batch || a.iters < 1 ||
      a.reps < 1 || a.epochs < 1 || a.threads < 0) {
    throw stoker::InvalidArgument(
        "bad option values (size 8..4096, batch 1..65535, images >= batch, iters/reps/epochs >= 1)");
  }
  return a;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Keras-style training augmentation with torchvision normalisation, f32 spec (bf16 on the GPU).
// bench/torch_augment_peer.py draws the same ranges: rotation +-20 deg, shift +-10 %, shear
// +-10 deg, zoom 0.8..1.2 per axis, horizontal flip, brightness 0.8..1.2, reflect fill, bilinear.
stoker::AugmentSpec bench_spec(int size) {
  stoker::AugmentSpec s;
  s.height = s.width = size;
  s.rotation_range = 20;
  s.width_shift_range = stoker::ShiftRange::uniform(0.1);
  s.height_shift_range = stoker::ShiftRange::uniform(0.1);
  s.shear_range = 10;
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
  double gpu = 0;    // img/s by GPU events (job-table copies + kernels), steady state, median of the repetitions
  double wall = 0;   // img/s by wall clock, host parameter draw included, median
  double gated = 0;  // img/s of pure GPU time (batches queued before the interval starts), median
  bool gate_held = false;
  bool ok = false;  // the last batch matches the kernel's host twin
};

// Warm-up by time (clocks ramp up, lazy module loading), bounded in iterations. Each step is
// waited for: steps only enqueue, so the host clock alone would let work pile up past 0.3 s.
template <typename F>
void warm_up(F&& step, const stoker::Stream& stream) {
  const auto t0 = Clock::now();
  for (int it = 0; it < 500 && (it < 10 || seconds_since(t0) < 0.3); ++it) {
    step(it);
    stream.synchronize();
  }
}

KernelResult kernel_alone(const Args& a) {
  auto cpu = std::make_shared<stoker::Augmenter>(bench_spec(a.size));
  const stoker::CudaAugmenter gpu(cpu, stoker::DType::BF16);
  const stoker::Stream stream;
  const std::size_t src_bytes = static_cast<std::size_t>(a.size) * a.size * 3;
  // Distinct uint8 sources, as a batch copied from the loader would be.
  std::vector<std::uint8_t> host(src_bytes * a.batch);
  for (int i = 0; i < a.batch; ++i) {
    const cv::Mat m = pattern(a.size, a.size, i);
    std::memcpy(host.data() + src_bytes * i, m.data, src_bytes);
  }
  const std::size_t out_sample = gpu.output_shape().bytes();
  stoker::DeviceBuffer src(host.size(), "bench sources"), out(out_sample * a.batch, "bench output");
  stoker::copy_to_device_async(src.get(), host.data(), host.size(), stream.get());
  std::vector<stoker::DeviceImage> images;
  for (int i = 0; i < a.batch; ++i) {
    images.push_back({src.as<std::uint8_t>() + src_bytes * i, a.size, a.size, static_cast<std::size_t>(a.size) * 3});
  }
  std::vector<stoker::SampleContext> ctx(static_cast<std::size_t>(a.batch));
  // Two job tables: the host draws batch k+1's parameters while the GPU runs batch k.
  stoker::CudaAugmentWorkspace ws0(a.batch), ws1(a.batch);
  auto run = [&](int it) {
    for (int i = 0; i < a.batch; ++i) ctx[static_cast<std::size_t>(i)] = {1, static_cast<std::uint64_t>(it), i};
    gpu.run(images, ctx, out.get(), it % 2 ? ws1 : ws0, stream.get());
  };
  warm_up(run, stream);
  std::vector<double> gpu_rate, wall_rate;
  const double n = static_cast<double>(a.iters) * a.batch;
  const stoker::Event t0(true), t1(true);
  for (int r = 0; r < a.reps; ++r) {
    const auto w0 = Clock::now();
    t0.record(stream);
    for (int it = 0; it < a.iters; ++it) run(1000 + r * a.iters + it);
    t1.record(stream);
    t1.synchronize();
    wall_rate.push_back(n / seconds_since(w0));
    gpu_rate.push_back(n / (stoker::Event::elapsed_ms(t0, t1) / 1e3));
  }
  KernelResult k{median(gpu_rate), median(wall_rate), 0, false, false};
  std::printf(
      "# kernel alone: %d reps x %d batches; img/s by GPU events min %.0f median %.0f max %.0f; wall median %.0f "
      "(host parameter draw included)\n",
      a.reps, a.iters, *std::min_element(gpu_rate.begin(), gpu_rate.end()), k.gpu,
      *std::max_element(gpu_rate.begin(), gpu_rate.end()), k.wall);

  // Pure GPU time: kGated batches enqueued while the stream waits behind a gate (memsets on a
  // helper stream), so no host work (parameter draw, launches) can fall inside the interval. If
  // the steady-state figure above is far below this one, the host draw is the limit.
  constexpr int kGated = 8;
  std::vector<std::unique_ptr<stoker::CudaAugmentWorkspace>> gated_ws;
  for (int g = 0; g < kGated; ++g) gated_ws.push_back(std::make_unique<stoker::CudaAugmentWorkspace>(a.batch));
  const std::size_t gate_bytes = std::size_t{1} << 30;
  const stoker::DeviceBuffer gate_buf(gate_bytes, "bench gate");
  const stoker::Stream helper;
  std::vector<double> gated_rate;
  bool gate_held = true;
  for (int r = 0; r < a.reps; ++r) {
    for (int m = 0; m < 16; ++m) stoker::memset_device_async(gate_buf.get(), m, gate_bytes, helper.get());
    const stoker::Event gate;
    gate.record(helper);
    stream.wait(gate);
    t0.record(stream);
    for (int g = 0; g < kGated; ++g) {
      for (int i = 0; i < a.batch; ++i)
        ctx[static_cast<std::size_t>(i)] = {1, static_cast<std::uint64_t>(500000 + r * kGated + g), i};
      gpu.run(images, ctx, out.get(), *gated_ws[static_cast<std::size_t>(g)], stream.get());
    }
    t1.record(stream);
    gate_held = gate_held && !gate.done();  // still closed: every batch was queued before it opened
    t1.synchronize();
    gated_rate.push_back(kGated * static_cast<double>(a.batch) / (stoker::Event::elapsed_ms(t0, t1) / 1e3));
  }
  helper.synchronize();
  k.gated = median(gated_rate);
  k.gate_held = gate_held;
  std::printf(
      "# kernel alone, pure GPU time (%d batches queued behind a gate, %d reps): img/s min %.0f median %.0f max "
      "%.0f%s\n",
      kGated, a.reps, *std::min_element(gated_rate.begin(), gated_rate.end()), k.gated,
      *std::max_element(gated_rate.begin(), gated_rate.end()),
      gate_held ? "" : " (the gate opened before all batches were queued: may include host time)");

  // Check that the timed kernel does the work: one more batch, first and last samples against the
  // kernel's host twin (the GPU tests compare it exactly; here a coarse bound catches a no-op).
  const int check_epoch = 999999;
  run(check_epoch);
  std::vector<std::uint16_t> dev_out(out_sample / 2 * a.batch);
  stoker::copy_to_host_async(dev_out.data(), out.get(), out_sample * a.batch, stream.get());
  stream.synchronize();
  std::size_t bad = 0, total = 0;
  double worst = 0;
  for (const int i : {0, a.batch - 1}) {
    const stoker::ImageView view{host.data() + src_bytes * i, a.size, a.size, 3, static_cast<std::size_t>(a.size) * 3};
    const auto params = cpu->params({1, static_cast<std::uint64_t>(check_epoch), i}, a.size, a.size);
    std::vector<std::uint16_t> ref(out_sample / 2);
    gpu.run_on_host(std::span(&view, 1), std::span(&params, 1), ref.data());
    const std::uint16_t* got = dev_out.data() + (out_sample / 2) * static_cast<std::size_t>(i);
    for (std::size_t e = 0; e < ref.size(); ++e, ++total) {
      const float g = stoker::convert::bf16_value(got[e]), h = stoker::convert::bf16_value(ref[e]);
      const double d = std::fabs(static_cast<double>(g) - h);
      if (!std::isfinite(g) || !(d <= 0.05 + 0.01 * std::fabs(h))) ++bad;
      if (std::isfinite(d)) worst = std::max(worst, d);
    }
  }
  k.ok = bad * 1000 <= total;  // at most 0.1 % of the values off by more than ~3 grey levels
  std::printf("# kernel check vs host twin (samples 0 and %d): %zu of %zu values off by > 0.05, max |diff| %.4g: %s\n",
              a.batch - 1, bad, total, worst, k.ok ? "ok" : "FAILED");
  return k;
}

// Synthetic JPEGs (a bit larger than the working size, so the cold epoch resizes), written once
// by all hardware threads; each file is written under a temporary name and renamed, so an
// interrupted run leaves no truncated file behind.
fs::path make_dataset(const Args& a, stoker::Dataset& ds) {
  const fs::path dir = fs::path(a.dir) / ("images_" + std::to_string(a.size) + "_" + std::to_string(a.images));
  fs::create_directories(dir);
  const int src = a.size + a.size / 8;  // decoded, then resized to the working size
  const auto t0 = Clock::now();
  std::atomic<int> next{0}, written{0}, failed{0};
  auto work = [&] {
    for (int i = next++; i < a.images; i = next++) {
      const fs::path f = dir / ("img" + std::to_string(i) + ".jpg");
      if (fs::exists(f)) continue;
      const fs::path tmp = dir / ("img" + std::to_string(i) + ".jpg.tmp.jpg");
      cv::Mat bgr;
      cv::cvtColor(pattern(src, src, i), bgr, cv::COLOR_RGB2BGR);
      std::error_code ec;
      if (!cv::imwrite(tmp.string(), bgr, {cv::IMWRITE_JPEG_QUALITY, 90})) {
        ++failed;
        continue;
      }
      fs::rename(tmp, f, ec);
      if (ec) ++failed;
      else ++written;
    }
  };
  const unsigned n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < n_threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (failed > 0)
    throw stoker::Error("gpu_bench: could not write " + std::to_string(failed.load()) + " images into " + dir.string());
  std::printf("# dataset: %d JPEGs %dx%d in %s (%d written now, %.1f s)\n", a.images, src, src, dir.c_str(),
              written.load(), seconds_since(t0));
  std::vector<stoker::Sample> samples;
  for (int i = 0; i < a.images; ++i) samples.push_back({(dir / ("img" + std::to_string(i) + ".jpg")).string(), i % 2});
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
  double img_per_s = 0;                                   // all warm epochs: images / wall time, the GPU work included
  double epoch_min = 0, epoch_median = 0, epoch_max = 0;  // per warm epoch (host clock, see below)
  double copy_gbps = 0;                                   // pixel bytes / time inside the copies (copy events), 1e9 B/s
  double delivered_gbps = 0;                              // pixel bytes delivered / wall time, 1e9 B/s
  bool cache_ok = false;  // the warm epochs were served from the decoded cache, nothing decoded
  std::string describe;
};

// Warm epochs through a GpuFeed; the consumer waits on each batch's event (on the GPU) and
// releases it. The clock stops after the consumer stream has synchronised, so every copy and
// every stage kernel of the warm epochs is inside the measured time.
EpochResult warm_epochs(const Args& a, const stoker::Dataset& ds, std::shared_ptr<const stoker::DeviceStage> stage,
                        bool timing) {
  stoker::GpuFeedOptions fo;
  fo.depth = 3;
  fo.stage = std::move(stage);
  fo.record_copy_timing = timing;
  stoker::GpuFeed feed(ds, loader_options(a), fo);
  const stoker::Stream consumer;
  const auto c0 = Clock::now();
  feed.begin_epoch(0);  // cold: decode + fill the cache
  while (auto b = feed.next()) b->wait_on(consumer.get());
  consumer.synchronize();
  const double cold_s = seconds_since(c0);
  const stoker::GpuFeedStats before = feed.stats();
  std::size_t images = 0, bytes = 0;
  double copy_ms = 0;
  std::vector<double> epoch_rate;
  const auto t0 = Clock::now();
  auto e0 = t0;
  for (int e = 1; e <= a.epochs; ++e) {
    feed.begin_epoch(static_cast<std::uint64_t>(e));
    std::size_t epoch_images = 0;
    while (auto b = feed.next()) {
      b->wait_on(consumer.get());
      epoch_images += static_cast<std::size_t>(b->size());
      bytes += feed.input_shape().bytes() * static_cast<std::size_t>(b->size());
      if (timing) {
        // The copy's duration: wait for this batch's copy only (the feeder keeps copying ahead).
        stoker::event_synchronize(b->copy_end_event());
        copy_ms += stoker::elapsed_ms(b->copy_start_event(), b->copy_end_event());
      }
    }
    images += epoch_images;
    // Per epoch by the host clock at the end of each epoch (the GPU may still be up to `depth`
    // batches behind; no synchronisation here, as in training). The total below is exact.
    const auto now = Clock::now();
    epoch_rate.push_back(static_cast<double>(epoch_images) / std::chrono::duration<double>(now - e0).count());
    e0 = now;
  }
  consumer.synchronize();
  const double wall = seconds_since(t0);
  const stoker::GpuFeedStats st = feed.stats();
  EpochResult r;
  r.img_per_s = static_cast<double>(images) / wall;
  r.epoch_min = *std::min_element(epoch_rate.begin(), epoch_rate.end());
  r.epoch_max = *std::max_element(epoch_rate.begin(), epoch_rate.end());
  r.epoch_median = median(epoch_rate);
  r.copy_gbps = copy_ms > 0 ? static_cast<double>(bytes) / (copy_ms / 1e3) / 1e9 : 0.0;
  r.delivered_gbps = static_cast<double>(bytes) / wall / 1e9;
  r.describe = feed.describe();
  const std::uint64_t hits = st.loader.cache_hits - before.loader.cache_hits;
  const std::uint64_t misses = st.loader.cache_misses - before.loader.cache_misses;
  const std::uint64_t files = st.loader.files_read - before.loader.files_read;
  r.cache_ok = images == static_cast<std::size_t>(a.epochs) * static_cast<std::size_t>(a.images) && hits == images &&
               misses == 0 && files == 0;
  std::printf(
      "# %s\n# cold epoch %.2f s; %d warm epochs: %zu images in %.3f s, per epoch img/s min %.0f median %.0f max %.0f\n"
      "# warm epochs: cache hits %llu, misses %llu, files read %llu: %s\n"
      "# consumer wait %.3f s, feeder waited for slots %.3f s, loader transform %.3f s (summed, all epochs)\n",
      r.describe.c_str(), cold_s, a.epochs, images, wall, r.epoch_min, r.epoch_median, r.epoch_max,
      static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
      static_cast<unsigned long long>(files),
      r.cache_ok ? "ok" : "FAILED (the warm epochs did not all come from the decoded cache)", st.consumer_wait_seconds,
      st.feeder_wait_seconds, st.loader.transform_seconds);
  return r;
}

// Back-to-back pinned cudaMemcpyAsync of `bytes` on one stream: median GB/s (1e9 B/s) of `reps`
// repetitions of `iters` copies, after a warm-up copy.
double plain_copy_gbps(std::size_t bytes, int iters, int reps) {
  stoker::PinnedBuffer host(bytes, "bench pinned");
  std::memset(host.get(), 1, bytes);
  stoker::DeviceBuffer dev(bytes, "bench device");
  const stoker::Stream s;
  for (int i = 0; i < 3; ++i) stoker::copy_to_device_async(dev.get(), host.get(), bytes, s.get());
  s.synchronize();
  const stoker::Event t0(true), t1(true);
  std::vector<double> rate;
  for (int r = 0; r < reps; ++r) {
    t0.record(s);
    for (int i = 0; i < iters; ++i) stoker::copy_to_device_async(dev.get(), host.get(), bytes, s.get());
    t1.record(s);
    t1.synchronize();
    rate.push_back(static_cast<double>(bytes) * iters / (stoker::Event::elapsed_ms(t0, t1) / 1e3) / 1e9);
  }
  std::printf("# plain pinned H2D copies of %zu bytes: %d reps x %d copies, GB/s min %.2f median %.2f max %.2f\n",
              bytes, reps, iters, *std::min_element(rate.begin(), rate.end()), median(rate),
              *std::max_element(rate.begin(), rate.end()));
  return median(rate);
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
    std::printf("# host threads: %u; size %d, batch %d, images %d, iters %d, reps %d, epochs %d\n",
                std::thread::hardware_concurrency(), a.size, a.batch, a.images, a.iters, a.reps, a.epochs);
    std::fflush(stdout);
    const KernelResult k = kernel_alone(a);
    std::fflush(stdout);

    // (2) and (3): a failure here still lets the table show (1).
    EpochResult aug, raw;
    double plain = 0;
    std::string feed_error;
    const std::size_t image_bytes = static_cast<std::size_t>(a.size) * a.size * 3;
    const std::size_t batch_bytes = image_bytes * static_cast<std::size_t>(a.batch);
    try {
      stoker::Dataset ds;
      make_dataset(a, ds);
      auto cpu = std::make_shared<stoker::Augmenter>(bench_spec(a.size));
      auto gpu = std::make_shared<stoker::CudaAugmenter>(cpu, stoker::DType::BF16);
      aug = warm_epochs(a, ds, gpu, false);
      std::fflush(stdout);
      raw = warm_epochs(a, ds, nullptr, true);
      std::fflush(stdout);
      plain = plain_copy_gbps(batch_bytes, 20, a.reps);
    } catch (const std::exception& e) {
      feed_error = e.what();
    }

    // Column 3 of row 1 holds the number only (scripts/gpu_check.sh reads it).
    std::printf("\n| measurement | value | reference |\n|---|---|---|\n");
    std::printf(
        "| 1. augmentation kernel, %dx%d, batch %d, u8 NHWC -> bf16 NCHW normalised (GPU events, median of %d) | %.0f "
        "img/s | PyTorch peer: bench/torch_augment_peer.py, same GPU (goal >= 3x) |\n",
        a.size, a.size, a.batch, a.reps, k.gpu);
    std::printf(
        "| 1b. the same, wall clock with the host parameter draw (one stream, two workspaces) | %.0f img/s | |\n",
        k.wall);
    std::printf(
        "| 1c. the same, pure GPU time (batches queued before timing; no host work inside) | %.0f img/s | %s |\n",
        k.gated, k.gate_held ? "" : "gate opened early: may include host time");
    bool ok = true;
    if (!k.ok)
      std::printf("gpu_bench: FAILED: the augmentation kernel's output does not match its host twin\n"), ok = false;
    if (!feed_error.empty()) {
      std::printf("gpu_bench: FAILED: measurements 2 and 3: %s\n", feed_error.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "gpu_bench: %s\n", feed_error.c_str());
      return 1;
    }
    std::printf(
        "| 2. warm epochs: decoded cache -> pinned -> device -> CUDA augmentation, %dx%d bf16 | %.0f img/s | per epoch "
        "median %.0f; copy-bound limit at plain bandwidth: %.0f img/s (goal >= 100000) |\n",
        a.size, a.size, aug.img_per_s, aug.epoch_median, plain * 1e9 / static_cast<double>(image_bytes));
    std::printf("| 2b. warm epochs, uint8 only (no stage) | %.0f img/s | per epoch median %.0f |\n", raw.img_per_s,
                raw.epoch_median);
    std::printf(
        "| 3. H2D bandwidth of the feed's copies (copy events, uint8 run) | %.1f GB/s (1e9 B/s) | plain pinned "
        "cudaMemcpy of %zu bytes: %.1f GB/s, ratio %.2f (goal >= 0.8) |\n",
        raw.copy_gbps, batch_bytes, plain, raw.copy_gbps / plain);
    std::printf(
        "| 3b. uint8 pixels delivered per wall second (no stage) | %.1f GB/s (1e9 B/s) | ratio to plain %.2f |\n",
        raw.delivered_gbps, raw.delivered_gbps / plain);
    std::printf(
        "| 3c. uint8 pixels delivered per wall second (with the augmentation) | %.1f GB/s (1e9 B/s) | ratio to plain "
        "%.2f |\n",
        aug.delivered_gbps, aug.delivered_gbps / plain);
    if (!aug.cache_ok || !raw.cache_ok)
      std::printf("gpu_bench: FAILED: warm epochs were not served from the decoded cache (figures 2/3 are not warm)\n"),
          ok = false;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
