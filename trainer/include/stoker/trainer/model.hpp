// A Keras model imported into a layer graph, plus the backend that runs it.
//
//   auto model = stoker::trainer::load_model("mobilenet_v2_0.35_224_3class.h5");   // or model.json
//   auto backbone = model.cut_at("sequential_9");          // a layer or nested-model name
//   std::cout << backbone.summary();
//   Tensor features = backbone.forward(nhwc_floats, batch);  // {batch, 1280}
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <stoker/trainer/backend.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer {

struct LoadOptions {
  // The spatial input size, e.g. {224, 224}: replaces what the file says (a fully convolutional
  // backbone runs at any size) and is required when the file leaves it unknown (null). Empty: the
  // file's own size.
  std::vector<int> input_hw;
};

// One row of Model::layers(): what `stoker inspect` prints.
struct LayerInfo {
  std::string name;
  std::string keras_class;
  std::vector<int> output_shape;  // per sample
  std::size_t parameters = 0;
  std::vector<std::string> inputs;
};

class Model {
 public:
  Model() = default;
  explicit Model(Graph graph, std::string source = {});

  // A model whose output is the named layer (or nested model); the layers that do not feed it are
  // dropped. Weights are shared, not copied. Throws InvalidArgument naming the layer when absent.
  Model cut_at(const std::string& layer_name) const;

  std::vector<LayerInfo> layers() const;
  std::string summary() const;  // a Keras-like table: layer, class, output shape, parameters
  std::size_t parameter_count() const;

  const std::vector<int>& input_shape() const;  // per sample, {H, W, C}
  std::vector<int> output_shape() const;        // per sample, of the single output
  const Graph& graph() const { return *graph_; }
  const std::string& source() const { return source_; }  // the file it came from

  // `input` holds batch × H × W × C floats (already preprocessed). forward() requires a single
  // output; forward_all() returns every output in order.
  Tensor forward(const float* input, int batch) const;
  std::vector<Tensor> forward_all(const float* input, int batch) const;

  // Replaces the backend (default, or null: the CPU backend, compiled lazily on the first forward).
  void set_backend(std::shared_ptr<const Backend> backend);
  const Backend& backend() const;

 private:
  std::shared_ptr<const Graph> graph_;
  std::string source_;
  mutable std::shared_ptr<const Backend> backend_;
  mutable std::shared_ptr<std::mutex> backend_mutex_ = std::make_shared<std::mutex>();
};

// Detects the format: a directory or a file named *.json is a TF.js layers model (model.json +
// weight shards); anything else is opened as a Keras HDF5 file (topology in the `model_config`
// attribute, weights under `model_weights`). Throws IoError for unreadable files and
// InvalidArgument for unsupported layers or weights with a wrong shape (naming the layer).
Model load_model(const std::filesystem::path& path, const LoadOptions& options = {});
Model load_keras_h5(const std::filesystem::path& path, const LoadOptions& options = {});
// A Keras 3 `.keras` file (zip: config.json + model.weights.h5).
Model load_keras3(const std::filesystem::path& path, const LoadOptions& options = {});
// Writes `graph` (one input) as a Keras 2 HDF5 full model — a Functional topology in
// `model_config` and the weights in Keras' layout — that tf_keras.models.load_model opens and that
// load_keras_h5 reads back. Layers Keras has no name for are written as equivalent standard
// layers (a capped or shifted ReLU as a ReLU layer, ScaledAdd as Rescaling + Add). The file is
// written under a temporary name and renamed. IoError when it cannot be written.
void save_keras_h5(const Graph& graph, const std::filesystem::path& file);
Model load_tfjs(const std::filesystem::path& model_json, const LoadOptions& options = {});

}  // namespace stoker::trainer
