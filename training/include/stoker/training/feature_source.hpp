// Where a training run's features come from: the CPU loader feeding the backbone on whatever
// backend it has (CPU, or cuDNN with host batches), or the GPU feed — uint8 batches cross the bus,
// the CUDA executor augments and normalises them, the cuDNN backbone reads them in place — with
// only the features coming back to the host for the head.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/augment/augmenter.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/trainer/model.hpp"

namespace stoker::training {

struct EpochTimes {
  // The consumer waited for batches: on the host in next(), and on the GPU, the backbone's stream
  // waiting for a batch's copy and augmentation (CUDA events).
  double data_wait_seconds = 0;
  double compute_seconds = 0;  // host time in the backbone (and, on the GPU, bringing features back)
  // GPU time of the backbone and the features' copy back (CUDA events); none on the CPU path.
  std::optional<double> gpu_seconds;
  // The loader's busy time in each stage, summed over its `loader_threads` threads (LoaderStats):
  // reading files, decoding, and its transform (on the CPU path the augmentation; on the GPU path
  // the plain resize).
  double read_seconds = 0, decode_seconds = 0, transform_seconds = 0;
  int loader_threads = 0;
  // GPU path: the part of data_wait_seconds the backbone's stream waited for a batch's copy to the
  // device and its augmentation there (CUDA events).
  std::optional<double> transfer_wait_seconds;
};

// features: n × dim floats (host), classes: n class indices, sample_ids: each row's index into the
// dataset (a skipped sample leaves a gap).
using FeatureBatchFn =
    std::function<void(const float* features, const int* classes, const std::int64_t* sample_ids, int n, int dim)>;

class FeatureSource {
 public:
  virtual ~FeatureSource() = default;
  virtual std::size_t batches_per_epoch() const = 0;
  // The epoch's batches through fn, from the first or, with `resume`, from its next batch (a state
  // saved by state() during an earlier run of the same epoch; Loader::resume checks it).
  virtual EpochTimes run_epoch(std::uint64_t epoch, const FeatureBatchFn& fn, const LoaderState* resume = nullptr) = 0;
  // Where the batches stand: after the batches fn has been given in the current epoch.
  virtual LoaderState state() const = 0;
  // The samples left out of the current epoch as unreadable (BadSamplePolicy::Skip), in plan
  // order: complete once run_epoch has returned (the GPU feed's loader may run a few batches ahead
  // of the batches given so far).
  virtual std::vector<SkippedSample> skipped() const = 0;
  virtual std::string describe() const { return {}; }  // one line for the log, empty when nothing to say
};

// The Loader's batches (float32 NHWC from its transform) through backbone.forward().
std::unique_ptr<FeatureSource> cpu_feature_source(Loader& loader, const trainer::Model& backbone);

// A GpuFeed over `dataset` (uint8 batches from `loader`, the CUDA executor of `augmenter` as its
// stage, fp16 out) into the cuDNN backend. Throws CudaError when the GPU cannot be used.
std::unique_ptr<FeatureSource> gpu_feature_source(Dataset dataset, LoaderOptions loader,
                                                  std::shared_ptr<const Augmenter> augmenter,
                                                  std::shared_ptr<trainer::CudnnBackend> backbone);

// Features of every sample of one epoch, in plan order.
struct Features {
  std::vector<float> x;
  std::vector<int> y;
  std::vector<std::int64_t> ids;  // the dataset index of each row
  int n = 0;
  int dim = 0;
  EpochTimes times;
  std::vector<SkippedSample> skipped;  // the unreadable samples, which have no row
};
// After each batch: batches done of the epoch's total, and images so far.
using ProgressFn = std::function<void(std::size_t batches, std::size_t total_batches, std::size_t images)>;
Features collect_features(FeatureSource& source, std::uint64_t epoch, const ProgressFn& progress = {});

// How far features from the GPU path are from the CPU path's: the images of the first `samples`
// rows of `gpu_features` (by their ids into `dataset`, so samples the GPU path skipped as
// unreadable are not compared) through a CPU loader with `loader`'s options and `augmenter` as its
// transform, and the CPU backend of `graph`. max |gpu - cpu| / max |cpu|, infinite for a NaN on
// one side or a sample only one side could read. For deterministic (validation) augmentation only.
double gpu_path_error(const Dataset& dataset, LoaderOptions loader, std::shared_ptr<const Augmenter> augmenter,
                      const trainer::Graph& graph, const Features& gpu_features, int samples);

}  // namespace stoker::training
