#include "fine_tune_phase.hpp"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "placement.hpp"
#include "stoker/trainer/model.hpp"
#include "stoker/training/model_folder.hpp"

namespace stoker::training {
namespace {
namespace fs = std::filesystem;

// The second phase's checkpoints name a backbone file of their own: `epoch` is where the
// checkpoint resumes, `batch` its next batch there (0 at an epoch's end).
std::string backbone_checkpoint_name(int epoch, std::size_t batch) {
  return "checkpoint-backbone-" + std::to_string(epoch) + (batch > 0 ? "-b" + std::to_string(batch) : "") + ".h5";
}

// The top and the head on the frozen part's output, with the phase's own best epoch (whose head
// refers to the fine-tuned backbone at `backbone_file`) and early stopping.
class FineTunePhase final : public Phase {
 public:
  FineTunePhase(RunState& run, FeatureSource& source, trainer::TrainableTop& top, trainer::BestEpoch& best,
                std::string backbone_file, TrainObserver& observer)
      : run_(run),
        source_(source),
        top_(top),
        best_(best),
        backbone_file_(std::move(backbone_file)),
        observer_(observer),
        model_(top, run.head, run.options.fine_tune.optimizer),
        early_stopping_{run.options.early_stopping.patience},
        in_size_(trainer::Tensor::element_count(top.input_shape())) {}

  // A run resumed in this phase: the optimizers, early stopping and the best epoch's backbone.
  void restore(const FineTuneProgress& resume) {
    top_.optimizer().restore(resume.top);
    model_.head_optimizer().restore(resume.head);
    std::tie(early_stopping_.best, early_stopping_.wait, early_stopping_.stopped) =
        std::tuple{resume.early_stopping.best, resume.early_stopping.wait, resume.early_stopping.stopped};
    // A best epoch of this phase saved its backbone with its head.
    if (best_.epoch() >= run_.options.epochs) best_backbone = trainer::load_model(backbone_file_).graph();
    saved_backbone_ = resume.backbone_file;
  }

  std::string values_name() const override { return "training values at " + top_.boundary(); }
  bool reports_value_batches() const override { return true; }

  trainer::StepResult step(const float* x, const int* y, int n) override {
    const auto t0 = Clock::now();
    const trainer::StepResult r = model_.train_step(x, y, n, run_.options.loss);
    step_seconds_ += since(t0);
    return r;
  }

  trainer::EpochStats train_on_values(const Features& values, int epoch) override {
    return train_rows(values,
                      trainer::epoch_rows(values.n, run_.options.loader.seed, static_cast<std::uint64_t>(epoch)));
  }
  trainer::EpochStats train_in_order(const Features& values) override {
    return train_rows(values, rows_in_order(values.n));
  }

  void complete(EpochReport& e) override {
    e.fine_tuning = true;
    e.times.compute_seconds += step_seconds_;  // the top's forward and backward, the head, the updates
    step_seconds_ = 0;
  }

  trainer::EpochStats validate() override;
  trainer::BestEpoch& best() override { return best_; }
  const trainer::Head& head() const override { return run_.head; }

  void improved() override {
    // The head file just saved refers to this backbone: write it next to it.
    best_backbone = top_.graph();
    if (run_.writes) trainer::save_keras_h5(*best_backbone, fs::path(backbone_file_));
  }

  double learning_rate() const override { return top_.optimizer().config().learning_rate; }
  EarlyStopping& early_stopping() override { return early_stopping_; }
  void checkpoint(int done, int epoch, const EpochProgress* progress) override;

  std::optional<trainer::Graph> best_backbone;  // when an epoch of this phase is the best

 private:
  trainer::EpochStats train_rows(const Features& values, const std::vector<int>& order);
  trainer::StepResult step_across_ranks(const float* x, const int* y, int m, int nb);

