// Transfer learning from a data folder to a model folder, as `stoker train` runs it: the frozen
// backbone turns images into features, a new Dense head (sigmoid for two classes, softmax for
// more) trains on them with Adam, and the best epoch by the monitored validation metric is kept.
// Without augmentation every image's features are computed once and reused across epochs; with
// augmentation each epoch decodes, augments and runs the backbone again. The backbone runs where
// TrainOptions::device says, behind the agreement checks of device.hpp.
//
//   training::TrainOptions o;
//   o.backbone = {"mobilenet_v2.h5", "sequential_9", ""};
//   o.out = "out/run1";
//   auto data = training::training_data("photos", 0.2);     // Keras' validation_split
//   training::TrainResult r = training::train(data, o);     // r.history, r.best_epoch
//   auto model = training::load_trained_model(o.out);       // then predict(model, paths)
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/augment/spec.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/trainer/fine_tune.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/collective.hpp"
#include "stoker/training/device.hpp"
#include "stoker/training/feature_source.hpp"
#include "stoker/training/model_folder.hpp"
#include "stoker/training/run_folder.hpp"
#include "stoker/training/schedules.hpp"

namespace stoker::training {

struct TrainingData {
  Dataset train;
  Dataset validation;
};

// `folder` with one sub-folder per class. With `validation_folder` empty, the first
// validation_split of each class is held out (Keras' validation_split); otherwise that folder
// (the same class names) is the validation set. Throws DatasetError for fewer than two classes
// or an empty validation set, InvalidArgument for a split that is not in (0, 1).
TrainingData training_data(const std::string& folder, double validation_split,
                           const std::string& validation_folder = {});
// The same for samples listed some other way (WebDataset tar shards, a CSV): `all` split per class
// in its order as Keras' validation_split splits a folder, or a given validation set.
TrainingData training_data(const Dataset& all, double validation_split);
TrainingData training_data(Dataset train, Dataset validation);

// The second phase of Keras' transfer-learning recipe: after the head's epochs, the backbone's
// layers from `from_layer` up train with the head (trainer::TrainableTop: BatchNormalization in
// inference mode, its gamma and beta trained) for `epochs` more epochs, with a new optimizer over
// all trainable weights, as Keras' recompile gives. Without augmentation the frozen part's output
// is computed once and reused; with it, every epoch decodes, augments and runs the frozen part
// again. When the first phase ran on a GPU, the top trains there (TrainableTop::run_on_gpu) and
// the frozen part runs on the cuDNN backend behind the GPU feed, each checked against the CPU
// first (kGpuAgreementLimit); otherwise, or when a check fails under --device auto, on the CPU
// backend (FineTuneSetup::note says which). The history and the
// best-epoch choice span both phases; early stopping watches each phase on its own (a second
// fit()), the plateau reduction and the cosine decay the first only. When a second-phase epoch is
// the best, the folder's backbone is the fine-tuned one (kFineTunedBackboneFile, and model.h5). A
// run resumed after the first phase repeats the second from its start.
struct FineTuneOptions {
  std::string from_layer;  // empty: no second phase
  int epochs = 10;
  trainer::OptimizerConfig optimizer;  // Adam at 1e-5 unless set
  bool dropout = false;                // the top's Dropout layers drop (TrainableTop::set_dropout)
  bool enabled() const { return !from_layer.empty(); }
};

struct TrainOptions {
  trainer::BackboneRef backbone;  // model file and cut; its preprocess is taken from `prepare`
  ImagePreparation prepare;
  // The random transformations of each training epoch (rotation, shifts, flips... its size,
  // dtype and normalisation are `prepare`'s). None: features are computed once.
  std::optional<AugmentSpec> augmentation;
  // Batch size, threads, prefetch, seed, cache, bad-sample policy. Its image size, interpolation,
  // aspect-ratio crop, label mode and transform are set from `prepare`.
  LoaderOptions loader;
  // Choose the loader's threads (and, with tune_prefetch, its prefetch) for the backbone by a short
  // calibration (pipeline/autotune.hpp) instead of loader.threads / prefetch: at most
  // tune_max_threads (0: all cores), the prefetched batches within tune_ram_budget_bytes (0: no
  // limit). A CPU backbone shares the cores with the decoding: the threads keep up with the rate
  // the two reach together.
  bool tune_loader = false;
  bool tune_prefetch = false;
  int tune_max_threads = 0;
  std::uint64_t tune_ram_budget_bytes = 0;
  int epochs = 10;
  trainer::AdamConfig adam;  // its learning_rate is the initial one when a schedule is set
  trainer::Monitor monitor = trainer::Monitor::ValLoss;
  // Keras fit() options: class_weight and label_smoothing (head.hpp), and callbacks on the
  // monitored metric (schedules.hpp; their state here is their configuration).
  trainer::LossOptions loss;
  EarlyStopping early_stopping;  // the best head is already the one saved: it only ends the run
  ReduceLrOnPlateau reduce_lr_on_plateau;
  // CosineDecay(adam.learning_rate, epochs x batches per epoch) per step; not with the plateau.
  bool cosine_decay = false;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N (device.hpp)
  std::filesystem::path out;    // the model folder, created when missing
  // The lock that keeps other runs out of `out` (run_folder.hpp), when the caller took it before
  // looking into the folder (the command does); null: train() takes it itself.
  std::shared_ptr<const RunFolderLock> out_lock;
  // A checkpoint (checkpoint.hpp) goes to `out` at each epoch end and, when > 0, after every this
  // many training batches of an augmenting epoch.
  int checkpoint_every_batches = 0;
  // Continue the run whose checkpoint is in `out`: the epochs it finished are not run again, an
  // epoch it was in continues at its next batch, and the result (history, heads) is that of the
  // uninterrupted run — bit for bit on the CPU backend. `epochs` may be raised to train on.
  // IoError when there is no checkpoint; InvalidArgument naming the setting when the data or a
  // setting the results depend on differs (threads, prefetch, cache and device may change).
  bool resume = false;
  FineTuneOptions fine_tune;
  // Asked after each training batch and at each epoch's end (a command sets it from SIGINT): when
  // it returns true, the run saves a checkpoint where it stands, as checkpoint_every_batches
  // would, and returns with TrainResult::stopped set; `resume` continues it. An epoch without
  // augmentation (the head on computed values) stops at its end. Empty: never asked.
  std::function<bool()> should_stop;
  // The ranks of a data-parallel run (collective.hpp, docs/distributed.md); null or one rank: this
  // process trains alone. With more: each rank computes the features of its share (the loader's
  // sharding is this rank of the collective's size), the ranks gather them and train the head on
  // global batches of loader.batch_size split between them, its gradients summed over the ranks
  // every step; every rank holds the same head and makes the same decisions, and only rank 0
  // writes `out`. Not yet with augmentation, fine-tuning or resume (InvalidArgument).
  std::shared_ptr<Collective> collective;
};

// What the run is about to do, for the log.
// One rank's device in a run of several ranks: what the setup line says, its machine, its GPU.
struct RankDevice {
  std::string description;  // DeviceChoice::description
  std::string machine;      // the host name
  std::optional<int> gpu;   // the CUDA device index, for a GPU
};

struct TrainSetup {
  std::size_t train_images = 0;  // listed; those unreadable are left out of each epoch (EpochReport::skipped)
  std::size_t validation_images = 0;
  std::vector<std::string> class_names;
  std::size_t backbone_parameters = 0;
  std::string cut_at;  // the layer the features come from (chosen by load_feature_backbone when not given)
  int features = 0;
  DeviceChoice device;
  std::vector<RankDevice> rank_devices;         // with several ranks: each rank's device, by rank
  std::string cache_status;                     // the training loader's cache, when it has one
  std::string batches;                          // how training batches are made (the GPU feed's description), or empty
  std::optional<FeaturewiseStats> featurewise;  // fitted on the training set, when the run standardises so
  std::string loader_tuning;                    // the threads and prefetch chosen (tune_loader), when tuned
};

// The second phase as it starts (FineTuneOptions): where the backbone was split and what it costs.
struct FineTuneSetup {
  std::string from_layer, boundary;  // trainable from from_layer; the frozen part ends at boundary
  std::size_t trainable_parameters = 0;
  std::size_t activation_bytes = 0;  // kept for the backward pass at the batch size (on the GPU: all its memory)
  bool on_gpu = false;               // the top trains on the GPU (TrainableTop::run_on_gpu)
  std::string note;                  // where it runs when a GPU was chosen (and why not, if it falls back)
};

struct EpochReport {
  int epoch = 0;                          // from 0
  bool fine_tuning = false;               // an epoch of the second phase (FineTuneOptions)
  bool features_cached = false;           // the head trained on features computed in an earlier epoch
  trainer::EpochStats train, validation;  // train.samples: the images trained on
  // The training samples left out as unreadable (LoaderOptions::on_bad_sample = Skip): found by
  // this epoch's decoding, or by the first epoch's when the features are reused.
  std::vector<SkippedSample> skipped;
  double learning_rate = 0;    // of the epoch's last step
  bool improved = false;       // best so far by the monitor: saved
  bool stopped_early = false;  // EarlyStopping ends the run after this epoch
  double seconds = 0;          // wall time of the epoch (feature extraction included)
  double images_per_second = 0;
  EpochTimes times;  // waiting for data, backbone, GPU time
  // With several ranks: the part of `seconds` this rank spent exchanging with the others, waiting
  // for slower ranks included (Collective::seconds_exchanging).
  double seconds_exchanging = 0;
};

// Callbacks for a command's progress and logs; every method has a do-nothing default.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_setup(const TrainSetup&) {}
  // The GPU of an "auto" device was dropped for the CPU (its setup or an agreement check failed).
  virtual void on_warning(const std::string&) {}
  // After the GPU was dropped: the loader's threads chosen again for sharing the cores with the
  // CPU backbone (the choice, as TrainSetup::loader_tuning says it).
  virtual void on_loader_retuned(const std::string&) {}
  // Feature extraction outside the epochs' training (validation features, the features reused
  // by every epoch without augmentation): what, then progress after each batch.
  virtual void on_features_begin(const std::string&, std::size_t /*batches*/) {}
  virtual void on_features_progress(std::size_t /*batches*/, std::size_t /*images*/) {}
  virtual void on_features_end(const std::vector<SkippedSample>& /*skipped: unreadable, left out*/) {}
  // A resumed run: the epochs the checkpoint had finished, and where the next one starts.
  virtual void on_resume(const std::vector<EpochReport>& /*history*/, int /*epoch*/, std::size_t /*next_batch*/) {}
  // batches: the epoch's total (0 for epochs that train the head on cached features).
  virtual void on_epoch_begin(int /*epoch*/, std::size_t /*batches*/) {}
  // After each training batch of an augmenting epoch: batches and images so far in the epoch
  // (counting those before a resume), running mean loss and accuracy.
  virtual void on_train_batch(std::size_t /*batches*/, std::size_t /*images*/, double /*loss*/, double /*accuracy*/) {}
  virtual void on_epoch_end(const EpochReport&) {}
  virtual void on_fine_tune_begin(const FineTuneSetup&) {}
};

