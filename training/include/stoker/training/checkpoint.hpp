// What a killed training run leaves behind so that train(resume = true) continues it where it
// stopped: one file, replaced atomically at each epoch end and every N batches,
//   OUT/checkpoint.stkc   the head with Adam's moments and step count, the best epoch's head and
//                         monitored value, the training loader's position (a LoaderState), the
//                         running sums of the epoch in progress, the history so far, and the
//                         settings the run's results depend on (a resume with others is refused)
// and, for runs without augmentation, the training features computed once (written once):
//   OUT/checkpoint-features.bin
// and, once fine-tuning has begun, its optimizers in the checkpoint and the backbone:
//   OUT/checkpoint-backbone-E.h5  (E: the epoch the checkpoint continues with)
// The format is described in docs/trainer.md ("checkpoints").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "stoker/pipeline/loader.hpp"
#include "stoker/trainer/fine_tune.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/feature_source.hpp"
#include "stoker/training/schedules.hpp"
#include "stoker/training/train.hpp"

namespace stoker::training {

inline constexpr const char* kCheckpointFile = "checkpoint.stkc";
inline constexpr const char* kCheckpointFeaturesFile = "checkpoint-features.bin";

// The running sums of an augmenting epoch after its first `batches` batches.
struct EpochProgress {
  std::size_t batches = 0;
  std::size_t images = 0;
  double loss_sum = 0;  // sum over samples of the per-batch mean loss × batch size
  int correct = 0;
  std::vector<SkippedSample> skipped;  // unreadable samples left out so far
};

// Where the fine-tuning phase stands after `epochs_done` of its epochs (the run's `epoch` counts
// both phases): its two optimizers, its early stopping, and the backbone with the current
// weights of its trainable layers, a Keras .h5 in the run's folder named by `backbone_file`
// (written before the checkpoint that names it, so a crash between the two leaves the previous
// checkpoint and its own file).
struct FineTuneProgress {
  int epochs_done = 0;
  trainer::OptimizerState top, head;
  EarlyStopping early_stopping;
  std::string backbone_file;
};

struct Checkpoint {
  std::string settings;    // JSON text of what the results depend on (run_settings.cpp compares it key by key)
  int epoch = 0;           // the epoch to run next (in progress when loader.next_batch > 0)
  LoaderState loader;      // the training batches' position in `epoch`
  EpochProgress progress;  // of `epoch`, when it is in progress
  std::vector<EpochReport> history;
  int best_epoch = -1;                           // -1: no epoch finished yet
  double best_value = 0;                         // the monitored value there (BestEpoch's convention: lower is better)
  std::optional<trainer::Head> head, best_head;  // the head's Adam settings hold the current learning rate
  // The callbacks' counters after `epoch` - 1 (best, wait, stopped / cooldown): their settings
  // are not stored, run_settings holds them.
  EarlyStopping early_stopping;
  ReduceLrOnPlateau reduce_lr_on_plateau;
  bool has_features = false;                  // the training features are in kCheckpointFeaturesFile
  std::optional<FineTuneProgress> fine_tune;  // set once a fine-tuning epoch has finished
};

// IoError naming the file and the reason; the file is replaced atomically (atomic_file.hpp).
void save_checkpoint(const std::filesystem::path& file, const Checkpoint& checkpoint);
// IoError naming the file for a missing, truncated or malformed checkpoint.
Checkpoint load_checkpoint(const std::filesystem::path& file);

// The training features of a run without augmentation (n, dim, the classes, then the values).
void save_features(const std::filesystem::path& file, const Features& features);
Features load_features(const std::filesystem::path& file);

}  // namespace stoker::training
