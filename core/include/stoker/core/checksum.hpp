// Checksums of what stoker writes for itself: cache entries and indexes, and a trailer on the
// files it reads back (checkpoints, heads, saved features), so that a damaged copy is refused by
// name instead of read as valid numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stoker {

// 64-bit checksum (fast, not cryptographic).
std::uint64_t checksum64(const void* data, std::size_t size) noexcept;

// Appends a trailer holding `bytes`' checksum.
void append_checksum(std::string& bytes);

// `bytes` without its trailer once the checksum matches; IoError naming `where` when it does not.
// Bytes without a trailer (a file written before trailers were) are returned whole.
std::string_view checked_content(std::string_view bytes, const std::string& where);

}  // namespace stoker
