// Fuzzes the model files a user hands stoker: a Keras HDF5 file (load_keras_h5: the HDF5 reader's
// attributes and datasets, the declared shapes checked against caps and the file's size before any
// allocation, nested groups) and a Keras 3 .keras archive (load_keras3: the zip's members and
// their declared sizes, config.json, the weights file inside). Byte 0's bit 0 picks the format;
// the rest is the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "fuzz_util.hpp"
#include "import/import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool archive = (data[0] & 1) != 0;
  const auto path = stoker_fuzz::scratch_dir() / (archive ? "model.keras" : "model.h5");
  stoker_fuzz::write_file(path, {reinterpret_cast<const char*>(data) + 1, size - 1});
  try {
    // In this process: the checking child of load_keras_h5 / load_keras3 would hide the read's faults.
    namespace detail = stoker::trainer::detail;
    const auto model = archive ? detail::load_keras3_in_process(path, {}) : detail::load_keras_h5_in_process(path, {});
    (void)model;
  } catch (const stoker::Error& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
