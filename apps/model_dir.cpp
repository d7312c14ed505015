#include "model_dir.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

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

}  // namespace stoker::app
