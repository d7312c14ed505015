// The transfer-learning head: Dense(1, sigmoid) + binary cross-entropy, or Dense(k, softmax) +
// categorical cross-entropy, trained with Adam (Keras' formulation and defaults) on feature
// vectors. Independent of the data loader: it takes float feature batches and integer labels.
//
//   Head head = Head::sigmoid(1280);                       // or Head::softmax(1280, k)
//   for (epoch...) { auto s = head.train_epoch(x, y, n, 32, epoch); }   // s.loss, s.accuracy
//   head.save("head.stkh", {"mobilenet.h5", "sequential_9"});
//   BackboneRef ref; Head again = Head::load("head.stkh", &ref);
//   Tensor p = again.predict(x, n);                        // {n, 1} or {n, k} probabilities
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <stoker/trainer/model.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer {

enum class HeadActivation { Sigmoid, Softmax };

struct AdamConfig {  // Keras defaults
  float learning_rate = 1e-3f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
};

// Which backbone produced the features, so a saved head can be used on new images.
struct BackboneRef {
  std::string model;       // path of the Keras .h5 or TF.js model.json
  std::string cut_at;      // layer (or nested model) whose output are the features; empty: the whole model
  std::string preprocess;  // free text, e.g. "x/127.5-1"
};

// What Keras' fit() adds to a training step's loss: class_weight (each sample's loss and gradient
// times its class's weight; the batch's loss stays the sum divided by the batch size, as
// tf-keras 2.x reports it) and the loss's label_smoothing (targets y(1 - s) + s/2 for the sigmoid
// head, y(1 - s) + s/k for the softmax head; it applies to evaluate() too, as Keras' compiled loss
// does, class weights do not).
struct LossOptions {
  double label_smoothing = 0;        // in [0, 1)
  std::vector<double> class_weight;  // one per class, or empty: all 1

  // InvalidArgument saying what is wrong for a head of `classes` classes.
  void check(int classes) const;
};

struct StepResult {
  double loss = 0;  // mean over the batch
  int correct = 0;  // samples whose predicted class equals the label
  int samples = 0;
};

// A batch's gradients of the head's loss: its kernel and bias, and the features it was given
// (what a fine-tuned backbone below the head trains on).
struct HeadGradients {
  std::vector<float> kernel, bias;  // the layouts of Head::kernel() / bias()
  std::vector<float> features;      // batch × input_dim
};

struct EpochStats {
  double loss = 0;      // mean over samples
  double accuracy = 0;  // fraction correct (binary: probability > 0.5)
  int samples = 0;
};

// The order an epoch visits n rows of cached values: a Fisher-Yates permutation from (seed, epoch),
// the same on every platform (splitmix64).
std::vector<int> epoch_rows(int n, std::uint64_t seed, std::uint64_t epoch);

class Head {
 public:
  // Glorot-uniform kernel and zero bias, like Keras' Dense, from a deterministic seed.
  Head(int input_dim, int units, HeadActivation activation, AdamConfig adam = {}, std::uint64_t seed = 0);
  static Head sigmoid(int input_dim, AdamConfig adam = {}, std::uint64_t seed = 0);
  static Head softmax(int input_dim, int classes, AdamConfig adam = {}, std::uint64_t seed = 0);

  int input_dim() const { return input_dim_; }
  int units() const { return units_; }
  int classes() const { return units_ == 1 ? 2 : units_; }
  HeadActivation activation() const { return activation_; }
  const AdamConfig& adam() const { return adam_; }
  std::int64_t steps() const { return step_; }

  // kernel [input_dim, units] row-major, bias [units]: readable and writable (e.g. to start from
  // known weights in tests).
  std::vector<float>& kernel() { return kernel_; }
  std::vector<float>& bias() { return bias_; }
  const std::vector<float>& kernel() const { return kernel_; }
  const std::vector<float>& bias() const { return bias_; }

  // One Adam step on a batch. features: batch × input_dim; labels: class index per sample (0/1 for
  // the sigmoid head). Returns the batch's loss (before the update) and correct count.
  StepResult train_step(const float* features, const int* labels, int batch, const LossOptions& loss = {});
  // The loss's gradients for a batch without updating anything (train_step's first half).
  StepResult backward(const float* features, const int* labels, int batch, const LossOptions& loss,
                      HeadGradients& gradients) const;
  // One Adam step on given gradients (train_step's second half), the moments the head keeps:
  // data-parallel training sums the ranks' gradients in between.
  void apply_gradients(const HeadGradients& gradients);
  // One pass over n samples in mini-batches, in the order epoch_rows(n, seed, epoch) (as Keras'
  // fit(shuffle=True) shuffles each epoch); reports the running mean loss and accuracy seen during the epoch.
  // `before_step`, when set, runs before each step (a learning-rate schedule).
  EpochStats train_epoch(const float* features, const int* labels, int n, int batch_size, std::uint64_t epoch,
                         std::uint64_t seed = 0, const LossOptions& loss = {},
                         const std::function<void(Head&)>& before_step = {});
  EpochStats evaluate(const float* features, const int* labels, int n, const LossOptions& loss = {}) const;

  // The rate of the next steps (a schedule's; >= 0): kept in the head file with the other Adam settings,
  // so a resumed run continues with it.
  void set_learning_rate(float learning_rate);

  // Probabilities: {n, 1} (sigmoid) or {n, k} (softmax).
  Tensor predict(const float* features, int n) const;
  std::vector<int> predict_classes(const float* features, int n) const;

  // The file format is described in docs/trainer.md ("stoker head file"): a magic, a JSON header,
  // then raw little-endian float32 tensors (kernel, bias and Adam's moments), so save -> load
  // reproduces the head bit for bit and training can resume. save() replaces the file atomically.
  void save(const std::filesystem::path& file, const BackboneRef& backbone = {}) const;
  static Head load(const std::filesystem::path& file, BackboneRef* backbone = nullptr);
  // The same bytes in memory (a checkpoint embeds them); `where` names the source in errors.
  std::string serialize(const BackboneRef& backbone = {}) const;
  static Head deserialize(std::string_view bytes, const std::string& where, BackboneRef* backbone = nullptr);

 private:
  int input_dim_;
  int units_;
  HeadActivation activation_;
  AdamConfig adam_;
  std::int64_t step_ = 0;
  std::vector<float> kernel_, bias_;
  std::vector<float> m_kernel_, v_kernel_, m_bias_, v_bias_;

  void logits(const float* features, int n, float* out) const;
  void check_labels(const int* labels, int n) const;
  // The (smoothed) target of class j for a sample of class `label`.
  double target(const LossOptions& loss, int label, int j) const;
};

// Training loop over cached features with validation and best-epoch selection, like Keras'
// fit(..., validation_data=...) with ModelCheckpoint(save_best_only=True).
enum class Monitor { ValLoss, ValAccuracy };

Monitor parse_monitor(const std::string& name);  // "val_loss" | "val_accuracy"

// Keeps the best epoch by the monitored validation metric, like Keras'
// ModelCheckpoint(save_best_only=True): fit() uses it, and so can loops that train the head on
// batches as they arrive.
class BestEpoch {
 public:
  explicit BestEpoch(Monitor monitor, std::filesystem::path checkpoint = {}, BackboneRef backbone = {});
  // Records an epoch's validation metrics; when they improve on every earlier epoch (a non-finite
  // loss never does), keeps a copy of the head (and saves it to the checkpoint, when set).
  // Returns whether it improved.
  bool offer(int epoch, const EpochStats& validation, const Head& head);
  int epoch() const { return epoch_; }  // -1 before the first offer
  const Head* head() const { return best_ ? &*best_ : nullptr; }
  double value() const { return best_value_; }  // the monitored value there, lower is better
  // Continues a resumed run's record: its best epoch, that epoch's value() and head.
  void restore(int epoch, double value, Head head);

 private:
  Monitor monitor_;
  std::filesystem::path checkpoint_;
  BackboneRef backbone_;
  std::optional<Head> best_;
  double best_value_ = 0;
  int epoch_ = -1;
};

struct EpochRecord {
  int epoch = 0;  // from 0
  EpochStats train;
  EpochStats validation;
  bool improved = false;  // the monitored validation metric improved (the head was checkpointed)
};

struct FitOptions {
  int epochs = 10;
  int batch_size = 32;
  std::uint64_t seed = 0;  // shuffling
  Monitor monitor = Monitor::ValLoss;
  bool restore_best = true;                          // leave the head at its best epoch when done
  std::filesystem::path checkpoint;                  // when set, the best head is saved here as it improves
  BackboneRef backbone;                              // written into the checkpoint
  std::function<void(const EpochRecord&)> on_epoch;  // progress callback
};

struct FitResult {
  std::vector<EpochRecord> history;
  int best_epoch = -1;
};

// x: n × input_dim features with labels y; xv/yv: validation (nv may be 0: then the training
// metrics are monitored instead).
FitResult fit(Head& head, const float* x, const int* y, int n, const float* xv, const int* yv, int nv,
              const FitOptions& options = {});

}  // namespace stoker::trainer
