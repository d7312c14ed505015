#include "sources.hpp"

#include <algorithm>
#include <chrono>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/autotune.hpp"

namespace stoker::training {
namespace {
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Images per second the backbone takes on its device: a batch of zeros, timed on its second run
// (the first compiles and allocates).
double consumer_rate(const trainer::Model& backbone, int image_size, int batch_size) {
  const std::vector<float> zeros(static_cast<std::size_t>(batch_size) * image_size * image_size * 3, 0.0f);
  backbone.forward(zeros.data(), batch_size);
  const auto t0 = Clock::now();
  backbone.forward(zeros.data(), batch_size);
  return batch_size / std::max(since(t0), 1e-9);
}

}  // namespace

Sources::Sources(const TrainingData& data, const TrainOptions& o, trainer::Model& backbone)
    : data_(data), backbone_(backbone) {
  // The GPU path's plain-resize loaders must prepare images as the Augmenter does on the CPU.
  train_loader_ = o.loader;
  train_loader_.image_height = train_loader_.image_width = o.prepare.image_size;
  // The warp's filter (centre_nearest or opencv_linear: image_spec takes no other).
  train_loader_.interpolation = o.prepare.interpolation;
  train_loader_.keep_aspect_ratio = o.prepare.keep_aspect_ratio;
  train_loader_.label_mode = LabelMode::Sparse;
  val_loader_ = train_loader_;
  val_loader_.shuffle = false;
  val_loader_.cache = {};
  const AugmentSpec random = o.augmentation.value_or(AugmentSpec{});
  train_aug_ = std::make_shared<const Augmenter>(image_spec(o.prepare, random, true));
  val_aug_ = std::make_shared<const Augmenter>(image_spec(o.prepare, random, false));
}

LoaderOptions Sources::train_loader(bool gpu) const {
  LoaderOptions tl = train_loader_;
  if (!gpu) tl.transform = train_aug_;
  return tl;
}

void Sources::use_threads(int threads, int prefetch) {
  train_loader_.threads = val_loader_.threads = threads;
  train_loader_.prefetch = val_loader_.prefetch = prefetch;
}

void Sources::make(const std::shared_ptr<trainer::CudnnBackend>& gpu, const trainer::Model* model) {
  train_.reset();
  validation_.reset();
  train_cpu_.reset();
  val_cpu_.reset();
  if (gpu) {
    train_ = gpu_feature_source(data_.train, train_loader_, train_aug_, gpu);
    validation_ = gpu_feature_source(data_.validation, val_loader_, val_aug_, gpu);
    return;
  }
  LoaderOptions tl = train_loader_, vl = val_loader_;
  tl.transform = train_aug_;
  vl.transform = val_aug_;
  train_cpu_ = std::make_unique<Loader>(data_.train, tl);
  val_cpu_ = std::make_unique<Loader>(data_.validation, vl);
  train_ = cpu_feature_source(*train_cpu_, model ? *model : backbone_);
  validation_ = cpu_feature_source(*val_cpu_, model ? *model : backbone_);
}

double Sources::gpu_error(const Features& gpu_validation, int batch_size) const {
  return gpu_path_error(data_.validation, val_loader_, val_aug_, backbone_.graph(), gpu_validation,
                        std::min(batch_size, 32));
}

Features extract(FeatureSource& source, const std::string& what, TrainObserver& observer,
                 const std::function<void()>& after_batch) {
  observer.on_features_begin(what, source.batches_per_epoch());
  Features f = collect_features(source, 0, [&](std::size_t batches, std::size_t, std::size_t images) {
    observer.on_features_progress(batches, images);
    if (after_batch) after_batch();
  });
  observer.on_features_end(f.skipped);
  return f;
}

std::string choose_loader_threads(const TrainingData& data, const TrainOptions& o, Sources& sources,
                                  const trainer::Model& backbone, bool gpu) {
  if (!o.tune_loader) return {};
  TuneOptions tune;
  tune.max_threads = o.tune_max_threads;
  tune.ram_budget_bytes = o.tune_ram_budget_bytes;
  tune.consumer_shares_cores = !gpu;
  if (!o.tune_prefetch) tune.prefetch = o.loader.prefetch;
  const LoaderTuning t = tune_loader(data.train, sources.train_loader(gpu),
                                     consumer_rate(backbone, o.prepare.image_size, o.loader.batch_size), tune);
  sources.use_threads(t.threads, t.prefetch);
  return t.reason;
}

TrainOptions with_featurewise_statistics(const TrainOptions& given, const Dataset& train, TrainObserver& observer) {
  TrainOptions o = given;
  ImagePreparation& p = o.prepare;
  if (!(p.featurewise_center || p.featurewise_std_normalization) || p.featurewise) return o;
  const AugmentSpec spec = image_spec(p);
  LoaderOptions lo = o.loader;
  lo.shuffle = false;
  lo.cache = {};
  lo.label_mode = LabelMode::None;
  lo.drop_last = false;
  lo.transform = std::make_shared<const Augmenter>(FeaturewiseFit::input_spec(spec));
  Loader loader(train, lo);
  FeaturewiseFit fit(spec);
  observer.on_features_begin("featurewise statistics", loader.batches_per_epoch());
  loader.begin_epoch(0);
  std::size_t batches = 0, images = 0;
  while (auto b = loader.next()) {
    fit.add(reinterpret_cast<const std::uint8_t*>(b->pixels()), static_cast<std::size_t>(b->size()));
    images += static_cast<std::size_t>(b->size());
    observer.on_features_progress(++batches, images);
  }
  observer.on_features_end(loader.skipped());
  if (images == 0) throw DatasetError("featurewise statistics: none of the training images could be read");
  p.featurewise = fit.result();
  return o;
}

}  // namespace stoker::training
