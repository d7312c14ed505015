// check_global_heaps_in_file / _in_image (hdf5_handles.hpp): the global heap collections of an
// HDF5 file, checked as libhdf5 1.10's H5HG__cache_heap_deserialize walks them (HDF5 file format
// specification, "Global Heap"), so that a damaged one is refused instead of looping or reading
// out of bounds.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>

#include <stoker/core/error.hpp>

#include "hdf5_handles.hpp"

namespace stoker::trainer::detail {
namespace {

// Reads up to n bytes at an offset (fewer at the end of the bytes).
using ReadAt = std::function<std::string(std::uint64_t offset, std::size_t n)>;

std::uint64_t little_endian(std::string_view bytes, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  return v;
}

// The file's "size of lengths" (2, 4 or 8 bytes) from its superblock, which lies at byte 0, 512,
// 1024, 2048, ...; 0 when there is none in `head` (libhdf5 then refuses the file itself).
int size_of_lengths(std::string_view head) {
  static constexpr char kSignature[] = "\x89HDF\r\n\x1a\n";
  for (std::size_t at = 0; at + 16 <= head.size(); at = at ? at * 2 : 512) {
    if (head.compare(at, 8, kSignature, 8) != 0) continue;
    const auto version = static_cast<unsigned char>(head[at + 8]);
    const int n = static_cast<unsigned char>(head[at + (version < 2 ? 14 : 10)]);
    return n == 2 || n == 4 || n == 8 ? n : 0;
  }
  return 0;
}

[[noreturn]] void damaged(const std::string& where, std::uint64_t collection, const std::string& why) {
  throw IoError(where + ": damaged HDF5 file: the global heap collection at byte " + std::to_string(collection) + " " +
                why);
}

// One collection at `offset`: "GCOL", version 1, 3 reserved bytes, its size (header included);
// then objects — index (2 bytes), reference count (2), reserved (4), size — each padded to 8
// bytes, the free space (index 0) last, its size counting its header and never padded.
void check_collection(const ReadAt& read, std::uint64_t file_size, std::uint64_t offset, int lengths,
                      const std::string& where) {
  const std::size_t header = 8 + static_cast<std::size_t>(lengths), object_header = header;
  const std::string head = read(offset, header);
  if (head.size() < header) damaged(where, offset, "is cut short");
  const std::uint64_t size = little_endian(head, 8, lengths);
  if (size < header || size > file_size - offset)
    damaged(where, offset,
            "declares " + std::to_string(size) + " bytes, the file holds " + std::to_string(file_size - offset));
  const std::string bytes = read(offset, static_cast<std::size_t>(size));
  for (std::size_t p = header; p < size && p + object_header <= size;) {
    const auto index = little_endian(bytes, p, 2);
    const std::uint64_t object = little_endian(bytes, p + 8, lengths);
    if (object > size) damaged(where, offset, "holds an object of " + std::to_string(object) + " bytes");
    const std::uint64_t need = index ? object_header + (object + 7) / 8 * 8 : object;
    if (need == 0) damaged(where, offset, "holds free space of size 0 (libhdf5 would loop for ever)");
    if (need > size - p) damaged(where, offset, "holds object " + std::to_string(index) + " running past its end");
    p += static_cast<std::size_t>(need);
  }
}

void check(const ReadAt& read, std::uint64_t file_size, const std::string& where) {
  const int lengths = size_of_lengths(read(0, 64 * 1024));
  if (lengths == 0) return;
  // A collection starts with "GCOL" and version 1 and zeros; weights that happen to hold those 8
  // bytes would be walked as one (about one chance in 2^64 per position).
  static constexpr std::string_view kCollection("GCOL\x01\0\0\0", 8);
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (std::uint64_t at = 0; at < file_size; at += kChunk) {
    const std::string chunk = read(at, kChunk + kCollection.size() - 1);  // a signature across the seam too
    for (std::size_t hit = chunk.find(kCollection); hit != std::string::npos && hit < kChunk;
         hit = chunk.find(kCollection, hit + 1))
      check_collection(read, file_size, at + hit, lengths, where);
  }
}

}  // namespace

void check_global_heaps_in_file(const std::filesystem::path& file, const std::string& where) {
  std::ifstream in(file, std::ios::binary);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (!in || ec) throw IoError(where + ": cannot read the file" + (ec ? ": " + ec.message() : std::string()));
  check(
      [&](std::uint64_t offset, std::size_t n) {
        std::string bytes(static_cast<std::size_t>(std::min<std::uint64_t>(n, size - std::min(offset, size))), '\0');
        in.clear();
        in.seekg(static_cast<std::streamoff>(offset));
        in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        bytes.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
        return bytes;
      },
      size, where);
}

void check_global_heaps_in_image(std::string_view image, const std::string& where) {
  check(
      [&](std::uint64_t offset, std::size_t n) {
        return offset >= image.size() ? std::string() : std::string(image.substr(static_cast<std::size_t>(offset), n));
      },
      image.size(), where);
}

}  // namespace stoker::trainer::detail
