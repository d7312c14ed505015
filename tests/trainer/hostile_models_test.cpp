// Hostile and broken model files: every one is refused with a stoker::Error naming the file and
// the reason, before anything sized by the file's claims is allocated, with bounded recursion.
// The files are made here with HDF5's and libzip's C APIs (nothing binary is committed).
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <hdf5.h>
#include <zip.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "import/read_in_child.hpp"
#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

// A Dense model on a 4x4x3 input: its weights are dense/kernel [48, 2] and dense/bias [2].
const char* kDenseConfig = R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
  {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
  {"class_name": "Flatten", "config": {"name": "flat"}},
  {"class_name": "Dense", "config": {"name": "dense", "units": 2}}]}})";

void write_string_attr(hid_t obj, const char* name, const std::vector<std::string>& values, bool scalar = false) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  const hsize_t n = values.size();
  const hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  H5Awrite(attr, type, ptrs.data());
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

// A float dataset `name` in `group`: written with `data` when given, else chunked and never written.
void add_dataset(hid_t group, const std::string& name, const std::vector<hsize_t>& dims,
                 const std::vector<float>* data = nullptr) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (!data) {
    std::vector<hsize_t> chunk(dims.size(), 1);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  }
  const hid_t ds = H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << "cannot create dataset " << name;
  if (data) H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data->data());
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  H5Sclose(space);
}

