// Thread hand-offs at the warm-epoch rate: std::mutex against boost::lockfree, side by side.
//
//   handoff_bench [--images 4096] [--size 32] [--batches 8,32] [--threads 0] [--prefetch 4]
//                 [--reps 5] [--seconds 0.5] [--dir DIR]
//
// 1. The real Loader over a decoded cache of --images generated JPEGs of --size x --size: after
//    the first epoch a sample is a stat() of its source and one copy into its batch. Reported:
//    img/s, batches/s, the process's CPU time per batch, and the consumer's time per batch inside
//    next() + Batch::release() while not waiting for data: its side of the mutex-guarded
//    hand-offs (the buffer back to the free list, the next ready batch out) plus the refill that
//    submits the next batch's samples to the oneTBB arena. (A sample reaches its batch through
//    the batch's atomic counter; the last one publishes the batch under the same mutex.)
// 2. The same pattern alone: P producers and one consumer pass buffer tokens around (free ->
//    producer -> ready -> consumer -> free) through
//      - std::mutex + one std::condition_variable (notify_all), sleeping at once (as GpuFeed) or
//        after a brief spin (as Loader::next());
//      - boost::lockfree::queue, a waiting thread yielding (std::this_thread::yield) or, after a
//        short spin, sleeping on a futex (std::atomic::wait) that every put bumps: a lock-free
//        queue has no blocking wait of its own;
//    for the loader (P = its threads, prefetch + 1 tokens) and for the GpuFeed's ring (P = 1, the
//    feeder thread, 3 tokens; there also boost::lockfree::spsc_queue). Paced: the producers
//    compute for the loader's CPU time per batch (measured in the same run) between hand-offs,
//    split so that every variant asks for the loader's batch rate; unpaced: no work, the
//    primitive's own ceiling. Reported: tokens/s and the CPU time per token the hand-off costs
//    (the process's CPU time less the work), both counted the same way whatever else runs on
//    the machine: CPU time, not wall time.
// Every figure is the median of --reps runs, the variants interleaved within each run. Built
// without Boost (bench/CMakeLists.txt finds it optionally) the lock-free rows are left out.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#if defined(STOKER_BENCH_HAVE_BOOST_LOCKFREE)
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#endif

#include "stoker/core/error.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/loader.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace stoker;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of the whole process (every thread), user + system.
double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Args {
  int images = 4096;
  int size = 32;
  std::vector<int> batches = {8, 32};
  int threads = 0;
  int prefetch = 4;
  int reps = 5;
  double seconds = 0.5;
  fs::path dir;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw InvalidArgument("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--images") a.images = std::stoi(v);
    else if (k == "--size") a.size = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--prefetch") a.prefetch = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--dir") a.dir = v;
    else if (k == "--batches") {
      a.batches.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) a.batches.push_back(std::stoi(item));
    } else {
      throw InvalidArgument("unknown option " + k);
    }
  }
  if (a.images < 2 || a.size < 1 || a.reps < 1 || a.seconds <= 0 || a.batches.empty() || a.prefetch < 1) {
    throw InvalidArgument(
        "--images >= 2, --size >= 1, --reps >= 1, --seconds > 0, --prefetch >= 1 and a --batches list");
  }
  return a;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

double load_average() {
  double one = -1;
  std::ifstream("/proc/loadavg") >> one;
  return one;
}

// Two class folders of small JPEGs with random content.
Dataset make_dataset(const fs::path& root, int images, int size) {
  cv::theRNG().state = 7;
  for (int i = 0; i < images; ++i) {
    const fs::path folder = root / (i % 2 ? "b" : "a");
    fs::create_directories(folder);
    cv::Mat img(size, size, CV_8UC3);
    cv::randu(img, cv::Scalar::all(0), cv::Scalar::all(256));
    cv::imwrite((folder / ("img" + std::to_string(i) + ".jpg")).string(), img);
  }
  return dataset_from_directory(root);
}

// ---- 1. the real Loader -----------------------------------------------------------------------

struct LoaderFigures {
  double images_per_second = 0;
  double batches_per_second = 0;
  double cpu_us_per_batch = 0;       // the whole process
  double consumer_us_per_batch = 0;  // in next() + release(), not waiting for data
};

