// Keras topology JSON -> flattened layer graph: models nested in models are flattened, and each
// leaf layer becomes a node by its kind's Keras form (layers.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <stoker/core/error.hpp>

#include "graph/keras_json.hpp"
#include "graph/layers.hpp"
#include "import.hpp"

namespace stoker::trainer::detail {
namespace {

using nlohmann::json;

bool is_model_class(const std::string& c) { return c == "Sequential" || c == "Functional" || c == "Model"; }

std::string layer_name_of(const json& layer) {
  if (layer.is_object() && layer.contains("name") && layer["name"].is_string()) return layer["name"].get<std::string>();
  if (layer.is_object() && layer.contains("config") && layer["config"].is_object() &&
      layer["config"].contains("name") && layer["config"]["name"].is_string())
    return layer["config"]["name"].get<std::string>();
  return {};
}

// A layer's name for messages: its name, else its position in its model.
std::string layer_label(const json& layer, std::size_t index, const std::string& model) {
  const std::string name = layer_name_of(layer);
  if (!name.empty()) return name;
  return "#" + std::to_string(index) + (model.empty() ? "" : " of model '" + model + "'");
}

// A Keras 2 tensor reference [layer, node index, tensor index] (a TFOpLambda's second operand).
bool is_tensor_ref(const json& v) { return v.is_array() && v.size() >= 3 && v[0].is_string(); }

// TFOpLambda: a TensorFlow function tf_keras recorded by name when a model applied it to a Keras
// tensor (MobileNetV3's hard_sigmoid is tf.__operators__.add(x, 3.0) -> ReLU(6) ->
// tf.math.multiply(., 1/6); ConvNeXt's residual is tf.__operators__.add(x, y)). The other
// arguments are in the call's kwargs; `tensor_inputs` counts the Keras tensors among them.
LayerNode make_tf_op_node(const json& cfg, const std::string& name, const json& kwargs, std::size_t tensor_inputs) {
  const std::string fn = cfg.value("function", std::string());
  LayerNode n;
  n.name = name;
  n.keras_class = "TFOpLambda";
  const json* y = kwargs.is_object() && kwargs.contains("y") ? &kwargs["y"] : nullptr;
  const bool y_number = y && y->is_number();
  const bool y_tensor = y && is_tensor_ref(*y) && tensor_inputs == 2;
  auto activation = [&](ActKind kind, float max_value) {
    n.kind = LayerKind::Activation;
    n.activation.kind = kind;
    n.activation.max_value = max_value;
  };
  const float inf = std::numeric_limits<float>::infinity();
  if ((fn == "__operators__.add" || fn == "math.add") && y_number) {
    n.kind = LayerKind::Rescaling, n.offset = y->get<float>();
  } else if ((fn == "__operators__.add" || fn == "math.add") && y_tensor) {
    n.kind = LayerKind::Add;
  } else if (fn == "math.subtract" && y_number) {
    n.kind = LayerKind::Rescaling, n.offset = -y->get<float>();
  } else if (fn == "math.multiply" && y_number) {
    n.kind = LayerKind::Rescaling, n.multiplier = y->get<float>();
  } else if (fn == "math.multiply" && y_tensor) {
    n.kind = LayerKind::Multiply;
  } else if ((fn == "math.truediv" || fn == "math.divide") && y_number && y->get<float>() != 0.0f) {
    n.kind = LayerKind::Rescaling, n.multiplier = 1.0f / y->get<float>();
  } else if (fn == "nn.relu" && !y) {
    activation(ActKind::ReLU, inf);
  } else if (fn == "nn.relu6" && !y) {
    activation(ActKind::ReLU, 6.0f);
  } else if ((fn == "math.sigmoid" || fn == "nn.sigmoid") && !y) {
    activation(ActKind::Sigmoid, inf);
  } else if ((fn == "nn.silu" || fn == "nn.swish") && !y) {
    activation(ActKind::Swish, inf);
  } else if (fn == "math.tanh" && !y) {
    activation(ActKind::Tanh, inf);
  } else {
    const std::string args = kwargs.is_object() ? kwargs.dump().substr(0, 100) : "{}";
    fail(name, "TFOpLambda op '" + fn + "' with arguments " + args +
                   " is not supported (supported: __operators__.add, math.add, math.subtract, math.multiply, "
                   "math.truediv with a number; __operators__.add, math.add, math.multiply of two tensors; "
                   "nn.relu, nn.relu6, math.sigmoid, nn.silu, math.tanh)");
  }
  return n;
}

// batch_input_shape [null, H, W, C] (Keras 2) or batch_shape (Keras 3) -> {H, W, C}
std::vector<int> input_shape_of(const json& cfg, const std::string& name, const LoadOptions& options) {
  const json* s = nullptr;
  if (cfg.contains("batch_input_shape")) s = &cfg["batch_input_shape"];
  else if (cfg.contains("batch_shape")) s = &cfg["batch_shape"];
  if (!s || !s->is_array() || s->size() < 2) fail(name, "input has no batch_input_shape");
  std::vector<int> shape;
  for (std::size_t i = 1; i < s->size(); ++i) {
    const json& d = (*s)[i];
    if (d.is_number_integer()) {
      const int v = to_int(d, name, "input dimension");
      if (v < 1) fail(name, "input shape " + s->dump() + " has a dimension < 1");
      shape.push_back(v);
    } else if (shape.size() < 2 && options.input_hw.size() == 2) {
      shape.push_back(options.input_hw[shape.size()]);
    } else {
      fail(name, "input shape " + s->dump() + " has an unknown dimension; pass LoadOptions::input_hw");
    }
  }
  if (shape.size() == 3 && options.input_hw.size() == 2) shape[0] = options.input_hw[0], shape[1] = options.input_hw[1];
  return shape;
}

// One tensor reference of an inbound node: (layer name, node index, tensor index).
struct Ref {
  std::string layer;
  int node = 0;
  int tensor = 0;
};

void collect_keras3_refs(const json& v, std::vector<Ref>& out) {
  if (v.is_object()) {
    if (v.value("class_name", std::string()) == "__keras_tensor__" && v.contains("config")) {
      const json& h = v["config"].at("keras_history");  // .at(): const operator[] does not check the index
      out.push_back({h.at(0).get<std::string>(), to_int(h.at(1), "", "keras_history node index"),
                     to_int(h.at(2), "", "keras_history tensor index")});
      return;
    }
    for (const auto& [k, e] : v.items()) collect_keras3_refs(e, out);
  } else if (v.is_array()) {
    for (const auto& e : v) collect_keras3_refs(e, out);
  }
}

std::vector<Ref> parse_inbound_node(const json& node) {
  std::vector<Ref> refs;
  if (node.is_array() && !node.empty() && node[0].is_string()) {  // a TFOpLambda's: [name, node, tensor, kwargs]
    refs.push_back({node[0].get<std::string>(), to_int(node.at(1), "", "inbound node index"),
                    to_int(node.at(2), "", "inbound tensor index")});
  } else if (node.is_array()) {  // Keras 2: [[name, node_index, tensor_index, kwargs], ...]
    for (const auto& r : node) {
      if (r.is_array() && r.size() >= 3 && r[0].is_string())
        refs.push_back({r[0].get<std::string>(), to_int(r[1], "", "inbound node index"),
                        to_int(r[2], "", "inbound tensor index")});
    }
  } else if (node.is_object()) {  // Keras 3: {"args": [...], "kwargs": {...}}
    collect_keras3_refs(node, refs);
  }
  return refs;
}

// The keyword arguments of a layer call: Keras 2 writes them as the 4th element of the (first)
// inbound reference, Keras 3 as "kwargs".
json call_kwargs(const json& node) {
  if (node.is_array() && node.size() >= 4 && node[0].is_string() && node[3].is_object()) return node[3];
  if (node.is_array() && !node.empty() && node[0].is_array() && node[0].size() >= 4 && node[0][3].is_object())
    return node[0][3];
  if (node.is_object() && node.contains("kwargs") && node["kwargs"].is_object()) return node["kwargs"];
  return nullptr;
}

class Flattener {
 public:
  Flattener(Graph& g, const LoadOptions& o) : g_(g), options_(o) {}

