#include "bench_suites.hpp"

#include <turbojpeg.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "stoker/augment/augmenter.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace stoker::app {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double median_of(int repeat, F&& run) {
  std::vector<double> runs;
  for (int r = 0; r < repeat; ++r) runs.push_back(run(r));
  return median(runs);
}

std::string read_proc_field(const char* file, const char* key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "?";
}

double peak_rss_mib() { return std::atof(read_proc_field("/proc/self/status", "VmHWM").c_str()) / 1024.0; }

double epoch_img_per_s(Loader& loader, std::uint64_t epoch) {
  const auto t0 = Clock::now();
  loader.begin_epoch(epoch);
  std::size_t n = 0;
  while (auto b = loader.next()) n += static_cast<std::size_t>(b->size());
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// One timed run: whole epochs (each epoch's images counted, its start-up and drain included) until
// at least `min_seconds` have passed, so that a small dataset on a fast machine is not timed over
// a few milliseconds. `run_epoch(e)` returns the images of epoch e; `next_epoch` advances.
template <class F>
double timed_epochs(F&& run_epoch, std::uint64_t& next_epoch, double min_seconds) {
  const auto t0 = Clock::now();
  std::size_t images = 0;
  double elapsed = 0;
  do {
    images += run_epoch(next_epoch++);
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return static_cast<double>(images) / elapsed;
}

std::size_t loader_epoch(Loader& loader, std::uint64_t epoch) {
  loader.begin_epoch(epoch);
  std::size_t n = 0;
  while (auto b = loader.next()) n += static_cast<std::size_t>(b->size());
  return n;
}

// Warm-up epoch, then the median of `repeat` timed runs of at least min_seconds each.
double loader_rate(const Dataset& ds, const LoaderOptions& o, const BenchSettings& s) {
  Loader loader(ds, o);
  loader_epoch(loader, 0);
  std::uint64_t epoch = 1;
  return median_of(s.repeat, [&](int) {
    return timed_epochs([&](std::uint64_t e) { return loader_epoch(loader, e); }, epoch, s.min_seconds);
  });
}

// Per-thread state of the raw loop: one TurboJPEG handle, reused buffers.
struct RawScratch {
  RawScratch() : tj(tjInitDecompress()) {}
  ~RawScratch() { tjDestroy(tj); }
  RawScratch(const RawScratch&) = delete;
  RawScratch& operator=(const RawScratch&) = delete;
  tjhandle tj;
  std::vector<std::uint8_t> decoded, out;
};

// The bare loop: TurboJPEG decode at the loader's DCT scale + the same resize the loader runs
// (PIL-rule nearest; faster than OpenCV's), files already in memory, parallel over the files on
// `threads` threads. What it leaves out is exactly the loader's own work: reading files,
// scheduling, batching, bookkeeping.
// One call is one pass over the files.
std::size_t raw_decode_pass(const std::vector<std::vector<std::uint8_t>>& files, int size, tbb::task_arena& arena,
                            tbb::enumerable_thread_specific<RawScratch>& scratch) {
  const ResizeTransform resize(size, size, Interpolation::Nearest);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, files.size(), 1), [&](const auto& r) {
      RawScratch& s = scratch.local();
      for (std::size_t i = r.begin(); i != r.end(); ++i) {
        const auto& f = files[i];
        int w = 0, h = 0, sub = 0, cs = 0;
        if (tjDecompressHeader3(s.tj, f.data(), f.size(), &w, &h, &sub, &cs)) throw Error("raw decode: bad JPEG");
        int num = 1, denom = 1;
        ImageDecoder::choose_jpeg_scale(w, h, size, size, num, denom);
        const tjscalingfactor sf{num, denom};
        const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
        s.decoded.resize(static_cast<std::size_t>(sw) * sh * 3);
        if (tjDecompress2(s.tj, f.data(), f.size(), s.decoded.data(), sw, 0, sh, TJPF_RGB, 0)) {
          throw Error("raw decode: bad JPEG");
        }
        s.out.resize(static_cast<std::size_t>(size) * size * 3);
        resize.apply(ImageView{s.decoded.data(), sh, sw, 3, static_cast<std::size_t>(sw) * 3}, {},
                     reinterpret_cast<std::byte*>(s.out.data()));
      }
    });
  });
  return files.size();
}

