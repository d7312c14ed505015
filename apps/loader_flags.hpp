// Flags shared by every subcommand that builds a Loader (names follow Keras where it has one).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <oneapi/tbb/info.h>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/webdataset.hpp"

namespace stoker::app {

// "shards: N indexed in T ms (M members)[, K bad samples skipped]" and each skipped sample.
inline void print_shard_report(const WebDatasetReport& report, double milliseconds) {
  std::printf("shards: %zu indexed in %.1f ms (%zu members", report.shards, milliseconds, report.members);
  if (report.shards_from_index > 0) std::printf("; %zu from the shard index", report.shards_from_index);
  std::printf(")");
  if (!report.skipped.empty()) std::printf(", %zu bad samples skipped", report.skipped.size());
  std::printf("\n");
  for (const auto& p : report.skipped) {
    std::printf("  skipped %s%s%s: %s\n", p.shard.c_str(), p.key.empty() ? "" : ":", p.key.c_str(), p.reason.c_str());
  }
}

struct LoaderFlags {
  std::string data;
  int image_size = 224;
  int batch_size = 32;
  int threads = 0;
  int prefetch = 0;  // 0: two batches per decode thread (train: with --threads not given, calibrated)
  std::uint64_t seed = 0;
  std::string interpolation = "nearest";
  std::string label_mode = "binary";
  std::string on_bad_sample = "fail";
  bool keep_aspect_ratio = false;
  std::string cache = "none";
  std::string cache_budget = "4GiB";
  std::string cache_file;
  int rank = -1;  // -1 with world_size 0: from the environment (torchrun, Slurm)
  int world_size = 0;
  std::string shard_mode = "interleaved";
  std::string shard_remainder = "pad";
  std::string label_field;  // tar shards: the label from this field of the json member
  std::string shard_index;  // tar shards: where the index is kept (default: beside --cache-file)
  // A CSV/TSV list instead of --data (Keras' flow_from_dataframe): the file, its path and label
  // columns, and the folder relative paths start from (default: the CSV's own).
  std::string data_csv, x_col = "filename", y_col = "class", directory;
  std::string extensions = "png,jpg,jpeg,bmp,ppm,tif,tiff,webp";  // of class-folder files

  // --data: a class folder, or WebDataset tar shards (a brace pattern or a .txt list).
  static bool names_shards(const std::string& where) {
    return is_shard_spec(where) && !std::filesystem::is_directory(where);
  }
  bool shards() const { return data_csv.empty() && names_shards(data); }
  // The CLI11 check of --data: empty when `where` is a folder or names tar shards, else why not.
  static std::string check_data(const std::string& where) {
    if (std::filesystem::is_directory(where) || is_shard_spec(where)) return {};
    return "Directory does not exist: " + where + " (nor is it tar shards: a pattern ending in .tar or a .txt list)";
  }

  // What the data is called in messages: --data, or the --data-csv file.
  const std::string& source() const { return data_csv.empty() ? data : data_csv; }

  // The dataset --data (or --data-csv) names; for shards, what was skipped (--on-bad-sample skip)
  // goes to `report`.
  Dataset dataset(WebDatasetReport* report = nullptr) const {
    if (!data_csv.empty()) {
      if (!data.empty()) throw InvalidArgument("give --data or --data-csv, not both");
      CsvOptions o;
      o.base_dir = directory;
      o.path_column = x_col;
      o.label_column = label_mode == "none" ? std::string() : y_col;
      return dataset_from_csv(data_csv, o);
    }
    if (data.empty()) throw InvalidArgument("--data (a class folder or tar shards) or --data-csv is required");
    return dataset_at(data, report);
  }
  // Another folder or shard set read with these flags (train's --val); a folder's classes are
  // `classes` when given (those of the training set), else its sub-folders.
  Dataset dataset_at(const std::string& where, WebDatasetReport* report = nullptr,
                     const std::vector<std::string>& classes = {}) const {
    if (!names_shards(where)) {
      DirectoryOptions o;
      o.classes = classes;
      o.extensions.clear();
      std::size_t start = 0;
      while (start < extensions.size()) {
        const std::size_t end = std::min(extensions.find(',', start), extensions.size());
        std::string e = extensions.substr(start, end - start);
        if (e.starts_with('.')) e.erase(0, 1);
        std::transform(e.begin(), e.end(), e.begin(), [](unsigned char ch) { return std::tolower(ch); });
        if (!e.empty()) o.extensions.push_back(e);
        start = end + 1;
      }
      if (o.extensions.empty()) throw InvalidArgument("--extensions lists no extension: '" + extensions + "'");
      return dataset_from_directory(where, o);
    }
    WebDatasetOptions o;
    o.label_field = label_field;
    o.index_file = !shard_index.empty() ? shard_index
                   : cache_file.empty() ? std::string()
                                        : cache_file + ".shard-index";
    o.skip_bad_samples = parse_bad_sample_policy(on_bad_sample) == BadSamplePolicy::Skip;
    o.require_labels = label_mode != "none";
    return dataset_from_webdataset(where, o, report);
  }

