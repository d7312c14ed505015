// write_webdataset_shards (see webdataset.hpp).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <regex>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/plan.hpp"
#include "stoker/pipeline/tar.hpp"
#include "stoker/pipeline/webdataset.hpp"

namespace stoker {
namespace fs = std::filesystem;

namespace {

// The pattern with its one integer conversion ("%d", "%06d") filled in.
std::string shard_name(const std::string& pattern, std::size_t index) {
  std::string out;
  int conversions = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    const bool zero = j < pattern.size() && pattern[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j])) && width < 100) {
      width = width * 10 + (pattern[j++] - '0');
    }
    if (j >= pattern.size() || pattern[j] != 'd') {
      throw InvalidArgument("shard pattern '" + pattern + "': only %d, %0Nd or %% may follow a '%'");
    }
    std::string n = std::to_string(index);
    if (static_cast<int>(n.size()) < width) n.insert(0, static_cast<std::size_t>(width) - n.size(), zero ? '0' : ' ');
    out += n;
    ++conversions;
    i = j;
  }
  if (conversions != 1) {
    throw InvalidArgument("shard pattern '" + pattern + "' needs exactly one integer conversion such as %06d, it has " +
                          std::to_string(conversions));
  }
  return out;
}

// Whether `name` (a file name) is one the pattern's file-name part gives for some index, with any
// number of digits: "train-%06d.tar" matches train-000001.tar and train-1234567.tar.
bool matches_pattern(const std::string& file_pattern, const std::string& name) {
  std::string re;
  for (std::size_t i = 0; i < file_pattern.size(); ++i) {
    const char c = file_pattern[i];
    if (c == '%' && i + 1 < file_pattern.size() && file_pattern[i + 1] == '%') {
      re += '%';
      ++i;
    } else if (c == '%') {
      while (i < file_pattern.size() && file_pattern[i] != 'd') ++i;
      re += "[ 0-9]+";
    } else if (std::isalnum(static_cast<unsigned char>(c))) {
      re += c;
    } else {
      re += '\\';
      re += c;
    }
  }
  return std::regex_match(name, std::regex(re));
}

// The files a writer of `pattern` may leave in its folder: shards of any index, their
// temporaries, and classes.txt.
struct EarlierShards {
  std::vector<fs::path> shards, temporaries;
  std::optional<fs::path> classes;
};

EarlierShards earlier_shards(const std::string& pattern) {
  const fs::path p(pattern);
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (folder.string().find('%') != std::string::npos)
    throw InvalidArgument("shard pattern '" + pattern +
                          "': the integer conversion belongs in the file name, not a folder");
  EarlierShards found;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return found;
  if (fs::exists(folder / "classes.txt")) found.classes = folder / "classes.txt";
  const std::string file_pattern = p.filename().string();
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (matches_pattern(file_pattern, name)) {
      found.shards.push_back(entry.path());
    } else {
      const std::size_t tmp = name.rfind(".tmp.");
      if (tmp != std::string::npos && matches_pattern(file_pattern, name.substr(0, tmp)) &&
          is_temporary_of(name, name.substr(0, tmp)))
        found.temporaries.push_back(entry.path());
    }
  }
  std::sort(found.shards.begin(), found.shards.end());
  return found;
}

// The first `n` bytes of `file` (fewer when it is shorter).
std::string read_head(const fs::path& file, std::size_t n) {
  std::string bytes(n, '\0');
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return {};
  bytes.resize(std::fread(bytes.data(), 1, n, f));
  std::fclose(f);
  return bytes;
}

