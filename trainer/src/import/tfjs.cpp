// TF.js layers models: model.json with `modelTopology` (Keras topology JSON) and `weightsManifest`
// (groups of shard files; each group's weights lie back to back in its concatenated shards,
// little-endian, in manifest order).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/core/half.hpp>
#include <stoker/trainer/model.hpp>

#include "import.hpp"

namespace stoker::trainer {
namespace {

static_assert(std::endian::native == std::endian::little, "TF.js shards are little-endian; add byte swapping");

// What a TF.js model may hold: model.json, and all of its weight shards together (TF.js models
// are made for browsers; the largest are a few hundred megabytes).
constexpr std::uintmax_t kMaxModelJsonBytes = std::uintmax_t{64} << 20;
constexpr std::uintmax_t kMaxShardBytes = std::uintmax_t{4} << 30;

// A regular file of at most `cap` bytes, whole; `what` names it in errors. A manifest naming a
// device (/dev/zero) or a FIFO must not hang the import, nor a huge file fill memory.
std::vector<char> read_file(const std::filesystem::path& p, std::uintmax_t cap, const char* what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) throw IoError(p.string() + ": " + what + " is not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(p, ec);
  if (ec) throw IoError(p.string() + ": cannot read the size of the " + what + ": " + ec.message());
  if (size > cap)
    throw IoError(p.string() + ": the " + what + " is " + std::to_string(size) + " bytes, over the " +
                  std::to_string(cap) + " a TF.js model may hold");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw IoError(p.string() + ": cannot open");
  std::vector<char> bytes(static_cast<std::size_t>(size));
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) throw IoError(p.string() + ": cannot read the " + what);
  return bytes;
}

// A shard path from the manifest: relative to model.json's folder, as TF.js resolves it against
// model.json's URL; absolute paths and paths that climb out of the folder are refused.
std::filesystem::path shard_path(const std::filesystem::path& dir, const std::string& name, const std::string& where) {
  const std::filesystem::path rel(name);
  bool climbs = false;
  for (const auto& part : rel) climbs = climbs || part == "..";
  if (name.empty() || rel.has_root_path() || climbs)
    throw InvalidArgument(where + ": weight shard path '" + name + "' must be relative to model.json's folder");
  return dir / rel;
}

std::size_t dtype_bytes(const std::string& dtype, const std::string& where) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "uint16" || dtype == "float16") return 2;
  if (dtype == "uint8" || dtype == "bool") return 1;
  throw InvalidArgument(where + ": weight dtype '" + dtype + "' is not supported");
}

// The number of values a weight's shape holds, its dimensions appended to `dims`. They are checked
// before they are multiplied: a negative or huge one must not wrap the count past the bounds
// check that follows (or into a giant allocation). `what` names the weight in errors.
std::size_t element_count(const nlohmann::json& shape, std::vector<int>& dims, const std::string& what) {
  std::size_t n = 1;
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0 ||
        (d.is_number_unsigned() && d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT32_MAX)) ||
        d.get<std::int64_t>() > INT32_MAX)
      throw InvalidArgument(what + " has an invalid dimension " + d.dump().substr(0, 100) + " in its shape");
    const auto dim = static_cast<std::size_t>(d.get<std::int64_t>());
    if (dim != 0 && n > (std::size_t{1} << 40) / dim)
      throw InvalidArgument(what + " shape " + shape.dump().substr(0, 200) + " is too large");
    dims.push_back(static_cast<int>(dim));
    n *= dim;
  }
  return n;
}

// `n` little-endian values of `dtype` from `p` as float32; uint8/uint16 dequantised when quantized.
std::vector<float> values(const char* p, std::size_t n, const std::string& dtype, bool quantized, float scale,
                          float minv) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == "float32") {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else if (dtype == "int32") {
      std::int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = static_cast<float>(v);
    } else if (dtype == "float16") {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = convert::f16_value(v);
    } else if (dtype == "uint16") {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = quantized ? v * scale + minv : static_cast<float>(v);
    } else {
      const auto v = static_cast<std::uint8_t>(p[i]);
      out[i] = quantized ? v * scale + minv : static_cast<float>(v);
    }
  }
  return out;
}

}  // namespace

Model load_tfjs(const std::filesystem::path& model_json, const LoadOptions& options) try {
  const std::string where = model_json.string();
  const std::vector<char> text = read_file(model_json, kMaxModelJsonBytes, "model.json");
  const nlohmann::json doc = detail::parse_model_json(std::string_view(text.data(), text.size()), where, "model.json");
  if (!doc.is_object() || !doc.contains("modelTopology"))
    throw InvalidArgument(where + ": no 'modelTopology' (not a TF.js layers model)");
  if (doc.contains("format") && doc["format"] == "graph-model")
    throw InvalidArgument(where + ": a TF.js graph model is not supported (only layers models)");
  const nlohmann::json& topo = doc["modelTopology"];
  const nlohmann::json& model_config = topo.contains("model_config") ? topo["model_config"] : topo;

  detail::WeightStore store;
  const auto dir = model_json.parent_path();
  std::uintmax_t shard_bytes_left = kMaxShardBytes;
  try {
    for (const auto& group : doc.value("weightsManifest", nlohmann::json::array())) {
      std::vector<char> bytes;
      for (const auto& shard : group.at("paths")) {
        auto b = read_file(shard_path(dir, shard.get<std::string>(), where), shard_bytes_left, "weight shard");
        shard_bytes_left -= b.size();
        bytes.insert(bytes.end(), b.begin(), b.end());
      }
      std::size_t offset = 0;
      for (const auto& spec : group.at("weights")) {
        detail::RawWeight w;
        w.full_name = spec.at("name").get<std::string>();
        const std::size_t n = element_count(spec.at("shape"), w.shape, where + ": weight '" + w.full_name + "'");
        std::string dtype = spec.value("dtype", std::string("float32"));
        float scale = 1.0f, minv = 0.0f;
        bool quantized = spec.contains("quantization");
        if (quantized) {
          const auto& q = spec["quantization"];
          dtype = q.at("dtype").get<std::string>();
          scale = q.value("scale", 1.0f);
          minv = q.value("min", 0.0f);
        }
        const std::size_t bytes_needed = n * dtype_bytes(dtype, where + " weight '" + w.full_name + "'");
        if (bytes_needed > bytes.size() - offset)  // offset <= bytes.size() holds: it only grows by checked sizes
          throw IoError(where + ": weight '" + w.full_name + "' needs bytes " + std::to_string(offset) + ".." +
                        std::to_string(offset + bytes_needed) + " but its shards hold " + std::to_string(bytes.size()));
        w.data = values(bytes.data() + offset, n, dtype, quantized, scale, minv);
        offset += bytes_needed;
        store.add(std::move(w));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(where + ": malformed weightsManifest: " + e.what());
  }

  return detail::build_model(model_config, store, options, where);
} catch (...) {
  detail::rethrow_as_load_error(model_json.string());
}

}  // namespace stoker::trainer
