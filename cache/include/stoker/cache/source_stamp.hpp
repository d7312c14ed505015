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

// A cache names each sample by an id: its source file's path, or, for a member of an archive (a
// tar shard), the archive's path, a NUL, then the member's name and its offset ("name@offset").
// Two members of one shard are so distinct entries, while the stamp checked is the shard's: a
// rewritten shard invalidates all of its members.
std::string member_source_id(const std::string& file, const std::string& member, std::uint64_t offset);
// The file an id's stamp is taken from (the id itself for a plain file).
std::string source_file(const std::string& id);

// The stamp of a file already stat'ed (the reader's fstat of the file it reads).
SourceStamp stamp_from(const struct stat& st) noexcept;

}  // namespace stoker
