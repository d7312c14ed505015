#include "resume.hpp"

#include <filesystem>
#include <tuple>

#include <nlohmann/json.hpp>

#include "run_settings.hpp"
#include "stoker/core/error.hpp"

namespace stoker::training {
namespace {
namespace fs = std::filesystem;

// In the second phase: the first one's length is settled, and the top goes on from the
// checkpoint's backbone.
void resume_top(const Checkpoint& c, const TrainOptions& o, const fs::path& file,
                std::optional<trainer::TrainableTop>& top) {
  const FineTuneProgress& ft = *c.fine_tune;
  const int first_phase = c.epoch - ft.epochs_done;
  if (!top || first_phase != o.epochs || ft.epochs_done > o.fine_tune.epochs)
    throw InvalidArgument(file.string() + ": the run stopped after " + std::to_string(ft.epochs_done) +
                          " fine-tuning epochs following " + std::to_string(first_phase) +
                          " epochs; resume it with --epochs " + std::to_string(first_phase) +
                          " and --fine-tune-epochs of at least " + std::to_string(ft.epochs_done));
  const fs::path saved = o.out / ft.backbone_file;
  if (!fs::exists(saved))
    throw IoError(saved.string() + ": the fine-tuned backbone the checkpoint continues from is missing");
  top.emplace(trainer::load_model(saved).graph(), o.fine_tune.from_layer, o.fine_tune.optimizer);
  top->set_dropout(o.fine_tune.dropout);
}

}  // namespace

std::optional<Checkpoint> resume_point(const TrainOptions& o, const std::string& settings, const LoaderState& loader,
                                       std::optional<trainer::TrainableTop>& top) {
  if (!o.resume) return std::nullopt;
  const fs::path file = o.out / kCheckpointFile;
  if (!fs::exists(file))
    throw IoError(file.string() + ": no checkpoint to resume from (is " + o.out.string() +
                  " the --out of a stoker train run?)");
  Checkpoint c = load_checkpoint(file);
  check_same_run(c, nlohmann::json::parse(settings), loader, file);
  if (c.fine_tune) {
    resume_top(c, o, file, top);
  } else if (c.epoch > o.epochs) {
    throw InvalidArgument(file.string() + ": the run has finished " + std::to_string(c.epoch) +
                          " epochs, more than the " + std::to_string(o.epochs) + " asked for");
  }
  return c;
}

void restore_run(RunState& run, Phase& first, const Checkpoint& c, std::size_t train_images, int dim,
                 TrainObserver& observer) {
  const TrainOptions& o = run.options;
  run.history = c.history;
  // The callbacks' counters where the checkpoint left them (their settings are this run's,
  // which run_settings has found equal).
  const EarlyStopping& es = c.early_stopping;
  std::tie(run.early_stopping.best, run.early_stopping.wait, run.early_stopping.stopped) =
      std::tuple{es.best, es.wait, es.stopped};
  const ReduceLrOnPlateau& rp = c.reduce_lr_on_plateau;
  std::tie(run.reduce_lr_on_plateau.best, run.reduce_lr_on_plateau.wait, run.reduce_lr_on_plateau.cooldown_counter) =
      std::tuple{rp.best, rp.wait, rp.cooldown_counter};
  if (c.best_head) run.best.restore(c.best_epoch, c.best_value, *c.best_head);
  // The first phase's features, for its epochs without augmentation (the second phase trains on
  // values at its boundary, which it computes itself).
  if (c.has_features && !o.augmentation && !c.fine_tune) {
    const fs::path file = o.out / kCheckpointFeaturesFile;
    Features& saved = first.values.emplace(load_features(file));
    const std::size_t listed = static_cast<std::size_t>(saved.n) + saved.skipped.size();
    if (listed != train_images || saved.dim != dim)
      throw IoError(file.string() + ": holds " + std::to_string(saved.n) + " x " + std::to_string(saved.dim) +
                    " features (and " + std::to_string(saved.skipped.size()) + " unreadable samples), the run needs " +
                    std::to_string(train_images) + " x " + std::to_string(dim));
    run.features_saved = true;
  }
  observer.on_resume(run.history, c.epoch, static_cast<std::size_t>(c.loader.next_batch));
}

}  // namespace stoker::training
