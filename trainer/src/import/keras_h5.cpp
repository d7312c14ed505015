// Keras HDF5 files: the topology JSON in the root attribute `model_config`, the weights under
// `model_weights/<layer or nested model>/<weight name>` listed by the `weight_names` attributes.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <hdf5.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "hdf5_handles.hpp"
#include "import.hpp"
#include "read_in_child.hpp"

namespace stoker::trainer {
namespace detail {

std::vector<std::string> read_string_attribute(hid_t obj, const char* name, const std::string& where) {
  if (H5Aexists(obj, name) <= 0) return {};
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  if (!attr.ok() || !type.ok() || !space.ok()) throw IoError(where + ": cannot open attribute '" + name + "'");
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (points < 0) throw IoError(where + ": attribute '" + std::string(name) + "' has an unreadable shape");
  if (H5Tget_class(type.get()) != H5T_STRING && points == 0) return {};  // Keras writes [] for "no weights"
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw IoError(where + ": attribute '" + std::string(name) + "' is not a string");
  const hssize_t count = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR ? 1 : points;
  // Every string takes at least a byte of the attribute's storage: a larger declared count is a
  // lie, refused before the count sizes anything.
  const std::size_t type_size = H5Tget_size(type.get());
  const auto stored = static_cast<std::uint64_t>(H5Aget_storage_size(attr.get()));
  if (type_size == 0 || static_cast<std::uint64_t>(count) > stored ||
      (H5Tis_variable_str(type.get()) <= 0 && static_cast<std::uint64_t>(count) > stored / type_size))
    throw IoError(where + ": attribute '" + std::string(name) + "' declares " + std::to_string(count) +
                  " strings but stores " + std::to_string(stored) + " bytes");
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    std::vector<char*> ptrs(static_cast<std::size_t>(count), nullptr);
    // libhdf5 allocates each string: freed however this ends (a read that fails part way may
    // have made some).
    struct Strings {
      std::vector<char*>& made;
      ~Strings() {
        for (char* p : made) H5free_memory(p);
      }
    } owned{ptrs};
    if (H5Aread(attr.get(), mem.get(), ptrs.data()) < 0)
      throw IoError(where + ": cannot read attribute '" + std::string(name) + "'");
    for (const char* p : ptrs) out.emplace_back(p ? p : "");
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

namespace {

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

detail::RawWeight read_dataset(hid_t group, const std::string& name, const std::string& where, WeightBudget& budget) {
  const std::string weight = where + ": weight '" + name + "'";
  Hid ds(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw IoError(where + ": weight dataset '" + name + "' is listed but cannot be opened");
  Hid space(H5Dget_space(ds.get()), H5Sclose);
  Hid type(H5Dget_type(ds.get()), H5Tclose);
  Hid dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
  if (!space.ok() || !type.ok() || !dcpl.ok()) throw IoError(weight + " cannot be opened");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 8) throw IoError(weight + " has an unreadable shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  if (H5Tget_class(type.get()) != H5T_FLOAT && H5Tget_class(type.get()) != H5T_INTEGER)
    throw InvalidArgument(weight + " is not numeric");
  // The shape, multiplied only after each factor is checked: no dimension or product wraps.
  std::uint64_t n = 1;
  for (const hsize_t d : dims) {
    if (d > static_cast<hsize_t>(kMaxElements) || (d != 0 && n > static_cast<std::uint64_t>(kMaxElements) / d))
      throw IoError(weight + " has shape " + shape_text(dims) + ", too large (over " + std::to_string(kMaxElements) +
                    " elements)");
    n *= d;
  }
  // Where its bytes are: in this file only (an external raw file or a virtual dataset would read
  // other files), and as many as it declares.
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
    throw IoError(weight + " is not stored in the file (a virtual dataset)");
  if (H5Pget_external_count(dcpl.get()) != 0) throw IoError(weight + " is stored in external files");
  const std::uint64_t element = H5Tget_size(type.get());
  if (element == 0 || element > 16) throw IoError(weight + " has elements of " + std::to_string(element) + " bytes");
  const std::uint64_t declared = n * element;  // n <= 2^31, element <= 16: no wrap
  const auto stored = static_cast<std::uint64_t>(H5Dget_storage_size(ds.get()));
  const bool compressed = layout == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) > 0;
  if (!compressed && stored < declared)
    throw IoError(weight + " declares shape " + shape_text(dims) + " (" + std::to_string(declared) +
                  " bytes) but the file stores only " + std::to_string(stored) +
                  " bytes of it (never written, or a damaged file)");
  const std::uint64_t share =
      compressed ? (declared + WeightBudget::kMaxCompression - 1) / WeightBudget::kMaxCompression : declared;
  if (share > budget.left)
    throw IoError(where + ": the weights declare more data than the file holds (" + std::to_string(budget.file_bytes) +
                  " bytes) at weight '" + name + "' of shape " + shape_text(dims));
  budget.left -= share;

  detail::RawWeight w;
  w.full_name = name;
  for (const hsize_t d : dims) w.shape.push_back(static_cast<int>(d));
  w.data.resize(static_cast<std::size_t>(n));
  if (n && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.data.data()) < 0)
    throw IoError(where + ": cannot read weight '" + name + "'");
  return w;
}

}  // namespace detail

using detail::Hid;
using detail::QuietHdf5;
using detail::read_dataset;
using detail::read_string_attribute;
using detail::WeightBudget;

namespace {

struct KerasH5 {
  nlohmann::json topology;
  detail::WeightStore weights;
};

// Everything load_keras_h5 reads with libhdf5: the topology and the weights.
KerasH5 read_keras_h5(const std::filesystem::path& path) {
  const std::string where = path.string();
  QuietHdf5 quiet;
  if (H5Fis_hdf5(where.c_str()) <= 0) throw IoError(where + ": not a readable HDF5 file");
  detail::check_global_heaps_in_file(path, where);
  Hid file(H5Fopen(where.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw IoError(where + ": cannot open HDF5 file");

  auto config = read_string_attribute(file.get(), "model_config", where);
  if (config.empty() || config[0].empty())
    throw InvalidArgument(where + ": no 'model_config' attribute (a weights-only file? save the full model)");
  nlohmann::json topology = detail::parse_model_json(config[0], where, "model_config");

  detail::WeightStore store;
  const bool nested = H5Lexists(file.get(), "model_weights", H5P_DEFAULT) > 0;
  Hid root(H5Gopen2(file.get(), nested ? "model_weights" : "/", H5P_DEFAULT), H5Gclose);
  if (!root.ok()) throw IoError(where + ": cannot open the weights group");
  std::error_code ec;
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(where + ": cannot read the file's size: " + ec.message());
  WeightBudget budget(file_bytes);
  for (const auto& layer : read_string_attribute(root.get(), "layer_names", where)) {
    Hid group(H5Gopen2(root.get(), layer.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) throw IoError(where + ": weights group '" + layer + "' is listed but missing");
    for (const auto& wname : read_string_attribute(group.get(), "weight_names", where)) {
      auto w = read_dataset(group.get(), wname, where, budget);
      w.full_name = layer + "/" + wname;
      store.add(std::move(w));
    }
  }
  return {std::move(topology), std::move(store)};
}

}  // namespace

Model detail::load_keras_h5_in_process(const std::filesystem::path& path, const LoadOptions& options) try {
  std::lock_guard lock(hdf5_mutex());
  KerasH5 file = read_keras_h5(path);
  return build_model(file.topology, file.weights, options, path.string());
} catch (...) {
  rethrow_as_load_error(path.string());
}

Model load_keras_h5(const std::filesystem::path& path, const LoadOptions& options) try {
  detail::check_read_in_child(path, [&] { read_keras_h5(path); });
  return detail::load_keras_h5_in_process(path, options);
} catch (...) {
  detail::rethrow_as_load_error(path.string());
}

}  // namespace stoker::trainer
