// A layer graph as a Keras 2 HDF5 full model, the layout tf_keras' legacy h5 format reads: the
// Functional topology JSON in the root attribute `model_config`, and under `model_weights` one
// group per layer (in the topology's order) whose `weight_names` list `<layer>/<weight>:0`
// datasets in the order Keras' layers create their weights. Each node's Keras layers come from its
// kind's Keras form (layers.hpp); this file writes them as HDF5.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/core/atomic_file.hpp>
#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "graph/layers.hpp"
#include "hdf5_handles.hpp"
#include "read_in_child.hpp"

namespace stoker::trainer {
namespace {

using detail::Hid;
using detail::KerasLayer;
using detail::QuietHdf5;
using nlohmann::json;

constexpr const char* kKerasVersion = "2.15.0";  // the tf_keras line whose h5 layout this writes

// A Keras layer name as an HDF5 path component.
std::string checked_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw InvalidArgument("save_keras_h5: layer name '" + name + "' cannot be a Keras layer name in an .h5 file");
  return name;
}

void write_string_attribute(hid_t obj, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = value.c_str();
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), &p) < 0)
    throw IoError(std::string("save_keras_h5: cannot write attribute '") + name + "'");
}

// A list of names as Keras writes it: fixed-length byte strings, or an empty float array.
void write_name_list(hid_t obj, const char* name, const std::vector<std::string>& values) {
  const hsize_t count = values.size();
  if (values.empty()) {
    Hid space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    Hid attr(H5Acreate2(obj, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) throw IoError(std::string("save_keras_h5: cannot write attribute '") + name + "'");
    return;
  }
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::vector<char> buf(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), buf.begin() + i * width);
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), width);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  Hid space(H5Screate_simple(1, &count, nullptr), H5Sclose);
  Hid attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), buf.data()) < 0)
    throw IoError(std::string("save_keras_h5: cannot write attribute '") + name + "'");
}

void write_weight(hid_t group, const std::string& name, const Weight& w) {
  std::vector<hsize_t> dims(w.shape.begin(), w.shape.end());
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid ds(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok() || (w.size() && H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.ptr()) < 0))
    throw IoError("save_keras_h5: cannot write weight '" + name + "'");
}

// The model's name as Keras accepts a root name scope ([A-Za-z0-9.][A-Za-z0-9_.-]*): a cut
// model's "model@layer" loads but cannot predict in tf_keras or Keras 3.
std::string keras_model_name(const std::string& name) {
  std::string out = name.empty() ? "model" : name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') c = '_';
  if (!std::isalnum(static_cast<unsigned char>(out[0])) && out[0] != '.') out.insert(0, "m");
  return out;
}

}  // namespace

void save_keras_h5(const Graph& graph, const std::filesystem::path& file) {
  if (graph.inputs.size() != 1 || graph.outputs.empty())
    throw InvalidArgument("save_keras_h5: the graph needs one input and an output");
  // The topology, in the graph's (topological) order.
  std::vector<KerasLayer> layers;
  for (const LayerNode& n : graph.nodes) {
    checked_name(n.name);
    std::vector<std::string> inputs;
    for (int i : n.inputs) inputs.push_back(detail::keras_output_name(graph.nodes.at(static_cast<std::size_t>(i))));
    for (KerasLayer& k : detail::keras_layers(n, inputs)) layers.push_back(std::move(k));
  }
  json config = {{"name", keras_model_name(graph.name)}, {"trainable", true}};
  config["layers"] = json::array();
  for (const KerasLayer& k : layers) {
    json inbound = json::array();
    if (!k.inputs.empty()) {
      json node = json::array();
      for (const auto& in : k.inputs) node.push_back({in, 0, 0, json::object()});
      inbound.push_back(node);
    }
    config["layers"].push_back(
        {{"class_name", k.class_name}, {"config", k.config}, {"name", k.config["name"]}, {"inbound_nodes", inbound}});
  }
  config["input_layers"] = {{graph.nodes.at(static_cast<std::size_t>(graph.inputs[0])).name, 0, 0}};
  config["output_layers"] = json::array();
  for (int o : graph.outputs)
    config["output_layers"].push_back({detail::keras_output_name(graph.nodes.at(static_cast<std::size_t>(o))), 0, 0});
  const json model_config = {
      {"class_name", "Functional"}, {"config", config}, {"keras_version", kKerasVersion}, {"backend", "tensorflow"}};

  // Built in memory by libhdf5's core driver and written by write_file_atomically: the disk is
  // never libhdf5's to fail on. (A file libhdf5 cannot flush stays open inside it, and it crashes
  // closing that file again when the process exits.)
  std::string image;
  {
    const std::lock_guard lock(detail::hdf5_mutex());
    QuietHdf5 quiet;
    const std::string where = file.string();
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/0) < 0)
      throw IoError(where + ": cannot set up an HDF5 file in memory");
    Hid f(H5Fcreate(where.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!f.ok()) throw IoError(where + ": cannot create");
    write_string_attribute(f.get(), "backend", "tensorflow");
    write_string_attribute(f.get(), "keras_version", kKerasVersion);
    write_string_attribute(f.get(), "model_config", model_config.dump());
    Hid weights(H5Gcreate2(f.get(), "model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!weights.ok()) throw IoError(where + ": cannot create the weights group");
    write_string_attribute(weights.get(), "backend", "tensorflow");
    write_string_attribute(weights.get(), "keras_version", kKerasVersion);
    std::vector<std::string> names;
    for (const KerasLayer& k : layers) {
      const std::string name = k.config["name"];
      names.push_back(name);
      Hid group(H5Gcreate2(weights.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      if (!group.ok()) throw IoError(where + ": cannot create the weights group of '" + name + "'");
      std::vector<std::string> weight_names;
      if (!k.weights.empty()) {
        Hid inner(H5Gcreate2(group.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        for (const auto& [wname, w] : k.weights) {
          write_weight(inner.get(), wname + ":0", *w);
          weight_names.push_back(name + "/" + wname + ":0");
        }
      }
      write_name_list(group.get(), "weight_names", weight_names);
    }
    write_name_list(weights.get(), "layer_names", names);
    if (H5Fflush(f.get(), H5F_SCOPE_GLOBAL) < 0) throw IoError(where + ": cannot flush");
    const ssize_t size = H5Fget_file_image(f.get(), nullptr, 0);
    if (size < 0) throw IoError(where + ": cannot read back the HDF5 image");
    image.resize(static_cast<std::size_t>(size));
    if (H5Fget_file_image(f.get(), image.data(), image.size()) != size)
      throw IoError(where + ": cannot read back the HDF5 image");
  }
  write_file_atomically(file, image);  // beside the target, synced and renamed over it
}

}  // namespace stoker::trainer
