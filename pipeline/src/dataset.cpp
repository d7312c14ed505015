#include "stoker/pipeline/dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <sys/stat.h>

#include "csv_records.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

void check_split(const Split& split) {
  if (!(split.validation_fraction >= 0.0 && split.validation_fraction < 1.0)) {
    throw InvalidArgument("validation_split must be in [0, 1), received " + std::to_string(split.validation_fraction));
  }
  if (split.subset != Subset::All && split.validation_fraction == 0.0) {
    throw InvalidArgument("a training/validation subset needs validation_split > 0");
  }
}

bool has_extension(const fs::path& file, const std::vector<std::string>& extensions) {
  std::string ext = lower(file.extension().string());
  if (ext.empty()) return false;
  ext.erase(0, 1);
  return std::find(extensions.begin(), extensions.end(), ext) != extensions.end();
}

// A folder's identity, whatever path reaches it: its device and inode.
struct FolderId {
  dev_t device;
  ino_t inode;
  auto operator<=>(const FolderId&) const = default;
};

FolderId folder_id(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw DatasetError(dir.string() +
                       ": cannot read the folder: " + std::error_code(errno, std::generic_category()).message());
  }
  return {st.st_dev, st.st_ino};
}

struct Walk {
  const std::vector<std::string>& extensions;
  bool follow_links;
  std::set<FolderId> visited;
  ImageFiles found;

  void folder(const fs::path& dir) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const fs::directory_entry& e = *it;
      std::error_code entry_ec;
      const bool link = e.is_symlink(entry_ec);
      if (e.is_directory(entry_ec)) {  // through a link too
        if (link && !follow_links) continue;
        if (!visited.insert(folder_id(e.path())).second) {
          found.repeated_folders.push_back(e.path().string());
          continue;
        }
        folder(e.path());
      } else if (e.is_regular_file(entry_ec) && has_extension(e.path(), extensions)) {
        found.files.push_back(e.path().string());
      }
    }
    if (ec) throw DatasetError(dir.string() + ": cannot list the folder: " + ec.message());
  }
};

}  // namespace

ImageFiles find_image_files(const fs::path& dir, const std::vector<std::string>& extensions, bool follow_links) {
  Walk walk{extensions, follow_links, {}, {}};
  walk.visited.insert(folder_id(dir));
  walk.folder(dir);
  std::vector<std::string>& files = walk.found.files;
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    const fs::path pa(a), pb(b);
    const std::string da = pa.parent_path().string(), db = pb.parent_path().string();
    if (da != db) return da < db;
    return pa.filename().string() < pb.filename().string();
  });
  return std::move(walk.found);
}

Dataset apply_split(const Dataset& dataset, const Split& split) {
  check_split(split);
  if (split.subset == Subset::All) return dataset;
  const std::size_t classes = std::max<std::size_t>(1, dataset.class_names.size());
  std::vector<std::size_t> per_class(classes + 1, 0);
  auto bucket = [&](const Sample& s) { return s.label < 0 ? classes : static_cast<std::size_t>(s.label); };
  for (const auto& s : dataset.samples) ++per_class[bucket(s)];

  Dataset out;
  out.class_names = dataset.class_names;
  std::vector<std::size_t> seen(classes + 1, 0);
  for (const auto& s : dataset.samples) {
    const std::size_t b = bucket(s);
    const auto cut = static_cast<std::size_t>(split.validation_fraction * static_cast<double>(per_class[b]));
    const bool in_validation = seen[b]++ < cut;
    if (in_validation == (split.subset == Subset::Validation)) out.samples.push_back(s);
  }
  return out;
}

std::vector<std::string> class_folders(const fs::path& root) {
  std::vector<std::string> classes;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code entry_ec;
    if (it->is_directory(entry_ec)) classes.push_back(it->path().filename().string());
  }
  if (ec) throw DatasetError(root.string() + ": cannot list the folder: " + ec.message());
  std::sort(classes.begin(), classes.end());
  return classes;
}

