// Fuzzes the TF.js layers-model reader (load_tfjs): model.json, its weightsManifest and the binary
// shards it names.
//
// Input: model.json, optionally followed by shard files, each introduced by the separator
// "\n--shard--\n"; they are written next to model.json as s0.bin, s1.bin, ... (a manifest names
// them in "paths").
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view sep = "\n--shard--\n";
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const std::size_t next = in.find(sep, at);
    parts.push_back(in.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) break;
    at = next + sep.size();
  }
  const auto dir = stoker_fuzz::scratch_dir() / "tfjs";
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 4; ++i) std::filesystem::remove(dir / ("s" + std::to_string(i) + ".bin"));
  for (std::size_t i = 1; i < parts.size() && i <= 4; ++i)
    stoker_fuzz::write_file(dir / ("s" + std::to_string(i - 1) + ".bin"), parts[i]);
  stoker_fuzz::write_file(dir / "model.json", parts[0]);
  try {
    auto m = stoker::trainer::load_tfjs(dir / "model.json");
    (void)m.summary();
  } catch (const stoker::Error& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
