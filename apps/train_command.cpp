// `stoker train`: transfer learning from the command line. The training itself is
// stoker::training::train (training/); this file turns flags into its options and its
// callbacks into progress bars, per-epoch lines, history.json and the plots.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "json_text.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "rank_launcher.hpp"
#include "stoker/core/atomic_file.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/device.hpp"
#include "stoker/training/run_folder.hpp"
#include "stoker/training/train.hpp"
#include "stop_signals.hpp"
#include "train_config.hpp"
#include "utilisation.hpp"

namespace stoker::app {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct EpochLog {
  int epoch = 0;
  bool features_cached = false;              // the epoch trained the head on features computed earlier
  bool fine_tuning = false;                  // an epoch of the second phase (--fine-tune-from)
  trainer::EpochStats train, validation;     // .samples: the images trained on / validated on
  std::size_t skipped = 0, val_skipped = 0;  // unreadable images left out (--on-bad-sample skip)
  double learning_rate = 0;                  // of the epoch's last step
  bool stopped_early = false;
  bool improved = false;
  double images_per_second = 0;
  double run_seconds = 0;  // the run's time at the epoch's end (a resumed run counts the killed one's)
  Utilisation utilisation;
};

// The library's report of an epoch (its utilisation is the command's own, added by the caller).
EpochLog epoch_log(const training::EpochReport& r, std::size_t val_skipped) {
  EpochLog e;
  e.epoch = r.epoch;
  e.features_cached = r.features_cached;
  e.fine_tuning = r.fine_tuning;
  e.train = r.train;
  e.validation = r.validation;
  e.skipped = r.skipped.size();
  e.val_skipped = val_skipped;
  e.learning_rate = r.learning_rate;
  e.stopped_early = r.stopped_early;
  e.improved = r.improved;
  e.images_per_second = r.images_per_second;
  return e;
}

// Epochs of both phases (--fine-tune-from adds the second).
int total_epochs(const TrainConfig& c) { return c.epochs + (c.fine_tune_from.empty() ? 0 : c.fine_tune_epochs); }

void print_epoch(const TrainConfig& c, const EpochLog& e) {
  const char* cached = e.fine_tuning ? " (fine-tuning, frozen part's output cached)" : " (head only, features cached)";
  std::printf("epoch %d/%d%s: loss %.4f acc %.4f | val_loss %.4f val_acc %.4f | lr %.3g | %.0f img/s%s%s", e.epoch + 1,
              total_epochs(c), e.fine_tuning && !e.features_cached ? " (fine-tuning)" : "", e.train.loss,
              e.train.accuracy, e.validation.loss, e.validation.accuracy, e.learning_rate, e.images_per_second,
              e.features_cached ? cached : "", e.improved ? " | best so far, saved" : "");
  if (e.skipped + e.val_skipped > 0) {
    std::printf(" | %d images trained, %zu unreadable skipped; %d validated, %zu skipped", e.train.samples, e.skipped,
                e.validation.samples, e.val_skipped);
  }
  std::printf("\n");
  std::printf("  utilisation: %s\n", describe(e.utilisation).c_str());
  if (e.stopped_early) {
    std::printf("early stopping: %s has not improved for %d epochs; stopped after epoch %d of %d\n", c.monitor.c_str(),
                c.early_stopping_patience, e.epoch + 1, total_epochs(c));
  }
  std::fflush(stdout);
}

nlohmann::json to_json(const Utilisation& u) {
  nlohmann::json j = {{"seconds", u.seconds},
                      {"disk_read_mb_per_s", u.disk_read_mb_per_s},
                      {"file_read_mb_per_s", u.file_read_mb_per_s},
                      {"cpu_percent_of_all_cores", u.cpu_percent_of_all_cores},
                      {"data_wait_share", u.data_wait_share},
                      {"compute_share", u.compute_share},
                      {"loader_threads", u.loader_threads},
                      {"read_share", u.read_share},
                      {"decode_share", u.decode_share},
                      {"transform_share", u.transform_share},
                      {"limited_by", limiting_stage(u)}};
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  j["gpu_run"] = u.gpu_run;
  j["gpu_busy_percent"] = opt(u.gpu_busy_percent);  // NVML, device-wide, mean over the stretch
  j["gpu_busy_samples"] = u.gpu_busy_samples;
  j["gpu_memory_used_mib"] = opt(u.gpu_memory_used_mib);  // NVML, device-wide peak
  j["backbone_gpu_share"] = opt(u.backbone_gpu_share);    // CUDA events: the run's own GPU time / wall
  j["transfer_share"] = opt(u.transfer_share);            // CUDA events: waiting for copy + GPU augmentation
  j["exchange_share"] = opt(u.exchange_share);            // several ranks: exchanging with the others
  j["other_gpus"] = nlohmann::json::array();              // several ranks: this machine's other GPUs (NVML)
  for (const Utilisation::OtherGpu& g : u.other_gpus)
    j["other_gpus"].push_back(
        {{"index", g.index}, {"busy_percent", opt(g.busy_percent)}, {"memory_used_mib", opt(g.memory_used_mib)}});
  if (!u.gpu_note.empty()) j["gpu_note"] = u.gpu_note;
  return j;
}

Utilisation utilisation_from(const nlohmann::json& j) {
  Utilisation u;
  auto opt = [&j](const char* key) {
    return j.contains(key) && !j[key].is_null() ? std::optional<double>(j[key].get<double>()) : std::nullopt;
  };
  u.seconds = j.value("seconds", 0.0);
  u.disk_read_mb_per_s = j.value("disk_read_mb_per_s", 0.0);
  u.file_read_mb_per_s = j.value("file_read_mb_per_s", 0.0);
  u.cpu_percent_of_all_cores = j.value("cpu_percent_of_all_cores", 0.0);
  u.data_wait_share = j.value("data_wait_share", 0.0);
  u.compute_share = j.value("compute_share", 0.0);
  u.loader_threads = j.value("loader_threads", 0);
  u.read_share = j.value("read_share", 0.0);
  u.decode_share = j.value("decode_share", 0.0);
  u.transform_share = j.value("transform_share", 0.0);
  u.transfer_share = opt("transfer_share");
  u.exchange_share = opt("exchange_share");
  for (const auto& g : j.value("other_gpus", nlohmann::json::array())) {
    Utilisation::OtherGpu o;
    o.index = g.value("index", 0);
    if (g.contains("busy_percent") && g["busy_percent"].is_number()) o.busy_percent = g["busy_percent"].get<double>();
    if (g.contains("memory_used_mib") && g["memory_used_mib"].is_number())
      o.memory_used_mib = g["memory_used_mib"].get<double>();
    u.other_gpus.push_back(o);
  }
  u.gpu_run = j.value("gpu_run", false);
  u.gpu_busy_percent = opt("gpu_busy_percent");
  u.gpu_busy_samples = j.value("gpu_busy_samples", 0);
  u.gpu_memory_used_mib = opt("gpu_memory_used_mib");
  u.backbone_gpu_share = opt("backbone_gpu_share");
  u.gpu_note = j.value("gpu_note", std::string());
  return u;
}

// The unreadable files of a run, each once, in the order they were first met.
struct SkippedFiles {
  std::vector<SkippedSample> files;
  std::set<std::string> seen;

