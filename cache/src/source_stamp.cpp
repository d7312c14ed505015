#include "stoker/cache/source_stamp.hpp"

#include <sys/stat.h>

namespace stoker {

SourceStamp stamp_from(const struct stat& st) noexcept {
  return SourceStamp{static_cast<std::uint64_t>(st.st_size),
                     static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::optional<SourceStamp> stamp_of(const std::string& path) noexcept {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return stamp_from(st);
}

std::string member_source_id(const std::string& file, const std::string& member, std::uint64_t offset) {
  std::string id = file;
  id += '\0';
  id += member;
  id += '@';
  id += std::to_string(offset);
  return id;
}

std::string source_file(const std::string& id) { return id.substr(0, id.find('\0')); }

}  // namespace stoker
