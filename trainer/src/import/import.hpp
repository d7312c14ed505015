// Internal: the pieces model import is made of: bounded JSON parsing, the Keras topology walk, the
// errors every reader throws, and build_model, where every format ends (graph/graph_build.hpp
// checks the graph).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/model.hpp>

#include "graph/graph_build.hpp"

namespace stoker::trainer::detail {

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

// Both file formats end here: topology + weights -> a checked Model. Errors name `source`.
Model build_model(const nlohmann::json& model_config, WeightStore& weights, const LoadOptions& options,
                  const std::string& source);

// The model loaders without check_read_in_child's process of their own (read_in_child.hpp): the
// fuzz targets, which must see the read's own faults.
Model load_keras_h5_in_process(const std::filesystem::path& path, const LoadOptions& options);
Model load_keras3_in_process(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace stoker::trainer::detail
