// Model: a layer graph plus its backend; cutting, summaries, format detection.
#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

namespace stoker::trainer {

Model::Model(Graph graph, std::string source)
    : graph_(std::make_shared<const Graph>(std::move(graph))), source_(std::move(source)) {}

Model Model::cut_at(const std::string& layer_name) const {
  if (!graph_) throw InvalidArgument("cut_at('" + layer_name + "'): the model is empty");
  const Graph& g = *graph_;
  const int out = g.find(layer_name);
  if (out < 0)
    throw InvalidArgument("cut_at: model '" + g.name + "' has no layer or nested model '" + layer_name + "'");
  std::vector<bool> keep(g.nodes.size(), false);
  keep[static_cast<std::size_t>(out)] = true;
  for (int i = out; i >= 0; --i)
    if (keep[static_cast<std::size_t>(i)])
      for (int in : g.nodes[static_cast<std::size_t>(i)].inputs) keep[static_cast<std::size_t>(in)] = true;
  std::vector<int> remap(g.nodes.size(), -1);
  Graph cut;
  cut.name = g.name + "@" + layer_name;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) continue;
    LayerNode n = g.nodes[i];
    for (int& in : n.inputs) in = remap[static_cast<std::size_t>(in)];
    remap[i] = static_cast<int>(cut.nodes.size());
    cut.nodes.push_back(std::move(n));
  }
  for (int in : g.inputs)
    if (keep[static_cast<std::size_t>(in)]) cut.inputs.push_back(remap[static_cast<std::size_t>(in)]);
  cut.outputs = {remap[static_cast<std::size_t>(out)]};
  for (const auto& [name, id] : g.model_outputs)
    if (keep[static_cast<std::size_t>(id)]) cut.model_outputs[name] = remap[static_cast<std::size_t>(id)];
  return Model(std::move(cut), source_);
}

std::vector<LayerInfo> Model::layers() const {
  std::vector<LayerInfo> out;
  if (!graph_) return out;
  for (const auto& n : graph_->nodes) {
    LayerInfo info{n.name, n.keras_class, n.out_shape, n.parameter_count(), {}};
    for (int i : n.inputs) info.inputs.push_back(graph_->nodes[static_cast<std::size_t>(i)].name);
    out.push_back(std::move(info));
  }
  return out;
}

std::size_t Model::parameter_count() const { return graph_ ? graph_->parameter_count() : 0; }

std::string Model::summary() const {
  std::ostringstream s;
  if (!graph_) return "(empty model)\n";
  s << "Model: " << graph_->name;
  if (!source_.empty()) s << "  (" << source_ << ")";
  s << "\n";
  s << std::left << std::setw(40) << "Layer" << std::setw(24) << "Class" << std::setw(22) << "Output shape"
    << std::right << std::setw(12) << "Param #"
    << "  Inputs\n";
  s << std::string(110, '-') << "\n";
  for (const auto& info : layers()) {
    std::vector<int> shape = info.output_shape;
    shape.insert(shape.begin(), -1);
    std::string ins;
    for (const auto& i : info.inputs) ins += (ins.empty() ? "" : ", ") + i;
    s << std::left << std::setw(40) << info.name << std::setw(24) << info.keras_class << std::setw(22)
      << shape_to_string(shape) << std::right << std::setw(12) << info.parameters << "  " << ins << "\n";
  }
  s << std::string(110, '-') << "\n";
  s << "Layers: " << graph_->nodes.size() << "   Parameters: " << parameter_count() << "\n";
  s << "Outputs:";
  for (int o : graph_->outputs) s << " " << graph_->nodes[static_cast<std::size_t>(o)].name;
  s << "\n";
  return s.str();
}

const std::vector<int>& Model::input_shape() const {
  if (!graph_ || graph_->inputs.empty()) throw InvalidArgument("input_shape: the model has no input");
  if (graph_->inputs.size() != 1)
    throw InvalidArgument("input_shape: model '" + graph_->name + "' has " + std::to_string(graph_->inputs.size()) +
                          " inputs; only single-input models are supported");
  return graph_->nodes[static_cast<std::size_t>(graph_->inputs[0])].out_shape;
}

std::vector<int> Model::output_shape() const {
  if (!graph_ || graph_->outputs.size() != 1)
    throw InvalidArgument("output_shape: the model does not have exactly one output");
  return graph_->nodes[static_cast<std::size_t>(graph_->outputs[0])].out_shape;
}

void Model::set_backend(std::shared_ptr<const Backend> backend) {
  std::lock_guard<std::mutex> lock(*backend_mutex_);
  backend_ = std::move(backend);
}

const Backend& Model::backend() const {
  if (!graph_) throw InvalidArgument("the model is empty");
  std::lock_guard<std::mutex> lock(*backend_mutex_);
  if (!backend_) backend_ = make_cpu_backend(*graph_);
  return *backend_;
}

std::vector<Tensor> Model::forward_all(const float* input, int batch) const {
  if (batch < 0) throw InvalidArgument("forward: batch must be >= 0, received " + std::to_string(batch));
  if (batch > 0 && !input) throw InvalidArgument("forward: input is null");
  return backend().forward(input, batch);
}

Tensor Model::forward(const float* input, int batch) const {
  if (graph_ && graph_->outputs.size() != 1)
    throw InvalidArgument("forward: model '" + graph_->name + "' has " + std::to_string(graph_->outputs.size()) +
                          " outputs; use forward_all() or cut_at()");
  auto outs = forward_all(input, batch);
  return std::move(outs.front());
}

Model load_model(const std::filesystem::path& path, const LoadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_tfjs(path / "model.json", options);
  if (!std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such file");
  if (path.extension() == ".json") return load_tfjs(path, options);
  // HDF5 files start with the signature \x89HDF\r\n\x1a\n (at offset 0 unless a user block precedes it).
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  if (in.gcount() == 8 && sig[0] == '{') return load_tfjs(path, options);
  if (path.extension() == ".keras" ||
      (in.gcount() >= 4 && sig[0] == 'P' && sig[1] == 'K' && sig[2] == 3 && sig[3] == 4))
    return load_keras3(path, options);  // a zip archive
  return load_keras_h5(path, options);
}

}  // namespace stoker::trainer
