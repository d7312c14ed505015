// Keras Applications backbones from their committed topologies
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
#include <stoker/trainer/backend.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/model.hpp>
#include <stoker/trainer/tensor.hpp>

#include "import/import.hpp"
#include "plan/plan.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

const char* const kBackbones[] = {"EfficientNetB0", "Xception",    "MobileNetV3Small", "MobileNetV3Large",
                                  "ResNet50V2",     "DenseNet121", "InceptionV3",      "VGG16",
                                  "ConvNeXtTiny",   "NASNetMobile"};

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A weight of a random network that keeps its values in range through a hundred layers: kernels
// uniform with variance 1/fan-in, variances in [0.5, 1.5], gammas near 1, the rest near 0.
std::vector<float> random_weight(const std::string& key, const std::vector<int>& shape, std::mt19937& rng) {
  const std::size_t count = Tensor::element_count(shape);
  double lo = -0.1, hi = 0.1;
  if (key.find("variance") != std::string::npos) {
    lo = 0.5, hi = 1.5;
  } else if (key == "gamma") {
    lo = 0.8, hi = 1.2;
  } else if (key.find("kernel") != std::string::npos && shape.size() >= 2) {
    // depthwise (kh, kw, c, multiplier): each output sums kh*kw values; others sum all but the last dim
    const double fan_in = key == "depthwise_kernel" ? double(shape[0]) * shape[1] : double(count) / shape.back();
    hi = std::sqrt(3.0 / fan_in), lo = -hi;
  }
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// scripts/keras_reference_backbones.py's seeded_values(): float32(lo + (hi - lo) * u_i), u_i from
// splitmix64 over fnv1a(name) + (i + 1) * golden ratio. The same weights and input in Keras and here.
std::vector<float> seeded_values(const std::string& name, std::size_t count, double lo, double hi) {
  std::uint64_t seed = 0xCBF29CE484222325ull;
  for (unsigned char c : name) seed = (seed ^ c) * 0x100000001B3ull;
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[i] = static_cast<float>(lo + (hi - lo) * (static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0)));
  }
  return v;
}

// The script's seeded weight of a layer, by Keras' weight name and shape (a groups == filters
// Conv2D keeps its Keras name "kernel" and shape [kh, kw, 1, C]: the same values in the same order).
std::vector<float> seeded_weight(const LayerNode& n, const std::string& key, const std::vector<int>& shape) {
  const bool grouped = n.kind == LayerKind::DepthwiseConv2D && n.keras_class == "Conv2D";
  const std::string keras_key = grouped && key == "depthwise_kernel" ? "kernel" : key;
  const std::size_t count = Tensor::element_count(shape);
  double lo = -0.1, hi = 0.1;
  if (keras_key == "kernel" || keras_key == "pointwise_kernel" || keras_key == "depthwise_kernel") {
    const double fan_in = key == "depthwise_kernel" ? double(shape[0]) * shape[1] : double(count) / shape.back();
    hi = std::sqrt(6.0 / fan_in), lo = -hi;
  } else if (keras_key == "moving_variance" || keras_key == "variance" || keras_key == "gamma") {
    lo = 0.5, hi = 1.5;
  }
  return seeded_values(n.name + "/" + keras_key, count, lo, hi);
}

enum class Weights { Constant, Random, Seeded };