// A loader whose decoded cache holds every sample (the first epoch filled it).
std::unique_ptr<Loader> warm_loader(const Dataset& ds, const Args& a, int batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.image_height = o.image_width = a.size;
  o.threads = a.threads;
  o.prefetch = a.prefetch;
  o.label_mode = LabelMode::Binary;
  o.cache.kind = CacheKind::Decoded;
  o.cache.budget_bytes = std::size_t{1} << 30;
  auto loader = std::make_unique<Loader>(ds, o);
  loader->begin_epoch(0);
  while (loader->next()) {}
  if (loader->cache_stats()->admitted != ds.size()) throw Error("the decoded cache did not take every sample");
  return loader;
}

// Whole warm epochs for at least `seconds`.
LoaderFigures run_loader(Loader& loader, std::uint64_t& epoch, double seconds) {
  loader.reset_stats();
  std::uint64_t images = 0, batches = 0;
  double in_calls = 0;
  const double cpu0 = process_cpu_seconds();
  const auto start = Clock::now();
  do {
    loader.begin_epoch(++epoch);
    for (;;) {
      const auto t0 = Clock::now();
      std::optional<Batch> b = loader.next();
      if (b) {
        images += static_cast<std::uint64_t>(b->size());
        ++batches;
        b->release();
      }
      in_calls += seconds_since(t0);
      if (!b) break;
    }
  } while (seconds_since(start) < seconds);
  const double elapsed = seconds_since(start);
  const double cpu = process_cpu_seconds() - cpu0;
  const LoaderStats st = loader.stats();
  if (st.cache_hits != images) throw Error("a warm epoch missed the cache");
  const auto n = static_cast<double>(batches);
  LoaderFigures f;
  f.images_per_second = static_cast<double>(images) / elapsed;
  f.batches_per_second = n / elapsed;
  f.cpu_us_per_batch = cpu / n * 1e6;
  f.consumer_us_per_batch = std::max(0.0, in_calls - st.consumer_wait_seconds) / n * 1e6;
  return f;
}

// ---- 2. the hand-off pattern alone ----------------------------------------------------------------

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Producer work that is computation, not a clock: a preempted thread makes no progress.
std::uint64_t compute(std::uint64_t iterations) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    asm volatile("" : "+r"(x));  // neither vectorised nor folded away
  }
  return x;
}

// Iterations of compute() per second of this thread's CPU time (not wall time: another process
// taking the core in between does not count).
double compute_iterations_per_cpu_second() {
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double t0 = thread_cpu_seconds();
    compute(4'000'000);
    best = std::max(best, 4e6 / (thread_cpu_seconds() - t0));
  }
  return best;
}

// As Loader and GpuFeed hand buffers around: one mutex, two lists, one condition variable. With
// kSpinFirst a thread that finds its list empty first watches a count of puts for 16 pauses and
// 12 yields, as Loader::next() does before it sleeps; the GpuFeed sleeps at once.
template <bool kSpinFirst>
class MutexRing {
 public:
  explicit MutexRing(int tokens) {
    for (int t = 0; t < tokens; ++t) free_.push_back(t);
  }
  bool take_free(int& t) { return take(free_, t); }
  bool take_ready(int& t) { return take(ready_, t); }
  void put_free(int t) { put(free_, t); }
  void put_ready(int t) { put(ready_, t); }
  void stop() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }

 private:
  bool take(std::deque<int>& from, int& t) {
    std::unique_lock lock(mu_);
    if (kSpinFirst && from.empty() && !stopping_) {
      const std::uint64_t seen = puts_.load(std::memory_order_relaxed);
      lock.unlock();
      for (int i = 0; i < 28 && puts_.load(std::memory_order_relaxed) == seen; ++i) {
        if (i < 16) {
          cpu_pause();
        } else {
          std::this_thread::yield();
        }
      }
      lock.lock();
    }
    cv_.wait(lock, [&] { return !from.empty() || stopping_; });
    if (from.empty()) return false;
    t = from.front();
    from.pop_front();
    return true;
  }
  void put(std::deque<int>& to, int t) {
    std::lock_guard lock(mu_);
    to.push_back(t);
    puts_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> free_, ready_;
  std::atomic<std::uint64_t> puts_{0};
  bool stopping_ = false;
};

#if defined(STOKER_BENCH_HAVE_BOOST_LOCKFREE)
// The same with two lock-free queues. A lock-free queue has no blocking wait: a thread that finds
// its queue empty either yields and retries (Wait::Yield) or, after a short spin, sleeps on a futex
// (std::atomic::wait) that every put bumps (Wait::Futex).
enum class Wait { Yield, Futex };

