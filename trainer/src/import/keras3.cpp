// Keras 3 `.keras` files: a zip archive holding config.json (the topology in Keras 3's format,
// which parse_keras_topology reads) and model.weights.h5, where each layer's weights are the
// datasets layers/<group>/vars/0, 1, ... in the order the layer creates them, the vars group naming
// its layer (attribute "name"); a nested model's layers sit under its own layers/ group.
#include <zip.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "hdf5_handles.hpp"
#include "import.hpp"
#include "read_in_child.hpp"

namespace stoker::trainer {
namespace {

using detail::Hid;
using detail::QuietHdf5;
using nlohmann::json;

// The most a member may expand: deflate's limit is 1032:1; a stored member's sizes are equal.
constexpr std::uint64_t kMaxCompression = 1100;
constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{64} << 20;  // config.json
constexpr std::uint64_t kMaxWeightsBytes = std::uint64_t{4} << 30;  // model.weights.h5, copied in memory

// One member of the archive, whole, at most `cap` bytes. Its declared (uncompressed) size is
// checked against the cap, against what it stores (its compressed size, times the most a
// compression method gives) and the archive's size before anything is allocated. IoError naming
// the file and the member when absent or when the sizes cannot be true.
std::string read_member(zip_t* archive, const char* name, std::uint64_t cap, std::uint64_t archive_bytes,
                        const std::string& where) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(archive, name, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    throw IoError(where + ": no '" + std::string(name) + "' in the archive (not a Keras 3 .keras file?)");
  const std::string member = where + ": '" + std::string(name) + "'";
  if (!(st.valid & ZIP_STAT_COMP_SIZE) || !(st.valid & ZIP_STAT_COMP_METHOD))
    throw IoError(member + " has no compressed size in the archive");
  if (st.size > cap)
    throw IoError(member + " declares " + std::to_string(st.size) + " bytes, more than the " + std::to_string(cap) +
                  " a .keras member may hold");
  if (st.comp_size > archive_bytes)
    throw IoError(member + " declares " + std::to_string(st.comp_size) + " compressed bytes in an archive of " +
                  std::to_string(archive_bytes));
  if ((st.comp_method == ZIP_CM_STORE && st.size != st.comp_size) || st.size > st.comp_size * kMaxCompression + 4096)
    throw IoError(member + " declares " + std::to_string(st.size) + " bytes but stores " +
                  std::to_string(st.comp_size) + " (a damaged or hostile archive)");
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> f(zip_fopen(archive, name, 0), zip_fclose);
  if (!f) throw IoError(where + ": cannot open '" + std::string(name) + "': " + zip_strerror(archive));
  std::string bytes(static_cast<std::size_t>(st.size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const zip_int64_t n = zip_fread(f.get(), bytes.data() + done, bytes.size() - done);
    if (n <= 0) throw IoError(where + ": cannot read '" + std::string(name) + "' (truncated or corrupt archive)");
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

// Layer name -> its {class_name, config}, through nested models (as deep as parse_model_json lets JSON nest).
void index_layers(const json& model, std::unordered_map<std::string, const json*>& out) {
  if (!model.is_object() || !model.contains("config") || !model["config"].is_object() ||
      !model["config"].contains("layers") || !model["config"]["layers"].is_array())
    return;
  for (const json& layer : model["config"]["layers"]) {
    if (layer.is_object() && layer.contains("config") && layer["config"].is_object() &&
        layer["config"].contains("name") && layer["config"]["name"].is_string())
      out[layer["config"]["name"].get<std::string>()] = &layer;
    index_layers(layer, out);
  }
}

// A boolean of a layer's config, `fallback` when absent or not a boolean (the topology check names the layer).
bool flag(const json& cfg, const char* key, bool fallback) {
  return cfg.is_object() && cfg.contains(key) && cfg[key].is_boolean() ? cfg[key].get<bool>() : fallback;
}

// The names Keras 3 layers give their variables, in creation order (what stoker's graph calls them).
std::vector<std::string> variable_names(const json* layer, std::size_t count) {
  const std::string cls = layer && layer->contains("class_name") && (*layer)["class_name"].is_string()
                              ? (*layer)["class_name"].get<std::string>()
                              : std::string();
  static const json kEmpty = json::object();
  const json& cfg = layer && layer->contains("config") ? (*layer)["config"] : kEmpty;
  std::vector<std::string> names;
  if (cls == "Conv2D" || cls == "Dense") names = {"kernel", "bias"};
  else if (cls == "DepthwiseConv2D") names = {"depthwise_kernel", "bias"};
  else if (cls == "SeparableConv2D") names = {"depthwise_kernel", "pointwise_kernel", "bias"};
  else if (cls == "Normalization") names = {"mean", "variance", "count"};
  else if (cls == "LayerNormalization") {
    if (flag(cfg, "scale", true)) names.push_back("gamma");
    if (flag(cfg, "center", true)) names.push_back("beta");
  } else if (cls == "BatchNormalization") {
    if (flag(cfg, "scale", true)) names.push_back("gamma");
    if (flag(cfg, "center", true)) names.push_back("beta");
    names.insert(names.end(), {"moving_mean", "moving_variance"});
  }
  // Layers stoker does not know keep numbered names: the topology check names the layer.
  for (std::size_t i = names.size(); i < count; ++i) names.push_back("variable_" + std::to_string(i));
  names.resize(count);
  return names;
}

std::vector<std::string> child_names(hid_t group) {
  H5G_info_t info;
  std::vector<std::string> names;
  if (H5Gget_info(group, &info) < 0) return names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len <= 0) continue;
    std::string name(static_cast<std::size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<std::size_t>(len));
    names.push_back(std::move(name));
  }
  return names;
}

// The object a handle names (its file and address): two links to one group give the same identity.
std::string object_identity(hid_t obj) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return {};
  std::string id(reinterpret_cast<const char*>(&info.fileno), sizeof info.fileno);
  id.append(reinterpret_cast<const char*>(&info.token), sizeof info.token);
#else
  H5O_info_t info;
  if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return {};
  std::string id(reinterpret_cast<const char*>(&info.fileno), sizeof info.fileno);
  id.append(reinterpret_cast<const char*>(&info.addr), sizeof info.addr);
#endif
  return id;
}

// Groups of model.weights.h5 walked so far: each is read once, and the walk stops at
// kMaxModelDepth nested models. A hard link back to an ancestor (a cycle) or to a group read
// already (a file that would be read exponentially often) is refused by name.
struct Walk {
  std::set<std::string> seen;
  int depth = 0;
};

void enter(Walk& walk, hid_t group, const std::string& path, const std::string& where) {
  const std::string id = object_identity(group);
  if (id.empty()) throw IoError(where + ": model.weights.h5: cannot identify group '" + path + "'");
  if (!walk.seen.insert(id).second)
    throw IoError(where + ": model.weights.h5: group '" + path +
                  "' is a link to a group read already (a cycle or a shared group; Keras writes neither)");
}

// Every layer group under `layers` (recursing into nested models) into the store; `path` names
// `layers` in messages.
void read_layers(hid_t layers, const std::string& path, const std::unordered_map<std::string, const json*>& topology,
                 detail::WeightStore& store, detail::WeightBudget& budget, Walk& walk, const std::string& where) {
  if (walk.depth >= detail::kMaxModelDepth)
    throw IoError(where + ": model.weights.h5: group '" + path + "' is nested more than " +
                  std::to_string(detail::kMaxModelDepth) + " models deep");
  enter(walk, layers, path, where);
  ++walk.depth;
  for (const std::string& group_name : child_names(layers)) {
    Hid group(H5Gopen2(layers, group_name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) continue;  // a dataset, not a layer
    const std::string group_path = path + "/" + group_name;
    enter(walk, group.get(), group_path, where);
    if (H5Lexists(group.get(), "layers", H5P_DEFAULT) > 0) {
      Hid nested(H5Gopen2(group.get(), "layers", H5P_DEFAULT), H5Gclose);
      if (!nested.ok()) throw IoError(where + ": model.weights.h5: cannot open '" + group_path + "/layers'");
      read_layers(nested.get(), group_path + "/layers", topology, store, budget, walk, where);
    }
    if (H5Lexists(group.get(), "vars", H5P_DEFAULT) <= 0) continue;
    Hid vars(H5Gopen2(group.get(), "vars", H5P_DEFAULT), H5Gclose);
    const std::vector<std::string> count = child_names(vars.get());
    if (count.empty()) continue;
    const std::vector<std::string> named = detail::read_string_attribute(vars.get(), "name", where);
    if (named.empty())
      throw IoError(where + ": weights group 'layers/" + group_name +
                    "' does not name its layer (saved by an older Keras 3; load and save it again)");
    const auto it = topology.find(named[0]);
    const std::vector<std::string> names = variable_names(it == topology.end() ? nullptr : it->second, count.size());
    for (std::size_t i = 0; i < count.size(); ++i) {
      detail::RawWeight w = detail::read_dataset(vars.get(), std::to_string(i), where, budget);
      w.full_name = named[0] + "/" + names[i] + ":0";
      store.add(std::move(w));
    }
  }
  --walk.depth;
}

struct Keras3File {
  json topology;
  detail::WeightStore weights;
};

// Everything load_keras3 reads: config.json and, with libhdf5, the weights.
Keras3File read_keras3(const std::filesystem::path& path) {
  const std::string where = path.string();
  int error = 0;
  std::unique_ptr<zip_t, int (*)(zip_t*)> archive(zip_open(where.c_str(), ZIP_RDONLY, &error), zip_close);
  if (!archive) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw IoError(where + ": not a readable .keras (zip) file: " + why);
  }
  std::error_code ec;
  const std::uintmax_t archive_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(where + ": cannot read the file's size: " + ec.message());
  const json topology = detail::parse_model_json(
      read_member(archive.get(), "config.json", kMaxConfigBytes, archive_bytes, where), where, "config.json");
  std::unordered_map<std::string, const json*> layers;
  index_layers(topology, layers);

  // The weights file, opened in memory (HDF5's core driver over a copy of the member).
  std::string image = read_member(archive.get(), "model.weights.h5", kMaxWeightsBytes, archive_bytes, where);
  detail::check_global_heaps_in_image(image, where + ": model.weights.h5");
  QuietHdf5 quiet;
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0 ||
      H5Pset_file_image(fapl.get(), image.data(), image.size()) < 0)
    throw IoError(where + ": cannot prepare model.weights.h5 for reading");
  Hid file(H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) throw IoError(where + ": model.weights.h5 in the archive is not a readable HDF5 file");
  detail::WeightStore store;
  detail::WeightBudget budget(image.size());
  if (H5Lexists(file.get(), "layers", H5P_DEFAULT) > 0) {
    Hid root(H5Gopen2(file.get(), "layers", H5P_DEFAULT), H5Gclose);
    if (!root.ok()) throw IoError(where + ": model.weights.h5: cannot open 'layers'");
    Walk walk;
    read_layers(root.get(), "layers", layers, store, budget, walk, where);
  }
  return {topology, std::move(store)};
}

}  // namespace

Model detail::load_keras3_in_process(const std::filesystem::path& path, const LoadOptions& options) try {
  std::lock_guard lock(hdf5_mutex());
  Keras3File file = read_keras3(path);
  return build_model(file.topology, file.weights, options, path.string());
} catch (...) {
  rethrow_as_load_error(path.string());
}

Model load_keras3(const std::filesystem::path& path, const LoadOptions& options) try {
  detail::check_read_in_child(path, [&] { read_keras3(path); });
  return detail::load_keras3_in_process(path, options);
} catch (...) {
  detail::rethrow_as_load_error(path.string());
}

}  // namespace stoker::trainer
