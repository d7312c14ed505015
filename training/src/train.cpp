#include "stoker/training/train.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <tuple>

#include <nlohmann/json.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/autotune.hpp"
#include "stoker/training/checkpoint.hpp"

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

  // The training loader as make(gpu) builds it: with the augmentation on the CPU path, the plain
  // resize feeding the GPU's on the GPU path.
  LoaderOptions train_loader(bool gpu) const {
    LoaderOptions tl = train_loader_;
    if (!gpu) tl.transform = train_aug_;
    return tl;
  }
  void use_threads(int threads, int prefetch) {
    train_loader_.threads = val_loader_.threads = threads;
    train_loader_.prefetch = val_loader_.prefetch = prefetch;
  }

  // `model`: another backbone for the CPU path (the frozen part of a fine-tuned one); default: the
  // one given to the constructor.
  void make(const std::shared_ptr<trainer::CudnnBackend>& gpu, const trainer::Model* model = nullptr) {
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

  // The feed and the CUDA augmentation, checked where they run: the first (up to 32) validation
  // images' features against the CPU path's (the backbone alone was checked by place_backbone).
  double gpu_error(const Features& gpu_validation, int batch_size) const {
    return gpu_path_error(data_.validation, val_loader_, val_aug_, backbone_.graph(), gpu_validation,
                          std::min(batch_size, 32));
  }

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

Features extract(FeatureSource& source, const std::string& what, TrainObserver& observer) {
  observer.on_features_begin(what, source.batches_per_epoch());
  Features f = collect_features(source, 0, [&](std::size_t batches, std::size_t, std::size_t images) {
    observer.on_features_progress(batches, images);
  });
  observer.on_features_end(f.skipped);
  return f;
}

// Images per second the backbone takes on its device: a batch of zeros, timed on its second run
// (the first compiles and allocates).
double consumer_rate(const trainer::Model& backbone, int image_size, int batch_size) {
  const std::vector<float> zeros(static_cast<std::size_t>(batch_size) * image_size * image_size * 3, 0.0f);
  backbone.forward(zeros.data(), batch_size);
  const auto t0 = Clock::now();
  backbone.forward(zeros.data(), batch_size);
  return batch_size / std::max(since(t0), 1e-9);
}

// --threads not given (TrainOptions::tune_loader): the loader's threads, and without --prefetch its
// prefetch, calibrated for this backbone on this data; returns the reason, or "" when not tuned.
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

// Where train() stands, for checkpoints: the head, the best epoch, the history, and (for runs
// without augmentation) whether the training features are saved.
struct RunState {
  const TrainOptions& options;
  std::string settings;
  trainer::Head& head;
  trainer::BestEpoch& best;
  std::vector<EpochReport>& history;
  EarlyStopping early_stopping;
  ReduceLrOnPlateau reduce_lr_on_plateau;
  std::int64_t decay_steps = 0;  // of the cosine schedule; 0 without it
  bool features_saved = false;

  // Before each optimizer step: the cosine schedule's rate for it.
  void before_step(trainer::Head& h) const {
    if (decay_steps > 0) h.set_learning_rate(cosine_decay(options.adam.learning_rate, h.steps(), decay_steps));
  }

  // In the fine-tuning phase `fine_tune` is where it stands and `phase_best` its best epoch (that
  // phase's BestEpoch, whose head refers to the fine-tuned backbone).
  void save(int epoch, const LoaderState& loader, const EpochProgress& progress = {},
            const FineTuneProgress* fine_tune = nullptr, const trainer::BestEpoch* phase_best = nullptr) const {
    const trainer::BestEpoch& b = phase_best ? *phase_best : best;
    Checkpoint c;
    c.settings = settings;
    c.epoch = epoch;
    c.loader = loader;
    c.progress = progress;
    c.history = history;
    c.best_epoch = b.epoch();
    c.best_value = b.value();
    c.head = head;
    if (b.head()) c.best_head = *b.head();
    if (fine_tune) c.fine_tune = *fine_tune;
    c.has_features = features_saved;
    c.early_stopping = early_stopping;
    c.reduce_lr_on_plateau = reduce_lr_on_plateau;
    save_checkpoint(options.out / kCheckpointFile, c);
  }
};

// One epoch that augments: decode, augment and run the backbone (in the second phase its frozen
// part) again, `step` training on each batch. Every `checkpoint_every` batches (0: never) but the
// last, `checkpoint` saves the run with the epoch's sums so far. A resumed epoch starts at
// `resume`'s next batch with the sums the checkpoint kept.
EpochReport augmented_epoch(int epoch, FeatureSource& source, int checkpoint_every, TrainObserver& observer,
                            const LoaderState* resume, EpochProgress sums,
                            const std::function<trainer::StepResult(const float*, const int*, int)>& step,
                            const std::function<void(const EpochProgress&)>& checkpoint) {
  EpochReport e;
  e.epoch = epoch;
  const std::size_t total = source.batches_per_epoch();
  const std::size_t images_before = sums.images;  // trained on by the process that was stopped
  const auto t0 = Clock::now();
  // The unreadable samples of the whole epoch: those the stopped process met, then this one's.
  auto skipped_so_far = [&] {
    std::vector<SkippedSample> all = sums.skipped;
    for (SkippedSample& s : source.skipped()) all.push_back(std::move(s));
    return all;
  };
  e.times = source.run_epoch(
      static_cast<std::uint64_t>(epoch),
      [&](const float* x, const int* y, const std::int64_t*, int n, int) {
        const trainer::StepResult r = step(x, y, n);
        sums.loss_sum += r.loss * r.samples;
        sums.correct += r.correct;
        sums.images += static_cast<std::size_t>(n);
        ++sums.batches;
        observer.on_train_batch(sums.batches, sums.images, sums.loss_sum / static_cast<double>(sums.images),
                                sums.correct / static_cast<double>(sums.images));
        if (checkpoint_every > 0 && sums.batches % static_cast<std::size_t>(checkpoint_every) == 0 &&
            sums.batches < total) {
          EpochProgress progress = sums;
          progress.skipped = skipped_so_far();
          checkpoint(progress);
        }
      },
      resume);
  e.seconds = since(t0);
  e.skipped = skipped_so_far();
  const double seen = std::max<double>(1, static_cast<double>(sums.images));
  e.train = {sums.loss_sum / seen, sums.correct / seen, static_cast<int>(sums.images)};
  e.images_per_second = static_cast<double>(sums.images - images_before) / std::max(1e-9, e.seconds);
  return e;
}

// The augmentation as a number: its output for a few samples of a synthetic image (geometry,
// photometric steps and normalisation all show in it, and a resumed run must draw the same).
std::string augmentation_fingerprint(const Augmenter& augmenter) {
  const int channels = augmenter.plan().channels;
  const int height = 37, width = 53;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(height) * width * channels);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
  const ImageView src{pixels.data(), height, width, channels, static_cast<std::size_t>(width) * channels};
  std::vector<std::byte> out(augmenter.output_shape().bytes());
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the outputs
  for (std::int64_t id = 0; id < 4; ++id) {
    augmenter.apply(src, {7, 1, id}, out.data());
    for (std::byte b : out) h = (h ^ static_cast<std::uint8_t>(b)) * 0x100000001b3ull;
  }
  return std::to_string(h);
}

