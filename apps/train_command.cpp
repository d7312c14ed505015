// `stoker train`: transfer learning from the command line. The frozen backbone turns images into
// features; a new Dense head (sigmoid for two classes, softmax for more) trains on them with Adam.
// Without augmentation every image's features are computed once and reused across epochs; with
// augmentation each epoch decodes, augments and runs the backbone again.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "device.hpp"
#include "feature_source.hpp"
#include "model_dir.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "stoker/error.hpp"
#include "utilisation.hpp"

namespace stoker::app {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct EpochLog {
  int epoch = 0;
  bool features_cached = false;  // the epoch trained the head on features computed earlier
  trainer::EpochStats train, validation;
  bool improved = false;
  double images_per_second = 0;
  Utilisation utilisation;
};

void print_epoch(const TrainConfig& c, const EpochLog& e) {
  std::printf("epoch %d/%d: loss %.4f acc %.4f | val_loss %.4f val_acc %.4f | %.0f img/s%s%s\n", e.epoch + 1,
              c.epochs, e.train.loss, e.train.accuracy, e.validation.loss, e.validation.accuracy, e.images_per_second,
              e.features_cached ? " (head only, features cached)" : "", e.improved ? " | best so far, saved" : "");
  std::printf("  utilisation: %s\n", describe(e.utilisation).c_str());
  std::fflush(stdout);
}

nlohmann::json to_json(const Utilisation& u) {
  nlohmann::json j = {{"seconds", u.seconds},
                      {"disk_read_mb_per_s", u.disk_read_mb_per_s},
                      {"file_read_mb_per_s", u.file_read_mb_per_s},
                      {"cpu_percent_of_all_cores", u.cpu_percent_of_all_cores},
                      {"data_wait_share", u.data_wait_share},
                      {"compute_share", u.compute_share},
                      {"limited_by", limiting_stage(u)}};
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  j["gpu_run"] = u.gpu_run;
  j["gpu_busy_percent"] = opt(u.gpu_busy_percent);  // NVML, device-wide, mean over the stretch
  j["gpu_busy_samples"] = u.gpu_busy_samples;
  j["gpu_memory_used_mib"] = opt(u.gpu_memory_used_mib);  // NVML, device-wide peak
  j["backbone_gpu_share"] = opt(u.backbone_gpu_share);    // CUDA events: the run's own GPU time / wall
  if (!u.gpu_note.empty()) j["gpu_note"] = u.gpu_note;
  return j;
}

void write_reports(const TrainConfig& c, const std::vector<EpochLog>& log, const Series& throughput, int best) {
  nlohmann::json j;
  j["best_epoch"] = best;
  j["monitor"] = c.monitor;
  for (const auto& e : log) {
    j["epochs"].push_back({{"epoch", e.epoch},
                           {"loss", e.train.loss},
                           {"accuracy", e.train.accuracy},
                           {"val_loss", e.validation.loss},
                           {"val_accuracy", e.validation.accuracy},
                           {"images_per_second", e.images_per_second},
                           {"features_cached", e.features_cached},
                           {"improved", e.improved},
                           {"utilisation", to_json(e.utilisation)}});
  }
  std::ofstream(fs::path(c.out) / "history.json") << j.dump(2) << "\n";

  Series loss{"loss", {}, {}}, val_loss{"val_loss", {}, {}}, acc{"accuracy", {}, {}}, val_acc{"val_accuracy", {}, {}};
  Series rate{"img/s", {}, {}}, cpu{"CPU %", {}, {}}, wait{"data wait %", {}, {}}, gpu{"GPU busy % (NVML)", {}, {}};
  Series own{"backbone on GPU % (events)", {}, {}};
  for (const auto& e : log) {
    const double x = e.epoch + 1;
    loss.x.push_back(x), loss.y.push_back(e.train.loss);
    val_loss.x.push_back(x), val_loss.y.push_back(e.validation.loss);
    acc.x.push_back(x), acc.y.push_back(e.train.accuracy);
    val_acc.x.push_back(x), val_acc.y.push_back(e.validation.accuracy);
    cpu.x.push_back(x), cpu.y.push_back(e.utilisation.cpu_percent_of_all_cores);
    wait.x.push_back(x), wait.y.push_back(100 * e.utilisation.data_wait_share);
    if (e.utilisation.gpu_busy_percent) gpu.x.push_back(x), gpu.y.push_back(*e.utilisation.gpu_busy_percent);
    if (e.utilisation.backbone_gpu_share) own.x.push_back(x), own.y.push_back(100 * *e.utilisation.backbone_gpu_share);
  }
  write_charts(fs::path(c.out) / "metrics.png",
               {Chart{"loss per epoch", "epoch", "binary/categorical cross-entropy", {loss, val_loss}},
                Chart{"accuracy per epoch", "epoch", "accuracy", {acc, val_acc}}});
  std::vector<Series> util{cpu, wait};
  if (!gpu.x.empty()) util.push_back(gpu);
  if (!own.x.empty()) util.push_back(own);
  write_charts(fs::path(c.out) / "throughput.png",
               {Chart{"training throughput over time", "seconds", "images per second", {throughput}},
                Chart{"utilisation per epoch", "epoch", "percent", util}});
}

void run_train(TrainConfig& c) {
  DeviceChoice device = choose_device(c.device);
  std::error_code ec;
  fs::create_directories(c.out, ec);
  if (ec || !fs::is_directory(c.out)) throw IoError(c.out + ": cannot create the output folder");

  Dataset train, val;
  if (!c.val.empty()) {
    train = dataset_from_directory(c.loader.data);
    DirectoryOptions vo;
    vo.classes = train.class_names;
    val = dataset_from_directory(c.val, vo);
  } else {
    if (!(c.validation_split > 0)) throw InvalidArgument("give --validation-split > 0 or --val DIR");
    DirectoryOptions o;
    o.split = {c.validation_split, Subset::Training};
    train = dataset_from_directory(c.loader.data, o);
    o.split.subset = Subset::Validation;
    val = dataset_from_directory(c.loader.data, o);
  }
  const int classes = static_cast<int>(train.class_names.size());
  if (classes < 2) throw DatasetError(c.loader.data + ": training needs at least 2 class folders, found " + std::to_string(classes));
  if (val.empty()) throw DatasetError("the validation set is empty: raise --validation-split or add images");
  const trainer::Monitor monitor = trainer::parse_monitor(c.monitor);

  trainer::LoadOptions lo;
  lo.input_hw = {c.loader.image_size, c.loader.image_size};
  trainer::Model backbone = trainer::load_model(c.model, lo);
  if (!c.cut_at.empty()) backbone = backbone.cut_at(c.cut_at);
  const std::vector<int> in = backbone.input_shape(), out = backbone.output_shape();
  if (in != std::vector<int>{c.loader.image_size, c.loader.image_size, 3}) {
    throw InvalidArgument(c.model + ": the backbone takes " + std::to_string(in.at(0)) + "x" + std::to_string(in.at(1)) +
                          "x" + std::to_string(in.at(2)) + " inputs; use --image-size " + std::to_string(in.at(0)));
  }
  if (out.size() != 1) {
    throw InvalidArgument(c.model + ": the features must be a vector per image, but the cut output has " +
                          std::to_string(out.size()) + " dimensions; cut at a pooling or flatten layer (--cut-at)");
  }
  const int dim = out[0];
  std::shared_ptr<trainer::CudnnBackend> gpu = place_backbone(backbone, device, c.loader.batch_size);

  // The CPU path: loaders with the Augmenter as their transform (float32 batches) into the
  // backbone. The GPU path: uint8 batches from plain-resize loaders into GPU feeds whose stage is
  // the CUDA executor of the same augmentation, then the cuDNN backbone.
  LoaderOptions lopt = c.loader.options();
  lopt.label_mode = LabelMode::Sparse;
  LoaderOptions vopt = lopt;
  vopt.shuffle = false;
  vopt.cache = {};
  const auto train_aug = std::make_shared<const Augmenter>(c.augment_spec(true));
  const auto val_aug = std::make_shared<const Augmenter>(c.augment_spec(false));
  std::unique_ptr<Loader> train_loader, val_loader;
  std::unique_ptr<FeatureSource> train_source, val_source;
  auto make_sources = [&] {
    if (gpu) {
      train_source = gpu_feature_source(train, lopt, train_aug, gpu);
      val_source = gpu_feature_source(val, vopt, val_aug, gpu);
      return;
    }
    LoaderOptions tl = lopt, vl = vopt;
    tl.transform = train_aug;
    vl.transform = val_aug;
    train_loader = std::make_unique<Loader>(train, tl);
    val_loader = std::make_unique<Loader>(val, vl);
    train_source = cpu_feature_source(*train_loader, backbone);
    val_source = cpu_feature_source(*val_loader, backbone);
  };
  make_sources();

  std::printf("train: %zu images, validation: %zu images, classes:", train.size(), val.size());
  for (const auto& n : train.class_names) std::printf(" %s", n.c_str());
  std::printf("\nbackbone: %s%s%s, %zu parameters, %d features; device %s\n", c.model.c_str(),
              c.cut_at.empty() ? "" : " cut at ", c.cut_at.c_str(), backbone.parameter_count(), dim,
              device.description.c_str());
  if (train_loader && !train_loader->cache_status().empty()) std::printf("%s\n", train_loader->cache_status().c_str());
  if (const std::string d = train_source->describe(); !d.empty()) std::printf("training batches: %s\n", d.c_str());

  trainer::AdamConfig adam;
  adam.learning_rate = static_cast<float>(c.learning_rate);
  trainer::Head head = classes == 2 ? trainer::Head::sigmoid(dim, adam, c.loader.seed)
                                    : trainer::Head::softmax(dim, classes, adam, c.loader.seed);
  const trainer::BackboneRef ref{fs::absolute(c.model).string(), c.cut_at, c.preprocess};
  const fs::path head_file = fs::path(c.out) / "head.stkh";
  write_model_info(c.out, c, train.class_names);

  Features vf = collect_features(*val_source, 0, "validation features");
  if (gpu) {
    // The feed and the CUDA augmentation, checked where they run: the first (up to 32) validation
    // images' features against the CPU path's (the backbone alone was checked by place_backbone).
    const double error = gpu_path_error(val, vopt, val_aug, backbone.graph(), vf, std::min(c.loader.batch_size, 32));
    if (!(error <= kGpuAgreementLimit)) {
      const std::string why =
          disagreement("cuda:" + std::to_string(device.index) + ": features from the GPU feed differ from the CPU path's", error);
      if (!device.automatic) throw Error(why);
      std::fprintf(stderr, "stoker: warning: the GPU is not used: %s; running on the CPU\n", why.c_str());
      device = {false, 0, true, "cpu (auto: the GPU failed its check, see the warning)"};
      train_source.reset();
      val_source.reset();
      gpu.reset();
      backbone.set_backend(nullptr);
      make_sources();
      vf = collect_features(*val_source, 0, "validation features");
    }
  }
  const std::optional<int> gpu_index = device.cuda ? std::optional<int>(device.index) : std::nullopt;
  std::vector<EpochLog> log;
  Series throughput{"img/s", {}, {}};
  const auto run_start = Clock::now();
  trainer::BestEpoch best(monitor, head_file, ref);
  auto finish_epoch = [&](EpochLog e) {
    e.validation = head.evaluate(vf.x.data(), vf.y.data(), vf.n);
    e.improved = best.offer(e.epoch, e.validation, head);
    print_epoch(c, e);
    log.push_back(e);
  };

  if (!c.augments()) {
    // Deterministic inputs: features once, then every epoch trains the head on them.
    std::printf("no augmentation: computing each image's features once\n");
    UtilisationMeter meter(gpu_index);
    const Features tf = collect_features(*train_source, 0, "training features");
    const Utilisation u = meter.finish(tf.times.data_wait_seconds, tf.times.compute_seconds, tf.times.gpu_seconds);
    const double extract_rate = tf.n / std::max(1e-9, u.seconds);
    throughput.x.push_back(std::chrono::duration<double>(Clock::now() - run_start).count());
    throughput.y.push_back(extract_rate);
    for (int epoch = 0; epoch < c.epochs; ++epoch) {
      UtilisationMeter epoch_meter(gpu_index);
      EpochLog e;
      e.epoch = epoch;
      e.features_cached = epoch > 0;
      const auto t0 = Clock::now();
      e.train = head.train_epoch(tf.x.data(), tf.y.data(), tf.n, c.loader.batch_size, static_cast<std::uint64_t>(epoch),
                                 c.loader.seed);
      const double head_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      e.utilisation = epoch == 0 ? u : epoch_meter.finish(0, head_seconds);
      e.images_per_second = epoch == 0 ? extract_rate : tf.n / std::max(1e-9, head_seconds);
      finish_epoch(e);
    }
  } else {
    for (int epoch = 0; epoch < c.epochs; ++epoch) {
      UtilisationMeter meter(gpu_index);
      Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c.epochs),
                        train_source->batches_per_epoch());
      double loss_sum = 0;
      std::size_t images = 0, batches = 0;
      int correct = 0;
      auto last = Clock::now();
      const EpochTimes times =
          train_source->run_epoch(static_cast<std::uint64_t>(epoch), [&](const float* x, const int* y, int n, int) {
            const trainer::StepResult r = head.train_step(x, y, n);
            const auto now = Clock::now();
            loss_sum += r.loss * r.samples;
            correct += r.correct;
            images += static_cast<std::size_t>(n);
            throughput.x.push_back(std::chrono::duration<double>(now - run_start).count());
            throughput.y.push_back(n / std::max(1e-9, std::chrono::duration<double>(now - last).count()));
            last = now;
            progress.update(++batches, images, loss_sum / static_cast<double>(images),
                            correct / static_cast<double>(images));
          });
      progress.finish();
      EpochLog e;
      e.epoch = epoch;
      e.train = {loss_sum / std::max<double>(1, static_cast<double>(images)),
                 correct / std::max<double>(1, static_cast<double>(images)), static_cast<int>(images)};
      e.utilisation = meter.finish(times.data_wait_seconds, times.compute_seconds, times.gpu_seconds);
      e.images_per_second = static_cast<double>(images) / std::max(1e-9, e.utilisation.seconds);
      finish_epoch(e);
    }
  }
  write_reports(c, log, throughput, best.epoch());
  const EpochLog& b = log.at(static_cast<std::size_t>(best.epoch()));
  std::printf("best epoch %d by %s: validation accuracy %.4f, validation loss %.4f\n", best.epoch() + 1, c.monitor.c_str(),
              b.validation.accuracy, b.validation.loss);
  std::printf("wrote %s (head.stkh, stoker_model.json, history.json, metrics.png, throughput.png)\n", c.out.c_str());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  config->loader.interpolation = "bilinear";
  CLI::App* cmd = app.add_subcommand("train", "train a classifier head on a frozen backbone (transfer learning)");
  config->add_to(*cmd);
  cmd->callback([config] { run_train(*config); });
}

}  // namespace stoker::app
