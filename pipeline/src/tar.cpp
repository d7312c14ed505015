// The tar index and writer (see tar.hpp). Layout of a header block (POSIX.1-1988 ustar, GNU and
// PAX extensions as described by GNU tar's manual and POSIX.1-2001 `pax`):
//   name[100] mode[8] uid[8] gid[8] size[12] mtime[12] chksum[8] typeflag[1] linkname[100]
//   magic[6] version[2] uname[32] gname[32] devmajor[8] devminor[8] prefix[155] (ustar only)
#include "stoker/pipeline/tar.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace {

constexpr std::size_t kBlock = 512;
constexpr std::uint64_t kMaxExtendedHeader = 16u << 20;  // a PAX or GNU long-name block over this is damage

std::uint64_t padded(std::uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

std::string field(const char* p, std::size_t n) { return std::string(p, ::strnlen(p, n)); }

// A name as far as it can be shown: printable ASCII kept, the rest as '?'.
std::string printable(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7E) c = '?';
  }
  return s;
}

// An octal number (leading spaces, digits, then NUL or space), or GNU's base-256 form (high bit
// of the first byte set). nullopt when malformed or negative.
std::optional<std::uint64_t> parse_number(const char* p, std::size_t n) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return std::nullopt;  // 0xFF: negative
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < n; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | u[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  std::uint64_t v = 0;
  bool digits = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + static_cast<std::uint64_t>(p[i] - '0');
    digits = true;
  }
  for (; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  }
  if (!digits) return std::nullopt;
  return v;
}

bool checksum_ok(const unsigned char* h, std::uint64_t stored) {
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;  // some old tars summed signed chars
  for (std::size_t i = 0; i < kBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || static_cast<std::int64_t>(stored) == signed_sum;
}

// PAX records "LENGTH KEY=VALUE\n"; only path and size matter here.
struct PaxFields {
  std::optional<std::string> path;
  std::optional<std::uint64_t> size;
};

bool parse_pax(const std::string& data, PaxFields& out) {
  std::size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] == '\0') break;  // padding some writers leave
    std::size_t len = 0, i = pos;
    while (i < data.size() && data[i] >= '0' && data[i] <= '9') {
      len = len * 10 + static_cast<std::size_t>(data[i] - '0');
      if (len > data.size()) return false;
      ++i;
    }
    if (i == pos || i >= data.size() || data[i] != ' ' || len < i - pos + 3 || pos + len > data.size() ||
        data[pos + len - 1] != '\n') {
      return false;
    }
    const std::string record = data.substr(i + 1, pos + len - 1 - (i + 1));
    const std::size_t eq = record.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      out.path = value;
    } else if (key == "size") {
      if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), ::isdigit)) return false;
      out.size = std::stoull(value);
    }
    pos += len;
  }
  return true;
}

class File {
 public:
  explicit File(const std::filesystem::path& path) : path_(path.string()) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw DatasetError(path_ + ": cannot open the shard: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw DatasetError(path_ + ": the shard is not a regular file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const { return size_; }
  void read(std::uint64_t offset, void* out, std::size_t n) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw DatasetError(path_ + ": read failed at byte " + std::to_string(offset + done) + ": " +
                           (r < 0 ? std::strerror(errno) : "the shard shrank while it was indexed"));
      }
      done += static_cast<std::size_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Thrown inside index_tar for damage, caught there to be rethrown or kept as `problem`.
struct Damage {
  std::string what;
};

}  // namespace

TarIndex index_tar(const std::filesystem::path& shard, bool keep_partial) {
  const File file(shard);
  const std::string name_of_shard = shard.string();
  TarIndex index;
  index.file_size = file.size();

  PaxFields global, local;
  std::optional<std::string> long_name;
  std::uint64_t pos = 0;
  unsigned char h[kBlock];
  try {
    while (pos < file.size()) {
      const auto where = [&](const std::string& member) {
        return "header at byte " + std::to_string(pos) + (member.empty() ? "" : " (member '" + member + "')");
      };
      if (file.size() - pos < kBlock) {
        throw Damage{"truncated archive: " + std::to_string(file.size() - pos) + " bytes at byte " +
                     std::to_string(pos) + ", less than a header block"};
      }
      file.read(pos, h, kBlock);
      if (std::all_of(h, h + kBlock, [](unsigned char c) { return c == 0; })) break;  // end of archive

      const char* c = reinterpret_cast<const char*>(h);
      const std::string header_name = printable(field(c, 100));
      const auto stored = parse_number(c + 148, 8);
      if (!stored) throw Damage{where(header_name) + ": malformed checksum field (not a tar header?)"};
      if (!checksum_ok(h, *stored)) {
        throw Damage{where(header_name) + ": bad header checksum (stored " + std::to_string(*stored) +
                     ", the block sums to something else)"};
      }
      const auto header_size = parse_number(c + 124, 12);
      if (!header_size) throw Damage{where(header_name) + ": malformed size field"};
      const char type = c[156];
      const bool posix = std::memcmp(c + 257, "ustar\0", 6) == 0;

      const bool regular = type == '0' || type == '\0' || type == '7';
      const bool extended = type == 'x' || type == 'g' || type == 'L' || type == 'K';
      // A PAX size applies to the member it describes, never to an extended header itself.
      std::uint64_t size = *header_size;
      if (!extended) {
        if (local.size) size = *local.size;
        else if (global.size) size = *global.size;
      }
      const bool has_data = !(type >= '1' && type <= '6');  // links, devices, folders, FIFOs: none
      const std::uint64_t data = pos + kBlock;
      if (has_data && size > file.size() - data) {
        throw Damage{where(header_name) + ": its " + std::to_string(size) +
                     " bytes of data run past the end of the archive (" + std::to_string(file.size()) +
                     " bytes): truncated"};
      }

      if (extended) {
        if (size > kMaxExtendedHeader) {
          throw Damage{where(header_name) + ": a " + std::string(1, type) + " header of " + std::to_string(size) +
                       " bytes"};
        }
        std::string text(static_cast<std::size_t>(size), '\0');
        file.read(data, text.data(), text.size());
        if (type == 'L') {
          text.erase(std::find(text.begin(), text.end(), '\0'), text.end());
          long_name = std::move(text);
        } else if (type == 'x' || type == 'g') {
          PaxFields& target = type == 'x' ? local : global;
          if (!parse_pax(text, target)) throw Damage{where(header_name) + ": malformed PAX extended header"};
        }
        pos = data + padded(size);
        continue;
      }

      if (regular) {
        std::string name;
        if (long_name) name = *long_name;
        else if (local.path) name = *local.path;
        else if (global.path) name = *global.path;
        else {
          name = field(c, 100);
          const std::string prefix = posix ? field(c + 345, 155) : std::string();
          if (!prefix.empty()) name = prefix + "/" + name;
        }
        if (!name.empty() && name.back() != '/') index.members.push_back({name, pos, data, size});
      }
      local = {};
      long_name.reset();
      pos = data + (has_data ? padded(size) : 0);
    }
  } catch (const Damage& d) {
    const std::string message = name_of_shard + ": " + d.what;
    if (!keep_partial) throw DatasetError(message);
    index.problem = message;
  }
  return index;
}