std::string extension_of(const Sample& s) {
  const std::string name = s.range ? s.member : s.path;
  const std::string file = fs::path(name).filename().string();
  const std::size_t dot = s.range ? file.find('.') : file.rfind('.');
  std::string ext = dot == std::string::npos ? "img" : file.substr(dot + 1);
  if (s.range) ext = ext.substr(ext.rfind('.') + 1);  // "seg.png" -> "png"
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

// "%08d_" + the source's stem with anything but [A-Za-z0-9_-] as '_', at most 60 characters.
std::string key_of(const Sample& s, std::size_t index) {
  char number[32];
  std::snprintf(number, sizeof number, "%08zu", index);
  std::string stem = fs::path(s.range ? s.member : s.path).filename().string();
  const std::size_t dot = s.range ? stem.find('.') : stem.rfind('.');
  if (dot != std::string::npos) stem.resize(dot);
  for (char& c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  if (stem.size() > 60) stem.resize(60);
  return std::string(number) + (stem.empty() ? "" : "_" + stem);
}

// What the loader checks before it decodes: a format it reads, and a size within the limits.
void check_sample(std::span<const std::uint8_t> bytes, const std::string& name, const DecodeLimits& limits) {
  const ImageHeader h = read_image_header(bytes, name);
  if (static_cast<std::int64_t>(h.width) * h.height > limits.max_pixels)
    throw DecodeError(name, std::string(to_string(h.format)) + " header announces " + std::to_string(h.width) + "x" +
                                std::to_string(h.height) + " pixels, over the limit of " +
                                std::to_string(limits.max_pixels));
}

}  // namespace

ShardWriteResult write_webdataset_shards(const Dataset& dataset, const ShardWriteOptions& options) {
  if (dataset.empty()) throw InvalidArgument("write_webdataset_shards: the dataset is empty");
  if (options.max_bytes < 10240) {
    throw InvalidArgument("shard size limit must be >= 10240 bytes, received " + std::to_string(options.max_bytes));
  }
  shard_name(options.pattern, 0);  // checks the pattern before anything is written
  // Shards of an earlier run left beside new ones would be read with them (a brace pattern or a
  // listing of the folder): refused, or all removed first with `overwrite`.
  EarlierShards earlier = earlier_shards(options.pattern);
  std::string class_list;
  for (const auto& name : dataset.class_names) class_list += name + '\n';
  // The same class names (shards of another pattern beside these, the validation set's next to
  // the training set's) read the same: no conflict.
  if (earlier.classes && !dataset.class_names.empty() && read_whole_file(*earlier.classes) == class_list)
    earlier.classes.reset();
  if (!options.overwrite && (!earlier.shards.empty() || earlier.classes)) {
    std::string what;
    if (!earlier.shards.empty()) {
      what = std::to_string(earlier.shards.size()) + " shard" + (earlier.shards.size() > 1 ? "s" : "") + " of '" +
             fs::path(options.pattern).filename().string() + "' (" + earlier.shards.front().filename().string() +
             (earlier.shards.size() > 1 ? " ... " + earlier.shards.back().filename().string() : "") + ")";
    }
    if (earlier.classes) what += std::string(what.empty() ? "" : " and ") + "a classes.txt with other class names";
    const fs::path folder = fs::path(options.pattern).has_parent_path() ? fs::path(options.pattern).parent_path() : ".";
    throw IoError(folder.string() + " already holds " + what +
                  ": new shards mixed with these would be read together; write into an empty folder, or replace "
                  "them with --overwrite (removes every shard of the pattern first and rewrites classes.txt)");
  }
  if (options.overwrite) {
    // Only a list of class names, one per line, is replaced: never a file of another kind.
    if (earlier.classes && read_whole_file(*earlier.classes).find('\0') != std::string::npos)
      throw IoError(earlier.classes->string() + ": is not a list of class names; left as it is");
    // Only tar archives are removed: a file of another kind under a shard's name stops the write.
    for (const auto& f : earlier.shards) {
      const std::string head = read_head(f, 262);
      const bool empty_archive = head.size() == 262 && head.find_first_not_of('\0') == std::string::npos;
      if (!empty_archive && (head.size() < 262 || head.compare(257, 5, "ustar") != 0))
        throw IoError(f.string() + ": is named as a shard of the pattern but is not a tar archive; left as it is");
    }
    for (const auto& f : earlier.shards) fs::remove(f);
    for (const auto& f : earlier.temporaries) fs::remove(f);
  }
  const auto order = epoch_order(static_cast<std::uint32_t>(dataset.size()), options.seed, 0, options.shuffle);

  ShardWriteResult result;
  result.replaced = earlier.shards.size();
  std::optional<TarWriter> writer;
  std::size_t in_shard = 0;
  const auto close = [&] {
    if (!writer) return;
    writer->finish();
    result.bytes += writer->bytes_written();
    writer.reset();
  };
  // A write that stops or fails leaves nothing: finished shards without their classes.txt would
  // read as a smaller dataset.
  const auto discard_written = [&] {
    writer.reset();  // its temporary goes
    std::error_code ignored;
    for (const auto& shard : result.shards) fs::remove(shard, ignored);
  };
  std::vector<std::uint8_t> bytes;
  try {
    for (const std::uint32_t index : order) {
      if (options.should_stop && options.should_stop()) {
        discard_written();
        ShardWriteResult stopped;
        stopped.stopped = true;
        stopped.replaced = result.replaced;
        return stopped;
      }
      const Sample& s = dataset.samples[index];
      SourceStamp stamp;
      try {
        stamp = s.range ? read_file_range(s.path, *s.range, sample_name(s), bytes) : read_file(s.path, bytes);
        check_sample(bytes, sample_name(s), options.limits);
      } catch (const DecodeError& e) {
        if (options.on_bad_sample == BadSamplePolicy::Fail) throw;
        result.skipped.push_back({static_cast<std::int64_t>(index), e.path(), e.reason()});
        continue;
      }
      const std::string key = key_of(s, index);
      const std::string label = s.label >= 0 ? std::to_string(s.label) : std::string();
      const std::uint64_t need =
          TarWriter::member_bytes(bytes.size()) + (label.empty() ? 0 : TarWriter::member_bytes(label.size()));
      if (writer && in_shard > 0 &&
          writer->bytes_written() + need + TarWriter::end_bytes(writer->bytes_written() + need) > options.max_bytes) {
        close();
      }
      if (!writer) {
        const fs::path path = shard_name(options.pattern, result.shards.size());
        if (path.has_parent_path()) fs::create_directories(path.parent_path());
        writer.emplace(path);
        result.shards.push_back(path.string());
        in_shard = 0;
      }
      const std::int64_t mtime = stamp.mtime_ns / 1'000'000'000;
      writer->add(key + "." + extension_of(s), bytes, mtime);
      if (!label.empty()) {
        writer->add(key + ".cls", {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()}, mtime);
      }
      ++in_shard;
      ++result.samples;
    }
    close();
    if (result.shards.empty())
      throw DatasetError("none of the " + std::to_string(dataset.size()) + " samples could be read (" +
                         result.skipped.front().path + ": " + result.skipped.front().reason + ")");
    if (!dataset.class_names.empty()) {
      const fs::path classes = fs::path(result.shards.front()).parent_path() / "classes.txt";
      write_file_atomically(classes, class_list);
      result.classes_file = classes.string();
    }
  } catch (...) {
    discard_written();
    throw;
  }
  return result;
}

}  // namespace stoker
