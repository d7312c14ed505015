#include "stoker/training/train.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"

namespace stoker::training {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The training and validation feature sources, on the CPU (loaders with the Augmenter as their
// transform, float32 batches into the backbone) or on the GPU (plain-resize loaders into GPU
// feeds whose stage is the CUDA executor of the same augmentation, then the cuDNN backbone).
class Sources {
 public:
  Sources(const TrainingData& data, const TrainOptions& o, trainer::Model& backbone)
      : data_(data), backbone_(backbone) {
    // The GPU path's plain-resize loaders must prepare images as the Augmenter does on the CPU.
    train_loader_ = o.loader;
    train_loader_.image_height = train_loader_.image_width = o.prepare.image_size;
    // The Augmenter's orders 0/1 resize as centre_nearest/opencv_linear, not as Pillow's filters.
    train_loader_.interpolation =
        o.prepare.interpolation == Interpolation::Nearest ? Interpolation::CentreNearest : Interpolation::OpenCvLinear;
    train_loader_.keep_aspect_ratio = o.prepare.keep_aspect_ratio;
    train_loader_.label_mode = LabelMode::Sparse;
    val_loader_ = train_loader_;
    val_loader_.shuffle = false;
    val_loader_.cache = {};
    const AugmentSpec random = o.augmentation.value_or(AugmentSpec{});
    train_aug_ = std::make_shared<const Augmenter>(image_spec(o.prepare, random, true));
    val_aug_ = std::make_shared<const Augmenter>(image_spec(o.prepare, random, false));
  }

  void make(const std::shared_ptr<trainer::CudnnBackend>& gpu) {
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
    train_ = cpu_feature_source(*train_cpu_, backbone_);
    validation_ = cpu_feature_source(*val_cpu_, backbone_);
  }

  // The feed and the CUDA augmentation, checked where they run: the first (up to 32) validation
  // images' features against the CPU path's (the backbone alone was checked by place_backbone).
  double gpu_error(const Features& gpu_validation, int batch_size) const {
    return gpu_path_error(data_.validation, val_loader_, val_aug_, backbone_.graph(), gpu_validation,
                          std::min(batch_size, 32));
  }

  FeatureSource& train() { return *train_; }
  FeatureSource& validation() { return *validation_; }
  std::string cache_status() const { return train_cpu_ ? train_cpu_->cache_status() : std::string(); }

 private:
  const TrainingData& data_;
  trainer::Model& backbone_;
  LoaderOptions train_loader_, val_loader_;
  std::shared_ptr<const Augmenter> train_aug_, val_aug_;
  std::unique_ptr<Loader> train_cpu_, val_cpu_;
  std::unique_ptr<FeatureSource> train_, validation_;
};

Features extract(FeatureSource& source, const std::string& what, TrainObserver& observer) {
  observer.on_features_begin(what, source.batches_per_epoch());
  Features f = collect_features(source, 0, [&](std::size_t batches, std::size_t, std::size_t images) {
    observer.on_features_progress(batches, images);
  });
  observer.on_features_end();
  return f;
}

// One epoch that augments: decode, augment and run the backbone again, training on each batch.
EpochReport augmented_epoch(int epoch, trainer::Head& head, FeatureSource& source, TrainObserver& observer) {
  EpochReport e;
  e.epoch = epoch;
  double loss_sum = 0;
  std::size_t images = 0, batches = 0;
  int correct = 0;
  const auto t0 = Clock::now();
  e.times = source.run_epoch(static_cast<std::uint64_t>(epoch), [&](const float* x, const int* y, int n, int) {
    const trainer::StepResult r = head.train_step(x, y, n);
    loss_sum += r.loss * r.samples;
    correct += r.correct;
    images += static_cast<std::size_t>(n);
    observer.on_train_batch(++batches, images, loss_sum / static_cast<double>(images),
                            correct / static_cast<double>(images));
  });
  e.seconds = since(t0);
  const double seen = std::max<double>(1, static_cast<double>(images));
  e.train = {loss_sum / seen, correct / seen, static_cast<int>(images)};
  e.images_per_second = static_cast<double>(images) / std::max(1e-9, e.seconds);
  return e;
}

}  // namespace

TrainingData training_data(const std::string& folder, double validation_split, const std::string& validation_folder) {
  TrainingData d;
  if (!validation_folder.empty()) {
    d.train = dataset_from_directory(folder);
    DirectoryOptions vo;
    vo.classes = d.train.class_names;
    d.validation = dataset_from_directory(validation_folder, vo);
  } else {
    if (!(validation_split > 0)) throw InvalidArgument("give a validation split > 0 or a validation folder");
    DirectoryOptions o;
    o.split = {validation_split, Subset::Training};
    d.train = dataset_from_directory(folder, o);
    o.split.subset = Subset::Validation;
    d.validation = dataset_from_directory(folder, o);
  }
  const std::size_t classes = d.train.class_names.size();
  if (classes < 2) {
    throw DatasetError(folder + ": training needs at least 2 class folders, found " + std::to_string(classes));
  }
  if (d.validation.empty()) throw DatasetError("the validation set is empty: raise the validation split or add images");
  return d;
}

TrainResult train(const TrainingData& data, const TrainOptions& o, TrainObserver* observer_or_null) {
  TrainObserver nothing;
  TrainObserver& observer = observer_or_null ? *observer_or_null : nothing;
  if (o.epochs < 1) throw InvalidArgument("epochs must be >= 1, received " + std::to_string(o.epochs));
  // One process trains on all of the data: no gradients are exchanged between ranks (yet).
  const Sharding sharding = o.loader.sharding ? *o.loader.sharding : sharding_from_environment();
  if (sharding.world_size > 1) {
    throw InvalidArgument("train() runs in one process on the whole dataset, but this is rank " +
                          std::to_string(sharding.rank) + " of " + std::to_string(sharding.world_size) +
                          " (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS, or the loader's sharding): run it once");
  }
  TrainResult result;
  result.device = choose_device(o.device);
  DeviceChoice& device = result.device;
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out)) throw IoError(o.out.string() + ": cannot create the output folder");

  trainer::BackboneRef ref = o.backbone;
  ref.model = fs::absolute(ref.model).string();
  ref.preprocess = o.prepare.preprocess;
  trainer::Model backbone = load_feature_backbone(ref, o.prepare.image_size);
  const int dim = backbone.output_shape()[0];
  const int classes = static_cast<int>(data.train.class_names.size());
  std::shared_ptr<trainer::CudnnBackend> gpu = place_backbone(backbone, device, o.loader.batch_size);
  if (!device.fallback_reason.empty()) observer.on_warning(device.fallback_reason);

  Sources sources(data, o, backbone);
  sources.make(gpu);
  observer.on_setup({data.train.size(), data.validation.size(), data.train.class_names, backbone.parameter_count(), dim,
                     device, sources.cache_status(), sources.train().describe()});

  trainer::Head head = classes == 2 ? trainer::Head::sigmoid(dim, o.adam, o.loader.seed)
                                    : trainer::Head::softmax(dim, classes, o.adam, o.loader.seed);
  write_model_info(o.out, {ref, o.prepare, data.train.class_names});

  Features validation = extract(sources.validation(), "validation features", observer);
  if (gpu) {
    const double error = sources.gpu_error(validation, o.loader.batch_size);
    if (!(error <= kGpuAgreementLimit)) {
      const std::string why = disagreement(
          "cuda:" + std::to_string(device.index) + ": features from the GPU feed differ from the CPU path's", error);
      if (!device.automatic) throw Error(why);
      device.fall_back_to_cpu(why);
      observer.on_warning(why);
      gpu.reset();
      backbone.set_backend(nullptr);
      sources.make(nullptr);
      validation = extract(sources.validation(), "validation features", observer);
    }
  }

  trainer::BestEpoch best(o.monitor, o.out / "head.stkh", ref);
  std::optional<Features> reused;  // without augmentation: the training features, computed in epoch 0
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    observer.on_epoch_begin(epoch, o.augmentation ? sources.train().batches_per_epoch() : 0);
    EpochReport e;
    if (o.augmentation) {
      e = augmented_epoch(epoch, head, sources.train(), observer);
    } else {
      const auto t0 = Clock::now();
      e.epoch = epoch;
      e.features_cached = reused.has_value();
      if (!reused) {
        reused = extract(sources.train(), "training features", observer);
        e.times = reused->times;
      }
      e.train = head.train_epoch(reused->x.data(), reused->y.data(), reused->n, o.loader.batch_size,
                                 static_cast<std::uint64_t>(epoch), o.loader.seed);
      e.seconds = since(t0);
      if (e.features_cached) e.times.compute_seconds = e.seconds;  // the head alone
      e.images_per_second = reused->n / std::max(1e-9, e.seconds);
    }
    e.validation = head.evaluate(validation.x.data(), validation.y.data(), validation.n);
    e.improved = best.offer(epoch, e.validation, head);
    observer.on_epoch_end(e);
    result.history.push_back(e);
  }
  result.best_epoch = best.epoch();
  return result;
}

}  // namespace stoker::training
