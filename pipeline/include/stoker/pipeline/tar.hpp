// Tar archives as sample containers (WebDataset shards): an index of the members read from their
// headers alone (the data is seeked over, never read), and a writer of plain ustar archives.
//
// Read: POSIX ustar (name + prefix), PAX extended headers ('x' for the next member, 'g' for all
// that follow; the keys path and size are used, others ignored), GNU long names ('L'; 'K' long
// link names are read and ignored), base-256 sizes. Only regular files ('0', '\0', '7') become
// members; directories, links and devices are passed over.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace stoker {

struct TarMember {
  std::string name;                 // full path inside the archive (PAX/GNU long names applied)
  std::uint64_t header_offset = 0;  // where its (first) header block starts
  std::uint64_t offset = 0;         // where its data starts
  std::uint64_t size = 0;           // data bytes
};

struct TarIndex {
  std::vector<TarMember> members;  // regular files, in archive order
  std::uint64_t file_size = 0;
  // Empty when the archive was read to its end. With keep_partial, why the index stopped early
  // (a truncated archive, a bad header checksum, ...); the members before the damage are kept.
  std::string problem;
};

// Indexes `shard`. Throws DatasetError naming the shard and the member (or the byte offset of the
// header) for a bad checksum, a malformed header, a member whose data runs past the end, or a
// truncated archive; with keep_partial those end the index instead and are reported in
// `problem`. A file that cannot be opened is always an error.
TarIndex index_tar(const std::filesystem::path& shard, bool keep_partial = false);

// Writes a ustar archive member by member (names up to 255 bytes, split at a '/' into prefix and
// name when over 100), under a temporary name beside `path`: finish() writes the end-of-archive
// blocks, syncs the file and renames it to `path`, so that a file under that name is always a
// whole archive; an archive not finished is removed by the destructor (a killed process leaves
// only the temporary). Throws IoError naming the file on any write failure.
class TarWriter {
 public:
  explicit TarWriter(std::filesystem::path path);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  void add(const std::string& name, std::span<const std::uint8_t> data, std::int64_t mtime = 0);
  void finish();
  std::uint64_t bytes_written() const noexcept { return written_; }
  const std::filesystem::path& path() const noexcept { return path_; }

  // Archive bytes one member of `data_size` bytes takes: header + data padded to 512.
  static std::uint64_t member_bytes(std::uint64_t data_size) noexcept { return 512 + (data_size + 511) / 512 * 512; }
  // Bytes finish() adds to an archive of `written` bytes (two zero blocks, padded to 10240).
  static std::uint64_t end_bytes(std::uint64_t written) noexcept;

 private:
  void write(const void* data, std::size_t size);

  std::filesystem::path path_, tmp_;  // the archive's name; what is written until finish()
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0;
};

}  // namespace stoker