  RunState& run_;
  FeatureSource& source_;
  trainer::TrainableTop& top_;
  trainer::BestEpoch& best_;
  std::string backbone_file_;
  TrainObserver& observer_;
  trainer::TopAndHead model_;
  EarlyStopping early_stopping_;
  std::size_t in_size_;
  double step_seconds_ = 0;     // of the epoch
  std::string saved_backbone_;  // the backbone file of the last checkpoint
};

// An epoch over the rows of `values` in `order`, in batches of --batch-size. With several ranks,
// rank r of W takes rows [nb·r/W, nb·(r+1)/W) of each batch of nb and the ranks' gradients are
// summed before every rank makes the same step.
trainer::EpochStats FineTunePhase::train_rows(const Features& values, const std::vector<int>& order) {
  EpochProgress sums;
  for_each_global_batch(
      values, order, run_.options.loader.batch_size, run_.collective, [&](const float* x, const int* y, int m, int nb) {
        add_step(sums, run_.collective ? step_across_ranks(x, y, m, nb) : step(x, y, nb), nb, observer_);
      });
  return epoch_stats(sums);
}

trainer::StepResult FineTunePhase::step_across_ranks(const float* x, const int* y, int m, int nb) {
  const auto t0 = Clock::now();
  const trainer::StepResult local =
      m > 0 ? model_.compute_gradients(x, y, m, run_.options.loss) : trainer::StepResult{};
  const trainer::StepResult r =
      sum_step_over_ranks(*run_.collective, m, nb, local, [this](const auto& f) { model_.for_each_gradient(f); });
  model_.apply_gradients();
  step_seconds_ += since(t0);
  return r;
}

// Validation through the current top, batch by batch.
trainer::EpochStats FineTunePhase::validate() {
  const int batch_size = run_.options.loader.batch_size;
  std::vector<float> features(static_cast<std::size_t>(validation.n) * static_cast<std::size_t>(top_.features()));
  for (int start = 0; start < validation.n; start += batch_size) {
    const int nb = std::min(batch_size, validation.n - start);
    const trainer::Tensor f = top_.forward(validation.x.data() + static_cast<std::size_t>(start) * in_size_, nb);
    std::copy(f.data.begin(), f.data.end(), features.begin() + static_cast<std::ptrdiff_t>(start) * top_.features());
  }
  return run_.head.evaluate(features.data(), validation.y.data(), validation.n,
                            {run_.options.loss.label_smoothing, {}});
}

// The backbone file comes first, so a crash between the two leaves the previous checkpoint with
// its own file; that one is removed after.
void FineTunePhase::checkpoint(int done, int epoch, const EpochProgress* progress) {
  if (!run_.writes) return;
  const fs::path& out = run_.options.out;
  const LoaderState loader = checkpoint_position(source_, epoch, progress);
  FineTuneProgress p;
  p.epochs_done = done;
  p.top = top_.optimizer().state();
  p.head = model_.head_optimizer().state();
  p.early_stopping = early_stopping_;
  p.backbone_file = backbone_checkpoint_name(epoch, static_cast<std::size_t>(loader.next_batch));
  trainer::save_keras_h5(top_.graph(), out / p.backbone_file);  // atomically: complete or absent
  run_.save(epoch, loader, progress ? *progress : EpochProgress{}, &p, &best_);
  std::error_code ignored;
  if (!saved_backbone_.empty() && saved_backbone_ != p.backbone_file) fs::remove(out / saved_backbone_, ignored);
  saved_backbone_ = p.backbone_file;
}

}  // namespace

std::optional<trainer::Graph> fine_tune_phase(const SecondPhase& in, RunState& run, const Checkpoint* resumed,
                                              TrainObserver& observer) {
  const TrainOptions& o = run.options;
  const trainer::BackboneRef tuned_ref{fs::absolute(o.out / kFineTunedBackboneFile).string(), {}, in.ref.preprocess};
  trainer::BestEpoch best(o.monitor, run.writes ? o.out / "head.stkh" : fs::path(), tuned_ref);
  if (run.best.head()) best.restore(run.best.epoch(), run.best.value(), *run.best.head());

  const trainer::Model below = in.backbone.cut_at(in.top.boundary());
  std::shared_ptr<trainer::CudnnBackend> below_gpu;
  std::string note;
  if (in.gpu) note = place_fine_tuning(in.top, below, o.loader.batch_size, *in.gpu, below_gpu, observer);
  in.sources.make(below_gpu, &below);
  observer.on_fine_tune_begin({o.fine_tune.from_layer, in.top.boundary(), in.top.trainable_parameters(),
                               in.top.activation_bytes(o.loader.batch_size), in.top.executor() != "cpu", note});

  if (best.head() && !resumed) run.head = *best.head();
  FineTunePhase phase(run, in.sources.train(), in.top, best, tuned_ref.model, observer);
  if (resumed) phase.restore(*resumed->fine_tune);
  phase.validation = extract(in.sources.validation(), "validation values at " + in.top.boundary(), observer);
  PhaseLoop loop{o, in.data.train.size(), in.sources.train(), observer, run.history};
  if (run.collective) {  // every rank holds every value, in one process's order
    phase.validation = gather_features(*run.collective, std::move(phase.validation),
                                       plan_order(in.data.validation.size(), o.loader.seed, 0, false));
    loop.gather = gather_in_plan_order(*run.collective, in.data.train.size(), o.loader.seed, o.loader.shuffle);
  }
  run_phase(phase, loop, o.fine_tune.epochs, resumed ? resumed->fine_tune->epochs_done : 0, resumed);
  if (phase.best_backbone) {
    if (run.writes) write_model_info(o.out, {tuned_ref, o.prepare, in.data.train.class_names});
    run.best = best;
  }
  return std::move(phase.best_backbone);
}

}  // namespace stoker::training