  // Adds those not seen before; prints them unless `quiet`.
  void add(const std::vector<SkippedSample>& skipped, bool quiet = false) {
    for (const SkippedSample& s : skipped) {
      if (!seen.insert(s.path).second) continue;
      files.push_back(s);
      if (!quiet) std::printf("  skipped %s: %s\n", s.path.c_str(), s.reason.c_str());
    }
  }
};

// The epochs a resumed run had finished: the library's record, with each epoch's utilisation from
// the history.json the killed process wrote (when it got that far).
std::vector<EpochLog> earlier_epochs(const TrainConfig& c, const std::vector<training::EpochReport>& history,
                                     std::size_t val_skipped, Series& throughput) {
  nlohmann::json old;
  try {
    std::ifstream in(fs::path(c.out) / training::kHistoryFile);
    if (in) old = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    old = nullptr;  // a history.json cut short: the epochs keep their figures, not their utilisation
  }
  std::vector<EpochLog> log;
  for (const training::EpochReport& r : history) {
    EpochLog e = epoch_log(r, val_skipped);
    if (old.is_object() && old.contains("epochs")) {
      for (const auto& j : old["epochs"])
        if (j.value("epoch", -1) == r.epoch && j.contains("utilisation")) {
          e.utilisation = utilisation_from(j["utilisation"]);
          e.run_seconds = j.value("run_seconds", 0.0);
        }
    }
    log.push_back(e);
  }
  if (old.is_object() && old.contains("throughput")) {
    throughput.x = old["throughput"].value("seconds", std::vector<double>{});
    throughput.y = old["throughput"].value("images_per_second", std::vector<double>{});
    throughput.y.resize(throughput.x.size());
  }
  return log;
}

// The last improved epoch is the best one (BestEpoch keeps only strict improvements).
int best_epoch(const std::vector<EpochLog>& log) {
  int best = -1;
  for (const auto& e : log)
    if (e.improved) best = e.epoch;
  return best;
}

void write_reports(const TrainConfig& c, const std::vector<EpochLog>& log, const SkippedFiles& skipped,
                   const Series& throughput) {
  nlohmann::json j;
  j["best_epoch"] = best_epoch(log);
  j["monitor"] = c.monitor;
  for (const auto& e : log) {
    j["epochs"].push_back({{"epoch", e.epoch},
                           {"loss", e.train.loss},
                           {"accuracy", e.train.accuracy},
                           {"val_loss", e.validation.loss},
                           {"val_accuracy", e.validation.accuracy},
                           {"images", e.train.samples},
                           {"skipped", e.skipped},
                           {"val_images", e.validation.samples},
                           {"val_skipped", e.val_skipped},
                           {"learning_rate", e.learning_rate},
                           {"stopped_early", e.stopped_early},
                           {"images_per_second", e.images_per_second},
                           {"features_cached", e.features_cached},
                           {"fine_tuning", e.fine_tuning},
                           {"improved", e.improved},
                           {"run_seconds", e.run_seconds},
                           {"utilisation", to_json(e.utilisation)}});
  }
  j["skipped_files"] = nlohmann::json::array();
  for (const SkippedSample& f : skipped.files) j["skipped_files"].push_back({{"path", f.path}, {"reason", f.reason}});
  j["throughput"] = {{"seconds", throughput.x}, {"images_per_second", throughput.y}};
  write_file_atomically(fs::path(c.out) / training::kHistoryFile, json_text(j, 2) + "\n");

  Series loss{"loss", {}, {}}, val_loss{"val_loss", {}, {}}, acc{"accuracy", {}, {}}, val_acc{"val_accuracy", {}, {}};
  Series cpu{"CPU %", {}, {}}, wait{"data wait %", {}, {}}, gpu{"GPU busy % (NVML)", {}, {}};
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
  // The fine-tuning phase shaded, in epochs and in the run's seconds; the best epoch marked.
  std::vector<Span> phase_in_epochs, phase_in_seconds;
  const auto tuned = std::find_if(log.begin(), log.end(), [](const EpochLog& e) { return e.fine_tuning; });
  if (tuned != log.end()) {
    phase_in_epochs.push_back({tuned->epoch + 0.5, log.back().epoch + 1.5, "fine-tuning"});
    const double begun = tuned == log.begin() ? 0.0 : std::prev(tuned)->run_seconds;
    phase_in_seconds.push_back(
        {begun, throughput.x.empty() ? log.back().run_seconds : throughput.x.back(), "fine-tuning"});
  }
  std::optional<Marker> best;
  if (const int b = best_epoch(log); b >= 0) best = Marker{b + 1.0, "best epoch " + std::to_string(b + 1)};
  auto per_epoch = [&](std::string title, std::string y_label, std::vector<Series> series, bool mark) {
    return Chart{std::move(title),          "epoch", std::move(y_label), std::move(series), true, phase_in_epochs,
                 mark ? best : std::nullopt};
  };
  write_charts(fs::path(c.out) / training::kMetricsChart,
               {per_epoch("loss per epoch", "binary/categorical cross-entropy", {loss, val_loss}, true),
                per_epoch("accuracy per epoch", "accuracy", {acc, val_acc}, true)});
  std::vector<Series> util{cpu, wait};
  if (!gpu.x.empty()) util.push_back(gpu);
  if (!own.x.empty()) util.push_back(own);
  write_charts(fs::path(c.out) / training::kThroughputChart,
               {Chart{"training throughput over time",
                      "seconds",
                      "images per second",
                      {throughput},
                      false,
                      phase_in_seconds,
                      std::nullopt},
                per_epoch("utilisation per epoch", "percent", util, false)});
}

// Progress bars, the per-epoch lines and utilisation, and the throughput series for the plots.
class TrainLog final : public training::TrainObserver {
 public:
  TrainLog(const TrainConfig& c, std::vector<EpochLog>& log, Series& throughput)
      : c_(c), log_(log), throughput_(throughput), start_(Clock::now()), last_(start_) {}

