#include "stoker/pipeline/webdataset.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/tar.hpp"

namespace stoker {
namespace fs = std::filesystem;

namespace {

bool parse_int(std::string_view text, long long& out) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// "{...}" at `open`: the index of its matching '}', or npos.
std::size_t matching_brace(const std::string& s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    else if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

std::vector<std::string> split_top_level(const std::string& body) {
  std::vector<std::string> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '{') ++depth;
    else if (body[i] == '}') --depth;
    else if (body[i] == ',' && depth == 0) {
      parts.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(body.substr(start));
  return parts;
}

// A range group {from..to}: its bounds, how many names, and the width of zero-padded names.
struct BraceRange {
  long long from = 0, to = 0, count = 0;
  std::size_t width = 0;
};
BraceRange parse_range(const std::string& body, const std::string& pattern) {
  const std::size_t dots = body.find("..");
  const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
  BraceRange r;
  if (!parse_int(a, r.from) || !parse_int(b, r.to) || a.find_first_of(" +") != std::string::npos ||
      b.find_first_of(" +") != std::string::npos) {
    throw InvalidArgument("brace pattern '" + pattern + "': the range {" + body + "} needs integer bounds");
  }
  const auto leading_zero = [](const std::string& n) {
    const std::size_t d = n[0] == '-' ? 1 : 0;
    return n.size() > d + 1 && n[d] == '0';
  };
  r.width = leading_zero(a) || leading_zero(b) ? std::max(a.size(), b.size()) : 0;
  r.count = (r.to >= r.from ? r.to - r.from : r.from - r.to) + 1;
  if (r.count > 10'000'000)
    throw InvalidArgument("brace pattern '" + pattern + "': {" + body + "} is over 10 million names");
  return r;
}

std::vector<std::string> expand_range(const std::string& body, const std::string& pattern) {
  const BraceRange r = parse_range(body, pattern);
  const long long from = r.from, to = r.to, count = r.count;
  const std::size_t width = r.width;
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(count));
  for (long long i = 0, v = from; i < count; ++i, v += to >= from ? 1 : -1) {
    std::string n = std::to_string(v < 0 ? -v : v);
    const std::size_t pad = width > n.size() + (v < 0) ? width - n.size() - (v < 0) : 0;
    out.push_back((v < 0 ? "-" : "") + std::string(pad, '0') + n);
  }
  return out;
}

// What one brace pattern may stand for: names, their characters, and brace groups (each group
// nested in another or following one is a level of recursion).
constexpr std::size_t kMaxBraceNames = 10'000'000;
constexpr std::size_t kMaxBraceBytes = std::size_t{256} << 20;
constexpr int kMaxBraceDepth = 32;

std::string too_many_names(const std::string& pattern) {
  return "brace pattern '" + pattern.substr(0, 200) + "': expands to over " + std::to_string(kMaxBraceNames) +
         " names or " + std::to_string(kMaxBraceBytes >> 20) + " MiB of them";
}

std::size_t total_size(const std::vector<std::string>& v) {
  std::size_t n = 0;
  for (const auto& e : v) n += e.size();
  return n;
}

// How many names `s` expands to (saturating at infinity), without making them: a pattern is
// refused before any name is built, whichever of its parts holds the product.
double count_names(const std::string& s, const std::string& pattern, int depth) {
  if (depth > kMaxBraceDepth)
    throw InvalidArgument("brace pattern '" + pattern.substr(0, 200) + "': more than " +
                          std::to_string(kMaxBraceDepth) + " brace groups, nested or one after another");
  const std::size_t open = s.find('{');
  if (open == std::string::npos) return 1.0;
  const std::size_t close = matching_brace(s, open);
  if (close == std::string::npos) return 1.0;  // expand() names the error
  const std::string body = s.substr(open + 1, close - open - 1);
  double alternatives = 0.0;
  const auto parts = split_top_level(body);
  if (parts.size() > 1) {
    for (const auto& p : parts) alternatives += count_names(p, pattern, depth + 1);
  } else if (body.find("..") != std::string::npos && body.find('{') == std::string::npos) {
    alternatives = static_cast<double>(parse_range(body, pattern).count);
  } else {
    alternatives = count_names(body, pattern, depth + 1);
  }
  return alternatives * count_names(s.substr(close + 1), pattern, depth + 1);
}

std::vector<std::string> expand(const std::string& s, const std::string& pattern, int depth) {
  if (depth > kMaxBraceDepth)
    throw InvalidArgument("brace pattern '" + pattern.substr(0, 200) + "': more than " +
                          std::to_string(kMaxBraceDepth) + " brace groups, nested or one after another");
  const std::size_t open = s.find('{');
  if (s.find('}') < open) throw InvalidArgument("brace pattern '" + pattern + "': a '}' without its '{'");
  if (open == std::string::npos) return {s};
  const std::size_t close = matching_brace(s, open);
  if (close == std::string::npos) throw InvalidArgument("brace pattern '" + pattern + "': a '{' without its '}'");
  const std::string prefix = s.substr(0, open), body = s.substr(open + 1, close - open - 1);
  const std::vector<std::string> rest = expand(s.substr(close + 1), pattern, depth + 1);
  std::vector<std::string> alternatives;
  const auto parts = split_top_level(body);
  if (parts.size() > 1) {
    for (const auto& p : parts) {
      for (auto& e : expand(p, pattern, depth + 1)) alternatives.push_back(std::move(e));
      if (alternatives.size() > kMaxBraceNames) throw InvalidArgument(too_many_names(pattern));
    }
  } else if (body.find("..") != std::string::npos && body.find('{') == std::string::npos) {
    alternatives = expand_range(body, pattern);
  } else {
    for (auto& e : expand(body, pattern, depth + 1)) alternatives.push_back("{" + e + "}");
  }
  // The product is checked before it is made: every alternative followed by every rest.
  const double names = static_cast<double>(alternatives.size()) * static_cast<double>(rest.size());
  const double bytes = names * static_cast<double>(prefix.size()) +
                       static_cast<double>(rest.size()) * static_cast<double>(total_size(alternatives)) +
                       static_cast<double>(alternatives.size()) * static_cast<double>(total_size(rest));
  if (names > static_cast<double>(kMaxBraceNames) || bytes > static_cast<double>(kMaxBraceBytes))
    throw InvalidArgument(too_many_names(pattern));
  std::vector<std::string> out;
  out.reserve(alternatives.size() * rest.size());
  for (const auto& a : alternatives) {
    for (const auto& r : rest) out.push_back(prefix + a + r);
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw DatasetError(file.string() + ": cannot read: " + std::strerror(errno));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

// Small members (labels, JSON) read from a shard that is open for the index.
class MemberReader {
 public:
  explicit MemberReader(const std::string& shard) : shard_(shard), fd_(::open(shard.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw DatasetError(shard + ": cannot open the shard: " + std::strerror(errno));
  }
  ~MemberReader() { ::close(fd_); }
  MemberReader(const MemberReader&) = delete;
  MemberReader& operator=(const MemberReader&) = delete;

  std::string read(const TarMember& m) const {
    if (m.size > (64u << 20)) throw DatasetError(shard_ + ": member '" + m.name + "' is too large for a label");
    std::string out(static_cast<std::size_t>(m.size), '\0');
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(m.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw DatasetError(shard_ + ": member '" + m.name + "': read failed");
      done += static_cast<std::size_t>(n);
    }
    return out;
  }

 private:
  std::string shard_;
  int fd_;
};

struct Group {
  std::string key;
  std::vector<std::pair<std::string, const TarMember*>> members;  // (extension, member)
  std::string duplicate;                                          // a member name seen twice
};

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern) {
  if (count_names(pattern, pattern, 0) > static_cast<double>(kMaxBraceNames))
    throw InvalidArgument(too_many_names(pattern));
  return expand(pattern, pattern, 0);
}

bool is_shard_spec(const std::string& spec) {
  return ends_with(spec, ".tar") || ends_with(spec, ".txt") || spec.find('{') != std::string::npos;
}

std::vector<std::string> shard_paths(const std::string& spec) {
  if (!ends_with(spec, ".txt")) return expand_braces(spec);
  const fs::path list(spec);
  std::vector<std::string> out;
  for (const auto& line : read_lines(list)) {
    std::size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    if (start == line.size() || line[start] == '#') continue;
    for (auto& p : expand_braces(line.substr(start))) {
      const fs::path path(p);
      out.push_back(path.is_relative() ? (list.parent_path() / path).string() : p);
    }
  }
  if (out.empty()) throw DatasetError(spec + ": the shard list names no shards");
  return out;
}

bool split_member_name(const std::string& name, std::string& key, std::string& extension) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  key = name.substr(0, dot);
  extension = name.substr(dot + 1);
  return !extension.empty();
}

namespace {

// Without classes.txt the class names are "0".."K-1", K = the largest label + 1: a label is
// bounded so that one number in a shard cannot make billions of names.
constexpr std::int64_t kMaxUnnamedClasses = std::int64_t{1} << 20;

// One shard's part of the dataset: its samples (labels checked against the class names when
// there are names), what was skipped, and its member count.
struct ShardSamples {
  std::vector<Sample> samples;
  std::vector<ShardProblem> skipped;
  std::size_t members = 0;
  std::int64_t max_label = -1;
};

ShardSamples scan_shard(const std::string& shard, const WebDatasetOptions& options,
                        const std::vector<std::string>& class_names, const fs::path& classes_file) {
  ShardSamples out;
  const bool named_classes = !class_names.empty();
  std::vector<std::string> image_extensions;
  for (const auto& e : options.image_extensions) image_extensions.push_back(lower(e));
  std::string image_list;
  for (const auto& e : image_extensions) image_list += (image_list.empty() ? "" : ", ") + e;

  TarIndex index = index_tar(shard, options.skip_bad_samples);
  out.members = index.members.size();
  if (!index.problem.empty()) out.skipped.push_back({shard, "", index.problem});
  const MemberReader reader(shard);

  const auto bad = [&](const std::string& key, const std::string& reason) {
    if (!options.skip_bad_samples) throw DatasetError(shard + ": sample '" + key + "': " + reason);
    out.skipped.push_back({shard, key, reason});
  };
  const auto finish = [&](const Group& g) {
    if (g.members.empty()) return;
    if (!g.duplicate.empty()) return bad(g.key, "member '" + g.duplicate + "' appears twice in the sample");
    const TarMember* image = nullptr;
    for (const auto& want : image_extensions) {
      for (const auto& [ext, m] : g.members) {
        if (!image && lower(ext) == want) image = m;
      }
    }
    if (!image) return bad(g.key, "no image member (" + image_list + ")");
    std::int64_t label = -1;
    const auto find = [&](const char* ext) -> const TarMember* {
      for (const auto& [e, m] : g.members) {
        if (lower(e) == ext) return m;
      }
      return nullptr;
    };
    if (options.label_field.empty()) {
      if (const TarMember* cls = find("cls")) {
        long long v = 0;
        const std::string text = reader.read(*cls);
        if (!parse_int(text, v)) return bad(g.key, "'" + cls->name + "' holds '" + text + "', not an integer label");
        label = v;
      } else if (options.require_labels) {
        return bad(g.key, "no label (no .cls member)");
      }
    } else if (const TarMember* js = find("json")) {
      nlohmann::json doc = nlohmann::json::parse(reader.read(*js), nullptr, false);
      if (doc.is_discarded() || !doc.is_object()) return bad(g.key, "'" + js->name + "' is not a JSON object");
      const auto it = doc.find(options.label_field);
      if (it == doc.end()) {
        if (options.require_labels) return bad(g.key, "'" + js->name + "' has no field '" + options.label_field + "'");
      } else if (it->is_number_integer()) {
        label = it->get<std::int64_t>();
      } else if (it->is_string()) {
        const auto name = it->get<std::string>();
        const auto c = std::find(class_names.begin(), class_names.end(), name);
        if (c == class_names.end()) {
          return bad(g.key, "label '" + name + "' is not one of the class names" +
                                (named_classes ? " in " + classes_file.string() : " (no classes.txt)"));
        }
        label = c - class_names.begin();
      } else {
        return bad(g.key,
                   "field '" + options.label_field + "' of '" + js->name + "' is neither an integer nor a string");
      }
    } else if (options.require_labels) {
      return bad(g.key, "no label (no .json member)");
    }
    if (label < -1 || (!named_classes && label >= kMaxUnnamedClasses) ||
        (named_classes && label >= static_cast<std::int64_t>(class_names.size()))) {
      return bad(g.key, "label " + std::to_string(label) +
                            (named_classes ? " is not below the " + std::to_string(class_names.size()) +
                                                 " classes of " + classes_file.string()
                             : label < 0 ? " is out of range"
                                         : " is not below " + std::to_string(kMaxUnnamedClasses) +
                                               ", the most classes without a classes.txt naming them"));
    }
    if (label < 0 && options.require_labels) return bad(g.key, "label " + std::to_string(label) + " is negative");
    out.max_label = std::max(out.max_label, label);
    Sample s;
    s.path = shard;
    s.label = static_cast<std::int32_t>(label);
    s.range = ByteRange{image->offset, image->size};
    s.member = image->name;
    out.samples.push_back(std::move(s));
  };

  Group group;
  std::string key, ext;
  for (const auto& m : index.members) {
    if (!split_member_name(m.name, key, ext)) continue;  // WebDataset passes over names without a dot
    if (key != group.key) {
      finish(group);
      group = Group{key, {}, {}};
    }
    for (const auto& [e, other] : group.members) {
      if (e == ext && group.duplicate.empty()) group.duplicate = m.name;
    }
    group.members.emplace_back(ext, &m);
  }
  finish(group);
  return out;
}

// The shard index file (WebDatasetOptions::index_file): every shard's ShardSamples, keyed by the
// shard's path, size and modification time, for the options they were computed with.
//   "STKWDSX1", u64 header length, JSON header {"format", "version", "options", "shards":
//   [{"path", "size", "mtime_ns", "members", "samples", "skipped": [[key, reason]...]}]},
//   then per sample in shard order: i32 label, u64 offset, u64 size, u32 name length, name.
constexpr char kIndexMagic[8] = {'S', 'T', 'K', 'W', 'D', 'S', 'X', '1'};

struct ShardStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const ShardStamp&, const ShardStamp&) = default;
};

std::optional<ShardStamp> shard_stamp_of(const std::string& shard) {
  struct stat st {};
  if (::stat(shard.c_str(), &st) != 0) return std::nullopt;
  return ShardStamp{static_cast<std::uint64_t>(st.st_size),
                    static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// The index's JSON holds names from the shards and classes.txt, which need not be UTF-8: their
// invalid bytes are written as U+FFFD (JSON holds only UTF-8). A shard path so written is not
// found again, and that shard is scanned: the index only ever saves time.
std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// What the samples of a shard depend on besides its bytes. The names' own bytes are hashed in, so
// that names differing only in bytes that are not UTF-8 give other identities.
std::string options_identity(const WebDatasetOptions& o, const std::vector<std::string>& class_names) {
  nlohmann::json j = {{"label_field", o.label_field},
                      {"image_extensions", o.image_extensions},
                      {"require_labels", o.require_labels},
                      {"skip_bad_samples", o.skip_bad_samples},
                      {"class_names", class_names}};
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over each name and its length
  auto add = [&h](const std::string& text) {
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ text.size()) * 0x100000001b3ull;
  };
  add(o.label_field);
  for (const auto& e : o.image_extensions) add(e);
  for (const auto& n : class_names) add(n);
  return json_text(j) + " " + std::to_string(h);
}

struct IndexedShard {
  ShardStamp stamp;
  ShardSamples samples;
};
using ShardIndex = std::unordered_map<std::string, IndexedShard>;

// The shards the file holds for these options; empty when it is missing, foreign, for other
// options or damaged (the index is then rebuilt: it only ever saves time).
ShardIndex read_shard_index(const fs::path& file, const std::string& identity, const WebDatasetOptions& options,
                            std::size_t class_count) {
  // A label the scan could have given these options, and a range inside the shard: anything else
  // means a damaged or foreign index, which is rebuilt.
  const std::int64_t label_bound = class_count > 0 ? static_cast<std::int64_t>(class_count) : kMaxUnnamedClasses;
  const auto plausible = [&](const Sample& s, const ByteRange& r, const ShardStamp& stamp) {
    return s.label >= (options.require_labels ? 0 : -1) && s.label < label_bound && r.offset <= stamp.size &&
           r.size <= stamp.size - r.offset;
  };
  ShardIndex index;
  std::ifstream in(file, std::ios::binary);
  if (!in) return index;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t len = 0;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kIndexMagic, 8) != 0) return index;
  std::memcpy(&len, bytes.data() + 8, 8);
  if (len > bytes.size() - 16) return index;
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(16, len), nullptr, false);
  if (h.is_discarded() || !h.is_object() || h.value("options", std::string()) != identity) return index;
  std::size_t pos = 16 + len;
  auto take = [&](void* dst, std::size_t n) {
    if (n > bytes.size() - pos) return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  try {
    for (const auto& js : h.at("shards")) {
      IndexedShard shard;
      const std::string path = js.at("path").get<std::string>();
      shard.stamp = {js.at("size").get<std::uint64_t>(), js.at("mtime_ns").get<std::int64_t>()};
      shard.samples.members = js.at("members").get<std::size_t>();
      for (const auto& k : js.at("skipped"))
        shard.samples.skipped.push_back({path, k.at(0).get<std::string>(), k.at(1).get<std::string>()});
      const auto count = js.at("samples").get<std::size_t>();
      for (std::size_t i = 0; i < count; ++i) {
        Sample s;
        ByteRange r;
        std::uint32_t name_len = 0;
        if (!take(&s.label, 4) || !take(&r.offset, 8) || !take(&r.size, 8) || !take(&name_len, 4) ||
            name_len > bytes.size() - pos)
          return {};
        s.member.assign(bytes.data() + pos, name_len);
        pos += name_len;
        if (!plausible(s, r, shard.stamp)) return {};
        s.path = path;
        s.range = r;
        shard.samples.max_label = std::max<std::int64_t>(shard.samples.max_label, s.label);
        shard.samples.samples.push_back(std::move(s));
      }
      index[path] = std::move(shard);
    }
  } catch (const nlohmann::json::exception&) {
    return {};
  }
  return pos == bytes.size() ? index : ShardIndex{};
}

void write_shard_index(const fs::path& file, const std::string& identity, const std::vector<std::string>& shards,
                       const ShardIndex& index) {
  nlohmann::json h = {{"format", "stoker-shard-index"}, {"version", 1}, {"options", identity}};
  h["shards"] = nlohmann::json::array();
  std::string table;
  for (const auto& path : shards) {
    const IndexedShard& s = index.at(path);
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& p : s.samples.skipped) skipped.push_back({p.key, p.reason});
    h["shards"].push_back({{"path", path},
                           {"size", s.stamp.size},
                           {"mtime_ns", s.stamp.mtime_ns},
                           {"members", s.samples.members},
                           {"samples", s.samples.samples.size()},
                           {"skipped", skipped}});
    for (const Sample& x : s.samples.samples) {
      const auto name_len = static_cast<std::uint32_t>(x.member.size());
      table.append(reinterpret_cast<const char*>(&x.label), 4);
      table.append(reinterpret_cast<const char*>(&x.range->offset), 8);
      table.append(reinterpret_cast<const char*>(&x.range->size), 8);
      table.append(reinterpret_cast<const char*>(&name_len), 4);
      table += x.member;
    }
  }
  const std::string header = json_text(h);
  const std::uint64_t len = header.size();
  std::string bytes(kIndexMagic, 8);
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  write_file_atomically(file, bytes + header + table);
}

}  // namespace

