#include "model_dir.hpp"

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "progress.hpp"
#include "stoker/error.hpp"

namespace stoker::app {
namespace fs = std::filesystem;

void write_model_info(const fs::path& dir, const TrainConfig& c, const std::vector<std::string>& class_names) {
  nlohmann::json j;
  j["format"] = "stoker model folder 1";
  j["backbone"] = {{"model", fs::absolute(c.model).string()}, {"cut_at", c.cut_at}};
  j["image_size"] = c.loader.image_size;
  j["interpolation"] = c.loader.interpolation;
  j["keep_aspect_ratio"] = c.loader.keep_aspect_ratio;
  j["preprocess"] = c.preprocess;
  j["class_names"] = class_names;
  std::ofstream out(dir / "stoker_model.json");
  out << j.dump(2) << "\n";
  if (!out) throw IoError((dir / "stoker_model.json").string() + ": cannot write");
}

TrainedModel load_trained_model(const fs::path& dir) {
  const fs::path info = dir / "stoker_model.json";
  std::ifstream in(info);
  if (!in) throw IoError(info.string() + ": not found (is " + dir.string() + " a folder written by stoker train --out?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw IoError(info.string() + ": not valid JSON (" + e.what() + ")");
  }
  TrainedModel m;
  m.dir = dir;
  TrainConfig c;
  try {
    c.model = j.at("backbone").at("model").get<std::string>();
    c.cut_at = j.at("backbone").at("cut_at").get<std::string>();
    c.loader.image_size = j.at("image_size").get<int>();
    c.loader.interpolation = j.at("interpolation").get<std::string>();
    c.loader.keep_aspect_ratio = j.at("keep_aspect_ratio").get<bool>();
    c.preprocess = j.at("preprocess").get<std::string>();
    m.class_names = j.at("class_names").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(info.string() + ": missing or malformed field (" + e.what() + ")");
  }
  m.validation_spec = c.augment_spec(false);
  m.head = trainer::Head::load(dir / "head.stkh", &m.backbone);
  trainer::LoadOptions lo;
  lo.input_hw = {c.loader.image_size, c.loader.image_size};
  m.backbone_model = trainer::load_model(c.model, lo);
  if (!c.cut_at.empty()) m.backbone_model = m.backbone_model.cut_at(c.cut_at);
  return m;
}

Features extract_features(Loader& loader, const trainer::Model& backbone, std::uint64_t epoch,
                          const std::string& progress_label) {
  Features f;
  Progress progress(progress_label, loader.batches_per_epoch());
  loader.begin_epoch(epoch);
  std::size_t batches = 0;
  while (auto b = loader.next()) {
    const auto t0 = std::chrono::steady_clock::now();
    const trainer::Tensor t = backbone.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
    f.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    f.dim = static_cast<int>(t.data.size() / static_cast<std::size_t>(b->size()));
    f.x.insert(f.x.end(), t.data.begin(), t.data.end());
    for (auto c : b->classes()) f.y.push_back(c);
    f.n += b->size();
    progress.update(++batches, static_cast<std::size_t>(f.n));
  }
  progress.finish();
  return f;
}

}  // namespace stoker::app