// A Keras 2 .h5 full model: `config` as model_config, `fill` adds the model_weights group's content.
void write_h5(const std::filesystem::path& file, const std::string& config, const std::function<void(hid_t)>& fill) {
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  write_string_attr(f, "model_config", {config}, true);
  const hid_t weights = H5Gcreate2(f, "model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  fill(weights);
  H5Gclose(weights);
  H5Fclose(f);
}

// The dense layer's group listing kernel and bias, the kernel made by `kernel`.
void dense_weights(hid_t weights, const std::function<void(hid_t)>& kernel) {
  write_string_attr(weights, "layer_names", {"dense"});
  const hid_t g = H5Gcreate2(weights, "dense", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  write_string_attr(g, "weight_names", {"dense/kernel:0", "dense/bias:0"});
  kernel(g);
  const std::vector<float> bias(2, 0.0f);
  add_dataset(g, "dense/bias:0", {2}, &bias);
  H5Gclose(g);
}

// Runs load_model and returns the stoker::Error's message; fails the test on success or on any
// other exception type.
std::string refusal(const std::filesystem::path& file) {
  try {
    load_model(file);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a stoker::Error: " << e.what();
    return {};
  }
  ADD_FAILURE() << file << " loaded";
  return {};
}

#define EXPECT_MENTIONS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "'" << (part) << "' not in: " << (message)

TEST(HostileModels, AWellFormedDenseModelLoads) {
  test::TempDir tmp;
  const std::vector<float> kernel(48 * 2, 0.5f);
  write_h5(tmp / "ok.h5", kDenseConfig, [&](hid_t w) {
    dense_weights(w, [&](hid_t g) { add_dataset(g, "dense/kernel:0", {48, 2}, &kernel); });
  });
  EXPECT_EQ(load_model(tmp / "ok.h5").output_shape(), (std::vector<int>{2}));
}

std::uint64_t little_endian(const std::vector<std::uint8_t>& bytes, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | bytes[at + static_cast<std::size_t>(i)];
  return v;
}

// libhdf5 walks the global heap collection that holds the variable-length strings (model_config,
// layer_names, weight_names) trusting the sizes in it: a free space of size 0 made it loop for
// ever, an object running past the collection made it read beyond its buffer. Both are refused,
// naming the file, before libhdf5 reads the collection.
TEST(HostileModels, ADamagedGlobalHeapIsRefusedNotLoopedOver) {
  test::TempDir tmp;
  const std::vector<float> kernel(48 * 2, 0.5f);
  write_h5(tmp / "ok.h5", kDenseConfig, [&](hid_t w) {
    dense_weights(w, [&](hid_t g) { add_dataset(g, "dense/kernel:0", {48, 2}, &kernel); });
  });
  const std::vector<std::uint8_t> good = test::read_bytes(tmp / "ok.h5");
  // The collection: "GCOL", version 1, 3 reserved bytes, its size (8 bytes, libhdf5's default
  // lengths), then objects — index (2), reference count (2), reserved (4), size (8), the data
  // padded to 8 — and the free space (index 0) last.
  const char kCollection[] = "GCOL\x01\0\0\0";
  const auto found = std::search(good.begin(), good.end(), kCollection, kCollection + 8);
  ASSERT_NE(found, good.end()) << "no global heap collection in the file libhdf5 wrote";
  const auto at = static_cast<std::size_t>(found - good.begin());
  const std::size_t end = at + little_endian(good, at + 8, 8);
  std::size_t free_space = 0;
  for (std::size_t p = at + 16; p + 16 <= end && !free_space;)
    if (little_endian(good, p, 2) == 0) free_space = p;
    else p += 16 + (little_endian(good, p + 8, 8) + 7) / 8 * 8;
  ASSERT_NE(free_space, 0u);
  const auto damaged = [&](const char* name, std::size_t size_at, std::uint64_t size) {
    std::vector<std::uint8_t> bytes = good;
    for (int i = 0; i < 8; ++i)
      bytes[size_at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(size >> (8 * i));
    test::write_bytes(tmp / name, bytes);
    return refusal(tmp / name);
  };
  const std::string spin = damaged("spin.h5", free_space + 8, 0);
  EXPECT_MENTIONS(spin, "spin.h5");
  EXPECT_MENTIONS(spin, "free space of size 0");
  const std::string past = damaged("past.h5", at + 16 + 8, end - at);  // the first object's size
  EXPECT_MENTIONS(past, "past.h5");
  EXPECT_MENTIONS(past, "running past its end");
  const std::string huge = damaged("huge.h5", at + 8, std::uint64_t{1} << 40);  // the collection's size
  EXPECT_MENTIONS(huge, "declares 1099511627776 bytes");
}

// Files on which libhdf5 1.10 itself crashes (found by fuzzing: a segmentation fault, and a free()
// of a pointer it did not allocate, which glibc aborts on). Each is read in a process of its own
// first, and refused naming the file; this process goes on.
// A variable-length string attribute that declares 1.9 GB in a 118 KB file (found by fuzzing):
// libhdf5 allocates and fills what it declares. The checking process may not, and the file is
// refused without this process growing.
TEST(HostileModels, AStringThatDeclaresGigabytesIsRefusedInBoundedMemory) {
  const std::filesystem::path file = test::vectors_dir() / "hostile" / "libhdf5_huge_vlen.h5";
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const std::string why = refusal(file);
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_MENTIONS(why, "libhdf5_huge_vlen.h5");
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "kB more at this process's peak";
  std::printf("[ info ] %s\n", why.c_str());
}

TEST(HostileModels, FilesThatCrashLibhdf5AreRefusedNotCrashingTheProcess) {
  for (const char* name : {"libhdf5_segfault.h5", "libhdf5_bad_free.h5"}) {
    const std::filesystem::path file = test::vectors_dir() / "hostile" / name;
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    const std::string why = refusal(file);
    EXPECT_MENTIONS(why, name);
    std::printf("[ info ] %s\n", why.c_str());
  }
}

// The child's verdict, independent of any libhdf5: a read that dies is refused naming the file
// and how, one that throws is thrown here as it threw there (its type and message), one that
// needs more memory than the file's size allows is refused, one that hangs is killed at its limit.
TEST(HostileModels, TheCheckingProcessReportsCrashesAndHangs) {
  try {
    detail::check_read_in_child("crashing.h5", [] { std::raise(SIGSEGV); });
    ADD_FAILURE() << "a crash was not reported";
  } catch (const IoError& e) {
    EXPECT_MENTIONS(std::string(e.what()), "crashing.h5");
    // The signal itself; under the sanitizers, whose handler reports it, their exit status.
    EXPECT_MENTIONS(std::string(e.what()), "crashed reading it");
  }
  try {
    detail::check_read_in_child("throwing.h5", [] { throw InvalidArgument("throwing.h5: no model_config"); });
    ADD_FAILURE() << "the read's error was not thrown";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "throwing.h5: no model_config");
  }
  EXPECT_THROW(detail::check_read_in_child("damaged.h5", [] { throw IoError("damaged"); }), IoError);
  try {  // 4 GiB where 1 GiB (and 8 bytes for each of the file's, none here) is allowed
    detail::check_read_in_child("greedy.h5", [] {
      std::vector<char> v(std::size_t{4} << 30);
      std::memset(v.data(), 1, v.size());
    });
    ADD_FAILURE() << "a read beyond its memory was not refused";
  } catch (const IoError& e) {
    EXPECT_MENTIONS(std::string(e.what()), "greedy.h5");
    // Release: the allocation fails (std::bad_alloc); under AddressSanitizer, its allocator stops.
    const std::string m = e.what();
    EXPECT_TRUE(m.find("needs more than the 1024 MiB allowed") != std::string::npos ||
                m.find("crashed reading it") != std::string::npos)
        << m;
  }
  EXPECT_NO_THROW(detail::check_read_in_child("fine.h5", [] {}));
  const auto started = std::chrono::steady_clock::now();
  try {
    detail::check_read_in_child(
        "hanging.h5", [] { std::this_thread::sleep_for(std::chrono::seconds(60)); }, std::chrono::seconds(1));
    ADD_FAILURE() << "a hang was not reported";
  } catch (const IoError& e) {
    EXPECT_MENTIONS(std::string(e.what()), "did not end within 1 s");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
}

// A chunked dataset that was never written stores nothing: its declared shape must not be
// allocated (and zero-filled) before the file is seen to hold it.
TEST(HostileModels, AChunkedNeverWrittenDatasetIsRefusedBeforeAllocation) {
  test::TempDir tmp;
  write_h5(tmp / "bomb.h5", kDenseConfig, [&](hid_t w) {
    dense_weights(w, [&](hid_t g) { add_dataset(g, "dense/kernel:0", {16384, 16384}); });  // 1 GiB as float
  });
  EXPECT_LT(std::filesystem::file_size(tmp / "bomb.h5"), 100000u);
  const std::string why = refusal(tmp / "bomb.h5");
  EXPECT_MENTIONS(why, "bomb.h5");
  EXPECT_MENTIONS(why, "dense/kernel:0");
  EXPECT_MENTIONS(why, "stores only");
}

// Dimensions whose product overflows 64 bits (or any size_t) are refused, not wrapped.
TEST(HostileModels, ADimensionProductThatOverflowsIsRefused) {
  test::TempDir tmp;
  write_h5(tmp / "wrap.h5", kDenseConfig, [&](hid_t w) {
    dense_weights(w, [&](hid_t g) { add_dataset(g, "dense/kernel:0", {1ull << 22, 1ull << 21, 1ull << 21}); });
  });
  const std::string why = refusal(tmp / "wrap.h5");
  EXPECT_MENTIONS(why, "wrap.h5");
  EXPECT_MENTIONS(why, "dense/kernel:0");
  EXPECT_MENTIONS(why, "too large");
}

// A file listing one dataset many times must not make it many times in memory: the weights may
// declare no more data than the file holds.
TEST(HostileModels, WeightsListedOverAndOverAreBoundedByTheFileSize) {
  test::TempDir tmp;
  const std::vector<float> kernel(256 * 1024, 0.5f);  // 1 MiB
  write_h5(tmp / "repeat.h5", kDenseConfig, [&](hid_t w) {
    write_string_attr(w, "layer_names", std::vector<std::string>(64, "dense"));
    const hid_t g = H5Gcreate2(w, "dense", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    write_string_attr(g, "weight_names", std::vector<std::string>(64, "dense/kernel:0"));
    add_dataset(g, "dense/kernel:0", {256, 1024}, &kernel);
    H5Gclose(g);
  });
  const std::string why = refusal(tmp / "repeat.h5");
  EXPECT_MENTIONS(why, "repeat.h5");
  EXPECT_MENTIONS(why, "more data than the file holds");
}

// Models nested inside models without end: a clear error, not a stack overflow.
TEST(HostileModels, ModelsNestedTooDeeplyAreRefused) {
  test::TempDir tmp;
  std::string config = R"({"class_name": "Sequential", "config": {"name": "m0", "layers": [
    {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}}, )";
  const int depth = 50;  // within the JSON depth limit: the model depth limit refuses it
  for (int i = 1; i < depth; ++i)
    config += R"({"class_name": "Sequential", "config": {"name": "m)" + std::to_string(i) + R"(", "layers": [)";
  config += R"({"class_name": "Flatten", "config": {"name": "flat"}})";
  for (int i = 1; i < depth; ++i) config += "]}}";
  config += "]}}";
  write_h5(tmp / "deep.h5", config, [](hid_t) {});
  const std::string why = refusal(tmp / "deep.h5");
  EXPECT_MENTIONS(why, "deep.h5");
  EXPECT_MENTIONS(why, "nested more than 32");
}

// JSON nested far deeper than any model (arrays in a layer's config) is refused while parsing.
TEST(HostileModels, JsonNestedTooDeeplyIsRefused) {
  test::TempDir tmp;
  const std::string config = R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
    {"class_name": "Flatten", "config": {"name": "flat", "x": )" +
                             std::string(100000, '[') + std::string(100000, ']') + "}}]}}";
  write_h5(tmp / "deepjson.h5", config, [](hid_t) {});
  const std::string why = refusal(tmp / "deepjson.h5");
  EXPECT_MENTIONS(why, "deepjson.h5");
  EXPECT_MENTIONS(why, "nested deeper than");
}

// A layer whose config has the wrong JSON types or lacks a key: the error names the file and the layer.
TEST(HostileModels, AMalformedLayerConfigNamesTheFileAndTheLayer) {
  test::TempDir tmp;
  const std::vector<std::string> configs = {
      // config is a number
      R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
        {"class_name": "Dense", "name": "broken_layer", "config": 7}]}})",
      // class_name is missing
      R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
        {"config": {"name": "broken_layer"}}]}})",
      // class_name is a number
      R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
        {"class_name": 12, "config": {"name": "broken_layer"}}]}})",
      // an activation given as a list
      R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 4, 3]}},
        {"class_name": "Flatten", "config": {"name": "flat"}},
        {"class_name": "Dense", "config": {"name": "broken_layer", "units": 2, "activation": [1]}}]}})",
  };
  for (std::size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE("config " + std::to_string(i));
    const auto file = tmp / ("bad" + std::to_string(i) + ".h5");
    write_h5(file, configs[i], [](hid_t) {});
    const std::string why = refusal(file);
    EXPECT_MENTIONS(why, file.filename().string());
    EXPECT_MENTIONS(why, "broken_layer");
  }
}