  // Adds `model` to the graph. `inputs`: the node ids feeding it (empty at top level: the model's
  // own InputLayers become graph inputs). Returns the node ids of its outputs.
  std::vector<int> add_model(const json& model, const std::vector<int>& inputs) {
    const std::string cls = model.at("class_name").get<std::string>();
    const json& cfg = model.at("config");
    const std::string name = layer_name_of(model);
    if (depth_ >= kMaxModelDepth)
      fail(name, "models are nested more than " + std::to_string(kMaxModelDepth) + " levels deep");
    ++depth_;
    std::vector<int> outs = cls == "Sequential" ? add_sequential(cfg, name, inputs) : add_functional(cfg, name, inputs);
    --depth_;
    if (outs.size() == 1 && !name.empty()) g_.model_outputs[name] = outs[0];
    return outs;
  }

 private:
  Graph& g_;
  const LoadOptions& options_;
  std::set<std::string> names_;
  int depth_ = 0;  // models being added, one inside the other

  // A JSON type or key error inside one layer, named by the layer (the message of a nested
  // model's layer is kept as it is).
  template <typename F>
  auto in_layer(const json& layer, std::size_t index, const std::string& model, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const json::exception& e) {
      fail(layer_label(layer, index, model), std::string("malformed layer: ") + e.what());
    }
  }

