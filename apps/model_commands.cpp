// `stoker evaluate`, `stoker predict` and `stoker inspect`: using a trained model folder, and
// looking inside a backbone file.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "json_text.hpp"
#include "progress.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/trainer/model.hpp"
#include "stoker/training/device.hpp"
#include "stoker/training/model_folder.hpp"

namespace stoker::app {
namespace {

struct UseArgs {
  std::string device = "auto";
  std::string model_dir;
  // predict with a whole classifier file instead of a model folder
  std::string model_file, labels, preprocess, interpolation = "opencv_linear";  // preprocess "": the model's own
  int image_size = 0;
  std::string data;
  std::vector<std::string> images;
  int batch_size = 32;
  int threads = 0;
  std::string on_bad_sample = "fail";
  bool json = false;

  training::UseOptions options() const { return {batch_size, threads, parse_bad_sample_policy(on_bad_sample)}; }
};

void print_skipped(const std::vector<SkippedSample>& skipped) {
  for (const auto& s : skipped) std::fprintf(stderr, "stoker: error: %s: %s\n", s.path.c_str(), s.reason.c_str());
}

// The trained model, its backbone on the requested device.
training::TrainedModel load_for_use(const UseArgs& a) {
  if (a.model_dir.empty() == a.model_file.empty()) throw InvalidArgument("give --model-dir DIR or --model FILE");
  training::ImagePreparation prep;  // for --model: how its images are prepared
  prep.image_size = a.image_size;
  prep.interpolation = parse_interpolation(a.interpolation);
  prep.preprocess = a.preprocess;
  training::TrainedModel m = !a.model_dir.empty() ? training::load_trained_model(a.model_dir)
                                                  : training::load_classifier(a.model_file, prep, a.labels);
  training::DeviceChoice device = training::choose_device(a.device);
  training::place_backbone(m.backbone, device, a.batch_size);
  if (!device.fallback_reason.empty()) {
    std::fprintf(stderr, "stoker: warning: the GPU is not used: %s; running on the CPU\n",
                 device.fallback_reason.c_str());
  }
  return m;
}

// A class folder the model was not trained on would be left out of the figures without a word.
void refuse_unknown_class_folders(const std::string& data, const std::vector<std::string>& classes) {
  for (const std::string& folder : class_folders(data)) {
    if (std::find(classes.begin(), classes.end(), folder) != classes.end()) continue;
    std::string known;
    for (const std::string& c : classes) known += (known.empty() ? "" : ", ") + c;
    throw DatasetError((std::filesystem::path(data) / folder).string() +
                       ": a class folder the model does not have (its classes: " + known +
                       "); evaluate takes a folder of the model's classes only");
  }
}

void run_evaluate(const UseArgs& a) {
  const training::TrainedModel m = load_for_use(a);
  refuse_unknown_class_folders(a.data, m.info.class_names);
  std::optional<Progress> progress;
  const training::Evaluation r =
      training::evaluate(m, a.data, a.options(), [&](std::size_t batches, std::size_t total, std::size_t images) {
        if (!progress) progress.emplace("evaluate", total);
        progress->update(batches, images);
      });
  if (progress) progress->finish();
  const trainer::EpochStats& s = r.stats;
  print_skipped(r.skipped);
  if (a.json) {
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& k : r.skipped) skipped.push_back({{"path", k.path}, {"reason", k.reason}});
    std::printf("%s\n", json_text(nlohmann::json({{"images", s.samples},
                                                  {"skipped", r.skipped.size()},
                                                  {"loss", s.loss},
                                                  {"accuracy", s.accuracy},
                                                  {"skipped_files", skipped}}))
                            .c_str());
  } else {
    std::printf("%d images: loss %.4f, accuracy %.4f", s.samples, s.loss, s.accuracy);
    if (!r.skipped.empty()) std::printf(" (%zu unreadable images skipped)", r.skipped.size());
    std::printf("\n");
  }
}

// The images named: files as given, folders as every image file below them (sorted), links to
// folders followed but no folder listed twice: a link that leads back (a loop) is named on stderr.
std::vector<std::string> image_paths(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  const DirectoryOptions images;  // its extensions: those a folder dataset takes
  std::vector<std::string> paths;
  for (const std::string& a : args) {
    std::error_code ec;
    if (!fs::is_directory(a, ec)) {
      paths.push_back(a);
      continue;
    }
    ImageFiles found = find_image_files(a, images.extensions, /*follow_links=*/true);
    for (const std::string& link : found.repeated_folders)
      std::fprintf(stderr, "stoker: note: %s: leads to a folder already listed (a link loop?); skipped\n",
                   link.c_str());
    if (found.repeated_folders.size() > 1)
      std::fprintf(stderr, "stoker: note: %zu folder links under %s skipped; each folder was read once\n",
                   found.repeated_folders.size(), a.c_str());
    if (found.files.empty()) throw DatasetError(a + ": holds no images");
    std::sort(found.files.begin(), found.files.end());
    paths.insert(paths.end(), found.files.begin(), found.files.end());
  }
  return paths;
}

// Exits with kExitUnreadableFiles when some images could not be read, after predicting the others.
void run_predict(const UseArgs& a) {
  const training::TrainedModel m = load_for_use(a);
  const std::vector<std::string> paths = image_paths(a.images);
  const training::Predictions p = training::predict(m, paths, a.options());
  const std::vector<std::string>& names = m.info.class_names;
  nlohmann::json out = nlohmann::json::array();
  for (const training::Prediction& r : p.predicted) {
    const auto best = static_cast<std::size_t>(r.class_index);
    nlohmann::json row = {{"path", r.path}, {"class", names.at(best)}, {"probability", r.probabilities[best]}};
    for (std::size_t k = 0; k < r.probabilities.size(); ++k) row["probabilities"][names.at(k)] = r.probabilities[k];
    out.push_back(row);
    if (!a.json) std::printf("%s\t%s\t%.4f\n", r.path.c_str(), names.at(best).c_str(), r.probabilities[best]);
  }
  for (const auto& s : p.failed)
    if (a.json) out.push_back({{"path", s.path}, {"error", s.reason}});
  print_skipped(p.failed);
  if (a.json) std::printf("%s\n", json_text(out, 2).c_str());
  if (!p.failed.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "stoker: %zu of %zu images could not be read; the others were predicted\n", p.failed.size(),
                 paths.size());
    throw CLI::RuntimeError(kExitUnreadableFiles);  // CLI11 exits with the code, printing nothing
  }
}

