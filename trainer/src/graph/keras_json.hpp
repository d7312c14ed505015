// Internal: reading Keras topology JSON, shared by the topology walk (keras_topology.cpp) and the
// layer kinds' Keras forms (keras_layers.cpp).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker::trainer::detail {

// Throws InvalidArgument "layer '<layer>': <what>".
[[noreturn]] void fail(const std::string& layer, const std::string& what);

// A JSON integer that fits an int (get<int>() would wrap a larger one, or convert a float with
// undefined behaviour when it is out of range); fails naming the layer and `what` otherwise.
int to_int(const nlohmann::json& v, const std::string& layer, const std::string& what);

// The one Lambda we recognise: Keras Applications' InceptionResNetV2 residual scaling, named
// block35_N / block17_N / block8_N with arguments {"scale": s}. Any other Lambda is Python code we
// cannot run.
bool is_inception_resnet_lambda(const nlohmann::json& cfg, const std::string& name);

}  // namespace stoker::trainer::detail