  int add_node(LayerNode node) {
    if (!names_.insert(node.name).second)
      fail(node.name, "the layer name appears twice in the model; layer names must be unique");
    g_.nodes.push_back(std::move(node));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  int add_input(const json& cfg, const std::string& name) {
    LayerNode n;
    n.name = name;
    n.keras_class = "InputLayer";
    n.kind = LayerKind::Input;
    n.out_shape = input_shape_of(cfg, name, options_);
    int id = add_node(std::move(n));
    g_.inputs.push_back(id);
    return id;
  }

  // `kwargs`: the call's keyword arguments (a TFOpLambda's operands), null when none.
  std::vector<int> add_layer(const json& layer, const std::vector<int>& inputs, const json& kwargs = nullptr) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string name = layer_name_of(layer);
    if (is_model_class(cls)) return add_model(layer, inputs);
    if (cls == "InputLayer") fail(name, "InputLayer inside the graph is not expected here");
    if (cls == "Lambda" && !is_inception_resnet_lambda(layer.at("config"), name))
      fail(name, "layer class '" + cls + "' (arbitrary Python code) is not supported");
    LayerNode n = cls == "TFOpLambda" ? make_tf_op_node(layer.at("config"), name, kwargs, inputs.size())
                                      : read_keras_layer(cls, layer.at("config"), name);
    // Keras 3 (its layers carry "module") redefined hard_sigmoid as relu6(x + 3) / 6; stoker's is
    // tf_keras' clip(0.2 x + 0.5, 0, 1).
    if (layer.contains("module") && n.activation.kind == ActKind::HardSigmoid)
      fail(name, "Keras 3's hard_sigmoid (relu6(x + 3) / 6) is not supported (only tf_keras' clip(0.2 x + 0.5, 0, 1))");
    n.inputs = inputs;
    return {add_node(std::move(n))};
  }

  std::vector<int> add_sequential(const json& cfg, const std::string& name, const std::vector<int>& inputs) {
    const json& layers = cfg.is_array() ? cfg : cfg.at("layers");
    std::vector<int> current = inputs;
    std::size_t index = 0;
    for (const auto& layer : layers) {
      in_layer(layer, index++, name, [&] { add_sequential_layer(layer, name, current); });
    }
    return current;
  }

  void add_sequential_layer(const json& layer, const std::string& name, std::vector<int>& current) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string lname = layer_name_of(layer);
    if (cls == "InputLayer") {
      if (current.empty()) current = {add_input(layer.at("config"), lname)};
      return;  // nested: the InputLayer stands for what feeds the Sequential
    }
    if (current.empty()) {
      const json& lc = layer.at("config");
      if (lc.is_object() && (lc.contains("batch_input_shape") || lc.contains("batch_shape"))) {
        current = {add_input(lc, (name.empty() ? lname : name) + "_input")};
      } else if (is_model_class(cls)) {
        current = {};  // a nested model brings its own InputLayer
      } else {
        fail(lname, "the Sequential model '" + name + "' has no input shape");
      }
    }
    if (current.size() > 1) fail(lname, "a Sequential layer receives " + std::to_string(current.size()) + " tensors");
    current = add_layer(layer, current);
  }

  std::vector<int> add_functional(const json& cfg, const std::string& name, const std::vector<int>& inputs) {
    const json& layers = cfg.at("layers");
    std::map<std::string, std::vector<int>> produced;  // layer name -> its output nodes
    auto normalise_io = [&name](const json& io) {
      std::vector<Ref> refs;
      // .at(): operator[] on a const array does not check the index.
      auto ref = [&](const json& r) {
        return Ref{r.at(0).get<std::string>(), to_int(r.at(1), name, "input/output node index"),
                   to_int(r.at(2), name, "input/output tensor index")};
      };
      if (io.is_array() && !io.empty() && io[0].is_string()) {
        refs.push_back(ref(io));
      } else if (io.is_array()) {
        for (const auto& r : io) refs.push_back(ref(r));
      }
      return refs;
    };
    const auto in_refs = normalise_io(cfg.at("input_layers"));
    const auto out_refs = normalise_io(cfg.at("output_layers"));
    if (!inputs.empty() && inputs.size() != in_refs.size())
      fail(name,
           "the model has " + std::to_string(in_refs.size()) + " inputs but receives " + std::to_string(inputs.size()));

    // Layers are listed in a valid order by Keras, but resolve dependencies to be safe.
    std::vector<bool> done(layers.size(), false);
    std::size_t remaining = layers.size();
    while (remaining > 0) {
      bool progress = false;
      for (std::size_t i = 0; i < layers.size(); ++i) {
        if (done[i]) continue;
        if (in_layer(layers[i], i, name, [&] { return add_functional_layer(layers[i], inputs, in_refs, produced); }))
          done[i] = true, --remaining, progress = true;
      }
      if (!progress) {
        for (std::size_t i = 0; i < layers.size(); ++i)
          if (!done[i]) fail(layer_label(layers[i], i, name), "its inputs are never produced in model '" + name + "'");
      }
    }
    std::vector<int> outs;
    for (const auto& r : out_refs) {
      auto it = produced.find(r.layer);
      if (it == produced.end() || static_cast<std::size_t>(r.tensor) >= it->second.size())
        fail(name, "output layer '" + r.layer + "' is not in the model");
      outs.push_back(it->second[static_cast<std::size_t>(r.tensor)]);
    }
    return outs;
  }

