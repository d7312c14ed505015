// Flags shared by every subcommand that builds a Loader (names follow Keras where it has one).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include <CLI/CLI.hpp>
#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/loader_settings.hpp"
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

// The loader's flags come from the settings' table (stoker/pipeline/loader_settings.hpp): each
// setting is a field here (members() says which), its flag, help and default are the table's, and
// options() converts through loader_options_from(), so the command checks values as Python does.
// The dataset's flags (--data, --data-csv, ...) are the command's own.
struct LoaderFlags {
  std::string data;
  int image_size = 0;
  int batch_size = 0;
  int threads = 0;
  int prefetch = 0;  // 0: two batches per decode thread (train: with --threads not given, calibrated)
  std::uint64_t seed = 0;
  std::uint64_t max_image_pixels = 0;
  std::string interpolation;
  std::string label_mode;
  std::string on_bad_sample;
  bool keep_aspect_ratio = false;
  bool dct_scaling = true;
  bool shuffle = true;
  bool drop_last = false;
  std::string cache;
  std::string cache_budget;
  std::string cache_file;
  int rank = -1;       // below the setting's minimum: unset (from the environment: torchrun, Slurm)
  int world_size = 0;  // likewise
  std::string shard_mode;
  bool drop_remainder = false;
  std::string shard_remainder = "pad";  // the older spelling of --drop-remainder: pad|drop
  std::string label_field;              // tar shards: the label from this field of the json member
  std::string shard_index;              // tar shards: where the index is kept (default: beside --cache-file)
  // A CSV/TSV list instead of --data (Keras' flow_from_dataframe): the file, its path and label
  // columns, and the folder relative paths start from (default: the CSV's own).
  std::string data_csv, x_col = "filename", y_col = "class", directory;
  std::string extensions = "png,jpg,jpeg,bmp,ppm,tif,tiff,webp";  // of class-folder files

  LoaderFlags() { use_defaults_of(kWhereCommand); }

  using Member =
      std::variant<int LoaderFlags::*, std::uint64_t LoaderFlags::*, bool LoaderFlags::*, std::string LoaderFlags::*>;
  // The field of each loader setting.
  static const std::map<std::string_view, Member>& members() {
    static const std::map<std::string_view, Member> m = {
        {"image_size", &LoaderFlags::image_size},
        {"batch_size", &LoaderFlags::batch_size},
        {"interpolation", &LoaderFlags::interpolation},
        {"keep_aspect_ratio", &LoaderFlags::keep_aspect_ratio},
        {"dct_scaling", &LoaderFlags::dct_scaling},
        {"label_mode", &LoaderFlags::label_mode},
        {"shuffle", &LoaderFlags::shuffle},
        {"seed", &LoaderFlags::seed},
        {"drop_last", &LoaderFlags::drop_last},
        {"threads", &LoaderFlags::threads},
        {"prefetch", &LoaderFlags::prefetch},
        {"on_bad_sample", &LoaderFlags::on_bad_sample},
        {"max_image_pixels", &LoaderFlags::max_image_pixels},
        {"cache", &LoaderFlags::cache},
        {"cache_budget", &LoaderFlags::cache_budget},
        {"cache_file", &LoaderFlags::cache_file},
        {"rank", &LoaderFlags::rank},
        {"world_size", &LoaderFlags::world_size},
        {"shard_mode", &LoaderFlags::shard_mode},
        {"drop_remainder", &LoaderFlags::drop_remainder},
    };
    return m;
  }
  static const Member& member(const LoaderSetting& s) {
    const auto it = members().find(s.name);
    if (it == members().end())
      throw std::logic_error("LoaderFlags has no field for the loader setting " + std::string(s.name));
    return it->second;
  }

  // Every setting's field at its default for `where` (kWhereCommand, kWhereTrain).
  void use_defaults_of(std::string_view where) {
    for (const auto& s : loader_settings()) set(s, std::string(s.default_for(where)));
  }
  // A setting's field from its text ("" leaves a setting that may be unset unset).
  void set(const LoaderSetting& s, const std::string& text) {
    std::visit(
        [&](auto field) {
          using V = std::remove_reference_t<decltype(this->*field)>;
          if constexpr (std::is_same_v<V, bool>) this->*field = parse_setting_bool(s, text);
          else if constexpr (std::is_same_v<V, std::string>) this->*field = text;
          else this->*field = text.empty() ? V(s.min - 1) : static_cast<V>(parse_setting_integer(s, text));
        },
        member(s));
  }
  // A setting's field as text ("" for an unset one: an integer below the setting's minimum that
  // was not given as a flag; given, it is checked as typed: --rank -1 is refused naming -1).
  std::string text(const LoaderSetting& s) const {
    return std::visit(
        [&](auto field) -> std::string {
          const auto& v = this->*field;
          using V = std::remove_cvref_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
          else if constexpr (std::is_same_v<V, std::string>) return v;
          else {
            if (s.may_be_unset() && static_cast<std::int64_t>(v) < s.min && !given_.contains(s.name)) return {};
            return std::to_string(v);
          }
        },
        member(s));
  }

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
    for (const auto& s : loader_settings()) add_setting(cmd, s);
    cmd.add_option("--shard-remainder", shard_remainder, "pad|drop: the older spelling of --drop-remainder")
        ->capture_default_str();
  }

  // One setting's flag, as the table describes it: a boolean that is true by default also has
  // --no-NAME; a choice lists its values.
  void add_setting(CLI::App& cmd, const LoaderSetting& s) {
    std::string help(s.help);
    if (s.type == SettingType::Choice) {
      help += " (";
      for (std::size_t i = 0; i < s.choices.size(); ++i) help += (i ? "|" : "") + std::string(s.choices[i]);
      help += ")";
    }
    std::visit(
        [&](auto field) {
          auto& v = this->*field;
          using V = std::remove_reference_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            const std::string names = v ? s.flag() + ",!--no-" + s.flag().substr(2) : s.flag();
            cmd.add_flag(names, v, help);
          } else {
            auto* option = cmd.add_option(s.flag(), v, help);
            if (!s.may_be_unset() && !s.default_value.empty()) option->capture_default_str();
            // Its unset value is one below its minimum, so a value given there must be told apart.
            if (s.may_be_unset()) option->each([this, name = s.name](const std::string&) { given_.insert(name); });
          }
        },
        member(s));
  }

  LoaderOptions options() const {
    LoaderSettingValues given;
    for (const auto& s : loader_settings()) {
      std::string t = text(s);
      if (!t.empty() || !s.may_be_unset()) given.emplace(std::string(s.name), std::move(t));
    }
    if (shard_remainder != "pad" && shard_remainder != "drop") {
      throw InvalidArgument("--shard-remainder must be pad or drop, received '" + shard_remainder + "'");
    }
    if (shard_remainder == "drop") given["drop_remainder"] = "true";
    return loader_options_from(given, kWhereCommand);
  }

 private:
  // The settings that may be unset (rank, world_size) given as flags, whatever their value.
  std::set<std::string_view> given_;
};

}  // namespace stoker::app