// ---- .keras (zip) ----

std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A .keras archive of config.json and model.weights.h5 (stored, uncompressed), the weights file
// made by `fill` on its root group.
void write_keras(const std::filesystem::path& file, const std::string& config, const std::function<void(hid_t)>& fill) {
  const auto h5 = file.string() + ".weights.h5";
  const hid_t f = H5Fcreate(h5.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  fill(f);
  H5Fclose(f);
  static std::vector<char> weights;  // libzip reads the sources at zip_close
  weights = read_all(h5);
  static std::string cfg;
  cfg = config;
  int err = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  zip_source_t* c = zip_source_buffer(z, cfg.data(), cfg.size(), 0);
  const zip_int64_t ci = zip_file_add(z, "config.json", c, ZIP_FL_OVERWRITE);
  zip_set_file_compression(z, static_cast<zip_uint64_t>(ci), ZIP_CM_STORE, 0);
  zip_source_t* w = zip_source_buffer(z, weights.data(), weights.size(), 0);
  const zip_int64_t wi = zip_file_add(z, "model.weights.h5", w, ZIP_FL_OVERWRITE);
  zip_set_file_compression(z, static_cast<zip_uint64_t>(wi), ZIP_CM_STORE, 0);
  ASSERT_EQ(zip_close(z), 0);
  std::filesystem::remove(h5);
}

// A hard link from a nested model's layers group back to the root's: a cycle, refused by name.
TEST(HostileModels, AKerasWeightsGroupLinkedBackToItsAncestorIsRefused) {
  test::TempDir tmp;
  write_keras(tmp / "cycle.keras", kDenseConfig, [](hid_t f) {
    const hid_t layers = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t inner = H5Gcreate2(layers, "inner", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_hard(f, "layers", inner, "layers", H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(inner);
    H5Gclose(layers);
  });
  const std::string why = refusal(tmp / "cycle.keras");
  EXPECT_MENTIONS(why, "cycle.keras");
  EXPECT_MENTIONS(why, "layers/inner");
}

// Offsets of a zip member's uncompressed-size fields: local header +22, central directory +24.
void patch_declared_size(const std::filesystem::path& file, const std::string& member, std::uint32_t size) {
  std::vector<char> bytes = read_all(file);
  auto patch = [&](const char* signature, std::size_t name_at, std::size_t size_at) {
    for (std::size_t i = 0; i + name_at + member.size() < bytes.size(); ++i) {
      if (std::memcmp(bytes.data() + i, signature, 4) != 0) continue;
      if (std::memcmp(bytes.data() + i + name_at, member.data(), member.size()) != 0) continue;
      std::memcpy(bytes.data() + i + size_at, &size, 4);
    }
  };
  patch("PK\x03\x04", 30, 22);
  patch("PK\x01\x02", 46, 24);
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A member declaring 1 GiB uncompressed while it stores a few bytes: refused before the 1 GiB exists.
TEST(HostileModels, AKerasMemberDeclaringMoreThanTheArchiveHoldsIsRefused) {
  test::TempDir tmp;
  write_keras(tmp / "zipbomb.keras", kDenseConfig, [](hid_t) {});
  patch_declared_size(tmp / "zipbomb.keras", "config.json", 1u << 30);
  const std::string why = refusal(tmp / "zipbomb.keras");
  EXPECT_MENTIONS(why, "zipbomb.keras");
  EXPECT_MENTIONS(why, "config.json");
  EXPECT_MENTIONS(why, "declares");
}

// .keras weights go through the same dataset checks as .h5 ones.
TEST(HostileModels, AKerasNeverWrittenDatasetIsRefused) {
  test::TempDir tmp;
  write_keras(tmp / "unwritten.keras", kDenseConfig, [](hid_t f) {
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t vars = H5Gcreate2(f, "layers/dense/vars", lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    ASSERT_GE(vars, 0);
    write_string_attr(vars, "name", {"dense"}, true);
    add_dataset(vars, "0", {16384, 16384});
    H5Gclose(vars);
  });
  const std::string why = refusal(tmp / "unwritten.keras");
  EXPECT_MENTIONS(why, "unwritten.keras");
  EXPECT_MENTIONS(why, "stores only");
}

// ---- TF.js ----

TEST(HostileModels, ATfjsModelNestedTooDeeplyIsRefused) {
  test::TempDir tmp;
  std::ofstream(tmp / "model.json") << R"({"modelTopology": )" << std::string(100000, '[') << std::string(100000, ']')
                                    << "}";
  const std::string why = refusal(tmp / "model.json");
  EXPECT_MENTIONS(why, "model.json");
  EXPECT_MENTIONS(why, "nested deeper than");
}

}  // namespace
}  // namespace stoker::trainer