std::uint64_t TarWriter::end_bytes(std::uint64_t written) noexcept {
  constexpr std::uint64_t kRecord = 20 * kBlock;
  const std::uint64_t end = written + 2 * kBlock;
  return (end + kRecord - 1) / kRecord * kRecord - written;
}

TarWriter::TarWriter(std::filesystem::path path) : path_(std::move(path)), tmp_(temporary_path(path_)) {
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_)
    throw IoError(path_.string() + ": cannot create " + tmp_.filename().string() + ": " + std::strerror(errno));
}

TarWriter::~TarWriter() {
  if (file_) {
    std::fclose(file_);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);  // never leave a half-written shard, and never one that looks whole
  }
}

void TarWriter::write(const void* data, std::size_t size) {
  if (size && std::fwrite(data, 1, size, file_) != size) {
    throw IoError(path_.string() + ": write failed: " + std::strerror(errno));
  }
  written_ += size;
}

void TarWriter::add(const std::string& name, std::span<const std::uint8_t> data, std::int64_t mtime) {
  if (!file_) throw IoError(path_.string() + ": add() after finish()");
  std::string prefix, base = name;
  if (name.empty() || name.find('\0') != std::string::npos)
    throw InvalidArgument("tar member name is empty or has a NUL");
  if (name.size() > 100) {
    // ustar: prefix (<= 155) + '/' + name (<= 100), split at a slash.
    std::size_t cut = name.rfind('/', 155);
    while (cut != std::string::npos && name.size() - cut - 1 > 100) cut = std::string::npos;
    if (cut == std::string::npos || cut == 0) {
      throw InvalidArgument("tar member name '" + name + "' does not fit a ustar header (" +
                            std::to_string(name.size()) + " bytes, no '/' splitting it into 155 + 100)");
    }
    prefix = name.substr(0, cut);
    base = name.substr(cut + 1);
  }
  char h[kBlock] = {};
  std::memcpy(h, base.data(), base.size());
  auto octal = [&](std::size_t off, std::size_t width, std::uint64_t v) {
    // width - 1 octal digits, then a NUL.
    for (std::size_t k = width - 1; k-- > 0; v >>= 3) h[off + k] = static_cast<char>('0' + (v & 7));
    h[off + width - 1] = '\0';
  };
  octal(100, 8, 0644);
  octal(108, 8, 0);
  octal(116, 8, 0);
  if (data.size() > 077777777777ULL) throw InvalidArgument("tar member '" + name + "' is over 8 GiB");
  octal(124, 12, data.size());
  octal(136, 12, static_cast<std::uint64_t>(std::max<std::int64_t>(0, mtime)));
  h[156] = '0';
  std::memcpy(h + 257,
              "ustar\0"
              "00",
              8);
  std::memcpy(h + 345, prefix.data(), prefix.size());
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  octal(148, 7, sum);  // six digits, a NUL, and the space already there
  write(h, kBlock);
  write(data.data(), data.size());
  static const char zeros[kBlock] = {};
  write(zeros, static_cast<std::size_t>(padded(data.size()) - data.size()));
}

void TarWriter::finish() {
  if (!file_) return;
  static const char zeros[kBlock] = {};
  for (std::uint64_t left = end_bytes(written_); left > 0; left -= kBlock) write(zeros, kBlock);
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed) {
    const std::string why = std::strerror(flushed ? errno : err);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    throw IoError(path_.string() + ": write failed: " + why);
  }
  commit_file(tmp_, path_);  // synced, then renamed to its name: complete or absent
}

}  // namespace stoker