  void add_to(CLI::App& cmd) {
    cmd.add_option("--data", data,
                   "folder with one sub-folder per class, or WebDataset tar shards: a brace pattern "
                   "('shards/train-{000000..000127}.tar') or a .txt list of shard paths")
        ->check(check_data);
    cmd.add_option("--data-csv", data_csv,
                   "a CSV/TSV file listing the images instead of --data (Keras' flow_from_dataframe)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--x-col", x_col, "--data-csv: the column of image paths")->capture_default_str();
    cmd.add_option("--y-col", y_col, "--data-csv: the column of class names")->capture_default_str();
    cmd.add_option("--directory", directory, "--data-csv: the folder relative paths start from (default: the CSV's)");
    cmd.add_option("--extensions", extensions, "class folders: the file extensions taken, comma-separated")
        ->capture_default_str();
    cmd.add_option("--label-field", label_field, "tar shards: take the label from this field of the json member");
    cmd.add_option("--shard-index", shard_index,
                   "tar shards: keep their index in this file so a later start skips the scan (default with "
                   "--cache-file: FILE.shard-index)");
    cmd.add_option("--image-size", image_size, "square target size in pixels")->capture_default_str();
    cmd.add_option("--batch-size", batch_size, "samples per batch")->capture_default_str();
    cmd.add_option("--threads", threads, "decode threads (0 = all cores; train: chosen by a short calibration)")
        ->capture_default_str();
    cmd.add_option("--prefetch", prefetch, "batches decoded ahead of the consumer (0 = two per decode thread)")
        ->capture_default_str();
    cmd.add_option("--seed", seed, "shuffle and augmentation seed")->capture_default_str();
    cmd.add_option("--interpolation", interpolation, "nearest|bilinear|area")->capture_default_str();
    cmd.add_option("--label-mode", label_mode, "binary|categorical|sparse|none")->capture_default_str();
    cmd.add_option("--on-bad-sample", on_bad_sample, "fail|skip")->capture_default_str();
    cmd.add_flag("--keep-aspect-ratio", keep_aspect_ratio, "centre-crop to the target aspect ratio first");
    cmd.add_option("--cache", cache, "keep samples across epochs: none|encoded|decoded")->capture_default_str();
    cmd.add_option("--cache-budget", cache_budget, "RAM for the cache, e.g. 8GiB")->capture_default_str();
    cmd.add_option("--cache-file", cache_file, "cache file to start warm from and to write after an epoch");
    cmd.add_option("--rank", rank, "this process's rank (default: RANK or SLURM_PROCID, else 0)");
    cmd.add_option("--world-size", world_size, "processes in the job (default: WORLD_SIZE or SLURM_NTASKS, else 1)");
    cmd.add_option("--shard-mode", shard_mode, "interleaved (DistributedSampler) | fixed (one part per rank)")
        ->capture_default_str();
    cmd.add_option("--shard-remainder", shard_remainder, "pad (wrap around, marked) | drop")->capture_default_str();
  }

  LoaderOptions options() const {
    LoaderOptions o;
    o.image_height = o.image_width = image_size;
    o.batch_size = batch_size;
    o.threads = threads;
    o.prefetch = prefetch > 0 ? prefetch : 2 * std::max(1, threads > 0 ? threads : tbb::info::default_concurrency());
    o.seed = seed;
    o.interpolation = parse_interpolation(interpolation);
    o.label_mode = parse_label_mode(label_mode);
    o.on_bad_sample = parse_bad_sample_policy(on_bad_sample);
    o.keep_aspect_ratio = keep_aspect_ratio;
    o.cache.kind = parse_cache_kind(cache);
    o.cache.budget_bytes = parse_byte_size(cache_budget);
    o.cache.file = cache_file;
    if (!cache_file.empty() && o.cache.kind == CacheKind::None) {
      throw InvalidArgument("--cache-file needs --cache encoded or --cache decoded");
    }
    if ((rank >= 0) != (world_size >= 1)) throw InvalidArgument("give --rank and --world-size together");
    Sharding sharding = rank >= 0 ? Sharding{rank, world_size} : sharding_from_environment();
    sharding.mode = parse_shard_mode(shard_mode);
    if (shard_remainder != "pad" && shard_remainder != "drop") {
      throw InvalidArgument("--shard-remainder must be pad or drop, received '" + shard_remainder + "'");
    }
    sharding.drop_remainder = shard_remainder == "drop";
    o.sharding = sharding;
    return o;
  }
};

}  // namespace stoker::app