  // Runs once the backbone, its cut and the device are settled, before the run writes a file.
  void before_first_write(std::function<void()> f) { before_first_write_ = std::move(f); }

  void on_setup(const training::TrainSetup& s) override {
    if (before_first_write_) before_first_write_();
    gpu_ = s.device.cuda ? std::optional<int>(s.device.index) : std::nullopt;
    ranks_ = !s.rank_devices.empty();
    // NVML is device-wide: rank 0 watches the GPUs of the ranks on its machine too.
    other_gpus_.clear();
    for (std::size_t r = 1; r < s.rank_devices.size(); ++r) {
      const training::RankDevice& d = s.rank_devices[r];
      if (d.gpu && d.machine == s.rank_devices[0].machine && d.gpu != s.rank_devices[0].gpu &&
          std::find(other_gpus_.begin(), other_gpus_.end(), *d.gpu) == other_gpus_.end())
        other_gpus_.push_back(*d.gpu);
    }
    std::printf("train: %zu images, validation: %zu images, classes:", s.train_images, s.validation_images);
    for (const auto& n : s.class_names) std::printf(" %s", n.c_str());
    std::printf("\nbackbone: %s%s%s%s, %zu parameters, %d features; device %s\n", c_.model.c_str(),
                s.cut_at.empty() ? "" : " cut at ", s.cut_at.c_str(),
                c_.cut_at.empty() && !s.cut_at.empty() ? " (its last global pooling, as Keras' include_top=False)" : "",
                s.backbone_parameters, s.features, s.device.description.c_str());
    for (std::size_t r = 1; r < s.rank_devices.size(); ++r)
      std::printf("  rank %zu: device %s on %s\n", r, s.rank_devices[r].description.c_str(),
                  s.rank_devices[r].machine.c_str());
    if (!s.cache_status.empty()) std::printf("%s\n", s.cache_status.c_str());
    if (!s.loader_tuning.empty()) std::printf("loader: %s\n", s.loader_tuning.c_str());
    if (!s.batches.empty()) std::printf("training batches: %s\n", s.batches.c_str());
    if (s.featurewise) {
      const FeaturewiseStats& f = *s.featurewise;
      std::printf("featurewise statistics of the training images: mean %.4g %.4g %.4g, std %.4g %.4g %.4g\n", f.mean[0],
                  f.mean[1], f.mean[2], f.std[0], f.std[1], f.std[2]);
    }
    if (!c_.augments()) std::printf("no augmentation: computing each image's features once\n");
  }
  void on_resume(const std::vector<training::EpochReport>& history, int epoch, std::size_t next_batch) override {
    log_ = earlier_epochs(c_, history, val_skipped_, throughput_);
    for (const auto& r : history) skipped_.add(r.skipped, true);  // the killed process printed them
    // This process's time continues the killed one's on the throughput plot.
    start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(throughput_.x.empty() ? 0.0 : throughput_.x.back()));
    std::printf("resuming %s at epoch %d/%d", c_.out.c_str(), epoch + 1, total_epochs(c_));
    if (next_batch > 0) std::printf(", batch %zu", next_batch + 1);
    std::printf(" (%zu epochs done)\n", history.size());
    std::fflush(stdout);
  }
  void on_warning(const std::string& why) override {
    std::fprintf(stderr, "stoker: warning: the GPU is not used: %s; running on the CPU\n", why.c_str());
    gpu_.reset();
  }
  void on_loader_retuned(const std::string& choice) override {
    std::printf("loader, tuned again for the CPU backbone: %s\n", choice.c_str());
  }
  void on_features_begin(const std::string& what, std::size_t batches) override {
    progress_.emplace(what, batches);
    extracting_validation_ = what.starts_with("validation");
  }
  void on_features_progress(std::size_t batches, std::size_t images) override {
    if (progress_) progress_->update(batches, images);
    if (meter_) record_throughput(images);  // the training features of an epoch without augmentation
  }
  void on_features_end(const std::vector<SkippedSample>& skipped) override {
    finish_progress();
    if (!extracting_validation_) return;  // training features: the epoch's report has them
    val_skipped_ = skipped.size();
    if (!skipped.empty()) std::printf("validation: %zu unreadable images skipped\n", skipped.size());
    skipped_.add(skipped);
  }
  void on_epoch_begin(int epoch, std::size_t batches) override {
    meter_.emplace(gpu_, other_gpus_);
    images_ = 0;
    // Epochs without augmentation train the head only: no bar (epoch 0's feature pass has its own).
    if (batches > 0)
      progress_.emplace("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(total_epochs(c_)), batches);
  }
  void on_train_batch(std::size_t batches, std::size_t images, double loss, double accuracy) override {
    if (progress_) progress_->update(batches, images, loss, accuracy);
    record_throughput(images);
  }
  void on_fine_tune_begin(const training::FineTuneSetup& s) override {
    std::printf("fine-tuning from %s: %zu trainable weights; the frozen part ends at %s; %.1f MB %s at batch %d%s%s\n",
                s.from_layer.c_str(), s.trainable_parameters, s.boundary.c_str(), s.activation_bytes / 1e6,
                s.on_gpu ? "of GPU memory for the training step" : "of activations kept for the backward pass",
                c_.loader.batch_size, s.note.empty() ? "" : "; ", s.note.c_str());
    std::fflush(stdout);
  }
  void on_epoch_end(const training::EpochReport& r) override {
    finish_progress();
    EpochLog e = epoch_log(r, val_skipped_);
    e.utilisation = meter_->finish(r.times);
    if (ranks_) e.utilisation.exchange_share = r.seconds_exchanging / std::max(1e-9, r.seconds);
    e.run_seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    meter_.reset();
    print_epoch(c_, e);
    skipped_.add(r.skipped);
    log_.push_back(e);
    write_reports(c_, log_, skipped_, throughput_);  // after every epoch: a killed run leaves its history
  }
  // The run stopped on a signal inside an epoch: its bar ends where it stood.
  void on_stopped() { finish_progress(); }

 private:
  void finish_progress() {
    if (progress_) progress_->finish();
    progress_.reset();
  }
  void record_throughput(std::size_t images) {
    const auto now = Clock::now();
    const double n = static_cast<double>(images - images_);
    throughput_.x.push_back(std::chrono::duration<double>(now - start_).count());
    throughput_.y.push_back(n / std::max(1e-9, std::chrono::duration<double>(now - last_).count()));
    images_ = images;
    last_ = now;
  }

  const TrainConfig& c_;
  std::vector<EpochLog>& log_;
  Series& throughput_;
  std::optional<int> gpu_;       // the card NVML watches
  bool ranks_ = false;           // a run of several ranks (this log is rank 0's)
  std::vector<int> other_gpus_;  // the GPUs of the other ranks on this machine
  std::optional<Progress> progress_;
  std::optional<UtilisationMeter> meter_;
  std::size_t images_ = 0;
  Clock::time_point start_, last_;
  SkippedFiles skipped_;
  std::function<void()> before_first_write_;
  std::size_t val_skipped_ = 0;
  bool extracting_validation_ = false;
};

// The length of the UTF-8 sequence at text[i], or 0 where the bytes there are not UTF-8 (overlong
// forms and surrogates included).
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  const std::size_t n = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? (b <= 0xef ? 3 : 0) : b >= 0xc2 && b <= 0xdf ? 2 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  if (n == 3 && ((b == 0xe0 && byte(i + 1) < 0xa0) || (b == 0xed && byte(i + 1) >= 0xa0))) return 0;
  if (n == 4 && ((b == 0xf0 && byte(i + 1) < 0x90) || (b == 0xf4 && byte(i + 1) >= 0x90))) return 0;
  return n;
}

