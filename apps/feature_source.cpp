#include "feature_source.hpp"

#include <chrono>

#include "progress.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/error.hpp"
#include "stoker/pipeline/cuda.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace stoker::app {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class CpuFeatureSource final : public FeatureSource {
 public:
  CpuFeatureSource(Loader& loader, const trainer::Model& backbone) : loader_(loader), backbone_(backbone) {}
  std::size_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }

  EpochTimes run_epoch(std::uint64_t epoch, const FeatureBatchFn& fn) override {
    EpochTimes t;
    const double waited_before = loader_.stats().consumer_wait_seconds;
    loader_.begin_epoch(epoch);
    while (auto b = loader_.next()) {
      const auto t0 = Clock::now();
      const trainer::Tensor f = backbone_.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
      t.compute_seconds += since(t0);
      const int dim = static_cast<int>(f.data.size() / static_cast<std::size_t>(b->size()));
      fn(f.data.data(), b->classes().data(), b->size(), dim);
    }
    t.data_wait_seconds = loader_.stats().consumer_wait_seconds - waited_before;
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

  EpochTimes run_epoch(std::uint64_t epoch, const FeatureBatchFn& fn) override {
    EpochTimes t;
    const double waited_before = feed_->stats().consumer_wait_seconds;
    feed_->begin_epoch(epoch);
    while (auto b = feed_->next()) {
      const auto t0 = Clock::now();
      b->wait_on(stream_.get());  // the GPU waits for the batch, not the host
      const auto out = backbone_->forward_device(b->data(), b->dtype(), b->size(), stream_.get());
      const trainer::DeviceTensor& f = out.at(0);
      const std::size_t values = trainer::Tensor::element_count(f.shape);
      host_.resize(values);
      copy_to_host_async(host_.data(), f.data, values * sizeof(float), stream_.get());
      stream_.synchronize();  // the head trains on the host: it needs the features now
      t.compute_seconds += since(t0);
      classes_.assign(b->labels().begin(), b->labels().end());  // sparse labels: the class index
      fn(host_.data(), classes_.data(), b->size(), static_cast<int>(values / static_cast<std::size_t>(b->size())));
      b->release(stream_.get());
    }
    t.data_wait_seconds = feed_->stats().consumer_wait_seconds - waited_before;
    return t;
  }

 private:
  std::shared_ptr<trainer::CudnnBackend> backbone_;
  std::unique_ptr<GpuFeed> feed_;
  Stream stream_;
  std::vector<float> host_;
  std::vector<int> classes_;
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

Features collect_features(FeatureSource& source, std::uint64_t epoch, const std::string& progress_label) {
  Features f;
  Progress progress(progress_label, source.batches_per_epoch());
  std::size_t batches = 0;
  f.times = source.run_epoch(epoch, [&](const float* x, const int* y, int n, int dim) {
    f.dim = dim;
    f.x.insert(f.x.end(), x, x + static_cast<std::size_t>(n) * static_cast<std::size_t>(dim));
    f.y.insert(f.y.end(), y, y + n);
    f.n += n;
    progress.update(++batches, static_cast<std::size_t>(f.n));
  });
  progress.finish();
  return f;
}

}  // namespace stoker::app
