// Keras HDF5 files: the topology JSON in the root attribute `model_config`, the weights under
// `model_weights/<layer or nested model>/<weight name>` listed by the `weight_names` attributes.
#include <cstring>
#include <string>
#include <vector>

#include <hdf5.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "hdf5_handles.hpp"
#include "import.hpp"

namespace stoker::trainer {
namespace detail {

std::vector<std::string> read_string_attribute(hid_t obj, const char* name, const std::string& where) {
  if (H5Aexists(obj, name) <= 0) return {};
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  if (!attr.ok() || !type.ok() || !space.ok()) throw IoError(where + ": cannot open attribute '" + name + "'");
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (H5Tget_class(type.get()) != H5T_STRING && points == 0) return {};  // Keras writes [] for "no weights"
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw IoError(where + ": attribute '" + std::string(name) + "' is not a string");
  const hssize_t count = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR ? 1 : points;
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    std::vector<char*> ptrs(static_cast<std::size_t>(count), nullptr);
    if (H5Aread(attr.get(), mem.get(), ptrs.data()) < 0)
      throw IoError(where + ": cannot read attribute '" + std::string(name) + "'");
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      H5free_memory(p);
    }
  } else {
    const std::size_t size = H5Tget_size(type.get());
    Hid mem(H5Tcopy(type.get()), H5Tclose);  // keeps the file's padding: a full-width name has no NUL
    std::vector<char> buf(size * static_cast<std::size_t>(count) + 1, '\0');
    if (H5Aread(attr.get(), mem.get(), buf.data()) < 0)
      throw IoError(where + ": cannot read attribute '" + std::string(name) + "'");
    for (hssize_t i = 0; i < count; ++i) {
      const char* p = buf.data() + static_cast<std::size_t>(i) * size;
      out.emplace_back(p, strnlen(p, size));
    }
  }
  return out;
}

detail::RawWeight read_dataset(hid_t group, const std::string& name, const std::string& where) {
  Hid ds(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw IoError(where + ": weight dataset '" + name + "' is listed but cannot be opened");
  Hid space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 8) throw IoError(where + ": weight '" + name + "' has an unreadable shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  detail::RawWeight w;
  w.full_name = name;
  std::size_t n = 1;
  for (auto d : dims) w.shape.push_back(static_cast<int>(d)), n *= static_cast<std::size_t>(d);
  w.data.resize(n);
  Hid type(H5Dget_type(ds.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_FLOAT && H5Tget_class(type.get()) != H5T_INTEGER)
    throw InvalidArgument(where + ": weight '" + name + "' is not numeric");
  if (n && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.data.data()) < 0)
    throw IoError(where + ": cannot read weight '" + name + "'");
  return w;
}

}  // namespace detail

using detail::Hid;
using detail::QuietHdf5;
using detail::read_dataset;
using detail::read_string_attribute;

Model load_keras_h5(const std::filesystem::path& path, const LoadOptions& options) {
  const std::string where = path.string();
  QuietHdf5 quiet;
  if (H5Fis_hdf5(where.c_str()) <= 0) throw IoError(where + ": not a readable HDF5 file");
  Hid file(H5Fopen(where.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw IoError(where + ": cannot open HDF5 file");

  auto config = read_string_attribute(file.get(), "model_config", where);
  if (config.empty() || config[0].empty())
    throw InvalidArgument(where + ": no 'model_config' attribute (a weights-only file? save the full model)");
  nlohmann::json topology;
  try {
    topology = nlohmann::json::parse(config[0]);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(where + ": model_config is not valid JSON: " + e.what());
  }

  detail::WeightStore store;
  const bool nested = H5Lexists(file.get(), "model_weights", H5P_DEFAULT) > 0;
  Hid root(H5Gopen2(file.get(), nested ? "model_weights" : "/", H5P_DEFAULT), H5Gclose);
  if (!root.ok()) throw IoError(where + ": cannot open the weights group");
  for (const auto& layer : read_string_attribute(root.get(), "layer_names", where)) {
    Hid group(H5Gopen2(root.get(), layer.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) throw IoError(where + ": weights group '" + layer + "' is listed but missing");
    for (const auto& wname : read_string_attribute(group.get(), "weight_names", where)) {
      auto w = read_dataset(group.get(), wname, where);
      w.full_name = layer + "/" + wname;
      store.add(std::move(w));
    }
  }

  return detail::build_model(topology, store, options, where);
}

}  // namespace stoker::trainer