// A run writes its data's path and class names into model.h5, stoker_model.json and its settings,
// which hold UTF-8 only: a name otherwise is refused before anything is computed, its bytes shown.
void require_utf8(const std::string& name, const std::string& what) {
  std::string shown;
  bool valid = true;
  for (std::size_t i = 0; i < name.size();) {
    const std::size_t n = utf8_sequence(name, i);
    if (n == 0) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(name[i]));
      shown += hex;
      valid = false;
      ++i;
    } else {
      shown.append(name, i, n);
      i += n;
    }
  }
  if (!valid)
    throw DatasetError(what + " '" + shown +
                       "' has a name that is not UTF-8; a run writes it into model.h5 and JSON files, which hold "
                       "UTF-8 only: rename it");
}

// The training and validation sets: class folders or tar shards (--data, --val), split as Keras'
// validation_split when there is no --val.
training::TrainingData training_data(const TrainConfig& c) {
  const auto t0 = Clock::now();
  WebDatasetReport report;
  Dataset all = c.loader.dataset(&report);
  std::optional<Dataset> validation;
  require_utf8(c.loader.source(), "the data");
  if (!c.val.empty()) require_utf8(c.val, "the validation data");
  for (const std::string& name : all.class_names) require_utf8(name, c.loader.source() + ": the class");
  if (!c.val.empty()) validation = c.loader.dataset_at(c.val, &report, all.class_names);
  if (report.shards > 0)
    print_shard_report(report, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  try {
    return validation ? training::training_data(std::move(all), std::move(*validation))
                      : training::training_data(all, c.validation_split);
  } catch (const DatasetError& e) {
    throw DatasetError(c.loader.source() + ": " + e.what());
  }
}

// --resume OUT: the recorded settings, with the flags that may change taken from the command line.
TrainConfig resumed_config(const TrainConfig& given, const CLI::App& cmd) {
  TrainConfig c = load_run_settings(given.resume);
  c.resume = given.resume;
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string flag = opt->get_lnames().front();
    if (!resumable_override(flag)) {
      throw InvalidArgument("--resume continues " + given.resume + " with its recorded settings (" + kRunSettingsFile +
                            "); --" + flag + " cannot change (" + resumable_flags() + " can)");
    }
    apply_override(c, given, flag);
  }
  return c;
}