// What a run's results depend on besides its data (the loader state's digest covers that).
nlohmann::json run_settings(const TrainOptions& o, const trainer::BackboneRef& backbone, const Augmenter& augmentation,
                            const std::vector<std::string>& classes, std::int64_t decay_steps) {
  return {{"backbone", backbone.model},
          {"cut_at", backbone.cut_at},
          {"preprocess", o.prepare.preprocess},
          {"image_size", o.prepare.image_size},
          {"interpolation", to_string(o.prepare.interpolation)},
          {"keep_aspect_ratio", o.prepare.keep_aspect_ratio},
          {"center_crop", o.prepare.center_crop},
          {"rescale", o.prepare.rescale ? nlohmann::json(*o.prepare.rescale) : nlohmann::json(nullptr)},
          {"standardisation",
           {o.prepare.samplewise_center, o.prepare.samplewise_std_normalization, o.prepare.featurewise_center,
            o.prepare.featurewise_std_normalization}},
          {"augmentation", o.augmentation ? augmentation_fingerprint(augmentation) : std::string("none")},
          {"learning_rate", o.adam.learning_rate},
          {"label_smoothing", o.loss.label_smoothing},
          {"class_weight", o.loss.class_weight},
          {"early_stopping_patience", o.early_stopping.patience},
          {"reduce_lr_on_plateau", {o.reduce_lr_on_plateau.factor, o.reduce_lr_on_plateau.patience}},
          {"cosine_decay_steps", decay_steps},
          {"beta_1", o.adam.beta_1},
          {"beta_2", o.adam.beta_2},
          {"epsilon", o.adam.epsilon},
          {"monitor", o.monitor == trainer::Monitor::ValLoss ? "val_loss" : "val_accuracy"},
          {"seed", o.loader.seed},
          {"batch_size", o.loader.batch_size},
          {"classes", classes},
          {"fine_tune", o.fine_tune.enabled()
                            ? nlohmann::json{{"from", o.fine_tune.from_layer},
                                             {"optimizer", trainer::to_string(o.fine_tune.optimizer.kind)},
                                             {"learning_rate", o.fine_tune.optimizer.learning_rate},
                                             {"momentum", o.fine_tune.optimizer.momentum},
                                             {"nesterov", o.fine_tune.optimizer.nesterov},
                                             {"dropout", o.fine_tune.dropout}}
                            : nlohmann::json(nullptr)}};
}

