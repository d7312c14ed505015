// Internal: a layer graph made whole and checked — each node's output shape (infer_shape, from the
// layer table), its weights taken from a store of what a file held (WeightStore) and checked against
// the shapes the layer kind expects (finalize_graph). The model readers (import/) end here; the
// layer table (layers.cpp) uses the shape rules.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <stoker/trainer/graph.hpp>

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

// Infers every node's output shape, takes its weights from the store (checking their shapes) and
// rejects what the backends cannot run. `source` names the file in error messages.
void finalize_graph(Graph& graph, WeightStore& weights, const std::string& source);

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