// The inputs of a run never lie in its --out (a run, or --overwrite, would replace or remove
// them), and --out never lies in a class folder given as --data or --val (its files would become
// images of a class).
void check_inputs_outside_out(const TrainConfig& c) {
  const fs::path out = c.out;
  auto refuse_inside = [&](const std::string& path, const char* flag) {
    if (path.empty()) return;
    // A brace pattern of shards: the folder part before the first brace.
    const std::string fixed = path.substr(0, path.find('{'));
    if (training::is_inside(fixed.empty() ? path : fixed, out))
      throw InvalidArgument(std::string(flag) + " " + path + " lies inside --out " + c.out +
                            ", which a run writes and --overwrite clears: keep the run's inputs outside its folder");
  };
  refuse_inside(c.model, "--model");
  refuse_inside(c.loader.data, "--data");
  refuse_inside(c.loader.data_csv, "--data-csv");
  refuse_inside(c.loader.directory, "--directory");
  refuse_inside(c.val, "--val");
  for (const auto& [folder, flag] : {std::pair{c.loader.data, "--data"}, {c.val, "--val"}}) {
    if (c.loader.data_csv.empty() && !folder.empty() && !LoaderFlags::names_shards(folder) &&
        fs::is_directory(folder) && training::is_inside(out, folder))
      throw InvalidArgument("--out " + c.out + " lies inside " + flag + " " + folder +
                            ": the run's files would be read as a class of images; choose an --out outside it");
  }
}