template <typename Queue, Wait wait>
class LockfreeRing {
 public:
  explicit LockfreeRing(int tokens) {
    for (int t = 0; t < tokens; ++t) free_.queue.push(t);
  }
  bool take_free(int& t) { return take(free_, t); }
  bool take_ready(int& t) { return take(ready_, t); }
  void put_free(int t) { put(free_, t); }
  void put_ready(int t) { put(ready_, t); }
  void stop() {
    stopping_ = true;
    for (Side* side : {&free_, &ready_}) {
      side->puts.fetch_add(1);
      side->puts.notify_all();
    }
  }

 private:
  struct Side {
    Queue queue;
    std::atomic<std::uint32_t> puts{0};
  };
  bool take(Side& from, int& t) {
    for (int tries = 0;; ++tries) {
      const std::uint32_t seen = from.puts.load(std::memory_order_acquire);
      if (from.queue.pop(t)) return true;
      if (stopping_.load(std::memory_order_relaxed)) return false;
      if (wait == Wait::Yield) {
        std::this_thread::yield();
      } else if (tries >= 64) {
        from.puts.wait(seen, std::memory_order_acquire);  // returns at once if a put came after `seen`
      }
    }
  }
  static void put(Side& to, int t) {
    while (!to.queue.push(t)) std::this_thread::yield();  // never full: capacity > tokens
    if (wait == Wait::Futex) {
      to.puts.fetch_add(1, std::memory_order_release);
      to.puts.notify_all();
    }
  }
  Side free_, ready_;
  std::atomic<bool> stopping_{false};
};
using Mpmc = boost::lockfree::queue<int, boost::lockfree::capacity<256>>;
using Spsc = boost::lockfree::spsc_queue<int, boost::lockfree::capacity<256>>;
#endif

struct RingFigures {
  double tokens_per_second = 0;
  double handoff_cpu_us = 0;  // per token: the process's CPU time less the producers' work
};

// The consumer takes ready tokens and gives them back for `seconds`; `producers` threads fill them.
template <typename Ring>
RingFigures run_ring(int producers, int tokens, std::uint64_t work_iterations, double work_cpu_seconds,
                     double seconds) {
  Ring ring(tokens);
  std::atomic<std::uint64_t> sink{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&] {
      std::uint64_t acc = 0;
      for (int t = 0; ring.take_free(t);) {
        acc += compute(work_iterations);
        ring.put_ready(t);
      }
      sink += acc;
    });
  }
  int t = 0;
  for (int i = 0; i < tokens * 8; ++i) {  // warm-up: every thread running
    ring.take_ready(t);
    ring.put_free(t);
  }
  std::uint64_t items = 0;
  const double cpu0 = process_cpu_seconds();
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 64; ++i) {
      ring.take_ready(t);
      ring.put_free(t);
    }
    items += 64;
    elapsed = seconds_since(start);
  } while (elapsed < seconds);
  const double cpu = process_cpu_seconds() - cpu0;
  ring.stop();
  for (auto& th : threads) th.join();
  const auto n = static_cast<double>(items);
  RingFigures f;
  f.tokens_per_second = n / elapsed;
  f.handoff_cpu_us = (cpu / n - work_cpu_seconds) * 1e6;
  return f;
}

