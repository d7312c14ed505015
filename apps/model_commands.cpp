// `stoker evaluate`, `stoker predict` and `stoker inspect`: using a trained model folder, and
// looking inside a backbone file.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "device.hpp"
#include "feature_source.hpp"
#include "model_dir.hpp"
#include "stoker/error.hpp"

namespace stoker::app {
namespace {

struct UseArgs {
  std::string device = "auto";
  std::string model_dir;
  std::string data;
  std::vector<std::string> images;
  int batch_size = 32;
  int threads = 0;
  bool json = false;
};

LoaderOptions prepare_options(const TrainedModel& m, const UseArgs& a) {
  LoaderOptions o;
  o.batch_size = a.batch_size;
  o.threads = a.threads;
  o.shuffle = false;
  o.transform = std::make_shared<Augmenter>(m.validation_spec);
  return o;
}

// The trained model, its backbone on the requested device.
TrainedModel load_for_use(const UseArgs& a) {
  TrainedModel m = load_trained_model(a.model_dir);
  DeviceChoice device = choose_device(a.device);
  place_backbone(m.backbone_model, device, a.batch_size);
  return m;
}

void run_evaluate(const UseArgs& a) {
  const TrainedModel m = load_for_use(a);
  DirectoryOptions d;
  d.classes = m.class_names;
  const Dataset ds = dataset_from_directory(a.data, d);
  LoaderOptions o = prepare_options(m, a);
  o.label_mode = LabelMode::Sparse;
  Loader loader(ds, o);
  const Features f = collect_features(*cpu_feature_source(loader, m.backbone_model), 0, "evaluate");
  const trainer::EpochStats s = m.head.evaluate(f.x.data(), f.y.data(), f.n);
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"images", s.samples}, {"loss", s.loss}, {"accuracy", s.accuracy}}).dump().c_str());
  } else {
    std::printf("%d images: loss %.4f, accuracy %.4f\n", s.samples, s.loss, s.accuracy);
  }
}

// Returns the number of images that could not be read.
int run_predict(const UseArgs& a) {
  const TrainedModel m = load_for_use(a);
  std::vector<Sample> samples;
  for (const auto& p : a.images) samples.push_back({p, -1});
  LoaderOptions o = prepare_options(m, a);
  o.label_mode = LabelMode::None;
  o.on_bad_sample = BadSamplePolicy::Skip;  // report each unreadable image, predict the rest
  Loader loader(dataset_from_list(samples, m.class_names), o);
  loader.begin_epoch(0);
  nlohmann::json out = nlohmann::json::array();
  while (auto b = loader.next()) {
    const trainer::Tensor f = m.backbone_model.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
    const trainer::Tensor p = m.head.predict(f.data.data(), b->size());
    const int width = static_cast<int>(p.data.size()) / b->size();
    for (int i = 0; i < b->size(); ++i) {
      std::vector<double> probs;
      if (width == 1) {
        const double p1 = p.data[static_cast<std::size_t>(i)];
        probs = {1 - p1, p1};
      } else {
        for (int k = 0; k < width; ++k) probs.push_back(p.data[static_cast<std::size_t>(i * width + k)]);
      }
      const auto best = static_cast<std::size_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
      const std::string& path = samples[static_cast<std::size_t>(b->sample_ids()[static_cast<std::size_t>(i)])].path;
      nlohmann::json row = {{"path", path}, {"class", m.class_names[best]}, {"probability", probs[best]}};
      for (std::size_t k = 0; k < probs.size(); ++k) row["probabilities"][m.class_names[k]] = probs[k];
      out.push_back(row);
      if (!a.json) std::printf("%s\t%s\t%.4f\n", path.c_str(), m.class_names[best].c_str(), probs[best]);
    }
  }
  const auto skipped = loader.skipped();
  for (const auto& s : skipped) {
    if (a.json) out.push_back({{"path", s.path}, {"error", s.reason}});
    std::fprintf(stderr, "stoker: error: %s: %s\n", s.path.c_str(), s.reason.c_str());
  }
  if (a.json) std::printf("%s\n", out.dump(2).c_str());
  return static_cast<int>(skipped.size());
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
  e->add_option("--model-dir", eval->model_dir, "folder written by stoker train --out")->required()->check(CLI::ExistingDirectory);
  e->add_option("--data", eval->data, "folder with one sub-folder per class")->required()->check(CLI::ExistingDirectory);
  e->add_option("--batch-size", eval->batch_size)->capture_default_str();
  e->add_option("--threads", eval->threads, "decode threads (0 = all cores)");
  e->add_flag("--json", eval->json, "machine-readable output");
  e->add_option("--device", eval->device, "auto | cpu | cuda[:N]")->capture_default_str();
  e->callback([eval] { run_evaluate(*eval); });

  auto pred = std::make_shared<UseArgs>();
  CLI::App* p = app.add_subcommand("predict", "class and probability for each image");
  p->add_option("--model-dir", pred->model_dir, "folder written by stoker train --out")->required()->check(CLI::ExistingDirectory);
  p->add_option("images", pred->images, "image files")->required()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p->add_option("--batch-size", pred->batch_size)->capture_default_str();
  p->add_option("--threads", pred->threads, "decode threads (0 = all cores)");
  p->add_flag("--json", pred->json, "machine-readable output");
  p->add_option("--device", pred->device, "auto | cpu | cuda[:N]")->capture_default_str();
  p->callback([pred] {
    if (const int failed = run_predict(*pred); failed > 0) {
      throw Error(std::to_string(failed) + " of " + std::to_string(pred->images.size()) + " images could not be read");
    }
  });

  auto ins = std::make_shared<InspectArgs>();
  CLI::App* i = app.add_subcommand("inspect", "print a model's layer graph and parameter counts");
  i->add_option("model", ins->model, "Keras .h5 or TF.js model.json")->required();
  i->add_option("--cut-at", ins->cut_at, "show the model cut at this layer");
  i->add_option("--image-size", ins->image_size, "input size for models that leave it open");
  i->callback([ins] { run_inspect(*ins); });
}

}  // namespace stoker::app
