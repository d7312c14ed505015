#include "stoker/cache/sample_cache.hpp"

#include <cctype>
#include <cmath>
#include <cstring>

#include <unistd.h>

#include "stoker/cache/cache_file.hpp"
#include "stoker/core/error.hpp"

namespace stoker {

const char* to_string(CacheKind k) noexcept {
  switch (k) {
    case CacheKind::None: return "none";
    case CacheKind::Encoded: return "encoded";
    case CacheKind::Decoded: return "decoded";
  }
  return "?";
}

CacheKind parse_cache_kind(const std::string& name) {
  if (name == "none") return CacheKind::None;
  if (name == "encoded") return CacheKind::Encoded;
  if (name == "decoded") return CacheKind::Decoded;
  throw InvalidArgument("cache kind must be none, encoded or decoded, received '" + name + "'");
}

std::size_t parse_byte_size(const std::string& text) {
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    throw InvalidArgument("byte size must look like 8GiB, 512MiB or 1000000, received '" + text + "'");
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gb") scale = 1e9;
  else if (unit == "t" || unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0 || !(value >= 0) || !std::isfinite(value)) {
    throw InvalidArgument("byte size must look like 8GiB, 512MiB or 1000000, received '" + text + "'");
  }
  return static_cast<std::size_t>(value * scale);
}

// Entry states: published with release stores, read with acquire loads. A sample can be in flight
// twice at once (a rank's epoch repeats samples to even out the ranks): the task that moves an
// entry out of kEmpty or out of a stale state claims it first (kBusy, a compare-exchange), and
// the other one takes a miss and leaves the entry alone.
enum : int { kEmpty = 0, kRam = 1, kFileUnverified = 2, kFileVerified = 3, kBusy = 4 };

struct SampleCache::Entry {
  std::atomic<int> state{kEmpty};
  std::unique_ptr<std::uint8_t[]> ram;
  std::size_t size = 0;
  int height = 0, width = 0, channels = 0;
  SourceStamp stamp;
  std::int64_t file_index = -1;
};

namespace {
constexpr std::size_t kAllocationOverhead = 32;  // what the allocator keeps next to each block

// The cache file is written at the end of the first epoch, into its folder (temp name, then
// rename): a folder that does not exist or cannot be written is reported now, not an epoch later.
void require_writable_folder(const std::filesystem::path& file) {
  const std::filesystem::path folder = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    throw IoError(file.string() + ": cannot write the cache file: " + folder.string() + " is not an existing folder");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw IoError(file.string() + ": cannot write the cache file in " + folder.string() + ": " + std::strerror(errno));
  }
}
}  // namespace

SampleCache::SampleCache(CacheOptions options, CacheKey key, std::vector<std::string> paths)
    : options_(std::move(options)), key_(key), paths_(std::move(paths)), entries_(new Entry[paths_.size()]) {
  if (key_.kind == CacheKind::None) throw InvalidArgument("SampleCache needs cache kind encoded or decoded");
  bookkeeping_bytes_ = sizeof(SampleCache) + paths_.size() * (sizeof(Entry) + sizeof(std::string));
  for (const auto& p : paths_) bookkeeping_bytes_ += p.capacity() > 15 ? p.capacity() + kAllocationOverhead : 0;

  if (!options_.file.empty()) {
    require_writable_folder(options_.file);
    file_ = CacheFile::open(options_.file, key_);
    switch (file_->state()) {
      case CacheFileState::Missing: file_status_ = "no cache file yet; it will be written after the first epoch"; break;
      case CacheFileState::Foreign:
        throw IoError(options_.file.string() + ": " + file_->problem() + "; refusing to use or overwrite it");
      case CacheFileState::Stale:
        file_status_ = "cache file unusable (" + file_->problem() + "); it will be rebuilt";
        break;
      case CacheFileState::Valid: {
        std::size_t matched = 0;
        for (std::size_t i = 0; i < paths_.size(); ++i) {
          const std::int64_t fi = file_->find(paths_[i]);
          if (fi < 0) continue;
          const auto& e = file_->entries()[static_cast<std::size_t>(fi)];
          Entry& entry = entries_[i];
          entry.file_index = fi;
          entry.size = e.data_size;
          entry.height = static_cast<int>(e.height);
          entry.width = static_cast<int>(e.width);
          entry.channels = static_cast<int>(e.channels);
          entry.stamp = e.stamp;
          entry.state.store(kFileUnverified, std::memory_order_release);
          ++matched;
        }
        // The file's index (parsed entries and the path map) lives in RAM too.
        for (const auto& e : file_->entries()) bookkeeping_bytes_ += sizeof(e) + e.path.capacity() + 64;
        file_status_ = "cache file " + options_.file.string() + ": " + std::to_string(matched) + " of " +
                       std::to_string(paths_.size()) + " samples";
        if (matched < paths_.size()) dirty_ = true;  // the file should grow to cover the rest
        break;
      }
    }
  }
  if (bookkeeping_bytes_ > options_.budget_bytes) {
    throw InvalidArgument("cache budget of " + std::to_string(options_.budget_bytes) +
                          " bytes cannot hold its own index (" + std::to_string(bookkeeping_bytes_) + " bytes for " +
                          std::to_string(paths_.size()) + " samples)");
  }
  used_ = bookkeeping_bytes_;
}

