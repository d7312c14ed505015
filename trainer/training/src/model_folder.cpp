#include "stoker/training/model_folder.hpp"

#include <algorithm>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"

namespace stoker::training {
namespace fs = std::filesystem;

AugmentSpec image_spec(const ImagePreparation& prep, AugmentSpec random, bool training) {
  AugmentSpec s = std::move(random);
  s.height = s.width = prep.image_size;
  s.dtype = DType::F32;
  s.layout = Layout::NHWC;
  if (prep.interpolation != Interpolation::Nearest && prep.interpolation != Interpolation::Bilinear) {
    throw InvalidArgument(std::string("interpolation ") + to_string(prep.interpolation) +
                          " is not available with training; use nearest or bilinear");
  }
  s.interpolation_order = prep.interpolation == Interpolation::Nearest ? 0 : 1;
  // Validation and prediction crop the centre as the model folder says; a random resized crop's
  // validation mode does the same.
  const CenterCrop centre{prep.center_crop, prep.keep_aspect_ratio};
  if (s.random_resized_crop) s.random_resized_crop->center = centre;
  else if (prep.keep_aspect_ratio || prep.center_crop != 1.0) s.center_crop = centre;
  s.rescale = prep.rescale;
  s.samplewise_center = prep.samplewise_center;
  s.samplewise_std_normalization = prep.samplewise_std_normalization;
  s.featurewise_center = prep.featurewise_center;
  s.featurewise_std_normalization = prep.featurewise_std_normalization;
  s.featurewise = prep.featurewise;
  if (prep.preprocess == "tf") s.normalization = ChannelNormalization::minus_one_to_one();
  else if (prep.preprocess == "caffe") s.normalization = ChannelNormalization::caffe();
  else if (prep.preprocess == "torch") s.normalization = ChannelNormalization::torch();
  else if (prep.preprocess == "none") s.normalization = {};
  else throw InvalidArgument("preprocess must be tf, caffe, torch or none, received '" + prep.preprocess + "'");
  s.training = training;
  return s;
}

trainer::Model load_feature_backbone(const trainer::BackboneRef& ref, int image_size) {
  trainer::LoadOptions lo;
  lo.input_hw = {image_size, image_size};
  trainer::Model backbone = trainer::load_model(ref.model, lo);
  if (!ref.cut_at.empty()) backbone = backbone.cut_at(ref.cut_at);
  const std::vector<int> in = backbone.input_shape(), out = backbone.output_shape();
  if (in != std::vector<int>{image_size, image_size, 3}) {
    throw InvalidArgument(ref.model + ": the backbone takes " + std::to_string(in.at(0)) + "x" +
                          std::to_string(in.at(1)) + "x" + std::to_string(in.at(2)) + " inputs; use an image size of " +
                          std::to_string(in.at(0)));
  }
  if (out.size() != 1) {
    throw InvalidArgument(ref.model + ": the features must be a vector per image, but the cut output has " +
                          std::to_string(out.size()) + " dimensions; cut at a pooling or flatten layer");
  }
  return backbone;
}

void write_model_info(const fs::path& dir, const ModelInfo& info) {
  nlohmann::json j;
  j["format"] = "stoker model folder 1";
  j["backbone"] = {{"model", fs::absolute(info.backbone.model).string()}, {"cut_at", info.backbone.cut_at}};
  j["image_size"] = info.prepare.image_size;
  j["interpolation"] = to_string(info.prepare.interpolation);
  j["keep_aspect_ratio"] = info.prepare.keep_aspect_ratio;
  j["preprocess"] = info.prepare.preprocess;
  const ImagePreparation& p = info.prepare;
  j["center_crop"] = p.center_crop;
  j["rescale"] = p.rescale ? nlohmann::json(*p.rescale) : nlohmann::json(nullptr);
  j["samplewise_center"] = p.samplewise_center;
  j["samplewise_std_normalization"] = p.samplewise_std_normalization;
  j["featurewise_center"] = p.featurewise_center;
  j["featurewise_std_normalization"] = p.featurewise_std_normalization;
  if (p.featurewise) j["featurewise"] = {{"mean", p.featurewise->mean}, {"std", p.featurewise->std}};
  j["class_names"] = info.class_names;
  std::ofstream out(dir / "stoker_model.json");
  out << j.dump(2) << "\n";
  if (!out) throw IoError((dir / "stoker_model.json").string() + ": cannot write");
}

TrainedModel load_trained_model(const fs::path& dir) {
  const fs::path file = dir / "stoker_model.json";
  std::ifstream in(file);
  if (!in)
    throw IoError(file.string() + ": not found (is " + dir.string() + " a folder written by stoker train --out?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw IoError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  TrainedModel m;
  m.dir = dir;
  ModelInfo& info = m.info;
  try {
    info.backbone.model = j.at("backbone").at("model").get<std::string>();
    info.backbone.cut_at = j.at("backbone").at("cut_at").get<std::string>();
    info.prepare.image_size = j.at("image_size").get<int>();
    info.prepare.interpolation = parse_interpolation(j.at("interpolation").get<std::string>());
    info.prepare.keep_aspect_ratio = j.at("keep_aspect_ratio").get<bool>();
    info.prepare.preprocess = j.at("preprocess").get<std::string>();
    // Absent in model folders written before they were recorded: Keras' defaults.
    ImagePreparation& p = info.prepare;
    p.center_crop = j.value("center_crop", 1.0);
    if (j.contains("rescale") && !j["rescale"].is_null()) p.rescale = j["rescale"].get<double>();
    p.samplewise_center = j.value("samplewise_center", false);
    p.samplewise_std_normalization = j.value("samplewise_std_normalization", false);
    p.featurewise_center = j.value("featurewise_center", false);
    p.featurewise_std_normalization = j.value("featurewise_std_normalization", false);
    if (j.contains("featurewise")) {
      p.featurewise = FeaturewiseStats{j["featurewise"].at("mean").get<std::array<float, 4>>(),
                                       j["featurewise"].at("std").get<std::array<float, 4>>()};
    }
    info.class_names = j.at("class_names").get<std::vector<std::string>>();
    image_spec(info.prepare);  // an unknown preprocessing or interpolation fails here, naming the file
  } catch (const nlohmann::json::exception& e) {
    throw IoError(file.string() + ": missing or malformed field (" + e.what() + ")");
  } catch (const InvalidArgument& e) {
    throw IoError(file.string() + ": " + e.what());
  }
  info.backbone.preprocess = info.prepare.preprocess;
  m.head = trainer::Head::load(dir / "head.stkh");
  m.backbone = load_feature_backbone(info.backbone, info.prepare.image_size);
  return m;
}

namespace {

LoaderOptions use_loader(const TrainedModel& m, const UseOptions& o, LabelMode labels) {
  LoaderOptions l;
  l.batch_size = o.batch_size;
  l.threads = o.threads;
  l.shuffle = false;
  l.label_mode = labels;
  l.on_bad_sample = o.on_bad_sample;
  l.transform = std::make_shared<Augmenter>(image_spec(m.info.prepare));
  return l;
}

}  // namespace

Predictions predict(const TrainedModel& m, const std::vector<std::string>& paths, const UseOptions& options) {
  std::vector<Sample> samples;
  samples.reserve(paths.size());
  for (const auto& p : paths) samples.push_back({p, -1});
  LoaderOptions lo = use_loader(m, options, LabelMode::None);
  Loader loader(dataset_from_list(samples, m.info.class_names), lo);
  loader.begin_epoch(0);
  Predictions out;
  while (auto b = loader.next()) {
    const trainer::Tensor f = m.backbone.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
    const trainer::Tensor p = m.head.predict(f.data.data(), b->size());
    const std::size_t width = p.data.size() / static_cast<std::size_t>(b->size());
    for (std::size_t i = 0; i < static_cast<std::size_t>(b->size()); ++i) {
      Prediction r;
      r.path = samples[static_cast<std::size_t>(b->sample_ids()[i])].path;
      if (width == 1) {  // sigmoid: the probability of class 1
        const double p1 = p.data[i];
        r.probabilities = {1 - p1, p1};
      } else {
        r.probabilities.assign(p.data.begin() + static_cast<std::ptrdiff_t>(i * width),
                               p.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
      }
      r.class_index =
          static_cast<int>(std::max_element(r.probabilities.begin(), r.probabilities.end()) - r.probabilities.begin());
      out.predicted.push_back(std::move(r));
    }
  }
  out.failed = loader.skipped();
  return out;
}

Evaluation evaluate(const TrainedModel& m, const std::string& folder, const UseOptions& options,
                    const ProgressFn& progress) {
  DirectoryOptions d;
  d.classes = m.info.class_names;
  Loader loader(dataset_from_directory(folder, d), use_loader(m, options, LabelMode::Sparse));
  const Features f = collect_features(*cpu_feature_source(loader, m.backbone), 0, progress);
  if (f.n == 0)
    throw DatasetError(folder + ": none of its " + std::to_string(f.skipped.size()) + " images could be read");
  return {m.head.evaluate(f.x.data(), f.y.data(), f.n), f.skipped};
}

}  // namespace stoker::training
