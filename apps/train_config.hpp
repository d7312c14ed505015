// Everything `stoker train` needs, from flags or a TOML config file (flags override the file).
// Flag names follow Keras' ImageDataGenerator and fit() where Keras has a name.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "loader_flags.hpp"
#include "stoker/training/run_folder.hpp"
#include "stoker/training/train.hpp"

namespace stoker::app {

struct TrainConfig {
  TrainConfig() { loader.use_defaults_of(kWhereTrain); }  // the settings table's train differences

  LoaderFlags loader;  // --data, --image-size, --batch-size, --threads, cache…
  std::string val;     // separate validation folder
  double validation_split = 0.2;
  std::string model;              // Keras .h5 or TF.js model.json
  std::string cut_at;             // layer whose output are the features
  std::string preprocess = "tf";  // tf ([-1, 1]) | caffe | torch | none
  int epochs = 10;
  double learning_rate = 1e-3;
  std::string monitor = "val_loss";  // val_loss | val_accuracy
  // Keras fit(): class_weight ("auto" = 'balanced', or "class:weight,..." by name or index) and
  // the loss's label_smoothing; callbacks on the monitored metric.
  std::string class_weight;
  double label_smoothing = 0;
  int early_stopping_patience = 0;           // 0: off
  std::vector<double> reduce_lr_on_plateau;  // factor, patience; empty: off
  bool cosine_decay = false;
  std::string device = "auto";  // auto | cpu | cuda[:N] | cuda:N,M,... | cuda:all (one rank per GPU)
  std::string out;
  int checkpoint_every = 0;  // batches between checkpoints of an augmenting epoch (0: epoch ends only)
  int cpu_budget = 0;        // without --threads: the calibration's most threads (0: all cores)
  std::string ram_budget;    // without --threads: RAM for prefetched batches (empty: no limit)
  std::string resume;        // the --out of a killed run to continue
  bool overwrite = false;  // --out may hold an earlier run (its files are removed) or other files (kept); not recorded
  double peer_timeout = 300;  // several ranks: seconds an exchange may wait for the others; not recorded
  // The second phase (training::FineTuneOptions): unfreeze the backbone from this layer up.
  std::string fine_tune_from;
  int fine_tune_epochs = 10;
  double fine_tune_learning_rate = 1e-5;
  std::string fine_tune_optimizer = "adam";  // adam | sgd
  double fine_tune_momentum = 0;             // sgd
  bool fine_tune_dropout = false;            // the unfrozen layers' Dropout drops

  // Keras ImageDataGenerator
  double rotation_range = 0;
  double width_shift_range = 0;
  double height_shift_range = 0;
  double shear_range = 0;
  std::vector<double> zoom_range;  // z: [1 - z, 1 + z]; or lower, upper
  bool horizontal_flip = false;
  bool vertical_flip = false;
  std::vector<double> brightness_range;
  double channel_shift_range = 0;
  std::string fill_mode = "nearest";
  double cval = 0;
  std::string rescale;  // e.g. 1/255; empty: none
  bool samplewise_center = false;
  bool samplewise_std_normalization = false;
  bool featurewise_center = false;  // the statistics are fitted on the training set
  bool featurewise_std_normalization = false;

  // Beyond Keras (AugmentSpec): crops and colour jitter.
  double center_crop = 1.0;                 // fraction of each side kept, for every image
  std::vector<double> random_resized_crop;  // scale lo, hi[, ratio lo, hi]: torchvision's
  double contrast = 0;
  double saturation = 0;
  double hue = 0;

  void add_to(CLI::App& cmd);
  // What the training library runs (its loader options and augmentation from the flags).
  training::TrainOptions options() const;
  // The class weights of --class-weight for `train`'s classes (empty without the flag).
  std::vector<double> class_weights(const Dataset& train) const;
  bool augments() const;  // any random transformation configured
};

// A run's settings, kept in its --out folder (kRunSettingsFile, JSON) so that --resume repeats
// them: paths are stored absolute. IoError naming the file when it cannot be written or read.
constexpr const char* kRunSettingsFile = training::kRunSettingsFile;
void save_run_settings(const TrainConfig& config);
TrainConfig load_run_settings(const std::string& out);
// The flags --resume takes along: those training::run_identity() says may change (they do not
// change the results); any other is refused.
bool resumable_override(const std::string& flag);
std::string resumable_flags();  // "--epochs, --threads, ... and --fine-tune-epochs"
// Sets `flag`'s value in `saved` from `given`; InvalidArgument for a flag that may not change.
void apply_override(TrainConfig& saved, const TrainConfig& given, const std::string& flag);

// The bundled default run: the sample photos and the MobileNetV2 α=0.35 backbone in data/.
constexpr const char* kDefaultData = "data/catsdogs-sample";
constexpr const char* kDefaultModel = "data/models/mobilenet_v2_0.35_224_3class.h5";
constexpr const char* kDefaultCut = "sequential_9";

}  // namespace stoker::app
