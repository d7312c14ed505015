// Fuzzes the tar index (index_tar) on arbitrary archive contents, in both modes.
//
// Input: byte 0 is a mode, the rest is the archive. Mode bit 0 set: the harness rewrites the
// checksum field of every 512-byte block that could be a header, the way a tar writer does, so
// the fuzzer gets past the checksum to the size, PAX and GNU long-name handling behind it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <stoker/core/error.hpp>
#include <stoker/pipeline/tar.hpp>

#include "fuzz_util.hpp"

namespace {

void fix_checksums(std::string& file) {
  for (std::size_t at = 0; at + 512 <= file.size(); at += 512) {
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(file[at + i]);
    }
    std::snprintf(file.data() + at + 148, 8, "%06o", sum & 0777777);
    file[at + 155] = ' ';
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) fix_checksums(file);
  const auto path = stoker_fuzz::scratch_dir() / "archive.tar";
  stoker_fuzz::write_file(path, file);
  for (bool keep_partial : {false, true}) {
    try {
      const stoker::TarIndex index = stoker::index_tar(path, keep_partial);
      for (const auto& m : index.members) {
        // Every member the index reports lies inside the file.
        if (m.offset > index.file_size || m.size > index.file_size - m.offset || m.header_offset >= m.offset) {
          std::abort();
        }
      }
      if (!keep_partial && !index.problem.empty()) std::abort();
    } catch (const stoker::DatasetError&) {
      if (keep_partial) {
        // Only an unreadable file is an error in this mode, and the file was just written.
        std::abort();
      }
    }
  }
  return 0;
}
