// A layer graph as a Keras 2 HDF5 full model, the layout tf_keras' legacy h5 format reads: the
// Functional topology JSON in the root attribute `model_config`, and under `model_weights` one
// group per layer (in the topology's order) whose `weight_names` list `<layer>/<weight>:0`
// datasets in the order Keras' layers create their weights.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/core/atomic_file.hpp>
#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "hdf5_handles.hpp"

namespace stoker::trainer {
namespace {

using detail::Hid;
using detail::QuietHdf5;
using nlohmann::json;

constexpr const char* kKerasVersion = "2.15.0";  // the tf_keras line whose h5 layout this writes

const char* padding_name(Padding p) { return p == Padding::Same ? "same" : "valid"; }

// A fused activation Keras can name; a ReLU with a cap, slope or threshold is a separate layer.
bool nameable(const ActivationSpec& a) {
  return a.kind != ActKind::ReLU ||
         (a.max_value == std::numeric_limits<float>::infinity() && a.negative_slope == 0 && a.threshold == 0);
}
std::string activation_name(const ActivationSpec& a) { return a.kind == ActKind::ReLU ? "relu" : to_string(a); }

json relu_config(const ActivationSpec& a) {
  return {{"max_value", a.max_value == std::numeric_limits<float>::infinity() ? json(nullptr) : json(a.max_value)},
          {"negative_slope", a.negative_slope},
          {"threshold", a.threshold}};
}

struct KerasLayer {
  std::string class_name;
  json config;
  std::vector<std::string> inputs;
  std::vector<std::pair<std::string, const Weight*>> weights;  // Keras' creation order
};

// The Keras layers of one node (two when a fused activation or a scale needs a layer of its own).
std::vector<KerasLayer> keras_layers(const LayerNode& n, const std::vector<std::string>& inputs) {
  json c = {{"name", n.name}, {"trainable", true}, {"dtype", "float32"}};
  KerasLayer l{"", {}, inputs, {}};
  auto with_weights = [&](std::initializer_list<const char*> names) {
    for (const char* w : names)
      if (const Weight* p = n.weight(w)) l.weights.emplace_back(w, p);
  };
  bool split_activation = false;
  switch (n.kind) {
    case LayerKind::Conv2D:
    case LayerKind::DepthwiseConv2D: {
      const bool depthwise = n.kind == LayerKind::DepthwiseConv2D;
      l.class_name = depthwise ? "DepthwiseConv2D" : "Conv2D";
      if (depthwise) c["depth_multiplier"] = n.depth_multiplier;
      else c["filters"] = n.filters, c["groups"] = 1;
      c["kernel_size"] = {n.kernel_h, n.kernel_w};
      c["strides"] = {n.stride_h, n.stride_w};
      c["padding"] = padding_name(n.padding);
      c["data_format"] = "channels_last";
      c["dilation_rate"] = {n.dilation_h, n.dilation_w};
      c["use_bias"] = n.use_bias;
      split_activation = !nameable(n.activation);
      c["activation"] = split_activation ? "linear" : activation_name(n.activation);
      with_weights({depthwise ? "depthwise_kernel" : "kernel", "bias"});
      break;
    }
    case LayerKind::SeparableConv2D:
      l.class_name = "SeparableConv2D";
      c["filters"] = n.filters;
      c["kernel_size"] = {n.kernel_h, n.kernel_w};
      c["strides"] = {n.stride_h, n.stride_w};
      c["padding"] = padding_name(n.padding);
      c["data_format"] = "channels_last";
      c["dilation_rate"] = {n.dilation_h, n.dilation_w};
      c["depth_multiplier"] = n.depth_multiplier;
      c["use_bias"] = n.use_bias;
      split_activation = !nameable(n.activation);
      c["activation"] = split_activation ? "linear" : activation_name(n.activation);
      with_weights({"depthwise_kernel", "pointwise_kernel", "bias"});
      break;
    case LayerKind::Normalization:
      l.class_name = "Normalization";
      c["axis"] = {n.axis};
      c["invert"] = false;
      c["mean"] = nullptr;
      c["variance"] = nullptr;
      with_weights({"mean", "variance", "count"});
      break;
    case LayerKind::LayerNormalization:
      l.class_name = "LayerNormalization";
      c["axis"] = {n.axis};
      c["epsilon"] = n.epsilon;
      c["center"] = n.use_bias;
      c["scale"] = n.scale;
      with_weights({"gamma", "beta"});
      break;
    case LayerKind::Dense:
      l.class_name = "Dense";
      c["units"] = n.filters;
      c["use_bias"] = n.use_bias;
      split_activation = !nameable(n.activation);
      c["activation"] = split_activation ? "linear" : activation_name(n.activation);
      with_weights({"kernel", "bias"});
      break;
    case LayerKind::BatchNormalization:
      l.class_name = "BatchNormalization";
      c["axis"] = n.axis;
      c["momentum"] = 0.99;
      c["epsilon"] = n.epsilon;
      c["center"] = n.use_bias;
      c["scale"] = n.scale;
      with_weights({"gamma", "beta", "moving_mean", "moving_variance"});
      break;
    case LayerKind::Activation:
      if (n.activation.kind == ActKind::ReLU && n.keras_class == "LeakyReLU" && n.activation.threshold == 0 &&
          n.activation.max_value == std::numeric_limits<float>::infinity()) {
        l.class_name = "LeakyReLU";
        c["alpha"] = n.activation.negative_slope;
      } else if (n.activation.kind == ActKind::ReLU && !nameable(n.activation)) {
        l.class_name = "ReLU";
        c.update(relu_config(n.activation));
      } else {
        l.class_name = "Activation";
        c["activation"] = activation_name(n.activation);
      }
      break;
    case LayerKind::ZeroPadding2D:
      l.class_name = "ZeroPadding2D";
      c["padding"] = {{n.pad_top, n.pad_bottom}, {n.pad_left, n.pad_right}};
      c["data_format"] = "channels_last";
      break;
    case LayerKind::Cropping2D:
      l.class_name = "Cropping2D";
      c["cropping"] = {{n.crop_top, n.crop_bottom}, {n.crop_left, n.crop_right}};
      c["data_format"] = "channels_last";
      break;
    case LayerKind::Add: l.class_name = "Add"; break;
    case LayerKind::ScaledAdd: {
      // inputs[0] + inputs[1] * scale as Rescaling(scale) + Add: the same two float operations,
      // with layers every Keras has (InceptionResNetV2's CustomScaleLayer is not registered there).
      KerasLayer scale{"Rescaling",
                       {{"name", n.name + "_scale"},
                        {"trainable", true},
                        {"dtype", "float32"},
                        {"scale", n.residual_scale},
                        {"offset", 0.0}},
                       {inputs.at(1)},
                       {}};
      KerasLayer add{"Add", c, {inputs.at(0), n.name + "_scale"}, {}};
      return {scale, add};
    }
    case LayerKind::Concatenate:
      l.class_name = "Concatenate";
      c["axis"] = n.axis;
      break;
    case LayerKind::MaxPooling2D:
    case LayerKind::AveragePooling2D:
      l.class_name = n.kind == LayerKind::MaxPooling2D ? "MaxPooling2D" : "AveragePooling2D";
      c["pool_size"] = {n.kernel_h, n.kernel_w};
      c["strides"] = {n.stride_h, n.stride_w};
      c["padding"] = padding_name(n.padding);
      c["data_format"] = "channels_last";
      break;
    case LayerKind::GlobalAveragePooling2D:
      l.class_name = "GlobalAveragePooling2D";
      c["data_format"] = "channels_last";
      c["keepdims"] = n.keepdims;
      break;
    case LayerKind::GlobalMaxPooling2D:
      l.class_name = "GlobalMaxPooling2D";
      c["data_format"] = "channels_last";
      c["keepdims"] = n.keepdims;
      break;
    case LayerKind::Reshape:
      l.class_name = "Reshape";
      c["target_shape"] = n.target_shape;
      break;
    case LayerKind::Multiply: l.class_name = "Multiply"; break;
    case LayerKind::Flatten:
      l.class_name = "Flatten";
      c["data_format"] = "channels_last";
      break;
    case LayerKind::Dropout:
      l.class_name = "Dropout";
      c["rate"] = n.rate;
      break;
    case LayerKind::Rescaling:
      l.class_name = "Rescaling";
      if (n.channel_multipliers.empty()) {
        c["scale"] = n.multiplier;
        c["offset"] = n.offset;
      } else {
        c["scale"] = n.channel_multipliers;
        c["offset"] = n.channel_offsets;
      }
      break;
    case LayerKind::LayerScale:  // Keras Applications' ConvNeXt layer (keras.applications.convnext.LayerScale)
      l.class_name = "LayerScale";
      c["init_values"] = 1e-6;
      if (const Weight* g = n.weight("gamma")) c["projection_dim"] = static_cast<int>(g->size());
      with_weights({"gamma"});
      break;
    case LayerKind::Input: break;  // written by the caller
  }
  l.config = c;
  if (!split_activation) return {l};
  KerasLayer act{"ReLU", {{"name", n.name + "_activation"}, {"trainable", true}, {"dtype", "float32"}}, {n.name}, {}};
  act.config.update(relu_config(n.activation));
  return {l, act};
}

// The Keras layer that holds a node's value: its last one when keras_layers() split it in two.
std::string output_name(const LayerNode& n) {
  const bool fused = n.kind == LayerKind::Conv2D || n.kind == LayerKind::DepthwiseConv2D ||
                     n.kind == LayerKind::SeparableConv2D || n.kind == LayerKind::Dense;
  return fused && !nameable(n.activation) ? n.name + "_activation" : n.name;
}

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

}  // namespace

void save_keras_h5(const Graph& graph, const std::filesystem::path& file) {
  if (graph.inputs.size() != 1 || graph.outputs.empty())
    throw InvalidArgument("save_keras_h5: the graph needs one input and an output");
  // The topology, in the graph's (topological) order.
  std::vector<KerasLayer> layers;
  for (const LayerNode& n : graph.nodes) {
    checked_name(n.name);
    if (n.kind == LayerKind::Input) {
      json shape = json::array({nullptr});
      for (int d : n.out_shape) shape.push_back(d);
      layers.push_back(
          {"InputLayer",
           {{"batch_input_shape", shape}, {"dtype", "float32"}, {"sparse", false}, {"ragged", false}, {"name", n.name}},
           {},
           {}});
      continue;
    }
    std::vector<std::string> inputs;
    for (int i : n.inputs) inputs.push_back(output_name(graph.nodes.at(static_cast<std::size_t>(i))));
    for (KerasLayer& k : keras_layers(n, inputs)) layers.push_back(std::move(k));
  }
  json config = {{"name", graph.name.empty() ? "model" : graph.name}, {"trainable", true}};
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
    config["output_layers"].push_back({output_name(graph.nodes.at(static_cast<std::size_t>(o))), 0, 0});
  const json model_config = {
      {"class_name", "Functional"}, {"config", config}, {"keras_version", kKerasVersion}, {"backend", "tensorflow"}};

  // Written beside the target, synced and renamed over it when complete.
  replace_file_atomically(file, [&](const std::filesystem::path& tmp) {
    QuietHdf5 quiet;
    Hid f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!f.ok()) throw IoError(tmp.string() + ": cannot create");
    write_string_attribute(f.get(), "backend", "tensorflow");
    write_string_attribute(f.get(), "keras_version", kKerasVersion);
    write_string_attribute(f.get(), "model_config", model_config.dump());
    Hid weights(H5Gcreate2(f.get(), "model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!weights.ok()) throw IoError(tmp.string() + ": cannot create the weights group");
    write_string_attribute(weights.get(), "backend", "tensorflow");
    write_string_attribute(weights.get(), "keras_version", kKerasVersion);
    std::vector<std::string> names;
    for (const KerasLayer& k : layers) {
      const std::string name = k.config["name"];
      names.push_back(name);
      Hid group(H5Gcreate2(weights.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      if (!group.ok()) throw IoError(tmp.string() + ": cannot create the weights group of '" + name + "'");
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
    if (H5Fflush(f.get(), H5F_SCOPE_GLOBAL) < 0) throw IoError(tmp.string() + ": cannot flush");
  });
}

}  // namespace stoker::trainer
