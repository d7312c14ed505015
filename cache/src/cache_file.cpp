#include "stoker/cache/cache_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mapping_guard.hpp"
#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'O', 'K', 'R', 'C', 'A', 'C'};
constexpr std::uint64_t kAlign = 64;
constexpr std::uint32_t kMaxDim = std::numeric_limits<int>::max();  // SampleCache holds dimensions as int

struct FileHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t kind;
  std::uint32_t min_height;
  std::uint32_t min_width;
  std::uint64_t entry_count;
  std::uint64_t index_offset;
  std::uint64_t strings_offset;
  std::uint64_t strings_size;
  std::uint64_t data_offset;
  std::uint64_t data_size;
  std::uint64_t file_size;
  std::uint64_t index_checksum;  // over the index records and the path strings
  std::uint64_t transform;       // CacheKey::transform
  std::uint8_t reserved[24];
  std::uint64_t header_checksum;  // over every byte above
};
static_assert(sizeof(FileHeader) == 128);

struct FileRecord {
  std::uint64_t path_offset;  // into the strings block
  std::uint32_t path_size;
  std::uint32_t channels;
  std::uint64_t source_size;
  std::int64_t source_mtime_ns;
  std::uint64_t data_offset;  // from the start of the file
  std::uint64_t data_size;
  std::uint32_t height;
  std::uint32_t width;
  std::uint64_t checksum;
};
static_assert(sizeof(FileRecord) == 64);