// A new run's --out: absent or empty, else refused with the choices; with --overwrite the earlier
// run's files (only those) are listed here and removed by clear_earlier_run.
training::RunFolder check_out_folder(const TrainConfig& c) {
  training::RunFolder folder = training::inspect_run_folder(c.out);
  if (!folder.foreign_run_names.empty()) {
    throw InvalidArgument("--out " + c.out + " holds " + training::list_names(folder.foreign_run_names) +
                          ", named as stoker's run files but not written by stoker: a run would replace them; move "
                          "them away or choose another --out");
  }
  if (folder.empty() || c.overwrite) return folder;
  if (!folder.run_files.empty()) {
    throw InvalidArgument("--out " + c.out + " holds an earlier run (" + training::list_names(folder.run_files) +
                          "): continue it with --resume " + c.out +
                          ", train into a new --out, or replace it with --overwrite (removes that run's files, keeps "
                          "any other)");
  }
  throw InvalidArgument("--out " + c.out + " is not empty (" + training::list_names(folder.other_files) +
                        "): train into a new or empty --out, or add --overwrite to write the run beside these files "
                        "(they are kept)");
}

// --overwrite, once the data has loaded: the earlier run's files go, the user's stay.
void clear_earlier_run(const training::RunFolder& folder) {
  if (folder.run_files.empty()) return;
  std::printf("--overwrite: removing the earlier run in %s (%zu files: %s)", folder.dir.c_str(),
              folder.run_files.size(), training::list_names(folder.run_files, 20).c_str());
  if (!folder.other_files.empty()) std::printf("; kept: %s", training::list_names(folder.other_files).c_str());
  std::printf("\n");
  std::fflush(stdout);
  training::remove_run_files(folder);
}

