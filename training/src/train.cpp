#include "stoker/training/train.hpp"

#include <filesystem>
#include <memory>
#include <optional>

#include "data_parallel.hpp"
#include "fine_tune_phase.hpp"
#include "head_phase.hpp"
#include "placement.hpp"
#include "resume.hpp"
#include "run_settings.hpp"
#include "sources.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/plan.hpp"

// train() sets a run up and hands its epochs to run_phase() (phase.hpp), once per phase:
// sources.cpp makes the features, placement.cpp checks the GPU's, resume.cpp continues a
// checkpoint, head_phase.cpp and fine_tune_phase.cpp are the two phases.
namespace stoker::training {
namespace {
namespace fs = std::filesystem;

// The options' own consistency, before anything is read.
void check_options(const TrainingData& data, const TrainOptions& given) {
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
  // Several ranks train together only through a collective that exchanges their gradients.
  const Sharding sharding = given.loader.sharding ? *given.loader.sharding : sharding_from_environment();
  const int ranks = given.collective ? given.collective->size() : 1;
  if (ranks == 1 && sharding.world_size > 1) {
    throw InvalidArgument("this is rank " + std::to_string(sharding.rank) + " of " +
                          std::to_string(sharding.world_size) +
                          " (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS, or the loader's sharding), but no gradients "
                          "are exchanged without MPI: launch the ranks with mpirun or srun and a stoker built with "
                          "STOKER_DISTRIBUTED (docs/distributed.md), or run it once");
  }
  if (ranks > 1) {
    const int rank = given.collective->rank();
    if (sharding.world_size > 1 && (sharding.rank != rank || sharding.world_size != ranks))
      throw InvalidArgument("the loader's sharding says rank " + std::to_string(sharding.rank) + " of " +
                            std::to_string(sharding.world_size) + ", MPI rank " + std::to_string(rank) + " of " +
                            std::to_string(ranks) + ": leave --rank/--world-size out under an MPI launcher");
    const std::string on = "training on " + std::to_string(ranks) + " ranks: ";
    if (given.augmentation && given.checkpoint_every_batches > 0)
      throw InvalidArgument(on +
                            "an augmenting epoch across ranks is gathered and trained whole: --checkpoint-every "
                            "has no batch to stop at; leave it out");
    if (given.loader.drop_last)
      throw InvalidArgument(on +
                            "the loader's drop_last is not supported across ranks (the head's epochs use "
                            "every image)");
  }
}

// The backbone file and cut as the model folder records them.
trainer::BackboneRef backbone_ref(const TrainOptions& o) {
  trainer::BackboneRef ref = o.backbone;
  ref.model = fs::absolute(ref.model).string();
  ref.preprocess = o.prepare.preprocess;
  return ref;
}

// The second phase's split, checked before the first phase runs.
std::optional<trainer::TrainableTop> trainable_top(const TrainOptions& o, const trainer::Model& backbone) {
  std::optional<trainer::TrainableTop> top;
  if (o.fine_tune.enabled()) {
    if (o.fine_tune.epochs < 1)
      throw InvalidArgument("fine-tuning epochs must be >= 1, received " + std::to_string(o.fine_tune.epochs));
    top.emplace(backbone.graph(), o.fine_tune.from_layer, o.fine_tune.optimizer);
    top->set_dropout(o.fine_tune.dropout);
  }
  return top;
}

// The validation features the first phase validates on, computed once, on the GPU when its feed
// agrees with the CPU path (else again on the CPU).
Features validation_features(const TrainingData& data, const TrainOptions& o, Sources& sources,
                             trainer::Model& backbone, std::shared_ptr<trainer::CudnnBackend>& gpu,
                             DeviceChoice& device, TrainObserver& observer) {
  Features validation = extract(sources.validation(), "validation features", observer);
  if (validation.n == 0)
    throw DatasetError("none of the " + std::to_string(data.validation.size()) + " validation images could be read");
  if (gpu && !keep_gpu_feed(validation, data, o, sources, backbone, gpu, device, observer))
    validation = extract(sources.validation(), "validation features", observer);
  return validation;
}

// The whole classifier, for Keras and for predict without the original backbone file.
// The options every rank runs with: the featurewise statistics fitted (after the checks: the fit
// reads every training image) and, with several ranks, this rank's share of the data.
TrainOptions run_options(const TrainingData& data, const TrainOptions& given, TrainObserver& observer) {
  TrainOptions o = with_featurewise_statistics(given, data.train, observer);
  if (o.collective && o.collective->size() > 1) {
    Sharding s = o.loader.sharding.value_or(Sharding{});
    s.rank = o.collective->rank();
    s.world_size = o.collective->size();
    o.loader.sharding = s;
  }
  return o;
}

// Every rank must run the same run (a flag given to one rank's command line only would make them
// exchange buffers of other sizes): the first rank whose settings differ from rank 0's is named on
// every rank.
void check_same_settings(Collective& collective, const std::string& settings) {
  const std::vector<std::string> all = collective.allgather(settings);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const nlohmann::json mine = nlohmann::json::parse(all[r]), first = nlohmann::json::parse(all[0]);
    std::string differing;
    for (const auto& [key, value] : mine.items())
      if (!first.contains(key) || first[key] != value) differing += (differing.empty() ? "" : ", ") + key;
    for (const auto& [key, value] : first.items())
      if (!mine.contains(key)) differing += (differing.empty() ? "" : ", ") + key;
    throw InvalidArgument("rank " + std::to_string(r) + " runs with other settings than rank 0 (" + differing +
                          "): give every rank the same arguments");
  }
}

// Ranks resume from an epoch's end: a one-process checkpoint inside an epoch is refused with the
// way on.
void check_resumable_across_ranks(const Checkpoint& resumed, const fs::path& out) {
  if (resumed.loader.next_batch == 0) return;
  throw InvalidArgument((out / kCheckpointFile).string() + ": the run stopped inside epoch " +
                        std::to_string(resumed.loader.epoch + 1) + " (after batch " +
                        std::to_string(resumed.loader.next_batch) +
                        " of one process); ranks resume from an epoch's end: resume it in one process, which "
                        "finishes that epoch, then across ranks");
}

// The steps the cosine schedule spans: the run's planned steps (an epoch whose files were all
// skipped in one batch has one step fewer); across ranks the head's epochs are global batches of
// the gathered features. 0 without the schedule.
std::int64_t cosine_decay_steps(const TrainOptions& o, std::size_t train_size, const FeatureSource& train, int ranks) {
  if (!o.cosine_decay) return 0;
  const auto batch = static_cast<std::size_t>(o.loader.batch_size);
  const std::size_t batches_per_epoch = ranks > 1 ? (train_size + batch - 1) / batch : train.batches_per_epoch();
  return static_cast<std::int64_t>(o.epochs) * static_cast<std::int64_t>(batches_per_epoch);
}

void write_classifier(const TrainOptions& o, const trainer::Graph& backbone, const trainer::BestEpoch& best,
                      TrainResult& result, bool writes) {
  result.best_epoch = best.epoch();
  if (!writes) return;
  if (o.prepare.samplewise_center || o.prepare.samplewise_std_normalization) {
    result.classifier_note =
        "model.h5 not written: sample-wise standardisation depends on each image, no Keras "
        "layer computes it (predict uses the head and the backbone file)";
  } else if (best.head()) {
    trainer::save_keras_h5(classifier_graph(backbone, *best.head(), o.prepare), o.out / kClassifierFile);
  }
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
  check_options(data, given);
  const TrainOptions o = run_options(data, given, observer);
  // Several ranks: each reads its share; only rank 0 writes.
  const std::shared_ptr<Collective> collective = o.collective;
  const int ranks = collective ? collective->size() : 1;
  const bool writes = ranks == 1 || collective->rank() == 0;
  TrainResult result;
  if (ranks == 1 && requested_gpus(o.device).size() > 1)
    throw InvalidArgument("--device " + o.device +
                          " names several GPUs, and one process trains on one: start one rank per GPU (the stoker "
                          "command does so itself; or mpirun -np N with --device cuda)");
  // Several ranks on a machine: each takes its own GPU, by its place among them (LOCAL_RANK).
  result.device = choose_device(o.device, ranks > 1 ? collective->local_rank() : 0);
  DeviceChoice& device = result.device;
  // One run at a time writes a folder: two would mix their files (the command took the lock before
  // it looked into the folder).
  std::shared_ptr<const RunFolderLock> out_lock = o.out_lock;
  if (writes && !out_lock) out_lock = std::make_shared<RunFolderLock>(o.out);  // creates the folder

  trainer::BackboneRef ref = backbone_ref(o);
  trainer::Model backbone = load_feature_backbone(ref, o.prepare.image_size, &ref.cut_at);
  check_normalised_once(backbone, o.prepare, ref.model);
  const int dim = backbone.output_shape()[0];
  const int classes = static_cast<int>(data.train.class_names.size());
  std::optional<trainer::TrainableTop> top = trainable_top(o, backbone);
  std::shared_ptr<trainer::CudnnBackend> gpu = place_backbone(backbone, device, o.loader.batch_size);
  if (!device.fallback_reason.empty()) observer.on_warning(device.fallback_reason);

  Sources sources(data, o, backbone);
  const std::string tuning = choose_loader_threads(data, o, sources, backbone, gpu != nullptr);
  sources.make(gpu);
  const std::vector<RankDevice> rank_devices =
      ranks > 1 ? gather_rank_devices(*collective, device) : std::vector<RankDevice>{};
  observer.on_setup({data.train.size(), data.validation.size(), data.train.class_names, backbone.parameter_count(),
                     ref.cut_at, dim, device, rank_devices, sources.cache_status(), sources.train().describe(),
                     o.prepare.featurewise, tuning});

  const std::int64_t decay_steps = cosine_decay_steps(o, data.train.size(), sources.train(), ranks);
  const std::string settings =
      run_settings(o, ref, sources.train_augmenter(), data.train.class_names, decay_steps).dump();
  if (ranks > 1) check_same_settings(*collective, settings);
  const std::optional<Checkpoint> resumed = resume_point(o, settings, sources.train().state(), top);
  if (resumed && ranks > 1) check_resumable_across_ranks(*resumed, o.out);
  trainer::Head head = resumed        ? *resumed->head
                       : classes == 2 ? trainer::Head::sigmoid(dim, o.adam, o.loader.seed)
                                      : trainer::Head::softmax(dim, classes, o.adam, o.loader.seed);
  if (writes) write_model_info(o.out, {ref, o.prepare, data.train.class_names});

  // Across ranks, every rank gathers the features of all in one process's order (the validation
  // set's and, in the first epoch, the training set's): all validate alike and decide alike.
  Features validation = validation_features(data, o, sources, backbone, gpu, device, observer);
  if (ranks > 1)
    validation = gather_features(*collective, std::move(validation),
                                 plan_order(data.validation.size(), o.loader.seed, 0, false));
  trainer::BestEpoch best(o.monitor, writes ? o.out / "head.stkh" : fs::path(), ref);
  RunState run{o, settings, head, best, result.history, o.early_stopping, o.reduce_lr_on_plateau, decay_steps};
  run.writes = writes;
  std::function<Features(Features, std::uint64_t)> gather;
  if (ranks > 1) {
    run.collective = collective.get();
    gather = gather_in_plan_order(*collective, data.train.size(), o.loader.seed, o.loader.shuffle);
  }
  HeadPhase first(run, sources.train());  // the sources are where they stay after the GPU feed's check
  first.validation = std::move(validation);
  if (resumed) {
    restore_run(run, first, *resumed, data.train.size(), dim, observer);
  } else {
    run.save(0, sources.train().state());  // a run stopped before its first checkpoint resumes from the start
  }
  const Checkpoint* in_fine_tuning = resumed && resumed->fine_tune ? &*resumed : nullptr;
  std::optional<trainer::Graph> tuned;
  try {
    run_phase(first, {o, data.train.size(), sources.train(), observer, result.history, gather}, o.epochs,
              resumed ? resumed->epoch : 0, resumed && !in_fine_tuning ? &*resumed : nullptr);
    // The second phase's best head refers to the fine-tuned backbone it writes into the folder.
    if (top)
      tuned =
          fine_tune_phase({data, sources, backbone, *top, ref, gpu ? &device : nullptr}, run, in_fine_tuning, observer);
  } catch (const StopRequested& stop) {  // its checkpoint is saved
    result.stopped = stop.at;
    result.best_epoch = best.epoch();
    return result;
  }
  write_classifier(o, tuned ? *tuned : backbone.graph(), best, result, writes);
  return result;
}

}  // namespace stoker::training