// Keras' ImageDataGenerator.fit(x_train) for featurewise centring / normalisation: the statistics
// of the training images after the deterministic crop and resize (unreadable ones skipped when the
// run skips them), kept in the options and so in the model folder. Options without featurewise
// steps, or with their statistics given, come back as they are.
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

// Refuses a checkpoint from another run, naming the first setting that differs.
void check_same_run(const Checkpoint& c, const nlohmann::json& settings, const LoaderState& loader,
                    const std::filesystem::path& file) {
  const std::string why = file.string() + ": cannot resume: ";
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(c.settings);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(why + "malformed settings: " + e.what());
  }
  for (const auto& [key, value] : settings.items()) {
    if (!saved.contains(key) || saved[key] != value) {
      throw InvalidArgument(why + "the checkpoint's run has " + key + " = " +
                            (saved.contains(key) ? saved[key].dump() : std::string("(none)")) + ", this one " +
                            value.dump());
    }
  }
  if (c.loader.digest != loader.digest || c.loader.seed != loader.seed) {
    throw InvalidArgument(why + "the checkpoint's run trained on other data (another set of files, labels or split)");
  }
}

// The second phase's checkpoints name a backbone file of their own: `epoch` is where the
// checkpoint resumes, `batch` its next batch there (0 at an epoch's end).
std::string backbone_checkpoint_name(int epoch, std::size_t batch) {
  return "checkpoint-backbone-" + std::to_string(epoch) + (batch > 0 ? "-b" + std::to_string(batch) : "") + ".h5";
}

// Saves the second phase where it stands: after `epochs_done` of its epochs, at the end of an
// epoch (progress null: the run resumes with `epoch`, the next) or inside epoch `epoch` after
// `progress`'s batches. The backbone file comes first, so a crash between the two leaves the
// previous checkpoint with its own file; that one is removed after (`saved_backbone`: its name,
// then this checkpoint's).
void save_fine_tune_checkpoint(const fs::path& out, const RunState& run, Sources& sources,
                               const trainer::TrainableTop& top, trainer::TopAndHead& model,
                               const trainer::BestEpoch& best, const EarlyStopping& early_stopping, int epochs_done,
                               int epoch, const EpochProgress* progress, std::string& saved_backbone) {
  LoaderState loader = sources.train().state();
  if (!progress) {
    loader.epoch = static_cast<std::uint64_t>(epoch);
    loader.next_batch = 0;
  }
  FineTuneProgress p;
  p.epochs_done = epochs_done;
  p.top = top.optimizer().state();
  p.head = model.head_optimizer().state();
  p.early_stopping = early_stopping;
  p.backbone_file = backbone_checkpoint_name(epoch, static_cast<std::size_t>(loader.next_batch));
  trainer::save_keras_h5(top.graph(), out / p.backbone_file);  // atomically: complete or absent
  run.save(epoch, loader, progress ? *progress : EpochProgress{}, &p, &best);
  std::error_code ignored;
  if (!saved_backbone.empty() && saved_backbone != p.backbone_file) fs::remove(out / saved_backbone, ignored);
  saved_backbone = p.backbone_file;
}

// The second phase on the GPU the first phase ran on: the top trains through the GPU trainer
// (TrainableTop::run_on_gpu) after its gradients pass TrainableTop::check_gpu_gradients, and the
// frozen part runs on the cuDNN backend behind the GPU feed after the backbone's agreement check
// (kGpuAgreementLimit). What fails keeps the CPU with the reason ("auto") or stops the run (an
// explicit --device cuda). Returns the setup's note; `below_gpu` is the frozen part's backend, or
// null for the CPU's.
std::string place_fine_tuning(trainer::TrainableTop& top, const trainer::Model& below, int batch,
                              const DeviceChoice& device, std::shared_ptr<trainer::CudnnBackend>& below_gpu,
                              TrainObserver& observer) {
  below_gpu.reset();
  try {
    trainer::GpuTrainOptions go;
    go.max_batch = batch;
    top.run_on_gpu(go);
    const trainer::TrainableTop::GpuGradientCheck check = top.check_gpu_gradients();
    if (!(check.gpu <= check.limit(kGpuAgreementLimit))) {
      char rounding[64];
      std::snprintf(rounding, sizeof rounding, " (bf16 rounding alone: %.3g)", check.rounding);
      throw Error(disagreement("the GPU trainer's gradients differ from the CPU backward's", check.gpu,
                               check.limit(kGpuAgreementLimit)) +
                  rounding);
    }
    if (!top.boundary_is_input()) {
      trainer::CudnnBackendOptions bo;
      bo.max_batch = batch;
      std::shared_ptr<trainer::CudnnBackend> g = trainer::make_cudnn_backend(below.graph(), bo);
      const double e = trainer::relative_error_to_cpu(below.graph(), *g);
      if (!(e <= kGpuAgreementLimit))
        throw Error(disagreement("the frozen part on the GPU differs from the CPU backend", e));
      below_gpu = std::move(g);
    }
    return "on the GPU: " + top.executor() + (below_gpu ? "; the frozen part on " + below_gpu->name() : "");
  } catch (const Error& e) {
    if (!device.automatic) throw;
    top.run_on_cpu();
    below_gpu.reset();
    const std::string why = std::string("fine-tuning: ") + e.what();
    observer.on_warning(why);
    return "on the CPU backend (the GPU failed its setup or check, see the warning)";
  }
}

