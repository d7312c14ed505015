// The on-disk cache file: a memory-mapped, read-only image of a SampleCache.
//
// Layout (little-endian): a 128-byte header (magic "STOKRCAC", format version, cache key, counts,
// offsets, a checksum of the index and one of the header itself), the index (one 64-byte record
// per entry), the path strings, then each entry's data 64-byte aligned. Every entry records its
// source's size and mtime and a 64-bit checksum of its data. Files are written to a temporary name
// and renamed when complete, so a reader sees either the old file or the whole new one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "stoker/cache/sample_cache.hpp"
#include "stoker/core/checksum.hpp"  // checksum64, for the entries, the index and the header

namespace stoker {

namespace detail {
class MappingGuard;
}

constexpr std::uint32_t kCacheFileVersion = 1;

struct CacheFileEntry {
  std::string path;
  SourceStamp stamp;
  std::uint64_t data_offset = 0;
  std::uint64_t data_size = 0;
  std::uint32_t height = 0, width = 0, channels = 0;  // decoded entries
  std::uint64_t checksum = 0;
};

// Outcome of opening a cache file.
enum class CacheFileState { Missing, Valid, Stale, Foreign };

class CacheFile {
 public:
  // Maps and validates `path`. State Missing (no file), Valid, Stale (ours but unusable: older
  // version, other key, truncated, torn or corrupt header/index; `problem()` says which), or
  // Foreign (not a stoker cache file at all: never overwritten).
  static std::unique_ptr<CacheFile> open(const std::filesystem::path& path, const CacheKey& key);
  ~CacheFile();

  CacheFileState state() const noexcept { return state_; }
  const std::string& problem() const noexcept { return problem_; }
  const CacheKey& key() const noexcept { return key_; }
  const std::vector<CacheFileEntry>& entries() const noexcept { return entries_; }
  std::span<const std::uint8_t> data(const CacheFileEntry& e) const noexcept;
  std::uint64_t file_bytes() const noexcept { return size_; }
  // Another process cut the file short while it was mapped: data() past its new end read as
  // zeros (a page that is gone as well: a SIGBUS guard keeps the process alive). Check after
  // using data(); one fstat.
  bool truncated_in_use() const noexcept;
  const std::filesystem::path& path() const noexcept { return path_; }

  // Index of the entry for `path`, or -1.
  std::int64_t find(const std::string& path) const;

  // Opens any stoker cache file without a key to compare against (for `stoker cache info`).
  static std::unique_ptr<CacheFile> inspect(const std::filesystem::path& path);

 private:
  CacheFile() = default;
  void load(const std::filesystem::path& path, const CacheKey* expected);

  CacheFileState state_ = CacheFileState::Missing;
  std::string problem_;
  CacheKey key_;
  std::vector<CacheFileEntry> entries_;
  std::unordered_map<std::string, std::int64_t> by_path_;
  const std::uint8_t* map_ = nullptr;
  std::uint64_t size_ = 0;
  std::filesystem::path path_;
  int fd_ = -1;
  std::unique_ptr<detail::MappingGuard> guard_;
};

// One entry to write: its metadata and where its bytes are now. A nonzero meta.checksum is
// written as it is (an entry copied from a mapped file keeps the checksum it was verified with, so
// bytes that changed under the mapping are found when the new file is read).
struct CacheFileRecord {
  CacheFileEntry meta;
  std::span<const std::uint8_t> data;
};

// Writes a complete cache file atomically (temp file in the same folder + fsync + rename).
void write_cache_file(const std::filesystem::path& path, const CacheKey& key,
                      const std::vector<CacheFileRecord>& records);

}  // namespace stoker
