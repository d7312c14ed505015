// Internal: the pieces model import is made of (topology parsing, weight stores, finalising).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/model.hpp>

namespace stoker::trainer::detail {

struct RawWeight {
  std::string full_name;  // as stored in the file, e.g. "sequential_9/Conv1/kernel:0"
  std::vector<int> shape;
  std::vector<float> data;
};

// Weights keyed by "<layer>/<weight>" (the last two parts of the stored name, without ":0").
class WeightStore {
 public:
  void add(RawWeight weight);
  // nullptr when absent; throws InvalidArgument when the key is ambiguous.
  RawWeight* find(const std::string& layer, const std::string& weight);
  std::size_t size() const { return weights_.size(); }

 private:
  std::map<std::string, std::vector<RawWeight>> weights_;
};

// "a/b/conv/kernel:0" -> "conv/kernel"
std::string weight_key(const std::string& full_name);

// Model JSON nests a few levels per nested model; deeper JSON is refused while parsing, so that
// the recursive walks over it (and nlohmann's own recursive dump and copy) stay within the stack.
inline constexpr int kMaxJsonDepth = 256;
// Models nested inside models (Sequential in Functional in ...): real models use two or three.
inline constexpr int kMaxModelDepth = 32;

// `text` (the JSON of a model file: model_config, config.json, model.json) parsed with its nesting
// bounded. InvalidArgument "<where>: <what> is not valid JSON: ..." or "... is nested deeper than ...".
nlohmann::json parse_model_json(std::string_view text, const std::string& where, const std::string& what);

// Called from a model loader's catch (...): rethrows the exception in flight as a stoker::Error
// naming `where` (a stoker::Error as it is; a JSON type error, a failed allocation, any other
// std::exception as IoError, InvalidArgument or BadAlloc), so that no file can make a loader throw
// anything else.
[[noreturn]] void rethrow_as_load_error(const std::string& where);

// Parses a Keras model config ({"class_name": "Sequential" | "Functional" | "Model", "config": ...}),
// flattening nested models. Nodes get parameters and inputs; shapes and weights come in finalize().
Graph parse_keras_topology(const nlohmann::json& model_config, const LoadOptions& options);

// Infers every node's output shape, takes its weights from the store (checking their shapes) and
// rejects what the backends cannot run. `source` names the file in error messages.
void finalize_graph(Graph& graph, WeightStore& weights, const std::string& source);

// Both file formats end here: topology + weights -> a checked Model. Errors name `source`.
Model build_model(const nlohmann::json& model_config, WeightStore& weights, const LoadOptions& options,
                  const std::string& source);

// Output shape of a node from its inputs' shapes (used by finalize and by graph tests).
std::vector<int> infer_shape(const LayerNode& node, const std::vector<std::vector<int>>& inputs);

// Per-sample tensors are indexed with int: every dimension >= 1 and their product <= INT_MAX.
inline constexpr std::int64_t kMaxElements = std::numeric_limits<int>::max();

// Throws InvalidArgument "layer '<name>' (<class>): <what>".
[[noreturn]] void fail(const LayerNode& node, const std::string& what);

// TensorFlow's output size and leading pad for one spatial dimension.
struct PadInfo {
  int out = 0;
  int pad_before = 0;
  int pad_after = 0;
};
PadInfo tf_padding(int in, int kernel, int stride, int dilation, Padding padding);

}  // namespace stoker::trainer::detail