struct InspectArgs {
  std::string model;
  std::string cut_at;
  int image_size = 0;
};

void run_inspect(const InspectArgs& a) {
  trainer::LoadOptions lo;
  if (a.image_size > 0) lo.input_hw = {a.image_size, a.image_size};
  trainer::Model model = trainer::load_model(a.model, lo);
  if (!a.cut_at.empty()) model = model.cut_at(a.cut_at);
  std::printf("%s", model.summary().c_str());
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto eval = std::make_shared<UseArgs>();
  CLI::App* e = app.add_subcommand("evaluate", "loss and accuracy of a trained model on a labelled folder");
  e->add_option("--model-dir", eval->model_dir, "folder written by stoker train --out")
      ->required()
      ->check(CLI::ExistingDirectory);
  e->add_option("--data", eval->data, "folder with one sub-folder per class")
      ->required()
      ->check(CLI::ExistingDirectory);
  e->add_option("--batch-size", eval->batch_size)->capture_default_str();
  e->add_option("--threads", eval->threads, "decode threads (0 = all cores)");
  e->add_option("--on-bad-sample", eval->on_bad_sample,
                "fail (stop at the first unreadable image) | skip (leave it out, name it on stderr)")
      ->capture_default_str();
  e->add_flag("--json", eval->json, "machine-readable output");
  e->add_option("--device", eval->device, "auto | cpu | cuda[:N]")->capture_default_str();
  e->callback([eval] { run_evaluate(*eval); });

  auto pred = std::make_shared<UseArgs>();
  pred->on_bad_sample = "skip";  // each image is its own answer: one unreadable file need not stop the rest
  CLI::App* p = app.add_subcommand("predict", "class and probability for each image");
  p->add_option("--model-dir", pred->model_dir, "folder written by stoker train --out")->check(CLI::ExistingDirectory);
  p->add_option("--model", pred->model_file, "or any whole classifier: Keras .h5 or TF.js model.json")
      ->check(CLI::ExistingFile);
  p->add_option("--labels", pred->labels, "with --model: class names, one per line (default 0..K-1)")
      ->check(CLI::ExistingFile);
  p->add_option("--preprocess", pred->preprocess,
                "with --model: tf | caffe | torch | rescale (x/255) | none (default: none for a model.h5 stoker train "
                "wrote, which normalises its input itself; else tf)");
  p->add_option("--image-size", pred->image_size, "with --model: input size (default: the model's)");
  p->add_option("--interpolation", pred->interpolation,
                "with --model: opencv_linear (bilinear as tf.image.resize) | centre_nearest")
      ->capture_default_str();
  p->add_option("images", pred->images, "image files or folders of them")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p->add_option("--batch-size", pred->batch_size)->capture_default_str();
  p->add_option("--threads", pred->threads, "decode threads (0 = all cores)");
  p->add_option("--on-bad-sample", pred->on_bad_sample,
                "skip (an error line for each unreadable image, the rest predicted, exit code 1) | fail (stop at "
                "the first, exit code 2)")
      ->capture_default_str();
  p->add_flag("--json", pred->json, "machine-readable output");
  p->add_option("--device", pred->device, "auto | cpu | cuda[:N]")->capture_default_str();
  p->callback([pred] { run_predict(*pred); });

  auto ins = std::make_shared<InspectArgs>();
  CLI::App* i = app.add_subcommand("inspect", "print a model's layer graph and parameter counts");
  i->add_option("model", ins->model, "Keras .h5 or TF.js model.json")->required();
  i->add_option("--cut-at", ins->cut_at, "show the model cut at this layer");
  i->add_option("--image-size", ins->image_size, "input size for models that leave it open");
  i->callback([ins] { run_inspect(*ins); });
}

}  // namespace stoker::app