// The graph of a committed topology, every weight deterministic: 0.5 everywhere (enough for the
// shapes and counts), random_weight's, or the reference script's seeded ones.
Graph import_topology(const nlohmann::json& entry, Weights weights = Weights::Constant) {
  LoadOptions lo;
  Graph g = detail::parse_keras_topology(entry.at("model_config"), lo);
  std::mt19937 rng(17);
  for (LayerNode& n : g.nodes) {
    if (n.kind == LayerKind::Input) continue;
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = detail::infer_shape(n, ins);
    for (const auto& [key, shape] : expected_weights(n, ins.at(0).back())) {
      auto values = weights == Weights::Random   ? random_weight(key, shape, rng)
                    : weights == Weights::Seeded ? seeded_weight(n, key, shape)
                                                 : std::vector<float>(Tensor::element_count(shape), 0.5f);
      n.weights[key] = Weight{shape, std::make_shared<const std::vector<float>>(std::move(values))};
    }
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

// Keras' own output for the reference script's seeded weights and input, committed with each
// topology: the CPU backend's within 1e-4 of the largest output value.
TEST(Backbones, SeededOutputsMatchKeras) {
  for (const char* name : kBackbones) {
    SCOPED_TRACE(name);
    const auto entry = read_json(test::vectors_dir() / "backbones" / (std::string(name) + ".json"));
    const Graph g = import_topology(entry, Weights::Seeded);
    const auto& range = entry.at("seeded").at("input_range");
    const std::vector<float> x =
        seeded_values("input", Tensor::element_count(g.nodes.at(0).out_shape), range[0], range[1]);
    const auto want = entry.at("seeded").at("output").get<std::vector<float>>();
    const auto y = make_cpu_backend(g, {})->forward(x.data(), 1);
    ASSERT_EQ(y.at(0).data.size(), want.size());
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, std::abs(double(y[0].data[i]) - double(want[i])));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    std::printf("%-18s CPU backend vs Keras, seeded weights: %.3g of max |y| %.3g\n", name, err / scale, scale);
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(err / scale, 1e-4);
  }
}

// What the cuDNN backend runs, on the host: every backbone's plan (folded and fused as on the GPU)
// executed by run_plan_host in float32 and in fp16 storage against the CPU backend, random
// weights that keep the values well inside fp16's range, one image.
TEST(Backbones, CudnnPlansOnTheHostMatchTheCpuBackend) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const char* name : kBackbones) {
    SCOPED_TRACE(name);
    const Graph g =
        import_topology(read_json(test::vectors_dir() / "backbones" / (std::string(name) + ".json")), Weights::Random);
    const std::vector<int>& in = g.nodes.at(0).out_shape;
    std::vector<float> x(Tensor::element_count(in));
    for (float& v : x) v = u(rng);
    const auto cpu = make_cpu_backend(g, {})->forward(x.data(), 1);
    cudnn::PlanOptions po;
    po.fold_batch_norm = po.fuse_activations = po.fuse_residual_add = true;
    const cudnn::Plan plan = cudnn::lower_graph(g, po);
    const std::vector<float>& want = cpu.at(0).data;
    double scale = 0;
    for (float v : want) {
      ASSERT_TRUE(std::isfinite(v));
      scale = std::max(scale, double(std::abs(v)));
    }
    ASSERT_GT(scale, 0.0);
    // float32 storage: float rounding; fp16, the GPU's default storage: the 1e-2 the issue allows.
    for (const auto& [storage, limit] : {std::pair{DType::F32, 1e-4}, std::pair{DType::F16, 1e-2}}) {
      const auto y = cudnn::run_plan_host(plan, x.data(), 1, storage);
      ASSERT_EQ(y.size(), cpu.size());
      ASSERT_EQ(y[0].size(), want.size());
      double err = 0;
      for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(double(y[0][i]) - double(want[i])));
      std::printf("%-18s plan on the host, %s storage, vs CPU backend: %.3g of max |y| %.3g\n", name,
                  storage == DType::F32 ? "f32" : "f16", err / scale, scale);
      EXPECT_LT(err / scale, limit) << (storage == DType::F32 ? "f32" : "f16");
    }
  }
}

TEST(Backbones, OutputsMatchKeras) {
  const char* dir = std::getenv("STOKER_BACKBONES_DIR");
  if (!dir) GTEST_SKIP() << "STOKER_BACKBONES_DIR (scripts/keras_reference_backbones.py --models) not set";
  int compared = 0;
  for (const char* name : kBackbones) {
    SCOPED_TRACE(name);
    const std::filesystem::path base = std::filesystem::path(dir) / name;
    if (!std::filesystem::exists(base.string() + ".h5")) {  // the script's --only wrote others
      std::printf("%-18s not in %s\n", name, dir);
      continue;
    }
    ++compared;
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
  EXPECT_GT(compared, 0) << "no backbone's files in " << dir;
}

}  // namespace
}  // namespace stoker::trainer
