#include "stoker/core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "stoker/core/error.hpp"

namespace stoker {

namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::filesystem::path& tmp, const std::string& step) {
  const std::string why = std::strerror(errno);
  if (tmp != file) ::unlink(tmp.c_str());
  throw IoError(file.string() + ": cannot write (" + step + "): " + why);
}

}  // namespace

// The pid keeps two processes writing the same file from sharing a temporary.
std::filesystem::path temporary_path(const std::filesystem::path& file) {
  return file.string() + ".tmp." + std::to_string(::getpid());
}

bool is_temporary_of(const std::string& name, const std::string& target) {
  const std::string stem = target + ".tmp.";
  if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(stem.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The temporary's bytes to the disk, the rename, then the folder.
void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& file) {
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(file, tmp, "open " + tmp.filename().string());
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail(file, tmp, "fsync");
  }
  if (::close(fd) != 0) fail(file, tmp, "close");
  if (std::rename(tmp.c_str(), file.c_str()) != 0) fail(file, tmp, "rename");
  // The rename itself is durable only once the folder is synced; failing that is not an error
  // (some file systems refuse fsync on a directory).
  const std::filesystem::path parent = file.has_parent_path() ? file.parent_path() : ".";
  const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

bool is_stream_target(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(file, ec);
  return !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
         !std::filesystem::is_directory(st);
}

void write_file_atomically(const std::filesystem::path& file, std::string_view bytes) {
  const bool in_place = is_stream_target(file);  // a device or a pipe is written, never replaced
  const std::filesystem::path tmp = in_place ? file : temporary_path(file);
  const int fd = in_place ? ::open(file.c_str(), O_WRONLY | O_CLOEXEC)
                          : ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(file, tmp, "create " + tmp.filename().string());
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail(file, tmp, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail(file, tmp, "close");
  if (!in_place) commit_file(tmp, file);
}

void replace_file_atomically(const std::filesystem::path& file,
                             const std::function<void(const std::filesystem::path& tmp)>& write) {
  const std::filesystem::path tmp = temporary_path(file);
  try {
    write(tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  commit_file(tmp, file);
}

bool file_starts_with(const std::filesystem::path& file, std::string_view magic) {
  std::ifstream in(file, std::ios::binary);
  std::string head(magic.size(), '\0');
  return in.read(head.data(), static_cast<std::streamsize>(head.size())) && head == magic;
}

void refuse_foreign_file(const std::filesystem::path& file, std::string_view magic, const std::string& kind) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return;
  if (!std::filesystem::is_regular_file(file, ec))
    throw IoError(file.string() + ": is not a file; the " + kind + " cannot be written there");
  std::ifstream in(file, std::ios::binary);
  std::string head(magic.size(), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  // Empty, or the magic or a file cut inside it: a file of this kind (rebuilt, not trusted).
  if (!in.bad() && magic.substr(0, head.size()) == head) return;
  throw IoError(file.string() + ": exists and is not a " + kind +
                " stoker wrote; left as it is (remove it or choose another file)");
}

std::string read_whole_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(file.string() + ": read failed");
  return bytes;
}

}  // namespace stoker