// The second phase (FineTuneOptions): the head and the backbone's top train together on the
// frozen part's output. Returns the best epoch's backbone when an epoch of this phase was the best.
// `resumed`: the checkpoint the run resumed from when it was in this phase (the top was built from
// its backbone file; the head and `best` are the checkpoint's), else null. Each epoch ends with a
// checkpoint, and an augmenting one has more every TrainOptions::checkpoint_every_batches.
std::optional<trainer::Graph> fine_tune_phase(const TrainingData& data, const TrainOptions& o, Sources& sources,
                                              const trainer::Model& backbone, trainer::TrainableTop& top,
                                              trainer::Head& head, trainer::BestEpoch& best,
                                              const trainer::BackboneRef& ref, const RunState& run,
                                              const Checkpoint* resumed, TrainObserver& observer,
                                              const DeviceChoice* gpu_device) {
  const FineTuneProgress* resume = resumed ? &*resumed->fine_tune : nullptr;
  std::vector<EpochReport>& history = run.history;
  const FineTuneOptions& ft = o.fine_tune;
  const trainer::Model below = backbone.cut_at(top.boundary());
  std::shared_ptr<trainer::CudnnBackend> below_gpu;
  std::string note;
  if (gpu_device) note = place_fine_tuning(top, below, o.loader.batch_size, *gpu_device, below_gpu, observer);
  sources.make(below_gpu, &below);
  FineTuneSetup setup{ft.from_layer,
                      top.boundary(),
                      top.trainable_parameters(),
                      top.activation_bytes(o.loader.batch_size),
                      top.executor() != "cpu",
                      note};
  observer.on_fine_tune_begin(setup);

  // The head goes on from the first phase's best epoch (what was saved), with a new optimizer
  // over every trainable weight as Keras' recompile gives.
  if (best.head() && !resume) head = *best.head();
  trainer::TopAndHead model(top, head, ft.optimizer);
  EarlyStopping early_stopping{o.early_stopping.patience};  // a second fit(): counting starts again
  std::optional<trainer::Graph> best_backbone;
  if (resume) {
    top.optimizer().restore(resume->top);
    model.head_optimizer().restore(resume->head);
    std::tie(early_stopping.best, early_stopping.wait, early_stopping.stopped) =
        std::tuple{resume->early_stopping.best, resume->early_stopping.wait, resume->early_stopping.stopped};
    // A best epoch of this phase saved its backbone with its head.
    if (best.epoch() >= o.epochs) best_backbone = trainer::load_model(ref.model).graph();
  }
  const std::size_t in_size = trainer::Tensor::element_count(top.input_shape());
  double step_seconds = 0;  // of the epoch: the top's forward and backward, the head, the updates
  auto step = [&](const float* x, const int* y, int n) {
    const auto t0 = Clock::now();
    const trainer::StepResult r = model.train_step(x, y, n, o.loss);
    step_seconds += since(t0);
    return r;
  };
  std::string saved_backbone = resume ? resume->backbone_file : std::string();  // the checkpoint's

  const Features validation = extract(sources.validation(), "validation values at " + top.boundary(), observer);
  std::optional<Features> reused;  // without augmentation: the training set's values at the boundary
  const int batch_size = o.loader.batch_size;
  for (int k = resume ? resume->epochs_done : 0; k < ft.epochs && !early_stopping.stopped; ++k) {
    const int epoch = static_cast<int>(history.size());
    observer.on_epoch_begin(epoch, sources.train().batches_per_epoch());
    EpochReport e;
    step_seconds = 0;
    if (o.augmentation) {
      const bool mid_epoch = resume && k == resume->epochs_done && resumed->loader.next_batch > 0;
      e = augmented_epoch(epoch, sources.train(), o.checkpoint_every_batches, observer,
                          mid_epoch ? &resumed->loader : nullptr, mid_epoch ? resumed->progress : EpochProgress{}, step,
                          [&](const EpochProgress& progress) {
                            save_fine_tune_checkpoint(o.out, run, sources, top, model, best, early_stopping, k, epoch,
                                                      &progress, saved_backbone);
                          });
    } else {
      const auto t0 = Clock::now();
      EpochProgress sums;
      e.epoch = epoch;
      e.features_cached = reused.has_value();
      if (!reused) {
        reused = extract(sources.train(), "training values at " + top.boundary(), observer);
        if (reused->n == 0)
          throw DatasetError("none of the " + std::to_string(data.train.size()) + " training images could be read");
        e.times = reused->times;
      }
      const std::vector<int> order = trainer::epoch_rows(reused->n, o.loader.seed, static_cast<std::uint64_t>(epoch));
      std::vector<float> bx(static_cast<std::size_t>(batch_size) * in_size);
      std::vector<int> by(static_cast<std::size_t>(batch_size));
      for (int start = 0; start < reused->n; start += batch_size) {
        const int nb = std::min(batch_size, reused->n - start);
        for (int b = 0; b < nb; ++b) {
          const auto row = static_cast<std::size_t>(order[static_cast<std::size_t>(start + b)]);
          std::copy_n(reused->x.data() + row * in_size, in_size, bx.data() + static_cast<std::size_t>(b) * in_size);
          by[static_cast<std::size_t>(b)] = reused->y[row];
        }
        const trainer::StepResult r = step(bx.data(), by.data(), nb);
        sums.loss_sum += r.loss * r.samples;
        sums.correct += r.correct;
        sums.images += static_cast<std::size_t>(nb);
        ++sums.batches;
        observer.on_train_batch(sums.batches, sums.images, sums.loss_sum / static_cast<double>(sums.images),
                                sums.correct / static_cast<double>(sums.images));
      }
      e.skipped = reused->skipped;
      const double seen = std::max<double>(1, static_cast<double>(sums.images));
      e.train = {sums.loss_sum / seen, sums.correct / seen, static_cast<int>(sums.images)};
      e.seconds = since(t0);
      e.images_per_second = static_cast<double>(sums.images) / std::max(1e-9, e.seconds);
    }
    e.fine_tuning = true;
    e.times.compute_seconds += step_seconds;
    // Validation through the current top, batch by batch.
    std::vector<float> features(static_cast<std::size_t>(validation.n) * static_cast<std::size_t>(top.features()));
    for (int start = 0; start < validation.n; start += batch_size) {
      const int nb = std::min(batch_size, validation.n - start);
      const trainer::Tensor f = top.forward(validation.x.data() + static_cast<std::size_t>(start) * in_size, nb);
      std::copy(f.data.begin(), f.data.end(), features.begin() + static_cast<std::ptrdiff_t>(start) * top.features());
    }
    e.validation = head.evaluate(features.data(), validation.y.data(), validation.n, {o.loss.label_smoothing, {}});
    e.improved = best.offer(epoch, e.validation, head);
    if (e.improved) {
      // The head file just saved refers to this backbone: write it next to it.
      best_backbone = top.graph();
      trainer::save_keras_h5(*best_backbone, fs::path(ref.model));
    }
    e.learning_rate = top.optimizer().config().learning_rate;
    const double monitored = o.monitor == trainer::Monitor::ValLoss ? e.validation.loss : -e.validation.accuracy;
    e.stopped_early = early_stopping.on_epoch_end(epoch, monitored);
    history.push_back(e);
    save_fine_tune_checkpoint(o.out, run, sources, top, model, best, early_stopping, k + 1, epoch + 1, nullptr,
                              saved_backbone);
    observer.on_epoch_end(e);
  }
  return best_backbone;
}
}  // namespace