struct Variant {
  std::string name;
  int producers;
  int tokens;
  std::function<RingFigures(std::uint64_t, double, double)> run;  // (work iterations, work CPU s, seconds)
};

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const bool own_dir = a.dir.empty();
  const fs::path dir =
      own_dir ? fs::temp_directory_path() / ("stoker_handoff_bench_" + std::to_string(::getpid())) : a.dir;
  struct Cleanup {
    const fs::path& dir;
    bool remove;
    ~Cleanup() {
      std::error_code ec;
      if (remove) fs::remove_all(dir, ec);
    }
  } cleanup{dir, own_dir};
  const Dataset ds = make_dataset(dir, a.images, a.size);
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::thread::hardware_concurrency());
  const double iterations_per_second = compute_iterations_per_cpu_second();

  std::printf("handoff_bench: %d generated %dx%d JPEGs, decoded cache (warm epochs), %d loader threads, prefetch %d\n",
              a.images, a.size, a.size, threads, a.prefetch);
  std::printf("machine: %s, %u hardware threads; load average %.2f at the start\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), load_average());
  std::printf("each figure the median of %d runs of %.2f s, the rows of one batch size interleaved in each run\n\n",
              a.reps, a.seconds);

  for (const int batch : a.batches) {
    auto loader = warm_loader(ds, a, batch);
    std::uint64_t epoch = 0;
    // The producers' work in the paced runs: the loader's CPU time per batch (a calibration run).
    const double cpu_per_batch = run_loader(*loader, epoch, a.seconds).cpu_us_per_batch * 1e-6;

    // The loader's topology (its decode threads and the consumer), then the GpuFeed's (one feeder
    // thread, a ring of depth 3, the consumer).
    std::vector<Variant> variants;
    auto add = [&]<typename Ring>(std::string name, int producers, int tokens) {
      variants.push_back(
          {std::move(name), producers, tokens, [producers, tokens](std::uint64_t w, double ws, double s) {
             return run_ring<Ring>(producers, tokens, w, ws, s);
           }});
    };
    add.operator()<MutexRing<false>>("std::mutex + condition_variable", threads, a.prefetch + 1);
    add.operator()<MutexRing<true>>("std::mutex + cv, spin first (as Loader)", threads, a.prefetch + 1);
#if defined(STOKER_BENCH_HAVE_BOOST_LOCKFREE)
    add.operator()<LockfreeRing<Mpmc, Wait::Yield>>("boost::lockfree::queue, yield", threads, a.prefetch + 1);
    add.operator()<LockfreeRing<Mpmc, Wait::Futex>>("boost::lockfree::queue, atomic wait", threads, a.prefetch + 1);
#endif
    add.operator()<MutexRing<false>>("std::mutex + cv (as GpuFeed)", 1, 3);
    add.operator()<MutexRing<true>>("std::mutex + cv, spin first", 1, 3);
#if defined(STOKER_BENCH_HAVE_BOOST_LOCKFREE)
    add.operator()<LockfreeRing<Mpmc, Wait::Futex>>("boost::lockfree::queue, atomic wait", 1, 3);
    add.operator()<LockfreeRing<Spsc, Wait::Yield>>("boost::lockfree::spsc_queue, yield", 1, 3);
    add.operator()<LockfreeRing<Spsc, Wait::Futex>>("boost::lockfree::spsc_queue, atomic wait", 1, 3);
#endif

    std::vector<double> img_s, batch_s, cpu_us, consumer_us;
    std::vector<std::vector<double>> paced_rate(variants.size()), paced_cpu(variants.size()),
        bare_rate(variants.size()), bare_cpu(variants.size());
    for (int r = 0; r < a.reps; ++r) {
      const LoaderFigures f = run_loader(*loader, epoch, a.seconds);
      img_s.push_back(f.images_per_second);
      batch_s.push_back(f.batches_per_second);
      cpu_us.push_back(f.cpu_us_per_batch);
      consumer_us.push_back(f.consumer_us_per_batch);
      for (std::size_t v = 0; v < variants.size(); ++v) {
        // P producers at the loader's batch rate: P tokens in flight per loader batch time.
        const double work = cpu_per_batch * variants[v].producers / threads;
        const RingFigures paced =
            variants[v].run(static_cast<std::uint64_t>(work * iterations_per_second), work, a.seconds);
        paced_rate[v].push_back(paced.tokens_per_second);
        paced_cpu[v].push_back(paced.handoff_cpu_us);
        const RingFigures bare = variants[v].run(0, 0, a.seconds);
        bare_rate[v].push_back(bare.tokens_per_second);
        bare_cpu[v].push_back(bare.handoff_cpu_us);
      }
    }

    std::printf("batch %d, the real Loader (warm epochs):\n", batch);
    std::printf("  %10s %10s %14s %36s\n", "img/s", "batches/s", "CPU us/batch",
                "consumer us/batch in next()+release()");
    std::printf("  %10.0f %10.0f %14.2f %14.2f (not waiting)\n\n", median(img_s), median(batch_s), median(cpu_us),
                median(consumer_us));
    std::printf(
        "batch %d, the hand-off alone; paced: each of %d producers computes %.2f CPU us per token, a single one %.2f\n",
        batch, threads, cpu_per_batch * 1e6, cpu_per_batch / threads * 1e6);
    std::printf("  %-42s %9s %6s %10s %18s %10s %18s\n", "hand-off", "producers", "tokens", "paced /s",
                "hand-off CPU us", "unpaced /s", "hand-off CPU us");
    for (std::size_t v = 0; v < variants.size(); ++v) {
      std::printf("  %-42s %9d %6d %10.0f %18.2f %10.0f %18.2f\n", variants[v].name.c_str(), variants[v].producers,
                  variants[v].tokens, median(paced_rate[v]), median(paced_cpu[v]), median(bare_rate[v]),
                  median(bare_cpu[v]));
    }
    std::printf("\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "handoff_bench: %s\n", e.what());
  return 1;
}
