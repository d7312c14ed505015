// Choosing the loader's threads and prefetch depth for a consumer: the fewest decode threads that
// keep it fed, measured on the dataset itself rather than guessed from the core count.
//
//   LoaderTuning t = tune_loader(dataset, options, /*consumer img/s*/ 850);
//   options.threads = t.threads;  options.prefetch = t.prefetch;   // t.reason says why
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/loader.hpp"

namespace stoker {

struct LoaderTuning {
  int threads = 1;
  int prefetch = 2;
  double consumer_images_per_second = 0;      // the rate the loader was tuned to keep up with
  std::vector<std::pair<int, double>> curve;  // (threads, measured loader img/s), in the order measured
  std::string reason;                         // one line: the choice and the figures behind it
};

// How tune_loader measures and what it may choose.
struct TuneOptions {
  int max_threads = 0;                 // the most decode threads tried; 0: the cores this process may use
  std::uint64_t ram_budget_bytes = 0;  // caps the prefetch at the batches it holds; 0: no cap
  int batches_per_trial = 4;           // batches timed per thread count (>= 2; the first is not timed)
  // The consumer's rate was measured alone on the same cores (a CPU backbone), so loading and
  // consuming compete for them: the loader is tuned for the rate both reach together,
  // max_threads / (1/r1 + max_threads/consumer) with r1 the loader's rate on one thread.
  bool consumer_shares_cores = false;
  int prefetch = 0;  // > 0: the caller's own prefetch depth, kept (the reason says so)
};

// Measures the loader (options as given, without its cache: the cost of a cold epoch) on a few
// batches at 1, 2, 4, ... threads up to max_threads and takes the fewest whose rate is at least
// 1.2x the consumer's; when none is, all of them (the loader limits). Prefetch: two batches per
// thread (jitter between threads), at least 2, at most what ram_budget_bytes holds. Throws what
// the Loader throws for unusable options.
LoaderTuning tune_loader(const Dataset& dataset, LoaderOptions options, double consumer_images_per_second,
                         const TuneOptions& tune = {});

}  // namespace stoker
