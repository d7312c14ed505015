// Fuzzes dataset_from_webdataset on one shard: WebDataset's grouping of members into samples by
// key, the labels from .cls members or a .json field, class names from classes.txt or from the
// labels, skipped samples, and the shard index written and read back.
//
// Input: byte 0 a mode, then the archive, optionally followed by "\n--index--\n" and bytes to
// XOR into the shard index, then optionally "\n--classes--\n" and the text of classes.txt. Mode
// bit 0: the harness rewrites every block's header checksum (as fuzz_tar); bit 1: labels from the
// json member's "label" field; bit 2: skip bad samples; bit 3: no label required; bit 4: through a
// shard index file (built, then read back by a second call that must give the same samples; with
// XOR bytes, the index is damaged first: the second call must still give only valid samples).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <stoker/core/error.hpp>
#include <stoker/pipeline/webdataset.hpp>

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

void check(const stoker::Dataset& ds, std::uintmax_t shard_size, bool labels_required) {
  const auto classes = static_cast<std::int64_t>(ds.class_names.size());
  for (const auto& s : ds.samples) {
    if (!s.range || s.range->offset > shard_size || s.range->size > shard_size - s.range->offset) std::abort();
    if (s.label >= classes || s.label < -1 || (labels_required && s.label < 0)) std::abort();
  }
}

std::string read_file(const std::filesystem::path& p) {
  std::string out;
  if (std::FILE* f = std::fopen(p.c_str(), "rb")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  std::string archive(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string classes;
  static const std::string kSeparator = "\n--classes--\n";
  const bool named = archive.find(kSeparator) != std::string::npos;
  if (named) {
    const auto at = archive.find(kSeparator);
    classes = archive.substr(at + kSeparator.size());
    archive.resize(at);
  }
  static const std::string kIndexSeparator = "\n--index--\n";
  std::string damage;
  if (const auto at = archive.find(kIndexSeparator); at != std::string::npos) {
    damage = archive.substr(at + kIndexSeparator.size());
    archive.resize(at);
  }
  if (mode & 1) fix_checksums(archive);
  const auto dir = stoker_fuzz::scratch_dir();
  const auto shard = dir / "shard-000.tar";
  stoker_fuzz::write_file(shard, archive);
  std::filesystem::remove(dir / "classes.txt");
  std::filesystem::remove(dir / "shards.index");
  if (named) stoker_fuzz::write_file(dir / "classes.txt", classes);

  stoker::WebDatasetOptions options;
  if (mode & 2) options.label_field = "label";
  options.skip_bad_samples = (mode & 4) != 0;
  options.require_labels = (mode & 8) == 0;
  if (mode & 16) options.index_file = dir / "shards.index";
  try {
    const stoker::Dataset first = stoker::dataset_from_webdataset({shard.string()}, options);
    check(first, archive.size(), options.require_labels);
    if ((mode & 16) && !damage.empty()) {
      // The index damaged in place (its size kept): read back, it is used or rebuilt, never trusted.
      std::string index = read_file(dir / "shards.index");
      for (std::size_t i = 0; i < index.size(); ++i) index[i] ^= damage[i % damage.size()];
      stoker_fuzz::write_file(dir / "shards.index", index);
      check(stoker::dataset_from_webdataset({shard.string()}, options), archive.size(), options.require_labels);
    } else if (mode & 16) {
      stoker::WebDatasetReport report;
      const stoker::Dataset again = stoker::dataset_from_webdataset({shard.string()}, options, &report);
      if (again.samples.size() != first.samples.size() || again.class_names != first.class_names) std::abort();
      for (std::size_t i = 0; i < again.samples.size(); ++i) {
        if (again.samples[i].label != first.samples[i].label || again.samples[i].member != first.samples[i].member) {
          std::abort();
        }
      }
    }
  } catch (const stoker::DatasetError&) {
  } catch (const stoker::IoError&) {}
  return 0;
}