// Keras' class_weight='balanced' (sklearn's compute_class_weight): n_samples / (n_classes x
// count), from the samples listed per class. DatasetError naming a class without samples.
std::vector<double> balanced_class_weight(const Dataset& train);

// Where a run asked to stop (TrainOptions::should_stop) stopped: after `batch` training batches of
// epoch `epoch` (from 0), or with batch 0 before epoch `epoch`, the previous one done.
struct StopPoint {
  int epoch = 0;
  std::size_t batch = 0;
};

struct TrainResult {
  std::vector<EpochReport> history;
  // Set when the run stopped on request: its checkpoint is in the folder, the classifier is not
  // written (best_epoch is the best so far).
  std::optional<StopPoint> stopped;
  int best_epoch = -1;
  DeviceChoice device;          // where the backbone ran in the end
  std::string classifier_note;  // why model.h5 was not written, when it was not
};

// A training or validation loss that is not finite (a learning rate too large, a diverging step):
// the run stops there, as Keras' TerminateOnNaN callback stops fit(). Nothing of the failing epoch
// is saved: head.stkh keeps the best finite epoch, the checkpoint the last finite position.
class NonFiniteLoss : public Error {
 public:
  using Error::Error;
};

// Trains and writes the model folder (head.stkh, stoker_model.json) to options.out. Throws
// stoker::Error subclasses naming the file or option at fault (NonFiniteLoss when the loss
// becomes NaN or infinite).
TrainResult train(const TrainingData& data, const TrainOptions& options, TrainObserver* observer = nullptr);

}  // namespace stoker::training
