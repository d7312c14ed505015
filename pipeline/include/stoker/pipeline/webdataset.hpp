// WebDataset tar shards as a source. A shard is a tar archive; a sample is the run of consecutive
// members that share a key (the member's path up to the first dot of its file name:
// "train/0001.seg.png" has key "train/0001" and extension "seg.png"). The image is the member
// with an image extension, the label the "cls" member (integer text) or a field of the "json"
// member. Samples point into their shard by byte range (Sample::range); the loader reads only
// those bytes. The shards are indexed from their headers when the dataset is built.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/loader.hpp"  // BadSamplePolicy, SkippedSample

namespace stoker {

// Brace expansion as WebDataset (braceexpand) does it: "{000000..000127}" is a range (ascending or
// descending), zero-padded to the wider bound when a bound has a leading zero; "{a,b,c}" a list
// (items expanded in turn); several groups multiply, left to right; "{x}" stays as it is.
// Throws InvalidArgument for an unbalanced brace or a range with bounds that are not integers.
std::vector<std::string> expand_braces(const std::string& pattern);

// True when `spec` names shards rather than a folder: it ends with ".tar" or ".txt" (a list), or
// holds a brace group.
bool is_shard_spec(const std::string& spec);

// The shard paths `spec` stands for: the lines of a ".txt" list (blank lines and '#' comments
// skipped, relative paths against the list's folder, each line brace-expanded), else the brace
// expansion of `spec`. Throws DatasetError for an unreadable or empty list.
std::vector<std::string> shard_paths(const std::string& spec);

struct WebDatasetOptions {
  // Empty: the label is the "cls" member. Otherwise the named top-level field of the "json"
  // member: an integer, or a string that is one of the class names.
  std::string label_field;
  // Image members, by extension (lower case); when a sample has several, the first in this list wins.
  std::vector<std::string> image_extensions = {"jpg", "jpeg", "png", "webp", "ppm", "bmp", "tif", "tiff"};
  // Class names, one per line (line i = label i). Empty: "classes.txt" in the first shard's
  // folder when it exists; otherwise the names are "0".."K-1", K = the largest label + 1 (a label
  // of 2^20 or more is then a bad sample: name the classes to have more).
  std::filesystem::path classes_file;
  bool require_labels = true;  // false: a sample without a label gets -1
  // A sample without an image or label, or the damaged tail of a shard (a truncated archive, a bad
  // header checksum): an error (false), or skipped and reported (true).
  bool skip_bad_samples = false;
  Split split;
  // Where to keep the shards' index: a later call reads each unchanged shard's samples from it
  // (same path, size and modification time, same options above) instead of scanning the archive,
  // and rewrites it (atomically) when a shard was scanned. Empty: scan every time. A missing or
  // damaged index is rebuilt, never an error; a file that is not an index (no signature: a
  // user's file named by mistake) is refused with an IoError and left as it is.
  std::filesystem::path index_file;
};

struct ShardProblem {
  std::string shard;
  std::string key;  // empty for damage to the archive itself
  std::string reason;
};

struct WebDatasetReport {
  std::size_t shards = 0;
  std::size_t members = 0;
  std::size_t shards_from_index = 0;  // read from WebDatasetOptions::index_file, not scanned
  std::vector<ShardProblem> skipped;  // with skip_bad_samples: what was left out, and why
};

// The samples of `shards`, in shard order then archive order. Throws DatasetError naming the
// shard and the key (or the byte offset) for a damaged shard or a bad sample unless
// skip_bad_samples, and when no sample is left.
Dataset dataset_from_webdataset(const std::vector<std::string>& shards, const WebDatasetOptions& options = {},
                                WebDatasetReport* report = nullptr);

// The same from a brace pattern or a ".txt" shard list (see shard_paths).
Dataset dataset_from_webdataset(const std::string& spec, const WebDatasetOptions& options = {},
                                WebDatasetReport* report = nullptr);

struct ShardWriteOptions {
  // Where shards go: a printf pattern with one integer conversion, "shards/train-%06d.tar".
  std::string pattern;
  // A shard is closed before it would grow past this (a sample larger on its own gets a shard).
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
  bool shuffle = false;  // sample order across shards: the plan's permutation of (seed, epoch 0)
  std::uint64_t seed = 0;
  // Shards of the pattern already in its folder (any index) or a classes.txt there: an IoError
  // (false), or every shard of the pattern removed before writing (true).
  bool overwrite = false;
  // Asked before each sample (a command sets it from SIGINT): when it returns true, the writer
  // stops and leaves no shard of this call behind, neither the one being written (its temporary
  // removed) nor those it completed (an incomplete set would read as a smaller dataset), and no
  // classes.txt; the result says `stopped`. Empty: never asked.
  std::function<bool()> should_stop;
  // Each sample's header is read before it is copied in (what the loader would refuse — not an
  // image, a format it does not read, more pixels than limits.max_pixels — is refused here):
  // Fail throws its DecodeError (and leaves no shard), Skip leaves it out and names it in
  // ShardWriteResult::skipped.
  BadSamplePolicy on_bad_sample = BadSamplePolicy::Fail;
  DecodeLimits limits;
};

struct ShardWriteResult {
  bool stopped = false;  // ShardWriteOptions::should_stop: nothing was written
  std::vector<std::string> shards;
  std::size_t replaced = 0;  // earlier shards of the pattern removed (ShardWriteOptions::overwrite)
  std::size_t samples = 0;
  std::uint64_t bytes = 0;
  std::string classes_file;            // written next to the shards when the dataset has class names
  std::vector<SkippedSample> skipped;  // BadSamplePolicy::Skip: the samples left out, and why
};

// Writes `dataset` as WebDataset ustar shards: per sample a key unique in the set ("%08d" of the
// sample's index in `dataset`, then its file's stem made safe: "00000012_cat_1"), members
// KEY.<original extension, lower case> (the file's bytes unchanged) and KEY.cls (the label as
// text, when labelled), plus classes.txt in the first shard's folder. Each shard and classes.txt
// is written under a temporary name and renamed when complete (a killed writer leaves no file
// under a shard's name). Throws InvalidArgument for a bad pattern (the conversion must be in the
// file name), DecodeError for an unreadable sample, IoError for a failed write or for earlier
// shards of the pattern (ShardWriteOptions::overwrite).
ShardWriteResult write_webdataset_shards(const Dataset& dataset, const ShardWriteOptions& options);

// Splits a member name into WebDataset's key and extension; false when the file name has no dot.
bool split_member_name(const std::string& name, std::string& key, std::string& extension);

}  // namespace stoker
