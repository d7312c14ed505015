// HDF5's C API for the Keras file formats: RAII handles and the readers the .h5 and .keras loaders share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
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

// libhdf5 (Debian's 1.10) trusts the global heap collections that hold variable-length data (the
// Keras files' string attributes): a free-space object of size 0 makes it loop for ever, an object
// running past its collection makes it read beyond its buffer. Each collection among the file's
// bytes (an HDF5 file, or its image in memory) is walked here as libhdf5 will walk it, before
// libhdf5 opens the file: IoError naming `where` and the collection when one is damaged.
void check_global_heaps_in_file(const std::filesystem::path& file, const std::string& where);
void check_global_heaps_in_image(std::string_view image, const std::string& where);

// A string attribute (scalar or list, fixed or variable length); empty when absent. IoError naming
// `where` when it cannot be read.
std::vector<std::string> read_string_attribute(hid_t obj, const char* name, const std::string& where);

// What the weights of one file may declare in all: a dataset stored as it is (Keras' way) holds
// its bytes in the file, a compressed one at most kMaxCompression times its share of it. Each
// dataset read takes its share, so a file cannot list one dataset over and over either.
struct WeightBudget {
  static constexpr std::uint64_t kMaxCompression = 1100;  // deflate's limit is 1032:1
  explicit WeightBudget(std::uint64_t file_bytes) : file_bytes(file_bytes), left(file_bytes) {}
  std::uint64_t file_bytes;
  std::uint64_t left;
};

// A numeric dataset as float32 with its shape. Its declared shape is checked (every dimension an
// int, the element count at most kMaxElements), its storage (contiguous, chunked or compact in
// this file; no external files, no virtual datasets) and its bytes against what the file stores
// and `budget` before anything is allocated. IoError naming `where` and the dataset otherwise.
RawWeight read_dataset(hid_t group, const std::string& name, const std::string& where, WeightBudget& budget);

}  // namespace stoker::trainer::detail
