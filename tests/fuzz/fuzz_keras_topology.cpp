// Fuzzes Keras topology JSON (the `model_config` of an .h5 file, the `modelTopology` of a TF.js
// model) -> layer graph: parsing, nested Sequential/Functional flattening, shape inference and the
// weight checks (detail::build_model, the step both file formats end in), then Model's cut_at,
// layers() and summary(), and a forward pass when the model is tiny.
//
// Input: the JSON text. Weights are made up by the harness: every weight the layers expect (from
// the shapes the parser infers) is supplied with that shape when it is small, so the fuzzer gets
// past the weight checks. An input whose length is a multiple of 3 is loaded with
// LoadOptions::input_hw = {12, 10}.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "import/import.hpp"

namespace {

using namespace stoker::trainer;

constexpr std::size_t kMaxWeight = 1 << 16;

// Weights for every layer of the parsed graph, with the shapes the layers expect.
detail::WeightStore make_weights(const nlohmann::json& config, const LoadOptions& options) {
  detail::WeightStore store;
  Graph g = detail::parse_keras_topology(config, options);
  for (auto& n : g.nodes) {
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = detail::infer_shape(n, ins);
    const int cin = ins.empty() || ins[0].empty() ? 0 : ins[0].back();
    for (const auto& [key, shape] : expected_weights(n, cin)) {
      std::size_t count = 1;
      bool ok = true;
      for (int d : shape) {
        if (d < 0 || (d > 0 && count > kMaxWeight / static_cast<std::size_t>(d))) ok = false;
        else count *= static_cast<std::size_t>(d);
      }
      if (!ok) continue;
      detail::RawWeight w;
      w.full_name = n.name + "/" + key + ":0";
      w.shape = shape;
      w.data.assign(count, key == "moving_variance" ? 1.0f : 0.25f);
      store.add(std::move(w));
    }
  }
  return store;
}

void exercise(const Model& m) {
  (void)m.summary();
  (void)m.layers();
  (void)m.parameter_count();
  for (const auto& [name, id] : m.graph().model_outputs) (void)m.cut_at(name).summary();
  if (m.graph().outputs.size() != 1 || m.graph().inputs.size() != 1) return;
  // Forward only tiny models: the harness looks for crashes, not for slow convolutions.
  std::size_t work = 0;
  for (const auto& n : m.graph().nodes) {
    const std::size_t c = Tensor::element_count(n.out_shape);
    if (c > 4096) return;
    work += c * (n.parameter_count() + 1);
  }
  if (work > (1u << 22)) return;
  const std::vector<float> x(Tensor::element_count(m.input_shape()), 0.5f);
  (void)m.forward(x.data(), 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json config = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  LoadOptions options;
  if (size % 3 == 0) options.input_hw = {12, 10};
  detail::WeightStore weights;
  try {
    weights = make_weights(config, options);
  } catch (const stoker::Error&) {
  } catch (const nlohmann::json::exception&) {
    // build_model below converts these; the harness's own pass only collects weights.
  }
  try {
    Model m = detail::build_model(config, weights, options, "fuzz/model_config.json");
    exercise(m);
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "loaded: %zu layers\n", m.graph().nodes.size());
  } catch (const stoker::Error& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