std::vector<double> balanced_class_weight(const Dataset& train) {
  std::vector<std::size_t> count(train.class_names.size(), 0);
  for (const Sample& s : train.samples)
    if (s.label >= 0 && static_cast<std::size_t>(s.label) < count.size()) ++count[static_cast<std::size_t>(s.label)];
  std::vector<double> weight;
  for (std::size_t c = 0; c < count.size(); ++c) {
    if (count[c] == 0)
      throw DatasetError("balanced class weights: class '" + train.class_names[c] + "' has no training samples");
    weight.push_back(static_cast<double>(train.size()) / (static_cast<double>(count.size()) * count[c]));
  }
  return weight;
}

TrainingData training_data(const std::string& folder, double validation_split, const std::string& validation_folder) {
  Dataset all = dataset_from_directory(folder);
  std::optional<Dataset> validation;
  if (!validation_folder.empty()) {
    DirectoryOptions vo;
    vo.classes = all.class_names;
    validation = dataset_from_directory(validation_folder, vo);
  }
  try {
    return validation ? training_data(std::move(all), std::move(*validation)) : training_data(all, validation_split);
  } catch (const DatasetError& e) {
    throw DatasetError(folder + ": " + e.what());
  }
}

TrainingData training_data(const Dataset& all, double validation_split) {
  if (!(validation_split > 0)) throw InvalidArgument("give a validation split > 0 or a validation set");
  return training_data(apply_split(all, {validation_split, Subset::Training}),
                       apply_split(all, {validation_split, Subset::Validation}));
}