// Asks the kernel to drop the dataset's files from the page cache, so the next read hits the disk.
void evict_from_page_cache(const Dataset& ds) {
  for (const auto& s : ds.samples) {
    const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace

std::string machine_description() {
  std::string d = read_proc_field("/proc/cpuinfo", "model name") + ", " +
                  std::to_string(std::thread::hardware_concurrency()) + " hardware threads, " +
                  read_proc_field("/proc/meminfo", "MemTotal") + " RAM";
  // The GPU the gpu suite measures (on an emulated device the description says its figures are
  // host timings, not a GPU's).
  if (cuda_device_count() > 0) {
    try {
      d += "; GPU: " + cuda_device_description();
    } catch (const Error& e) {
      d += std::string("; GPU: unknown (") + e.what() + ")";
    }
  }
  return d;
}

std::vector<BenchRow> loader_suite(const Dataset& ds, const BenchSettings& s) {
  std::vector<BenchRow> rows;
  // The loader first, so the process's peak resident memory reflects the loader alone.
  const double baseline_rss = peak_rss_mib();
  std::vector<double> rates;
  std::size_t buffer_bytes = 0;
  for (int t : s.threads) {
    LoaderOptions o = s.loader.options();
    o.threads = t;
    rates.push_back(loader_rate(ds, o, s));
    buffer_bytes = Loader(ds, o).buffer_bytes();
  }
  const double loader_rss = peak_rss_mib();

  std::vector<std::vector<std::uint8_t>> files;
  for (const auto& sample : ds.samples) {
    std::vector<std::uint8_t> bytes;
    if (sample.range) read_file_range(sample.path, *sample.range, sample_name(sample), bytes);
    else read_file(sample.path, bytes);
    files.push_back(std::move(bytes));
  }
  for (std::size_t i = 0; i < s.threads.size(); ++i) {
    const int t = s.threads[i];
    // No slot reserved for the calling thread, as in the loader's arena: `t` threads decode.
    tbb::task_arena arena(t, 0);
    tbb::enumerable_thread_specific<RawScratch> scratch;
    auto pass = [&](std::uint64_t) { return raw_decode_pass(files, s.loader.image_size, arena, scratch); };
    pass(0);  // warm-up
    std::uint64_t round = 1;
    const double raw = median_of(s.repeat, [&](int) { return timed_epochs(pass, round, s.min_seconds); });
    rows.push_back({"loader", "raw limit: bare TurboJPEG decode + resize, files in memory", t, raw, "", 0, ""});
    char note[160];
    std::snprintf(note, sizeof note, "peak RSS %.0f MiB (%.0f before; batch buffers %.1f MiB)", loader_rss,
                  baseline_rss, static_cast<double>(buffer_bytes) / (1 << 20));
    rows.push_back(
        {"loader", "stoker loader, files in the page cache", t, rates[i], "raw limit", rates[i] / raw, note});
  }
  return rows;
}

std::vector<BenchRow> cache_suite(const Dataset& ds, const BenchSettings& s) {
  LoaderOptions base = s.loader.options();
  const int t = s.threads.back();
  base.threads = t;
  std::vector<BenchRow> rows;
  double cold = 0;
  {
    Loader loader(ds, base);
    cold = median_of(s.repeat, [&](int r) {
      evict_from_page_cache(ds);
      return epoch_img_per_s(loader, static_cast<std::uint64_t>(r));
    });
  }
  rows.push_back({"cache", "epoch 1, cold (files evicted from the page cache)", t, cold, "", 0, ""});
  const double warm_files = loader_rate(ds, base, s);
  rows.push_back(
      {"cache", "epoch 2+, no cache (files in the page cache)", t, warm_files, "cold", warm_files / cold, ""});
  for (CacheKind kind : {CacheKind::Encoded, CacheKind::Decoded}) {
    LoaderOptions o = base;
    o.cache.kind = kind;
    const double r = loader_rate(ds, o, s);  // the warm-up epoch fills the cache
    rows.push_back(
        {"cache", std::string("epoch 2+, ") + to_string(kind) + " cache in RAM", t, r, "cold", r / cold, ""});
  }
  const std::string file = "/tmp/stoker-bench-" + std::to_string(::getpid()) + ".cache";
  LoaderOptions o = base;
  o.cache.kind = CacheKind::Decoded;
  o.cache.file = file;
  {
    Loader writer(ds, o);
    epoch_img_per_s(writer, 0);  // writes the file at the end of the epoch
  }
  const double fresh = median_of(s.repeat, [&](int) {
    Loader loader(ds, o);  // opens and maps the file anew, as a new process would
    const double r = epoch_img_per_s(loader, 0);
    if (loader.stats().files_read != 0) throw Error("bench: the cache file did not cover the dataset");
    return r;
  });
  std::remove(file.c_str());
  rows.push_back({"cache", "epoch 1 of a new loader from the decoded cache file", t, fresh, "cold", fresh / cold, ""});
  return rows;
}

std::vector<BenchRow> augment_suite(const Dataset& ds, const BenchSettings& s) {
  std::vector<BenchRow> rows;
  for (int t : s.threads) {
    LoaderOptions plain = s.loader.options();
    plain.threads = t;
    const double resize = loader_rate(ds, plain, s);
    LoaderOptions aug = plain;
    aug.transform = std::make_shared<Augmenter>(keras_example_augmentation(s.loader.image_size, s.loader.image_size));
    const double augmented = loader_rate(ds, aug, s);
    rows.push_back({"augment", "stoker loader, resize only", t, resize, "", 0, ""});
    rows.push_back({"augment", "stoker loader + the seed's Keras augmentation (CPU)", t, augmented, "resize only",
                    augmented / resize, ""});
    LoaderOptions cached = aug;
    cached.cache.kind = CacheKind::Decoded;
    const double warm = loader_rate(ds, cached, s);
    rows.push_back(
        {"augment", "seed's augmentation from the decoded cache (CPU)", t, warm, "resize only", warm / resize, ""});
  }
  return rows;
}

std::vector<BenchRow> gpu_suite(const Dataset& ds, const BenchSettings& s) {
  const int t = s.threads.back();
  if (cuda_device_count() == 0) {
    return {{"gpu", "warm epochs into GPU memory", t, 0, "", 0, "skipped: " + cuda_unavailable_reason()}};
  }
  LoaderOptions lo = s.loader.options();
  lo.threads = t;
  lo.cache.kind = CacheKind::Decoded;
  AugmentSpec spec = keras_example_augmentation(s.loader.image_size, s.loader.image_size);
  spec.dtype = DType::F32;
  spec.layout = Layout::NCHW;
  spec.normalization = ChannelNormalization::minus_one_to_one();
  std::vector<BenchRow> rows;
  for (const bool augment : {false, true}) {
    GpuFeedOptions fo;
    if (augment) fo.stage = std::make_shared<CudaAugmenter>(std::make_shared<const Augmenter>(spec), DType::BF16);
    GpuFeed feed(ds, lo, fo);
    const Stream consumer;
    auto epoch = [&](std::uint64_t e) {
      feed.begin_epoch(e);
      std::size_t n = 0;
      while (auto b = feed.next()) {
        b->wait_on(consumer.get());
        n += static_cast<std::size_t>(b->size());
      }
      consumer.synchronize();
      return n;
    };
    epoch(0);  // fills the decoded cache
    std::uint64_t next = 1;
    const double r = median_of(s.repeat, [&](int) { return timed_epochs(epoch, next, s.min_seconds); });
    rows.push_back({"gpu",
                    augment ? "warm epochs + CUDA augmentation (seed's, bf16 NCHW) in GPU memory"
                            : "warm epochs, uint8 batches in GPU memory",
                    t, r, "", 0, feed.describe()});
  }
  return rows;
}

std::vector<BenchRow> peers_suite(const BenchSettings& s) {
  std::vector<BenchRow> rows;
  auto run_peer = [&](const std::string& python, const std::string& framework, int workers, bool augment,
                      const std::string& label) {
    const std::string cmd = python + " " + s.peers_script + " --framework " + framework + " --data '" + s.loader.data +
                            "' --image-size " + std::to_string(s.loader.image_size) + " --batch-size " +
                            std::to_string(s.loader.batch_size) + " --workers " + std::to_string(workers) +
                            " --repeat " + std::to_string(s.repeat) + " --min-seconds " +
                            std::to_string(s.min_seconds) + (augment ? " --augment" : "") + " 2>/dev/null";
    std::string out;
    if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
      std::array<char, 4096> buf{};
      while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
      const int status = ::pclose(p);
      if (status == 0 && out.find('{') != std::string::npos) {
        const auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
        rows.push_back({"peers", label, std::max(1, workers), j.at("img_per_s").get<double>(), "", 0, ""});
        return;
      }
    }
    rows.push_back(
        {"peers", label, std::max(1, workers), 0, "", 0, "skipped: " + framework + " not available via " + python});
  };
  for (int t : s.threads) {
    run_peer(s.torch_python, "torch", t, false, "PyTorch DataLoader, resize only");
    run_peer(s.torch_python, "torch", t, true, "PyTorch DataLoader + RandomAffine/flip/ColorJitter");
  }
  run_peer(s.keras_python, "keras", 0, false, "Keras flow_from_directory, resize only");
  run_peer(s.keras_python, "keras", 0, true, "Keras flow_from_directory + seed's augmentation");
  return rows;
}

}  // namespace stoker::app
