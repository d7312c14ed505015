// Keras Applications backbones (issue 17) from their committed topologies
// (scripts/keras_reference_backbones.py): each imports, and its per-layer and total parameter
// counts equal Keras'. With STOKER_BACKBONES_DIR (the script's --models output) the forward pass
// is compared with Keras' on random weights.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stoker/core/error.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/model.hpp>
#include <stoker/trainer/tensor.hpp>

#include "import.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

const char* const kBackbones[] = {"EfficientNetB0",   "Xception",   "MobileNetV3Small",
                                  "MobileNetV3Large", "ResNet50V2", "DenseNet121",
                                  "InceptionV3",      "VGG16",      "ConvNeXtTiny"};

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The graph of a committed topology, every weight deterministic (values do not matter here).
Graph import_topology(const nlohmann::json& entry) {
  LoadOptions lo;
  Graph g = detail::parse_keras_topology(entry.at("model_config"), lo);
  for (LayerNode& n : g.nodes) {
    if (n.kind == LayerKind::Input) continue;
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = detail::infer_shape(n, ins);
    for (const auto& [key, shape] : expected_weights(n, ins.at(0).back()))
      n.weights[key] = Weight{shape, std::make_shared<const std::vector<float>>(Tensor::element_count(shape), 0.5f)};
  }
  infer_shapes_and_check(g);
  return g;
}

TEST(Backbones, TopologiesImportWithKerasParameterCounts) {
  for (const char* name : kBackbones) {
    SCOPED_TRACE(name);
    const auto entry = read_json(test::vectors_dir() / "backbones" / (std::string(name) + ".json"));
    const Graph g = import_topology(entry);
    const auto& counts = entry.at("layer_params");
    std::size_t layers = 0;
    for (const LayerNode& n : g.nodes) {
      if (n.kind == LayerKind::Input) continue;
      ASSERT_TRUE(counts.contains(n.name)) << n.name;
      EXPECT_EQ(n.parameter_count(), counts[n.name].get<std::size_t>()) << n.name;
      ++layers;
    }
    EXPECT_EQ(layers, counts.size());
    EXPECT_EQ(g.parameter_count(), entry.at("total_params").get<std::size_t>());
    const Model m(Graph(g), name);
    std::size_t summary_total = 0;
    for (const auto& info : m.layers()) summary_total += info.parameters;
    EXPECT_EQ(summary_total, entry.at("total_params").get<std::size_t>());
    EXPECT_EQ(m.parameter_count(), summary_total);
    EXPECT_EQ(g.nodes[static_cast<std::size_t>(g.outputs.at(0))].out_shape,
              entry.at("output_shape").get<std::vector<int>>());
  }
}

TEST(Backbones, UnknownTFOpLambdaNamesLayerAndOp) {
  const auto config = nlohmann::json::parse(R"({"class_name": "Functional", "config": {"name": "m",
    "layers": [
      {"class_name": "InputLayer", "name": "in", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]},
       "inbound_nodes": []},
      {"class_name": "TFOpLambda", "name": "tf.math.cumsum", "config": {"name": "tf.math.cumsum",
       "function": "math.cumsum"}, "inbound_nodes": [["in", 0, 0, {"axis": 1}]]}],
    "input_layers": [["in", 0, 0]], "output_layers": [["tf.math.cumsum", 0, 0]]}})");
  try {
    detail::parse_keras_topology(config, LoadOptions{});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'tf.math.cumsum'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TFOpLambda op 'math.cumsum'"), std::string::npos) << e.what();
  }
}

std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v(std::filesystem::file_size(p) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

TEST(Backbones, OutputsMatchKeras) {
  const char* dir = std::getenv("STOKER_BACKBONES_DIR");
  if (!dir) GTEST_SKIP() << "STOKER_BACKBONES_DIR (scripts/keras_reference_backbones.py --models) not set";
  for (const char* name : kBackbones) {
    SCOPED_TRACE(name);
    const std::filesystem::path base = std::filesystem::path(dir) / name;
    const Model m = load_model(base.string() + ".h5");
    const auto x = read_floats(base.string() + ".input.bin");
    const auto want = read_floats(base.string() + ".output.bin");
    const auto shapes = read_json(base.string() + ".shapes.json");
    const int batch = shapes.at("input").at(0).get<int>();
    const Tensor y = m.forward(x.data(), batch);
    ASSERT_EQ(y.data.size(), want.size());
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, std::abs(double(y.data[i]) - double(want[i])));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    std::printf("%-18s max |stoker - keras| / max |keras| = %.3g (max |keras| %.3g)\n", name, err / scale, scale);
    EXPECT_LT(err / scale, 1e-3);
  }
}

}  // namespace
}  // namespace stoker::trainer