TrainingData training_data(Dataset train, Dataset validation) {
  const std::size_t classes = train.class_names.size();
  if (classes < 2) {
    throw DatasetError("training needs at least 2 classes, found " + std::to_string(classes) +
                       (classes == 1 ? " ('" + train.class_names[0] + "')" : std::string()));
  }
  if (validation.class_names != train.class_names) {
    throw DatasetError("the validation set's classes differ from the training set's (" +
                       std::to_string(validation.class_names.size()) + " vs " + std::to_string(classes) + ")");
  }
  if (validation.empty()) throw DatasetError("the validation set is empty: raise the validation split or add images");
  return {std::move(train), std::move(validation)};
}

TrainResult train(const TrainingData& data, const TrainOptions& given, TrainObserver* observer_or_null) {
  TrainObserver nothing;
  TrainObserver& observer = observer_or_null ? *observer_or_null : nothing;
  if (given.epochs < 1) throw InvalidArgument("epochs must be >= 1, received " + std::to_string(given.epochs));
  given.loss.check(static_cast<int>(data.train.class_names.size()));
  if (given.cosine_decay && given.reduce_lr_on_plateau.enabled())
    throw InvalidArgument("the cosine decay and the plateau reduction both set the learning rate: choose one");
  if (given.reduce_lr_on_plateau.enabled() &&
      !(given.reduce_lr_on_plateau.factor < 1 && given.reduce_lr_on_plateau.patience >= 0))
    throw InvalidArgument("the plateau reduction's factor must be in (0, 1), received " +
                          std::to_string(given.reduce_lr_on_plateau.factor));
  if (given.early_stopping.patience < 0)
    throw InvalidArgument("early stopping's patience must be >= 0, received " +
                          std::to_string(given.early_stopping.patience));
  // One process trains on all of the data: no gradients are exchanged between ranks (yet).
  const Sharding sharding = given.loader.sharding ? *given.loader.sharding : sharding_from_environment();
  if (sharding.world_size > 1) {
    throw InvalidArgument("train() runs in one process on the whole dataset, but this is rank " +
                          std::to_string(sharding.rank) + " of " + std::to_string(sharding.world_size) +
                          " (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS, or the loader's sharding): run it once");
  }
  // After the checks: the fit reads every training image.
  const TrainOptions o = with_featurewise_statistics(given, data.train, observer);
  TrainResult result;
  result.device = choose_device(o.device);
  DeviceChoice& device = result.device;
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out)) throw IoError(o.out.string() + ": cannot create the output folder");

  trainer::BackboneRef ref = o.backbone;
  ref.model = fs::absolute(ref.model).string();
  ref.preprocess = o.prepare.preprocess;
  trainer::Model backbone = load_feature_backbone(ref, o.prepare.image_size, &ref.cut_at);
  const int dim = backbone.output_shape()[0];
  const int classes = static_cast<int>(data.train.class_names.size());
  // The second phase's split is checked before the first phase runs.
  std::optional<trainer::TrainableTop> top;
  if (o.fine_tune.enabled()) {
    if (o.fine_tune.epochs < 1)
      throw InvalidArgument("fine-tuning epochs must be >= 1, received " + std::to_string(o.fine_tune.epochs));
    top.emplace(backbone.graph(), o.fine_tune.from_layer, o.fine_tune.optimizer);
    top->set_dropout(o.fine_tune.dropout);
  }
  std::shared_ptr<trainer::CudnnBackend> gpu = place_backbone(backbone, device, o.loader.batch_size);
  if (!device.fallback_reason.empty()) observer.on_warning(device.fallback_reason);

  Sources sources(data, o, backbone);
  const std::string tuning = choose_loader_threads(data, o, sources, backbone, gpu != nullptr);
  sources.make(gpu);
  observer.on_setup({data.train.size(), data.validation.size(), data.train.class_names, backbone.parameter_count(),
                     ref.cut_at, dim, device, sources.cache_status(), sources.train().describe(), o.prepare.featurewise,
                     tuning});

  const fs::path checkpoint_file = o.out / kCheckpointFile;
  std::optional<Checkpoint> resumed;
  if (o.resume) {
    if (!fs::exists(checkpoint_file))
      throw IoError(checkpoint_file.string() + ": no checkpoint to resume from (is " + o.out.string() +
                    " the --out of a stoker train run?)");
    resumed = load_checkpoint(checkpoint_file);
  }
  // The cosine schedule spans the run's planned steps (an epoch whose files were all skipped in
  // one batch has one step fewer).
  const std::int64_t decay_steps = o.cosine_decay ? static_cast<std::int64_t>(o.epochs) *
                                                        static_cast<std::int64_t>(sources.train().batches_per_epoch())
                                                  : 0;
  const std::string settings =
      run_settings(o, ref, sources.train_augmenter(), data.train.class_names, decay_steps).dump();
  if (resumed) check_same_run(*resumed, nlohmann::json::parse(settings), sources.train().state(), checkpoint_file);
  const FineTuneProgress* resumed_fine_tune = resumed && resumed->fine_tune ? &*resumed->fine_tune : nullptr;
  if (resumed_fine_tune) {
    // In the second phase: the first one's length is settled, and the top goes on from the
    // checkpoint's backbone.
    const int first_phase = resumed->epoch - resumed_fine_tune->epochs_done;
    if (!top || first_phase != o.epochs || resumed_fine_tune->epochs_done > o.fine_tune.epochs)
      throw InvalidArgument(checkpoint_file.string() + ": the run stopped after " +
                            std::to_string(resumed_fine_tune->epochs_done) + " fine-tuning epochs following " +
                            std::to_string(first_phase) + " epochs; resume it with --epochs " +
                            std::to_string(first_phase) + " and --fine-tune-epochs of at least " +
                            std::to_string(resumed_fine_tune->epochs_done));
    const fs::path saved = o.out / resumed_fine_tune->backbone_file;
    if (!fs::exists(saved))
      throw IoError(saved.string() + ": the fine-tuned backbone the checkpoint continues from is missing");
    top.emplace(trainer::load_model(saved).graph(), o.fine_tune.from_layer, o.fine_tune.optimizer);
    top->set_dropout(o.fine_tune.dropout);
  } else if (resumed && resumed->epoch > o.epochs) {
    throw InvalidArgument(checkpoint_file.string() + ": the run has finished " + std::to_string(resumed->epoch) +
                          " epochs, more than the " + std::to_string(o.epochs) + " asked for");
  }

  trainer::Head head = resumed        ? *resumed->head
                       : classes == 2 ? trainer::Head::sigmoid(dim, o.adam, o.loader.seed)
                                      : trainer::Head::softmax(dim, classes, o.adam, o.loader.seed);
  write_model_info(o.out, {ref, o.prepare, data.train.class_names});

  Features validation = extract(sources.validation(), "validation features", observer);
  if (validation.n == 0)
    throw DatasetError("none of the " + std::to_string(data.validation.size()) + " validation images could be read");
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
      // The loader now shares the cores with the backbone: tuned again, and the new choice said.
      const std::string retuned = choose_loader_threads(data, o, sources, backbone, false);
      if (!retuned.empty()) observer.on_loader_retuned(retuned);
      sources.make(nullptr);
      validation = extract(sources.validation(), "validation features", observer);
    }
  }

  trainer::BestEpoch best(o.monitor, o.out / "head.stkh", ref);
  std::optional<Features> reused;  // without augmentation: the training features, computed in epoch 0
  int first_epoch = 0;
  RunState run{o, settings, head, best, result.history, o.early_stopping, o.reduce_lr_on_plateau, decay_steps};
  if (resumed) {
    result.history = resumed->history;
    // The callbacks' counters where the checkpoint left them (their settings are this run's,
    // which run_settings has found equal).
    const EarlyStopping& es = resumed->early_stopping;
    std::tie(run.early_stopping.best, run.early_stopping.wait, run.early_stopping.stopped) =
        std::tuple{es.best, es.wait, es.stopped};
    const ReduceLrOnPlateau& rp = resumed->reduce_lr_on_plateau;
    std::tie(run.reduce_lr_on_plateau.best, run.reduce_lr_on_plateau.wait, run.reduce_lr_on_plateau.cooldown_counter) =
        std::tuple{rp.best, rp.wait, rp.cooldown_counter};
    if (resumed->best_head) best.restore(resumed->best_epoch, resumed->best_value, *resumed->best_head);
    // The first phase's features, for its epochs without augmentation (the second phase trains on
    // values at its boundary, which it computes itself).
    if (resumed->has_features && !o.augmentation && !resumed_fine_tune) {
      reused = load_features(o.out / kCheckpointFeaturesFile);
      const std::size_t listed = static_cast<std::size_t>(reused->n) + reused->skipped.size();
      if (listed != data.train.size() || reused->dim != dim)
        throw IoError((o.out / kCheckpointFeaturesFile).string() + ": holds " + std::to_string(reused->n) + " x " +
                      std::to_string(reused->dim) + " features (and " + std::to_string(reused->skipped.size()) +
                      " unreadable samples), the run needs " + std::to_string(data.train.size()) + " x " +
                      std::to_string(dim));
      run.features_saved = true;
    }
    first_epoch = resumed->epoch;
    observer.on_resume(result.history, first_epoch, static_cast<std::size_t>(resumed->loader.next_batch));
  } else {
    run.save(0, sources.train().state());  // a run stopped before its first checkpoint resumes from the start
  }
  for (int epoch = first_epoch; epoch < o.epochs && !run.early_stopping.stopped; ++epoch) {
    observer.on_epoch_begin(epoch, o.augmentation ? sources.train().batches_per_epoch() : 0);
    EpochReport e;
    if (o.augmentation) {
      const bool mid_epoch = resumed && epoch == first_epoch && resumed->loader.next_batch > 0;
      FeatureSource& source = sources.train();
      e = augmented_epoch(
          epoch, source, o.checkpoint_every_batches, observer, mid_epoch ? &resumed->loader : nullptr,
          mid_epoch ? resumed->progress : EpochProgress{},
          [&](const float* x, const int* y, int n) {
            run.before_step(head);
            return head.train_step(x, y, n, o.loss);
          },
          [&](const EpochProgress& progress) { run.save(epoch, source.state(), progress); });
    } else {
      const auto t0 = Clock::now();
      e.epoch = epoch;
      e.features_cached = reused.has_value();
      if (!reused) {
        reused = extract(sources.train(), "training features", observer);
        if (reused->n == 0)
          throw DatasetError("none of the " + std::to_string(data.train.size()) + " training images could be read");
        e.times = reused->times;
        save_features(o.out / kCheckpointFeaturesFile, *reused);
        run.features_saved = true;
      }
      e.train = head.train_epoch(reused->x.data(), reused->y.data(), reused->n, o.loader.batch_size,
                                 static_cast<std::uint64_t>(epoch), o.loader.seed, o.loss,
                                 [&run](trainer::Head& h) { run.before_step(h); });
      e.skipped = reused->skipped;
      e.seconds = since(t0);
      if (e.features_cached) e.times.compute_seconds = e.seconds;  // the head alone
      e.images_per_second = reused->n / std::max(1e-9, e.seconds);
    }
    e.validation = head.evaluate(validation.x.data(), validation.y.data(), validation.n, {o.loss.label_smoothing, {}});
    e.improved = best.offer(epoch, e.validation, head);
    e.learning_rate = head.adam().learning_rate;
    // Keras' callbacks after the epoch, on the monitored value (lower is better, as BestEpoch).
    const double monitored = o.monitor == trainer::Monitor::ValLoss ? e.validation.loss : -e.validation.accuracy;
    head.set_learning_rate(run.reduce_lr_on_plateau.on_epoch_end(monitored, head.adam().learning_rate));
    e.stopped_early = run.early_stopping.on_epoch_end(epoch, monitored);
    result.history.push_back(e);
    LoaderState next = sources.train().state();
    next.epoch = static_cast<std::uint64_t>(epoch) + 1;
    next.next_batch = 0;
    run.save(epoch + 1, next);
    observer.on_epoch_end(e);
  }
  // The second phase's best head refers to the fine-tuned backbone it writes into the folder.
  std::optional<trainer::Graph> tuned;
  if (top) {
    const trainer::BackboneRef tuned_ref{fs::absolute(o.out / kFineTunedBackboneFile).string(), {}, ref.preprocess};
    trainer::BestEpoch tuned_best(o.monitor, o.out / "head.stkh", tuned_ref);
    if (best.head()) tuned_best.restore(best.epoch(), best.value(), *best.head());
    tuned = fine_tune_phase(data, o, sources, backbone, *top, head, tuned_best, tuned_ref, run,
                            resumed_fine_tune ? &*resumed : nullptr, observer, gpu ? &device : nullptr);
    if (tuned) {
      write_model_info(o.out, {tuned_ref, o.prepare, data.train.class_names});
      best = tuned_best;
    }
  }
  result.best_epoch = best.epoch();
  const trainer::Graph& final_backbone = tuned ? *tuned : backbone.graph();
  // The whole classifier, for Keras and for predict without the original backbone file.
  if (o.prepare.samplewise_center || o.prepare.samplewise_std_normalization) {
    result.classifier_note =
        "model.h5 not written: sample-wise standardisation depends on each image, no Keras "
        "layer computes it (predict uses the head and the backbone file)";
  } else if (best.head()) {
    trainer::save_keras_h5(classifier_graph(final_backbone, *best.head(), o.prepare), o.out / kClassifierFile);
  }
  return result;
}

}  // namespace stoker::training
