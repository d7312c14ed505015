// HDF5's C API for the Keras file formats: RAII handles and the readers the .h5 and .keras loaders share.
#pragma once

#include <string>
#include <vector>

#include <hdf5.h>

#include "import.hpp"

namespace stoker::trainer::detail {

// Owns one HDF5 identifier.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  Closer close_;
};

// Silences HDF5's automatic error printing while alive (we report errors ourselves).
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// A string attribute (scalar or list, fixed or variable length); empty when absent. IoError naming
// `where` when it cannot be read.
std::vector<std::string> read_string_attribute(hid_t obj, const char* name, const std::string& where);
// A numeric dataset as float32 with its shape.
RawWeight read_dataset(hid_t group, const std::string& name, const std::string& where);

}  // namespace stoker::trainer::detail