Dataset dataset_from_directory(const fs::path& root, const DirectoryOptions& options) {
  check_split(options.split);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DatasetError(root.string() + ": not a directory (expected one sub-folder per class)");
  }
  const std::vector<std::string> classes = options.classes.empty() ? class_folders(root) : options.classes;
  if (classes.empty()) {
    throw DatasetError(root.string() + ": no class sub-folders (expected one sub-folder per class)");
  }

  Dataset dataset;
  dataset.class_names = classes;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = root / classes[c];
    if (!fs::is_directory(dir, ec)) throw DatasetError(dir.string() + ": class folder does not exist");
    const auto files = find_image_files(dir, options.extensions, options.follow_links).files;
    if (files.empty()) {
      throw DatasetError(dir.string() + ": class folder '" + classes[c] + "' holds no images (" +
                         std::to_string(options.extensions.size()) + " accepted extensions)");
    }
    for (const auto& f : files) dataset.samples.push_back({f, static_cast<std::int32_t>(c)});
  }
  return apply_split(dataset, options.split);
}

Dataset dataset_from_csv(const fs::path& csv_file, const CsvOptions& options) {
  check_split(options.split);
  const std::string name = csv_file.string();
  std::ifstream in(csv_file, std::ios::binary);
  if (!in) throw DatasetError(name + ": cannot open CSV file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw DatasetError(name + ": cannot read CSV file");
  const char delimiter =
      options.delimiter ? options.delimiter : (lower(csv_file.extension().string()) == ".tsv" ? '\t' : ',');
  const fs::path base = options.base_dir.empty() ? csv_file.parent_path() : options.base_dir;
  detail::CsvRecords reader(std::move(text), delimiter, name);

  std::vector<std::string> header;
  if (!reader.next(header)) throw DatasetError(name + ": empty CSV file (no header row)");
  auto column = [&](const std::string& wanted) -> int {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == wanted) return static_cast<int>(i);
    std::string have;
    for (const auto& h : header) have += (have.empty() ? "" : ", ") + h;
    throw DatasetError(name + ": no column '" + wanted + "' (columns: " + have + ")");
  };
  const int path_col = column(options.path_column);
  const int label_col = options.label_column.empty() ? -1 : column(options.label_column);
  const auto need = static_cast<std::size_t>(std::max(path_col, label_col) + 1);

  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    const std::string at = name + ":" + std::to_string(reader.line()) + ": ";
    if (fields.size() < need) {
      throw DatasetError(at + std::to_string(fields.size()) + " fields, expected at least " + std::to_string(need));
    }
    if (fields.size() > header.size()) {  // pandas refuses it too ("Expected 2 fields in line 3, saw 3")
      throw DatasetError(at + std::to_string(fields.size()) + " fields, but the header has " +
                         std::to_string(header.size()) + " (a field holding the delimiter must be quoted)");
    }
    if (fields[path_col].empty()) throw DatasetError(at + "empty '" + options.path_column + "'");
    if (label_col >= 0 && fields[label_col].empty()) {
      throw DatasetError(at + "empty '" + options.label_column + "' for " + fields[path_col] +
                         " (every image needs its class)");
    }
    fs::path p(fields[path_col]);
    if (p.is_relative()) p = base / p;
    rows.emplace_back(p.string(), label_col >= 0 ? std::move(fields[label_col]) : std::string());
  }
  if (rows.empty()) throw DatasetError(name + ": no rows after the header");

  Dataset dataset;
  if (label_col >= 0) {
    std::set<std::string> names;
    for (const auto& r : rows) names.insert(r.second);
    dataset.class_names.assign(names.begin(), names.end());
  }
  for (auto& [path, label_name] : rows) {
    std::int32_t label = -1;
    if (label_col >= 0) {
      label = static_cast<std::int32_t>(
          std::lower_bound(dataset.class_names.begin(), dataset.class_names.end(), label_name) -
          dataset.class_names.begin());
    }
    dataset.samples.push_back({std::move(path), label});
  }
  return apply_split(dataset, options.split);
}

std::string sample_name(const Sample& sample) { return sample.range ? sample.path + ":" + sample.member : sample.path; }

Dataset dataset_from_list(std::vector<Sample> samples, std::vector<std::string> class_names, const Split& split) {
  if (samples.empty()) throw DatasetError("dataset_from_list: the list of samples is empty");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (s.path.empty()) throw DatasetError("dataset_from_list: sample " + std::to_string(i) + " has an empty path");
    if (s.label < -1 || s.label >= static_cast<std::int32_t>(class_names.size())) {
      throw DatasetError("dataset_from_list: sample " + std::to_string(i) + " (" + s.path + ") has label " +
                         std::to_string(s.label) + ", but there are " + std::to_string(class_names.size()) +
                         " classes");
    }
  }
  return apply_split(Dataset{std::move(samples), std::move(class_names)}, split);
}

}  // namespace stoker
