// After the first epoch the disk and the decoder should rest. A SampleCache keeps, per sample,
// either the encoded file bytes (small; decode still runs) or the decoded pixels at the decoder's
// working resolution (large; only the transform is left), within a byte budget that includes its
// own bookkeeping. Entries are admitted while the budget allows and never evicted, so a dataset
// larger than the budget keeps a fixed part cached and streams the rest: no thrashing.
//
// A cache file (see cache_file.hpp) lets the next process start warm: its entries are served from
// a read-only memory map, verified by checksum on first use, and re-read from the source when the
// source's size or mtime changed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/cache/source_stamp.hpp"
#include "stoker/core/image.hpp"

namespace stoker {

enum class CacheKind : std::uint8_t { None, Encoded, Decoded };

const char* to_string(CacheKind k) noexcept;
CacheKind parse_cache_kind(const std::string& name);  // none|encoded|decoded
// "8GiB", "512MiB", "1.5GB", "1000000" → bytes; throws InvalidArgument naming the text.
std::size_t parse_byte_size(const std::string& text);

struct CacheOptions {
  CacheKind kind = CacheKind::None;
  std::size_t budget_bytes = std::size_t{4} << 30;  // RAM for entries + bookkeeping
  // Optional: loaded at start when valid; (re)written after an epoch that added entries.
  std::filesystem::path file;
  // stat() each source on a hit and refresh entries whose size or mtime changed.
  bool validate_sources = true;
};

// What the cache knows about the settings its decoded entries depend on.
struct CacheKey {
  CacheKind kind = CacheKind::None;
  int min_height = 0;  // the decoder's minimum size (DCT scaling) for decoded entries
  int min_width = 0;
  // Decoded entries hold the transform's output when the transform is deterministic: then this is
  // a hash of SampleTransform::cache_identity(); 0 means entries hold the decoder's output.
  std::uint64_t transform = 0;
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
};

struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t admitted = 0;
  std::uint64_t rejected_over_budget = 0;
  std::uint64_t stale_refreshed = 0;  // source changed since the entry was made
  std::uint64_t corrupt_entries = 0;  // checksum mismatch in the cache file
  std::uint64_t bytes_held = 0;       // RAM held by entries + bookkeeping (<= budget)
  std::uint64_t file_entries = 0;     // entries served from the cache file
};

// One cached sample: encoded bytes or a decoded RGB image. Views stay valid until the same sample
// is offered again (only the task that owns the sample does that).
struct CachedSample {
  std::span<const std::uint8_t> encoded;
  ImageView decoded;
};

class CacheFile;

class SampleCache {
 public:
  // `paths[i]` is sample i's source id (its file, or an archive member: see member_source_id).
  // Throws InvalidArgument when the budget cannot hold the bookkeeping, IoError when
  // `options.file` exists but is not a stoker cache file or its folder does not exist or cannot be
  // written (checked now: the file is written after the first epoch).
  SampleCache(CacheOptions options, CacheKey key, std::vector<std::string> paths);
  ~SampleCache();
  SampleCache(const SampleCache&) = delete;
  SampleCache& operator=(const SampleCache&) = delete;

  // A valid entry for the sample, or nullopt (miss). Thread-safe. Throws check_file()'s IoError.
  std::optional<CachedSample> find(std::size_t sample);
  // Throws IoError naming the cache file when another process cut it short while it was mapped:
  // entries from it read as zeros past its new end (not SIGBUS). Call after using what find()
  // returned, whether the use succeeded or not. One atomic load; thread-safe.
  void check_file() const;

  // Offers a freshly read/decoded sample; copied in when the budget allows. Thread-safe.
  void admit_encoded(std::size_t sample, std::span<const std::uint8_t> bytes, const SourceStamp& stamp);
  void admit_decoded(std::size_t sample, const ImageView& image, const SourceStamp& stamp);

  // Writes every valid entry (RAM and file) to options.file: temp name, then rename. Returns
  // false when there is nothing new to write since the file was loaded or last saved. Call it
  // when no find() or admit runs (an epoch's end): it also frees the stale entries' bytes.
  bool save_if_changed();

  const CacheOptions& options() const noexcept { return options_; }
  const CacheKey& key() const noexcept { return key_; }
  CacheStats stats() const noexcept;  // walks the entries: call per epoch, not per sample
  std::uint64_t bytes_held() const noexcept { return used_.load(); }
  std::string file_status() const;  // how the cache file was found at start, for the user

 private:
  struct Entry;
  bool source_unchanged(std::size_t sample, const SourceStamp& recorded);
  bool reserve(std::size_t bytes);

  CacheOptions options_;
  CacheKey key_;
  std::vector<std::string> paths_;
  std::unique_ptr<Entry[]> entries_;
  std::unique_ptr<CacheFile> file_;
  std::string file_status_;
  std::size_t bookkeeping_bytes_ = 0;

  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, admitted_{0}, rejected_{0}, stale_{0}, corrupt_{0};
  std::atomic<bool> dirty_{false};
  std::mutex retired_mutex_;
  std::vector<std::unique_ptr<std::uint8_t[]>> retired_;  // stale entries' bytes, until save_if_changed()
  std::uint64_t retired_bytes_ = 0;
};

}  // namespace stoker
