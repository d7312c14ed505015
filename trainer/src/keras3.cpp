// Keras 3 `.keras` files: a zip archive holding config.json (the topology in Keras 3's format,
// which parse_keras_topology reads) and model.weights.h5, where each layer's weights are the
// datasets layers/<group>/vars/0, 1, ... in the order the layer creates them, the vars group naming
// its layer (attribute "name"); a nested model's layers sit under its own layers/ group.
#include <zip.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "hdf5_handles.hpp"
#include "import.hpp"

namespace stoker::trainer {
namespace {

using detail::Hid;
using detail::QuietHdf5;
using nlohmann::json;

// One member of the archive, whole. IoError naming the file and the member when absent.
std::string read_member(zip_t* archive, const char* name, const std::string& where) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(archive, name, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    throw IoError(where + ": no '" + std::string(name) + "' in the archive (not a Keras 3 .keras file?)");
  if (st.size > (std::uint64_t{4} << 30)) throw IoError(where + ": '" + std::string(name) + "' is implausibly large");
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

// Layer name -> its {class_name, config}, through nested models.
void index_layers(const json& model, std::unordered_map<std::string, const json*>& out) {
  if (!model.contains("config") || !model["config"].is_object() || !model["config"].contains("layers")) return;
  for (const json& layer : model["config"]["layers"]) {
    if (layer.contains("config") && layer["config"].contains("name") && layer["config"]["name"].is_string())
      out[layer["config"]["name"].get<std::string>()] = &layer;
    index_layers(layer, out);
  }
}

// The names Keras 3 layers give their variables, in creation order (what stoker's graph calls them).
std::vector<std::string> variable_names(const json* layer, std::size_t count) {
  const std::string cls = layer ? layer->value("class_name", std::string()) : std::string();
  const json cfg = layer && layer->contains("config") ? (*layer)["config"] : json::object();
  std::vector<std::string> names;
  if (cls == "Conv2D" || cls == "Dense") names = {"kernel", "bias"};
  else if (cls == "DepthwiseConv2D") names = {"depthwise_kernel", "bias"};
  else if (cls == "SeparableConv2D") names = {"depthwise_kernel", "pointwise_kernel", "bias"};
  else if (cls == "Normalization") names = {"mean", "variance", "count"};
  else if (cls == "LayerNormalization") {
    if (cfg.value("scale", true)) names.push_back("gamma");
    if (cfg.value("center", true)) names.push_back("beta");
  } else if (cls == "BatchNormalization") {
    if (cfg.value("scale", true)) names.push_back("gamma");
    if (cfg.value("center", true)) names.push_back("beta");
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

// Every layer group under `layers` (recursing into nested models) into the store.
void read_layers(hid_t layers, const std::unordered_map<std::string, const json*>& topology, detail::WeightStore& store,
                 const std::string& where) {
  for (const std::string& group_name : child_names(layers)) {
    Hid group(H5Gopen2(layers, group_name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) continue;  // a dataset, not a layer
    if (H5Lexists(group.get(), "layers", H5P_DEFAULT) > 0) {
      Hid nested(H5Gopen2(group.get(), "layers", H5P_DEFAULT), H5Gclose);
      read_layers(nested.get(), topology, store, where);
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
      detail::RawWeight w = detail::read_dataset(vars.get(), std::to_string(i), where);
      w.full_name = named[0] + "/" + names[i] + ":0";
      store.add(std::move(w));
    }
  }
}

}  // namespace

Model load_keras3(const std::filesystem::path& path, const LoadOptions& options) {
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
  json topology;
  try {
    topology = json::parse(read_member(archive.get(), "config.json", where));
  } catch (const json::exception& e) {
    throw InvalidArgument(where + ": config.json is not valid JSON: " + e.what());
  }
  std::unordered_map<std::string, const json*> layers;
  index_layers(topology, layers);

  // The weights file, opened in memory (HDF5's core driver over a copy of the member).
  std::string image = read_member(archive.get(), "model.weights.h5", where);
  QuietHdf5 quiet;
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0 ||
      H5Pset_file_image(fapl.get(), image.data(), image.size()) < 0)
    throw IoError(where + ": cannot prepare model.weights.h5 for reading");
  Hid file(H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) throw IoError(where + ": model.weights.h5 in the archive is not a readable HDF5 file");
  detail::WeightStore store;
  if (H5Lexists(file.get(), "layers", H5P_DEFAULT) > 0) {
    Hid root(H5Gopen2(file.get(), "layers", H5P_DEFAULT), H5Gclose);
    read_layers(root.get(), layers, store, where);
  }
  return detail::build_model(topology, store, options, where);
}

}  // namespace stoker::trainer