// A folder the command created for a run that fails before writing into it is removed again, so
// that the corrected command finds things as they were.
class EmptyFolderOnError {
 public:
  explicit EmptyFolderOnError(fs::path dir) : dir_(std::move(dir)) {}
  ~EmptyFolderOnError() {
    std::error_code ec;
    if (!dir_.empty() && std::uncaught_exceptions() > 0 && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
  }
  EmptyFolderOnError(const EmptyFolderOnError&) = delete;
  EmptyFolderOnError& operator=(const EmptyFolderOnError&) = delete;

 private:
  fs::path dir_;
};

void discard_unstarted_run(const fs::path& out, bool remove_folder) {
  try {
    training::remove_run_files(training::inspect_run_folder(out));
    if (remove_folder && fs::is_empty(out)) fs::remove(out);
  } catch (const std::exception&) {  // the run's own error is the one to report
  }
}

void run_train_rank(const TrainConfig& given, const CLI::App& cmd, training::Collective& collective);

// Under mpirun or srun (a build with MPI), this is one rank of a data-parallel run: rank 0 checks
// and writes --out and prints the log; the others write nothing and print nothing but errors. A
// rank's error ends every rank (MPI_Abort), named with the rank: the others would wait for it.
// --device naming several GPUs outside a launcher starts the command again as one rank per GPU.
void run_train(const TrainConfig& given, const CLI::App& cmd) {
  if (!training::launched_by_mpi()) {
    // A resumed run's device is the recorded one unless --device is given again.
    const std::string device = given.resume.empty() ? given.device : resumed_config(given, cmd).device;
    const std::size_t gpus = training::requested_gpus(device).size();
    if (gpus > 1) restart_as_one_rank_per_gpu(static_cast<int>(gpus));
  }
  const std::shared_ptr<training::Collective> collective = training::launcher_collective();
  if (collective->size() == 1) return run_train_rank(given, cmd, *collective);
  try {
    collective->set_peer_timeout(std::chrono::duration<double>(given.peer_timeout));
    run_train_rank(given, cmd, *collective);
  } catch (const CLI::Error&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: error (rank %d of %d): %s\n", collective->rank(), collective->size(), e.what());
    std::fflush(stderr);
    collective->abort(dynamic_cast<const Error*>(&e) || dynamic_cast<const fs::filesystem_error*>(&e) ? 2 : 3);
  }
}

void run_train_rank(const TrainConfig& given, const CLI::App& cmd, training::Collective& collective) {
  if (!given.resume.empty() && given.overwrite)
    throw InvalidArgument("--overwrite starts a new run over an earlier one; --resume continues it: give one of them");
  const TrainConfig c = given.resume.empty() ? given : resumed_config(given, cmd);
  if (c.loader.data.empty() && c.loader.data_csv.empty())
    throw InvalidArgument("--data is required (or --data-csv FILE, or --resume OUT to continue a run)");
  for (const auto& [value, flag] : {std::pair{&c.model, "--model"}, {&c.out, "--out"}}) {
    if (value->empty()) throw InvalidArgument(std::string(flag) + " is required (or --resume OUT to continue a run)");
  }
  const bool ranks = collective.size() > 1;
  const bool lead = collective.rank() == 0;
  const bool new_folder = !fs::exists(c.out);
  // The folder is held before it is looked into: a second run started on it at the same time is
  // refused here instead of mixing its files with this one's.
  std::shared_ptr<const training::RunFolderLock> out_lock;
  if (lead) {
    check_inputs_outside_out(c);
    out_lock = std::make_shared<training::RunFolderLock>(c.out);  // creates the folder
  }
  const EmptyFolderOnError created(new_folder && lead ? fs::path(c.out) : fs::path());
  const training::RunFolder earlier = c.resume.empty() && lead ? check_out_folder(c) : training::RunFolder{};
  if (cmd.count("--label-mode") > 0) {
    throw InvalidArgument(
        "--label-mode does not apply to train: two classes train a sigmoid head (binary labels), more a softmax "
        "head (categorical)");
  }
  const training::TrainingData data = training_data(c);
  training::TrainOptions options = c.options();
  options.out_lock = out_lock;
  if (ranks) {
    options.collective = training::launcher_collective();
    if (lead)
      std::printf("data-parallel: %d ranks (%s), global batch %d split between them\n", collective.size(),
                  collective.describe().c_str(), options.loader.batch_size);
  }
  options.loss.class_weight = c.class_weights(data.train);
  if (!options.loss.class_weight.empty() && lead) {
    std::printf("class weights:");
    for (std::size_t k = 0; k < options.loss.class_weight.size(); ++k)
      std::printf("%s %s %.4g", k ? "," : "", data.train.class_names[k].c_str(), options.loss.class_weight[k]);
    std::printf("\n");
  }
  std::vector<EpochLog> log;
  Series throughput{"img/s", {}, {}};
  TrainLog observer(c, log, throughput);
  // An earlier run is removed (--overwrite) only once this one's setup has held: a mistyped
  // --cut-at fails with the earlier run still in place.
  bool started = false;  // this run has written into --out (an earlier run's files are gone)
  if (c.resume.empty() && lead) {
    observer.before_first_write([&] {
      started = true;
      clear_earlier_run(earlier);
      fs::create_directories(c.out);
      save_run_settings(c);
    });
  }
  // Ctrl-C or SIGTERM: the run stops after its batch, with a checkpoint there (a second one kills).
  // Across ranks a signal ends every rank (the launcher's), the checkpoint of the last epoch kept:
  // ranks that saw it at different batches would wait for each other for ever.
  std::optional<StopSignals> signals;
  if (!ranks) {
    signals.emplace();
    options.should_stop = [] { return StopSignals::received() != 0; };
  }
  training::TrainResult result;
  try {
    result = training::train(data, options, lead ? &observer : nullptr);
  } catch (...) {
    if (!lead) throw;
    // A new run that stops before its first epoch ends (a --cut-at that does not exist, a file
    // that cannot be read) has nothing to resume: its files go, so that the corrected command
    // finds the folder as it was. A resumed run keeps everything.
    if (started && log.empty()) discard_unstarted_run(c.out, new_folder);
    else if (!started && c.resume.empty() && new_folder) discard_unstarted_run(c.out, true);  // the folder train() made
    throw;
  }
  if (result.stopped) {
    observer.on_stopped();
    const training::StopPoint& at = *result.stopped;
    if (at.batch > 0) std::printf("stopped at epoch %d, batch %zu", at.epoch + 1, at.batch);
    else std::printf("stopped at the start of epoch %d", at.epoch + 1);
    std::printf(": continue with stoker train --resume %s\n", c.out.c_str());
    std::fflush(stdout);
    throw CLI::RuntimeError(StopSignals::exit_status());  // CLI11 exits with the code, printing nothing
  }
  if (!lead) return;
  const EpochLog& b = log.at(static_cast<std::size_t>(result.best_epoch));
  std::printf("best epoch %d by %s: validation accuracy %.4f, validation loss %.4f\n", result.best_epoch + 1,
              c.monitor.c_str(), b.validation.accuracy, b.validation.loss);
  if (!result.classifier_note.empty()) std::printf("%s\n", result.classifier_note.c_str());
  std::printf("wrote %s (%shead.stkh, stoker_model.json, history.json, metrics.png, throughput.png; %s to resume)\n",
              c.out.c_str(), result.classifier_note.empty() ? "model.h5, " : "", training::kCheckpointFile);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  CLI::App* cmd = app.add_subcommand("train", "train a classifier head on a frozen backbone (transfer learning)");
  config->add_to(*cmd);
  // Not a setting of the run (never recorded): what may happen to the --out folder it starts in.
  cmd->add_flag("--overwrite", config->overwrite,
                "train into a --out that holds an earlier run or other files: the earlier run's files are removed "
                "(they are listed), any other file is kept (without it such a folder is refused)");
  cmd->add_option("--peer-timeout", config->peer_timeout,
                  "several ranks: seconds an exchange waits for the other ranks before it ends every rank (a rank "
                  "that hung or stopped)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([config, cmd] { run_train(*config, *cmd); });
}

}  // namespace stoker::app
