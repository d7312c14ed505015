// What a cache records about a sample's source file to notice that it changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

struct stat;

namespace stoker {

// Size and modification time of a source file: what caches record to notice a changed source.
struct SourceStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const SourceStamp&, const SourceStamp&) = default;
};

// The stamp alone (stat, no read); nullopt when the path is not a regular file that can be stat'ed.
std::optional<SourceStamp> stamp_of(const std::string& path) noexcept;

// The stamp of a file already stat'ed (the reader's fstat of the file it reads).
SourceStamp stamp_from(const struct stat& st) noexcept;

}  // namespace stoker
