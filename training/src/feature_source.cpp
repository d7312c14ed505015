#include "stoker/training/feature_source.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>

#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace stoker::training {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The loader's stage times between two snapshots of its counters.
void add_stage_times(EpochTimes& t, const LoaderStats& before, const LoaderStats& after, int threads) {
  t.read_seconds = after.read_seconds - before.read_seconds;
  t.decode_seconds = after.decode_seconds - before.decode_seconds;
  t.transform_seconds = after.transform_seconds - before.transform_seconds;
  t.loader_threads = threads;
}

class CpuFeatureSource final : public FeatureSource {
 public:
  CpuFeatureSource(Loader& loader, const trainer::Model& backbone) : loader_(loader), backbone_(backbone) {}
  std::size_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }

  LoaderState state() const override { return loader_.state(); }
  std::vector<SkippedSample> skipped() const override { return loader_.skipped(); }

  EpochTimes run_epoch(std::uint64_t epoch, const FeatureBatchFn& fn, const LoaderState* resume) override {
    EpochTimes t;
    const LoaderStats before = loader_.stats();
    if (resume) loader_.resume(*resume);
    else loader_.begin_epoch(epoch);
    while (auto b = loader_.next()) {
      const auto t0 = Clock::now();
      const trainer::Tensor f = backbone_.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
      t.compute_seconds += since(t0);
      const int dim = static_cast<int>(f.data.size() / static_cast<std::size_t>(b->size()));
      fn(f.data.data(), b->classes().data(), b->sample_ids().data(), b->size(), dim);
    }
    const LoaderStats after = loader_.stats();
    t.data_wait_seconds = after.consumer_wait_seconds - before.consumer_wait_seconds;
    add_stage_times(t, before, after, loader_.threads());
    return t;
  }

 private:
  Loader& loader_;
  const trainer::Model& backbone_;
};

class GpuFeatureSource final : public FeatureSource {
 public:
  GpuFeatureSource(Dataset dataset, LoaderOptions loader, std::shared_ptr<const Augmenter> augmenter,
                   std::shared_ptr<trainer::CudnnBackend> backbone)
      : backbone_(std::move(backbone)) {
    GpuFeedOptions fo;
    fo.stage = std::make_shared<CudaAugmenter>(std::move(augmenter), DType::F16);
    feed_ = std::make_unique<GpuFeed>(std::move(dataset), std::move(loader), fo);
  }
  std::size_t batches_per_epoch() const override { return feed_->batches_per_epoch(); }
  std::string describe() const override {
    return feed_->describe() + "; backbone " + backbone_->name() + ", " +
           std::to_string(backbone_->device_bytes() >> 20) + " MiB on the device, max batch " +
           std::to_string(backbone_->max_batch());
  }

  LoaderState state() const override { return feed_->state(); }
  std::vector<SkippedSample> skipped() const override { return feed_->skipped(); }

  EpochTimes run_epoch(std::uint64_t epoch, const FeatureBatchFn& fn, const LoaderState* resume) override {
    EpochTimes t;
    double stalled = 0, gpu = 0;
    const GpuFeedStats before = feed_->stats();
    if (resume) feed_->resume(*resume);
    else feed_->begin_epoch(epoch);
    while (auto b = feed_->next()) {
      if (b->dtype() != DType::F16 || b->layout() != Layout::NHWC || b->label_width() != 1) {
        throw Error(std::string("GPU features: the feed delivers ") + to_string(b->dtype()) + " " +
                    to_string(b->layout()) + " with " + std::to_string(b->label_width()) +
                    " label values per sample; the backbone needs F16 NHWC and sparse labels");
      }
      const auto t0 = Clock::now();
      // The stream is idle here (synchronised after the previous batch): `before_` is stamped at
      // once, `ready_` when the batch's copy and augmentation are done; the gap is time the GPU
      // waited for data, which next() does not see.
      before_.record(stream_);
      b->wait_on(stream_.get());  // the GPU waits for the batch, not the host
      ready_.record(stream_);
      const auto out = backbone_->forward_device(b->data(), b->dtype(), b->size(), stream_.get());
      const trainer::DeviceTensor& f = out.at(0);
      const std::size_t values = trainer::Tensor::element_count(f.shape);
      host_.resize(values);
      // The views are overwritten by the next forward_device call: copied out before it.
      copy_to_host_async(host_.data(), f.data, values * sizeof(float), stream_.get());
      done_.record(stream_);
      stream_.synchronize();  // the head trains on the host: it needs the features now
      const double batch_stall = std::max(0.0, static_cast<double>(Event::elapsed_ms(before_, ready_)) / 1e3);
      stalled += batch_stall;
      gpu += std::max(0.0, static_cast<double>(Event::elapsed_ms(ready_, done_)) / 1e3);
      t.compute_seconds += std::max(0.0, since(t0) - batch_stall);
      // Sparse labels: the class index as a float. Copied before the slot goes back.
      const auto labels = b->labels();
      classes_.resize(labels.size());
      std::transform(labels.begin(), labels.end(), classes_.begin(), [](float v) { return static_cast<int>(v); });
      ids_.assign(b->sample_ids().begin(), b->sample_ids().end());
      const int n = b->size();
      b->release(stream_.get());  // the stream is idle: the slot can be refilled now, while the head trains
      fn(host_.data(), classes_.data(), ids_.data(), n, static_cast<int>(values / static_cast<std::size_t>(n)));
    }
    const GpuFeedStats after = feed_->stats();
    t.data_wait_seconds = after.consumer_wait_seconds - before.consumer_wait_seconds + stalled;
    t.gpu_seconds = gpu;
    t.transfer_wait_seconds = stalled;
    add_stage_times(t, before.loader, after.loader, feed_->loader_threads());
    return t;
  }

