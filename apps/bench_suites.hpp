// The figures `stoker bench` measures. Each suite returns rows; bench_command.cpp prints them,
// writes JSON and a chart. Every figure is the median of `repeat` timed runs after a warm-up; a
// timed run spans whole epochs until at least `min_seconds` have passed (the cold epoch: one).
#pragma once

#include <string>
#include <vector>

#include "loader_flags.hpp"

namespace stoker::app {

struct BenchSettings {
  LoaderFlags loader;        // dataset, image size, batch size, prefetch…
  std::vector<int> threads;  // thread counts to measure
  int repeat = 3;
  double min_seconds = 1.0;  // a timed run spans whole epochs until at least this long
  std::string torch_python, keras_python;
  std::string peers_script;  // bench/loader_peers.py
};

struct BenchRow {
  std::string suite;
  std::string config;
  int threads = 0;
  double img_per_s = 0;
  std::string reference;  // what `ratio` compares against, empty when none
  double ratio = 0;
  std::string note;  // e.g. peak memory
};

// Loader vs the raw decode limit (TurboJPEG decode + resize of in-memory files) per thread count,
// and the loader's peak resident memory.
std::vector<BenchRow> loader_suite(const Dataset& ds, const BenchSettings& s);
// Cold epoch, encoded and decoded caches, a fresh loader from a cache file (widest thread count).
std::vector<BenchRow> cache_suite(const Dataset& ds, const BenchSettings& s);
// The seed's Keras augmentation on the CPU per thread count, next to plain resize.
std::vector<BenchRow> augment_suite(const Dataset& ds, const BenchSettings& s);
// Warm epochs delivered into GPU memory through a GpuFeed (decoded cache → pinned → device), as
// uint8 and through the CUDA augmentation executor (bf16 NCHW); a skipped row without a GPU.
std::vector<BenchRow> gpu_suite(const Dataset& ds, const BenchSettings& s);
// PyTorch DataLoader (workers = threads) and Keras flow_from_directory, plain and augmented,
// where their Python packages are installed; skipped rows say why.
std::vector<BenchRow> peers_suite(const BenchSettings& s);

std::string machine_description();

}  // namespace stoker::app