SampleCache::~SampleCache() = default;

bool SampleCache::reserve(std::size_t bytes) {
  std::uint64_t used = used_.load();
  do {
    if (used + bytes > options_.budget_bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

bool SampleCache::source_unchanged(std::size_t sample, const SourceStamp& recorded) {
  if (!options_.validate_sources) return true;
  const auto now = stamp_of(source_file(paths_[sample]));
  return now && *now == recorded;
}

void SampleCache::check_file() const {
  if (file_ && file_->truncated_in_use()) {
    throw IoError(options_.file.string() +
                  ": the cache file was cut short by another process while this one used it (its entries past the new "
                  "end are gone); start again: it will be rebuilt");
  }
}

std::optional<CachedSample> SampleCache::find(std::size_t sample) {
  check_file();
  Entry& e = entries_[sample];
  int state = e.state.load(std::memory_order_acquire);
  if (state == kEmpty || state == kBusy) {
    ++misses_;
    return std::nullopt;
  }
  if (!source_unchanged(sample, e.stamp)) {
    ++misses_;
    if (!e.state.compare_exchange_strong(state, kBusy, std::memory_order_acq_rel)) return std::nullopt;
    ++stale_;
    if (state == kRam) {
      // Another copy of this sample in flight may still read these bytes: freed when no task runs.
      std::lock_guard lock(retired_mutex_);
      retired_.push_back(std::move(e.ram));
      retired_bytes_ += e.size + kAllocationOverhead;
    }
    e.state.store(kEmpty, std::memory_order_release);
    dirty_ = true;
    return std::nullopt;
  }
  const std::uint8_t* data = nullptr;
  if (state == kRam) {
    data = e.ram.get();
  } else {
    const auto bytes = file_->data(file_->entries()[static_cast<std::size_t>(e.file_index)]);
    if (state == kFileUnverified) {
      if (checksum64(bytes.data(), bytes.size()) != file_->entries()[static_cast<std::size_t>(e.file_index)].checksum) {
        ++misses_;
        if (e.state.compare_exchange_strong(state, kEmpty, std::memory_order_acq_rel)) {
          ++corrupt_;
          dirty_ = true;
        }
        return std::nullopt;
      }
      e.state.compare_exchange_strong(state, kFileVerified, std::memory_order_acq_rel);
    }
    data = bytes.data();
  }
  ++hits_;
  CachedSample out;
  if (key_.kind == CacheKind::Encoded) {
    out.encoded = {data, e.size};
  } else {
    out.decoded = ImageView{data, e.height, e.width, e.channels,
                            static_cast<std::size_t>(e.width) * static_cast<std::size_t>(e.channels)};
  }
  return out;
}

void SampleCache::admit_encoded(std::size_t sample, std::span<const std::uint8_t> bytes, const SourceStamp& stamp) {
  Entry& e = entries_[sample];
  int empty = kEmpty;
  if (key_.kind != CacheKind::Encoded || !e.state.compare_exchange_strong(empty, kBusy, std::memory_order_acq_rel)) {
    return;
  }
  if (!reserve(bytes.size() + kAllocationOverhead)) {
    ++rejected_;
    e.state.store(kEmpty, std::memory_order_release);
    return;
  }
  e.ram.reset(new std::uint8_t[bytes.size()]);
  std::memcpy(e.ram.get(), bytes.data(), bytes.size());
  e.size = bytes.size();
  e.stamp = stamp;
  e.file_index = -1;
  ++admitted_;
  dirty_ = true;
  e.state.store(kRam, std::memory_order_release);
}

void SampleCache::admit_decoded(std::size_t sample, const ImageView& image, const SourceStamp& stamp) {
  Entry& e = entries_[sample];
  int empty = kEmpty;
  if (key_.kind != CacheKind::Decoded || !e.state.compare_exchange_strong(empty, kBusy, std::memory_order_acq_rel)) {
    return;
  }
  const std::size_t row = static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.channels);
  const std::size_t bytes = row * static_cast<std::size_t>(image.height);
  if (!reserve(bytes + kAllocationOverhead)) {
    ++rejected_;
    e.state.store(kEmpty, std::memory_order_release);
    return;
  }
  e.ram.reset(new std::uint8_t[bytes]);
  for (int y = 0; y < image.height; ++y)
    std::memcpy(e.ram.get() + row * static_cast<std::size_t>(y), image.row(y), row);
  e.size = bytes;
  e.height = image.height;
  e.width = image.width;
  e.channels = image.channels;
  e.stamp = stamp;
  e.file_index = -1;
  ++admitted_;
  dirty_ = true;
  e.state.store(kRam, std::memory_order_release);
}

bool SampleCache::save_if_changed() {
  {  // no task runs now: the stale entries' bytes can go
    std::lock_guard lock(retired_mutex_);
    retired_.clear();
    used_ -= retired_bytes_;
    retired_bytes_ = 0;
  }
  if (options_.file.empty() || !dirty_.exchange(false)) return false;
  std::vector<CacheFileRecord> records;
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    Entry& e = entries_[i];
    const int state = e.state.load(std::memory_order_acquire);
    if (state == kEmpty || state == kBusy) continue;
    CacheFileRecord r;
    r.meta.path = paths_[i];
    r.meta.stamp = e.stamp;
    r.meta.height = static_cast<std::uint32_t>(e.height);
    r.meta.width = static_cast<std::uint32_t>(e.width);
    r.meta.channels = static_cast<std::uint32_t>(e.channels);
    if (state == kRam) {
      r.data = {e.ram.get(), e.size};
    } else {
      const auto& fe = file_->entries()[static_cast<std::size_t>(e.file_index)];
      r.data = file_->data(fe);
      r.meta.checksum = fe.checksum;  // bytes changed under the mapping fail it when read back
      if (state == kFileUnverified && checksum64(r.data.data(), r.data.size()) != fe.checksum) {
        ++corrupt_;
        e.state.store(kEmpty, std::memory_order_release);
        continue;  // never copy a corrupt entry into the new file
      }
    }
    records.push_back(std::move(r));
  }
  try {
    check_file();
    write_cache_file(options_.file, key_, records);
    check_file();
  } catch (...) {
    dirty_ = true;  // not written: the next save tries again
    throw;
  }
  return true;
}

CacheStats SampleCache::stats() const noexcept {
  CacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.admitted = admitted_.load();
  s.rejected_over_budget = rejected_.load();
  s.stale_refreshed = stale_.load();
  s.corrupt_entries = corrupt_.load();
  s.bytes_held = used_.load();
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    const int st = entries_[i].state.load(std::memory_order_relaxed);
    if (st == kFileUnverified || st == kFileVerified) ++s.file_entries;
  }
  return s;
}

std::string SampleCache::file_status() const { return file_status_; }

}  // namespace stoker
