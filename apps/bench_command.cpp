// `stoker bench`: the loader's throughput next to the raw decode limit of the same machine.
//
// Raw limit: a bare loop of TurboJPEG decode (same DCT scaling) + OpenCV nearest resize over the
// same files already in memory, on a oneTBB arena of the same thread count. The loader reads the
// files (from the page cache after a warm-up epoch), decodes, resizes and batches them. Each figure
// is the median of --repeat timed runs after one warm-up run.
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <fcntl.h>
#include <unistd.h>

#include "commands.hpp"
#include "loader_flags.hpp"
#include "stoker/error.hpp"

namespace stoker::app {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  LoaderFlags loader;
  std::vector<int> threads;
  int repeat = 3;
  std::string json;
  std::vector<std::string> suites = {"loader", "cache"};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read_proc_field(const char* file, const char* key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "?";
}

double peak_rss_mib() {
  const std::string hwm = read_proc_field("/proc/self/status", "VmHWM");  // "123456 kB"
  return std::atof(hwm.c_str()) / 1024.0;
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

double raw_decode_img_per_s(const std::vector<std::vector<std::uint8_t>>& files, int size, int threads) {
  tbb::task_arena arena(threads);
  tbb::enumerable_thread_specific<RawScratch> scratch;
  const auto t0 = Clock::now();
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
        cv::Mat in(sh, sw, CV_8UC3, s.decoded.data()), out(size, size, CV_8UC3, s.out.data());
        cv::resize(in, out, out.size(), 0, 0, cv::INTER_NEAREST);
      }
    });
  });
  return static_cast<double>(files.size()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

void loader_suite(const BenchArgs& args, const Dataset& ds, const std::vector<int>& thread_counts,
                  nlohmann::json& report);

double loader_img_per_s(Loader& loader, std::uint64_t epoch) {
  const auto t0 = Clock::now();
  loader.begin_epoch(epoch);
  std::size_t n = 0;
  while (auto b = loader.next()) n += static_cast<std::size_t>(b->size());
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Asks the kernel to drop the dataset's files from the page cache, so the next read hits the disk.
void evict_from_page_cache(const Dataset& ds) {
  for (const auto& s : ds.samples) {
    const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Issue 3's figures: a cold epoch, a second epoch with each cache kind, and a fresh loader (as a
// second process would) starting from the cache file; all at the widest thread count.
void cache_suite(const BenchArgs& args, const Dataset& ds, int threads, nlohmann::json& report) {
  LoaderOptions base = args.loader.options();
  base.threads = threads;
  auto median_epochs = [&](Loader& loader, std::uint64_t first) {
    std::vector<double> runs;
    for (int r = 0; r < args.repeat; ++r) runs.push_back(loader_img_per_s(loader, first + static_cast<std::uint64_t>(r)));
    return median(runs);
  };
  std::vector<std::pair<std::string, double>> rows;

  {
    Loader loader(ds, base);
    std::vector<double> runs;
    for (int r = 0; r < args.repeat; ++r) {
      evict_from_page_cache(ds);
      runs.push_back(loader_img_per_s(loader, static_cast<std::uint64_t>(r)));
    }
    rows.emplace_back("epoch 1, cold (files evicted from the page cache)", median(runs));
    rows.emplace_back("epoch 2+, no cache (files in the page cache)", median_epochs(loader, 100));
  }
  for (CacheKind kind : {CacheKind::Encoded, CacheKind::Decoded}) {
    LoaderOptions o = base;
    o.cache.kind = kind;
    Loader loader(ds, o);
    loader_img_per_s(loader, 0);  // epoch 1 fills the cache
    rows.emplace_back(std::string("epoch 2+, ") + to_string(kind) + " cache in RAM", median_epochs(loader, 1));
  }
  const std::string file = "/tmp/stoker-bench-" + std::to_string(::getpid()) + ".cache";
  {
    LoaderOptions o = base;
    o.cache.kind = CacheKind::Decoded;
    o.cache.file = file;
    {
      Loader writer(ds, o);
      loader_img_per_s(writer, 0);  // writes the file at the end of the epoch
    }
    std::vector<double> first_epochs;
    for (int r = 0; r < args.repeat; ++r) {
      Loader fresh(ds, o);  // opens and maps the file anew, like a new process
      first_epochs.push_back(loader_img_per_s(fresh, 0));
      if (fresh.stats().files_read != 0) throw Error("bench: the cache file did not cover the dataset");
    }
    rows.emplace_back("epoch 1 of a new loader from the decoded cache file", median(first_epochs));
  }
  std::remove(file.c_str());

  const double cold = rows[0].second;
  const std::string title = "cache (threads " + std::to_string(threads) + ")";
  std::printf("\n%-56s %12s %10s\n", title.c_str(), "img/s", "vs cold");
  for (const auto& [name, rate] : rows) {
    std::printf("%-56s %12.0f %9.1fx\n", name.c_str(), rate, rate / cold);
    report["cache"].push_back({{"config", name}, {"threads", threads}, {"img_per_s", rate}, {"vs_cold", rate / cold}});
  }
}

void run_bench(const BenchArgs& args) {
  const Dataset ds = dataset_from_directory(args.loader.data);
  std::vector<int> thread_counts = args.threads;
  if (thread_counts.empty()) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    for (int t = 1; t < hw; t *= 2) thread_counts.push_back(t);
    thread_counts.push_back(hw);
  }
  const std::string cpu = read_proc_field("/proc/cpuinfo", "model name");
  std::printf("machine: %s, %u hardware threads, %s RAM\n", cpu.c_str(), std::thread::hardware_concurrency(),
              read_proc_field("/proc/meminfo", "MemTotal").c_str());
  std::printf("dataset: %s, %zu images; %dx%d nearest, batch %d, prefetch %d; median of %d runs after a warm-up\n\n",
              args.loader.data.c_str(), ds.size(), args.loader.image_size, args.loader.image_size,
              args.loader.batch_size, args.loader.prefetch, args.repeat);

  nlohmann::json report;
  report["machine"] = {{"cpu", cpu}, {"hardware_threads", std::thread::hardware_concurrency()}};
  report["dataset"] = {{"path", args.loader.data}, {"images", ds.size()}};
  report["image_size"] = args.loader.image_size;
  report["batch_size"] = args.loader.batch_size;

  const auto wants = [&](const char* suite) {
    return std::find(args.suites.begin(), args.suites.end(), suite) != args.suites.end();
  };
  if (wants("loader")) loader_suite(args, ds, thread_counts, report);
  if (wants("cache")) cache_suite(args, ds, thread_counts.back(), report);
  if (!args.json.empty()) {
    std::ofstream(args.json) << report.dump(2) << "\n";
    std::printf("wrote %s\n", args.json.c_str());
  }
}

// Issue 2's figures: loader vs the raw decode limit per thread count, and peak resident memory.
void loader_suite(const BenchArgs& args, const Dataset& ds, const std::vector<int>& thread_counts,
                  nlohmann::json& report) {
  // Loader first, so the process's peak resident memory reflects the loader alone.
  const double baseline_rss = peak_rss_mib();
  std::vector<double> loader_rate;
  std::size_t buffer_bytes = 0;
  for (int t : thread_counts) {
    LoaderOptions o = args.loader.options();
    o.threads = t;
    Loader loader(ds, o);
    buffer_bytes = loader.buffer_bytes();
    loader_img_per_s(loader, 0);  // warm-up: page cache, decoder scratch
    std::vector<double> runs;
    for (int r = 0; r < args.repeat; ++r) runs.push_back(loader_img_per_s(loader, static_cast<std::uint64_t>(r + 1)));
    loader_rate.push_back(median(runs));
  }
  const double loader_peak_rss = peak_rss_mib();

  std::vector<std::vector<std::uint8_t>> files;
  for (const auto& s : ds.samples) {
    std::vector<std::uint8_t> bytes;
    read_file(s.path, bytes);
    files.push_back(std::move(bytes));
  }
  std::printf("%8s %16s %16s %8s\n", "threads", "raw limit img/s", "loader img/s", "ratio");
  for (std::size_t i = 0; i < thread_counts.size(); ++i) {
    const int t = thread_counts[i];
    raw_decode_img_per_s(files, args.loader.image_size, t);  // warm-up
    std::vector<double> runs;
    for (int r = 0; r < args.repeat; ++r) runs.push_back(raw_decode_img_per_s(files, args.loader.image_size, t));
    const double raw = median(runs);
    std::printf("%8d %16.0f %16.0f %8.2f\n", t, raw, loader_rate[i], loader_rate[i] / raw);
    report["rows"].push_back({{"threads", t}, {"raw_img_per_s", raw}, {"loader_img_per_s", loader_rate[i]},
                              {"ratio", loader_rate[i] / raw}});
  }
  std::printf("\npeak resident memory: %.1f MiB before the loader, %.1f MiB during the loader runs (batch buffers "
              "%.1f MiB = (prefetch %d + 1) x batch %d x %d bytes)\n",
              baseline_rss, loader_peak_rss, static_cast<double>(buffer_bytes) / (1 << 20), args.loader.prefetch,
              args.loader.batch_size, args.loader.image_size * args.loader.image_size * 3);
  report["baseline_rss_mib"] = baseline_rss;
  report["loader_peak_rss_mib"] = loader_peak_rss;
  report["batch_buffer_mib"] = static_cast<double>(buffer_bytes) / (1 << 20);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "measure the loader against the raw decode limit of this machine");
  args->loader.add_to(*cmd);
  cmd->add_option("--threads-list", args->threads, "thread counts to measure (default 1, 2, 4, … all)");
  cmd->add_option("--repeat", args->repeat, "timed runs per figure (median reported)")->capture_default_str();
  cmd->add_option("--json", args->json, "also write the results as JSON to this file");
  cmd->add_option("--suite", args->suites, "which figures: loader, cache (default both)");
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace stoker::app
