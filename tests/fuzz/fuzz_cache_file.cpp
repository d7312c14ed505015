// Fuzzes the cache file reader (CacheFile::open / inspect) on arbitrary file contents.
//
// Input: byte 0 is a mode, the rest is the file. Mode bit 0 set: the harness recomputes the index
// and header checksums the way write_cache_file does (when the header's layout fields let it), so
// the fuzzer gets past them and exercises the layout and record checks behind them.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <stoker/cache/cache_file.hpp>
#include <stoker/core/error.hpp>

#include "fuzz_util.hpp"

namespace {

// Offsets in the 128-byte header (cache_file.hpp documents the layout).
constexpr std::size_t kEntryCount = 24, kIndexOffset = 32, kStringsSize = 48, kIndexChecksum = 80,
                      kHeaderChecksum = 120;

std::uint64_t get64(const std::string& s, std::size_t at) {
  std::uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void put64(std::string& s, std::size_t at, std::uint64_t v) { std::memcpy(s.data() + at, &v, 8); }

void fix_checksums(std::string& file) {
  if (file.size() < 128) return;
  const std::uint64_t count = get64(file, kEntryCount), index = get64(file, kIndexOffset),
                      strings = get64(file, kStringsSize);
  if (index <= file.size() && count <= (file.size() - index) / 64 && strings <= file.size() - index - count * 64)
    put64(file, kIndexChecksum, stoker::checksum64(file.data() + index, count * 64 + strings));
  put64(file, kHeaderChecksum, stoker::checksum64(file.data(), kHeaderChecksum));
}

void exercise(stoker::CacheFile& f) {
  if (std::getenv("STOKER_FUZZ_VERBOSE"))
    std::fprintf(stderr, "state %d (%s), %zu entries\n", static_cast<int>(f.state()), f.problem().c_str(),
                 f.entries().size());
  if (f.state() != stoker::CacheFileState::Valid) return;
  volatile std::uint64_t sink = 0;
  for (const auto& e : f.entries()) {
    auto bytes = f.data(e);
    sink = sink + stoker::checksum64(bytes.data(), bytes.size());  // touches every byte of the entry
    if (f.find(e.path) < 0) std::abort();
  }
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) fix_checksums(file);
  const auto path = stoker_fuzz::scratch_dir() / "cache.bin";
  stoker_fuzz::write_file(path, file);
  try {
    auto f = stoker::CacheFile::inspect(path);
    exercise(*f);
  } catch (const stoker::Error&) {}
  try {
    auto f = stoker::CacheFile::open(path, stoker::CacheKey{stoker::CacheKind::Decoded, 32, 32, 0});
    exercise(*f);
  } catch (const stoker::Error&) {}
  try {
    auto f = stoker::CacheFile::open(path, stoker::CacheKey{stoker::CacheKind::Encoded, 0, 0, 0});
    exercise(*f);
  } catch (const stoker::Error&) {}
  return 0;
}
