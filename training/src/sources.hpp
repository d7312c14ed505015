// Where train()'s features come from: the training and validation feature sources on the CPU or
// the GPU, the loader's threads chosen for the backbone, and Keras' featurewise statistics.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "stoker/augment/augmenter.hpp"
#include "stoker/training/feature_source.hpp"
#include "stoker/training/train.hpp"

namespace stoker::training {

// The training and validation feature sources, on the CPU (loaders with the Augmenter as their
// transform, float32 batches into the backbone) or on the GPU (plain-resize loaders into GPU
// feeds whose stage is the CUDA executor of the same augmentation, then the cuDNN backbone).
class Sources {
 public:
  Sources(const TrainingData& data, const TrainOptions& o, trainer::Model& backbone);

  // The training loader as make(gpu) builds it: with the augmentation on the CPU path, the plain
  // resize feeding the GPU's on the GPU path.
  LoaderOptions train_loader(bool gpu) const;
  void use_threads(int threads, int prefetch);

  // `model`: another backbone for the CPU path (the frozen part of a fine-tuned one); default: the
  // one given to the constructor.
  void make(const std::shared_ptr<trainer::CudnnBackend>& gpu, const trainer::Model* model = nullptr);

  // The feed and the CUDA augmentation, checked where they run: the first (up to 32) validation
  // images' features against the CPU path's (the backbone alone was checked by place_backbone).
  double gpu_error(const Features& gpu_validation, int batch_size) const;

  FeatureSource& train() { return *train_; }
  const Augmenter& train_augmenter() const { return *train_aug_; }
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

// A pass over `source` outside the epochs' training, reported to the observer as `what`.
// `after_batch`, when given, runs after each batch (it may throw to end the pass).
Features extract(FeatureSource& source, const std::string& what, TrainObserver& observer,
                 const std::function<void()>& after_batch = {});

// --threads not given (TrainOptions::tune_loader): the loader's threads, and without --prefetch its
// prefetch, calibrated for this backbone on this data; returns the reason, or "" when not tuned.
std::string choose_loader_threads(const TrainingData& data, const TrainOptions& o, Sources& sources,
                                  const trainer::Model& backbone, bool gpu);

// Keras' ImageDataGenerator.fit(x_train) for featurewise centring / normalisation: the statistics
// of the training images after the deterministic crop and resize (unreadable ones skipped when the
// run skips them), kept in the options and so in the model folder. Options without featurewise
// steps, or with their statistics given, come back as they are.
TrainOptions with_featurewise_statistics(const TrainOptions& given, const Dataset& train, TrainObserver& observer);

}  // namespace stoker::training