Dataset dataset_from_webdataset(const std::vector<std::string>& shards, const WebDatasetOptions& options,
                                WebDatasetReport* report) {
  if (shards.empty()) throw DatasetError("dataset_from_webdataset: no shards given");
  WebDatasetReport local_report;
  WebDatasetReport& rep = report ? *report : local_report;
  rep = {};

  Dataset dataset;
  fs::path classes_file = options.classes_file;
  if (classes_file.empty()) {
    const fs::path next_to = fs::path(shards.front()).parent_path() / "classes.txt";
    if (fs::is_regular_file(next_to)) classes_file = next_to;
  }
  if (!classes_file.empty()) {
    for (auto& line : read_lines(classes_file)) {
      if (!line.empty()) dataset.class_names.push_back(std::move(line));
    }
    if (dataset.class_names.empty()) throw DatasetError(classes_file.string() + ": no class names");
  }
  const bool named_classes = !dataset.class_names.empty();

  // A file that is not an index (a user's notes named by mistake) is refused before anything else,
  // and never overwritten.
  if (!options.index_file.empty())
    refuse_foreign_file(options.index_file, std::string_view(kIndexMagic, 8), "shard index");
  const std::string identity =
      options.index_file.empty() ? std::string() : options_identity(options, dataset.class_names);
  ShardIndex index = options.index_file.empty()
                         ? ShardIndex{}
                         : read_shard_index(options.index_file, identity, options, dataset.class_names.size());
  bool index_changed = index.size() != shards.size();
  std::int64_t max_label = -1;
  for (const auto& shard : shards) {
    const std::optional<ShardStamp> stamp = options.index_file.empty() ? std::nullopt : shard_stamp_of(shard);
    const auto known = index.find(shard);
    const bool reuse = stamp && known != index.end() && known->second.stamp == *stamp;
    if (!reuse) {
      ShardSamples scanned = scan_shard(shard, options, dataset.class_names, classes_file);
      if (!stamp) {  // no index file, or a shard stat() cannot see (then scan_shard has thrown)
        index[shard].samples = std::move(scanned);
      } else {
        index[shard] = {*stamp, std::move(scanned)};
      }
      index_changed = true;
    } else {
      ++rep.shards_from_index;
    }
    const ShardSamples& part = index.at(shard).samples;
    ++rep.shards;
    rep.members += part.members;
    rep.skipped.insert(rep.skipped.end(), part.skipped.begin(), part.skipped.end());
    max_label = std::max(max_label, part.max_label);
    dataset.samples.insert(dataset.samples.end(), part.samples.begin(), part.samples.end());
  }
  if (!options.index_file.empty() && index_changed) {
    for (auto it = index.begin(); it != index.end();) {  // shards no longer in the set
      it = std::find(shards.begin(), shards.end(), it->first) == shards.end() ? index.erase(it) : std::next(it);
    }
    write_shard_index(options.index_file, identity, shards, index);
  }
  if (!named_classes) {
    for (std::int64_t c = 0; c <= max_label; ++c) dataset.class_names.push_back(std::to_string(c));
  }
  if (dataset.samples.empty()) {
    throw DatasetError("no samples in " + std::to_string(shards.size()) + " shard(s) starting with " + shards.front() +
                       (rep.skipped.empty() ? "" : " (" + std::to_string(rep.skipped.size()) + " skipped)"));
  }
  return apply_split(dataset, options.split);
}

Dataset dataset_from_webdataset(const std::string& spec, const WebDatasetOptions& options, WebDatasetReport* report) {
  return dataset_from_webdataset(shard_paths(spec), options, report);
}

}  // namespace stoker
