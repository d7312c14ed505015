#include "stoker/pipeline/autotune.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <tbb/info.h>

#include "stoker/core/error.hpp"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

// Images per second over batches 2..n (the first pays for starting the threads), the epochs after
// the first when it has fewer batches: a dataset of one batch (batch_size above its size) is
// measured on the next epochs' batches, not reported as 0 img/s.
double measure(const Dataset& dataset, const LoaderOptions& options, int batches) {
  Loader loader(dataset, options);
  std::uint64_t epoch = 0;
  loader.begin_epoch(epoch);
  auto next = [&]() -> std::optional<Batch> {
    for (int tries = 0; tries < 2; ++tries) {  // an epoch's end, then the next epoch's first batch
      if (auto batch = loader.next()) return batch;
      loader.begin_epoch(++epoch);
    }
    return std::nullopt;  // every sample was skipped
  };
  if (!next()) return 0;
  std::size_t images = 0;
  const auto t0 = Clock::now();
  for (int b = 1; b < batches; ++b) {
    auto batch = next();
    if (!batch) break;
    images += static_cast<std::size_t>(batch->size());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return images > 0 ? static_cast<double>(images) / std::max(seconds, 1e-9) : 0;
}

std::string rate(double images_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f img/s", images_per_second);
  return buf;
}

}  // namespace

LoaderTuning tune_loader(const Dataset& dataset, LoaderOptions options, double consumer_images_per_second,
                         const TuneOptions& tune) {
  if (!(consumer_images_per_second > 0))
    throw InvalidArgument("tune_loader: the consumer's rate must be positive, received " +
                          std::to_string(consumer_images_per_second));
  if (tune.batches_per_trial < 2) throw InvalidArgument("tune_loader: batches_per_trial must be >= 2");
  const int cores = tune.max_threads > 0 ? tune.max_threads : std::max(1, tbb::info::default_concurrency());
  options.cache = {};
  LoaderTuning t;
  t.consumer_images_per_second = consumer_images_per_second;
  double wanted = 1.2 * consumer_images_per_second;
  int chosen = cores;
  for (int threads = 1;; threads = std::min(cores, threads * 2)) {
    options.threads = threads;
    options.prefetch = threads + 1;  // enough to keep every thread busy while measuring
    const double r = measure(dataset, options, tune.batches_per_trial);
    t.curve.emplace_back(threads, r);
    if (tune.consumer_shares_cores && threads == 1 && r > 0) {
      // An image costs 1/r core-seconds to load and cores/consumer to consume: on shared cores
      // the two together reach cores / (1/r + cores/consumer), the rate the loader must keep.
      t.consumer_images_per_second = cores / (1 / r + cores / consumer_images_per_second);
      wanted = 1.2 * t.consumer_images_per_second;
    }
    if (r >= wanted) {
      chosen = threads;
      break;
    }
    if (threads == cores) break;
  }
  t.threads = chosen;
  const Loader sized(dataset, options);
  const std::size_t batch_bytes = sized.sample_shape().bytes() * static_cast<std::size_t>(sized.batch_capacity());
  t.prefetch = std::max(2, 2 * chosen);
  if (tune.ram_budget_bytes > 0)
    t.prefetch = static_cast<int>(
        std::max<std::uint64_t>(2, std::min<std::uint64_t>(t.prefetch, tune.ram_budget_bytes / batch_bytes)));
  if (tune.prefetch > 0) t.prefetch = tune.prefetch;
  const double at = t.curve.back().second;
  const std::string consumer = tune.consumer_shares_cores
                                   ? rate(t.consumer_images_per_second) + " that loading and the consumer (" +
                                         rate(consumer_images_per_second) + " alone) reach together on " +
                                         std::to_string(cores) + " shared cores"
                                   : "consumer's " + rate(consumer_images_per_second);
  t.reason = at >= wanted ? std::to_string(chosen) + " thread" + (chosen > 1 ? "s" : "") + " load " + rate(at) +
                                ", enough for the " + consumer + " (+20%)"
                          : "all " + std::to_string(chosen) + " threads: the loader's " + rate(at) + " is below the " +
                                consumer + " (the input pipeline limits; try --cache decoded)";
  t.reason += "; prefetch " + std::to_string(t.prefetch) + (tune.prefetch > 0 ? " (--prefetch)" : "");
  return t;
}

}  // namespace stoker