  // One layer of a Functional model, added when its inputs are produced: false when they are not yet.
  bool add_functional_layer(const json& layer, const std::vector<int>& inputs, const std::vector<Ref>& in_refs,
                            std::map<std::string, std::vector<int>>& produced) {
    const std::string cls = layer.at("class_name").get<std::string>();
    const std::string lname = layer_name_of(layer);
    if (cls == "InputLayer") {
      auto it = std::find_if(in_refs.begin(), in_refs.end(), [&](const Ref& r) { return r.layer == lname; });
      if (!inputs.empty() && it != in_refs.end())
        produced[lname] = {inputs[static_cast<std::size_t>(it - in_refs.begin())]};
      else produced[lname] = {add_input(layer.at("config"), lname)};
      return true;
    }
    const json& nodes = layer.contains("inbound_nodes") ? layer["inbound_nodes"] : json::array();
    if (nodes.size() != 1)
      fail(lname, nodes.empty() ? "the layer has no inbound node (not connected)"
                                : "the layer is called " + std::to_string(nodes.size()) +
                                      " times (shared layers are not supported)");
    auto refs = parse_inbound_node(nodes[0]);
    const json kwargs = call_kwargs(nodes[0]);
    if (cls == "TFOpLambda" && kwargs.is_object() && kwargs.contains("y") && is_tensor_ref(kwargs["y"]))
      refs.push_back({kwargs["y"][0].get<std::string>(), to_int(kwargs["y"][1], lname, "y node index"),
                      to_int(kwargs["y"][2], lname, "y tensor index")});
    bool ready = true;
    for (const auto& r : refs) ready = ready && produced.count(r.layer) > 0;
    if (!ready) return false;
    std::vector<int> ins;
    for (const auto& r : refs) {
      const auto& outs = produced[r.layer];
      if (r.tensor < 0 || static_cast<std::size_t>(r.tensor) >= outs.size())
        fail(lname, "input '" + r.layer + "' has no output tensor " + std::to_string(r.tensor));
      ins.push_back(outs[static_cast<std::size_t>(r.tensor)]);
    }
    produced[lname] = add_layer(layer, ins, kwargs);
    return true;
  }
};

}  // namespace

json parse_model_json(std::string_view text, const std::string& where, const std::string& what) {
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw InvalidArgument(where + ": " + what + " is nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels (no model is)");
    return true;
  };
  try {
    return json::parse(text, bounded);
  } catch (const json::exception& e) {
    throw InvalidArgument(where + ": " + what + " is not valid JSON: " + e.what());
  }
}

void rethrow_as_load_error(const std::string& where) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const json::exception& e) {
    throw InvalidArgument(where + ": malformed model file: " + e.what());
  } catch (const std::bad_alloc&) {
    throw BadAlloc(where + ": out of memory while loading the model");
  } catch (const std::length_error& e) {
    throw IoError(where + ": a size in the file is too large (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw IoError(where + ": cannot load the model: " + e.what());
  }
}

Graph parse_keras_topology(const json& model_config, const LoadOptions& options) {
  if (!model_config.is_object() || !model_config.contains("class_name") || !model_config.contains("config"))
    throw InvalidArgument("model topology: expected {\"class_name\", \"config\"}, received " +
                          model_config.dump().substr(0, 200));
  const std::string cls = model_config["class_name"].get<std::string>();
  if (!is_model_class(cls))
    throw InvalidArgument("model topology: top-level class '" + cls + "' is not Sequential, Functional or Model");
  Graph g;
  g.name = layer_name_of(model_config);
  Flattener f(g, options);
  g.outputs = f.add_model(model_config, {});
  if (g.inputs.empty()) throw InvalidArgument("model '" + g.name + "' has no input layer");
  return g;
}

Model build_model(const json& model_config, WeightStore& weights, const LoadOptions& options,
                  const std::string& source) {
  try {
    Graph g = parse_keras_topology(model_config, options);
    finalize_graph(g, weights, source);
    return Model(std::move(g), source);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(source + ": " + e.what());
  } catch (const json::exception& e) {
    throw InvalidArgument(source + ": malformed model topology: " + e.what());
  }
}

}  // namespace stoker::trainer::detail