std::uint64_t align_up(std::uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// [offset, offset + size) lies within [0, limit), without overflowing on bogus 64-bit fields.
bool within(std::uint64_t offset, std::uint64_t size, std::uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

std::unique_ptr<CacheFile> CacheFile::open(const std::filesystem::path& path, const CacheKey& key) {
  std::unique_ptr<CacheFile> f(new CacheFile());
  f->load(path, &key);
  return f;
}

std::unique_ptr<CacheFile> CacheFile::inspect(const std::filesystem::path& path) {
  std::unique_ptr<CacheFile> f(new CacheFile());
  f->load(path, nullptr);
  return f;
}

CacheFile::~CacheFile() {
  guard_.reset();  // before the pages go
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

// A page that is gone faults (the guard); the bytes of the new last page past the new end read as
// zeros without a fault, so the size is looked at too.
bool CacheFile::truncated_in_use() const noexcept {
  if (guard_ && guard_->damaged()) return true;
  struct stat st {};
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < size_;
}

void CacheFile::load(const std::filesystem::path& path, const CacheKey* expected) {
  path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return;  // Missing
    throw IoError(path.string() + ": cannot open cache file: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path.string() + ": the cache file path is not a regular file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  auto stale = [&](std::string why) {
    state_ = CacheFileState::Stale;
    problem_ = std::move(why);
    entries_.clear();
    by_path_.clear();
  };
  if (size_ == 0) {
    ::close(fd);
    stale("empty file");
    return;
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw IoError(path.string() + ": cannot map cache file: " + std::strerror(e));
  }
  fd_ = fd;  // kept to see the file's size while it is in use
  map_ = static_cast<const std::uint8_t*>(m);
  guard_ = std::make_unique<detail::MappingGuard>(map_, size_);

  if (size_ < sizeof(kMagic) || std::memcmp(map_, kMagic, sizeof(kMagic)) != 0) {
    state_ = CacheFileState::Foreign;
    problem_ = "not a stoker cache file (no STOKRCAC signature)";
    return;
  }
  if (size_ < sizeof(FileHeader)) return stale("truncated header (" + std::to_string(size_) + " bytes)");
  FileHeader h;
  std::memcpy(&h, map_, sizeof h);
  if (checksum64(&h, offsetof(FileHeader, header_checksum)) != h.header_checksum) return stale("corrupt header");
  if (h.version != kCacheFileVersion) {
    return stale("format version " + std::to_string(h.version) + ", this stoker reads version " +
                 std::to_string(kCacheFileVersion));
  }
  if (h.file_size != size_) {
    return stale("truncated or torn: " + std::to_string(size_) + " bytes, the header says " +
                 std::to_string(h.file_size));
  }
  if (h.kind != static_cast<std::uint32_t>(CacheKind::Encoded) &&
      h.kind != static_cast<std::uint32_t>(CacheKind::Decoded))
    return stale("unknown cache kind " + std::to_string(h.kind));
  if (h.min_height > static_cast<std::uint32_t>(std::numeric_limits<int>::max()) ||
      h.min_width > static_cast<std::uint32_t>(std::numeric_limits<int>::max()))
    return stale("implausible minimum size " + std::to_string(h.min_height) + "x" + std::to_string(h.min_width));
  key_ = CacheKey{static_cast<CacheKind>(h.kind), static_cast<int>(h.min_height), static_cast<int>(h.min_width),
                  h.transform};
  if (expected && !(key_ == *expected)) {
    auto describe = [](const CacheKey& k) {
      return std::string(to_string(k.kind)) + " cache at minimum size " + std::to_string(k.min_height) + "x" +
             std::to_string(k.min_width) + (k.transform ? " (transform outputs)" : "");
    };
    return stale("built for a " + describe(key_) + ", this run needs a " + describe(*expected));
  }
  if (h.entry_count > size_ / sizeof(FileRecord)) return stale("inconsistent layout");
  const std::uint64_t index_bytes = h.entry_count * sizeof(FileRecord);
  if (h.index_offset != sizeof(FileHeader) || !within(h.index_offset, index_bytes, size_) ||
      h.strings_offset != h.index_offset + index_bytes || !within(h.strings_offset, h.strings_size, size_) ||
      !within(h.data_offset, h.data_size, size_)) {
    return stale("inconsistent layout");
  }
  if (checksum64(map_ + h.index_offset, index_bytes + h.strings_size) != h.index_checksum) {
    return stale("corrupt index");
  }
  const char* strings = reinterpret_cast<const char*>(map_ + h.strings_offset);
  entries_.reserve(h.entry_count);
  for (std::uint64_t i = 0; i < h.entry_count; ++i) {
    FileRecord r;
    std::memcpy(&r, map_ + h.index_offset + i * sizeof(FileRecord), sizeof r);
    if (!within(r.path_offset, r.path_size, h.strings_size) || r.data_offset < h.data_offset ||
        !within(r.data_offset - h.data_offset, r.data_size, h.data_size)) {
      return stale("entry " + std::to_string(i) + " points outside the file");
    }
    CacheFileEntry e;
    e.path.assign(strings + r.path_offset, r.path_size);
    e.stamp = SourceStamp{r.source_size, r.source_mtime_ns};
    e.data_offset = r.data_offset;
    e.data_size = r.data_size;
    e.height = r.height;
    e.width = r.width;
    e.channels = r.channels;
    e.checksum = r.checksum;
    // Decoded entries become cv::Mat-like images indexed with int: each dimension must fit, and
    // the product is checked for overflow so a wrapped product cannot match data_size by accident.
    std::uint64_t pixels = 0, values = 0;
    const bool wraps = __builtin_mul_overflow(std::uint64_t{e.height}, std::uint64_t{e.width}, &pixels) ||
                       __builtin_mul_overflow(pixels, std::uint64_t{e.channels}, &values);
    if (key_.kind == CacheKind::Decoded &&
        (e.height > kMaxDim || e.width > kMaxDim || e.channels > kMaxDim || wraps || values != e.data_size)) {
      return stale("entry " + std::to_string(i) + " has a size that does not match its image shape");
    }
    by_path_.emplace(e.path, static_cast<std::int64_t>(i));
    entries_.push_back(std::move(e));
  }
  state_ = CacheFileState::Valid;
}

std::span<const std::uint8_t> CacheFile::data(const CacheFileEntry& e) const noexcept {
  return {map_ + e.data_offset, static_cast<std::size_t>(e.data_size)};
}

std::int64_t CacheFile::find(const std::string& path) const {
  const auto it = by_path_.find(path);
  return it == by_path_.end() ? -1 : it->second;
}

void write_cache_file(const std::filesystem::path& path, const CacheKey& key,
                      const std::vector<CacheFileRecord>& records) {
  std::vector<FileRecord> index(records.size());
  std::string strings;
  std::uint64_t data_offset = 0;  // relative to the data block for now
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& m = records[i].meta;
    FileRecord& r = index[i];
    r.path_offset = strings.size();
    r.path_size = static_cast<std::uint32_t>(m.path.size());
    strings += m.path;
    r.channels = m.channels;
    r.source_size = m.stamp.size;
    r.source_mtime_ns = m.stamp.mtime_ns;
    r.data_offset = data_offset;
    r.data_size = records[i].data.size();
    r.height = m.height;
    r.width = m.width;
    r.checksum = m.checksum != 0 ? m.checksum : checksum64(records[i].data.data(), records[i].data.size());
    data_offset = align_up(data_offset + r.data_size);
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kCacheFileVersion;
  h.kind = static_cast<std::uint32_t>(key.kind);
  h.min_height = static_cast<std::uint32_t>(key.min_height);
  h.min_width = static_cast<std::uint32_t>(key.min_width);
  h.transform = key.transform;
  h.entry_count = records.size();
  h.index_offset = sizeof(FileHeader);
  h.strings_offset = h.index_offset + index.size() * sizeof(FileRecord);
  h.strings_size = strings.size();
  h.data_offset = align_up(h.strings_offset + h.strings_size);
  h.data_size = data_offset;
  h.file_size = h.data_offset + h.data_size;
  for (auto& r : index) r.data_offset += h.data_offset;
  {
    std::string block(reinterpret_cast<const char*>(index.data()), index.size() * sizeof(FileRecord));
    block += strings;
    h.index_checksum = checksum64(block.data(), block.size());
  }
  h.header_checksum = checksum64(&h, offsetof(FileHeader, header_checksum));

  const std::filesystem::path tmp = temporary_path(path);
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) throw IoError(tmp.string() + ": cannot create cache file: " + std::strerror(errno));
  bool ok = std::fwrite(&h, sizeof h, 1, out) == 1;
  ok = ok && (index.empty() || std::fwrite(index.data(), sizeof(FileRecord), index.size(), out) == index.size());
  ok = ok && std::fwrite(strings.data(), 1, strings.size(), out) == strings.size();
  static const std::uint8_t zeros[kAlign] = {};
  auto pad_to = [&](std::uint64_t offset) {
    const long pos = std::ftell(out);
    if (pos < 0 || static_cast<std::uint64_t>(pos) > offset) return false;
    return std::fwrite(zeros, 1, offset - static_cast<std::uint64_t>(pos), out) ==
           offset - static_cast<std::uint64_t>(pos);
  };
  for (std::size_t i = 0; ok && i < records.size(); ++i) {
    ok = pad_to(index[i].data_offset) &&
         std::fwrite(records[i].data.data(), 1, records[i].data.size(), out) == records[i].data.size();
  }
  ok = ok && pad_to(h.file_size) && std::fflush(out) == 0;
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IoError(path.string() + ": cannot write cache file: " + why);
  }
  commit_file(tmp, path);  // synced, renamed over the old file, the folder synced
}

}  // namespace stoker