 private:
  std::shared_ptr<trainer::CudnnBackend> backbone_;
  std::unique_ptr<GpuFeed> feed_;
  Stream stream_;
  Event before_{true}, ready_{true}, done_{true};  // timing events, one set reused per batch
  std::vector<float> host_;
  std::vector<int> classes_;
  std::vector<std::int64_t> ids_;
};

}  // namespace

std::unique_ptr<FeatureSource> cpu_feature_source(Loader& loader, const trainer::Model& backbone) {
  return std::make_unique<CpuFeatureSource>(loader, backbone);
}

std::unique_ptr<FeatureSource> gpu_feature_source(Dataset dataset, LoaderOptions loader,
                                                  std::shared_ptr<const Augmenter> augmenter,
                                                  std::shared_ptr<trainer::CudnnBackend> backbone) {
  return std::make_unique<GpuFeatureSource>(std::move(dataset), std::move(loader), std::move(augmenter),
                                            std::move(backbone));
}

Features collect_features(FeatureSource& source, std::uint64_t epoch, const ProgressFn& progress) {
  Features f;
  std::size_t batches = 0;
  f.times = source.run_epoch(epoch, [&](const float* x, const int* y, const std::int64_t* ids, int n, int dim) {
    f.dim = dim;
    f.x.insert(f.x.end(), x, x + static_cast<std::size_t>(n) * static_cast<std::size_t>(dim));
    f.y.insert(f.y.end(), y, y + n);
    f.ids.insert(f.ids.end(), ids, ids + n);
    f.n += n;
    ++batches;
    if (progress) progress(batches, source.batches_per_epoch(), static_cast<std::size_t>(f.n));
  });
  f.skipped = source.skipped();
  return f;
}

double gpu_path_error(const Dataset& dataset, LoaderOptions loader, std::shared_ptr<const Augmenter> augmenter,
                      const trainer::Graph& graph, const Features& gpu_features, int samples) {
  samples = std::min(samples, gpu_features.n);
  if (samples <= 0 || gpu_features.dim <= 0) return 0;
  if (gpu_features.ids.size() < static_cast<std::size_t>(samples)) return std::numeric_limits<double>::infinity();
  // The samples the GPU path read, in its order: one it skipped as unreadable is not compared.
  Dataset first = dataset;
  first.samples.clear();
  for (int i = 0; i < samples; ++i) {
    const std::int64_t id = gpu_features.ids[static_cast<std::size_t>(i)];
    if (id < 0 || static_cast<std::size_t>(id) >= dataset.size()) return std::numeric_limits<double>::infinity();
    first.samples.push_back(dataset.samples[static_cast<std::size_t>(id)]);
  }
  loader.shuffle = false;
  loader.cache = {};
  loader.sharding.reset();  // these samples, all of them: a rank's share is already in the GPU's
  loader.transform = std::move(augmenter);
  Loader cpu_loader(std::move(first), loader);
  trainer::Model cpu_model(graph);  // its default backend: the CPU one
  const Features cpu = collect_features(*cpu_feature_source(cpu_loader, cpu_model), 0);
  const std::size_t values = static_cast<std::size_t>(samples) * static_cast<std::size_t>(gpu_features.dim);
  if (cpu.n != samples || cpu.dim != gpu_features.dim || gpu_features.x.size() < values)
    return std::numeric_limits<double>::infinity();
  return trainer::relative_error(std::span<const float>(gpu_features.x.data(), values), cpu.x);
}

}  // namespace stoker::training
