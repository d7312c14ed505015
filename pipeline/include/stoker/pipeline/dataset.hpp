// Sources: the list of samples (file + label) a loader visits, from a class-per-folder directory
// (Keras flow_from_directory), a CSV/TSV file (flow_from_dataframe) or a list built in code.
// WebDataset tar shards are in webdataset.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace stoker {

// Where a sample's bytes lie inside its file: a member of a tar shard.
struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

struct Sample {
  std::string path;         // file to read
  std::int32_t label = -1;  // class index, -1 when unlabelled
  // Set for a member of an archive: only these bytes of `path` are the image, and `member` (the
  // member's name, e.g. "000123.jpg") names it in messages. Unset: the whole file.
  std::optional<ByteRange> range;
  std::string member;
};

// How errors and reports name a sample: its path, or "shard.tar:member" for an archive member.
std::string sample_name(const Sample& sample);

struct Dataset {
  std::vector<Sample> samples;
  std::vector<std::string> class_names;  // index = label

  std::size_t size() const noexcept { return samples.size(); }
  bool empty() const noexcept { return samples.empty(); }
};

// Which part of a validation split to keep.
enum class Subset : std::uint8_t { All, Training, Validation };

// Keras' split: in each class (in source order) the first floor(fraction * n) samples are the
// validation subset and the rest the training subset. Deterministic; no shuffling.
struct Split {
  double validation_fraction = 0.0;  // [0, 1)
  Subset subset = Subset::All;
};

struct DirectoryOptions {
  Split split;
  // Only these class sub-folders, in this order (Keras' `classes`); empty = all, alphanumeric.
  std::vector<std::string> classes;
  // File extensions accepted (lower case, without the dot): Keras' white list, and WebP (which
  // tf.keras' image_dataset_from_directory leaves out, but the decoder reads).
  std::vector<std::string> extensions = {"png", "jpg", "jpeg", "bmp", "ppm", "tif", "tiff", "webp"};
  bool follow_links = false;
};

// The image files below a folder, found recursively: those with one of `extensions`, in Keras'
// order (the folders sorted by path, in each its files sorted by name). With `follow_links`,
// links to folders are followed, but no folder is entered twice (as `find -L` does): a link back
// to a folder being walked (a loop) or to one already listed is left out and named in
// `repeated_folders`. Throws DatasetError naming a folder that cannot be listed (e.g. no
// permission).
struct ImageFiles {
  std::vector<std::string> files;
  std::vector<std::string> repeated_folders;  // the links left out, as found under the folder
};
ImageFiles find_image_files(const std::filesystem::path& dir, const std::vector<std::string>& extensions,
                            bool follow_links);

// The sub-folders of `root`, sorted: the classes dataset_from_directory takes when it is given none.
// Throws DatasetError when `root` cannot be listed.
std::vector<std::string> class_folders(const std::filesystem::path& root);

// One sub-folder per class; class indices follow the sorted folder names; files inside a class
// folder are found recursively and sorted, as Keras does (find_image_files: with `follow_links` a
// folder reached twice, as through a link loop, is listed once). Throws DatasetError when the
// folder is missing or cannot be listed, has no class folders, or a class folder holds no images.
Dataset dataset_from_directory(const std::filesystem::path& root, const DirectoryOptions& options = {});

struct CsvOptions {
  std::filesystem::path base_dir;        // relative paths are resolved against it (default: the CSV's folder)
  std::string path_column = "filename";  // Keras' x_col default
  std::string label_column = "class";    // Keras' y_col default; empty = unlabelled
  char delimiter = '\0';                 // '\0': tab for .tsv files, comma otherwise
  Split split;
};

// A CSV/TSV file with a header row, read as pandas' read_csv reads it with its defaults: a leading
// UTF-8 byte order mark is skipped; a quote is special only at a field's start (`a"b.jpg` is a
// path), a quoted field may hold the delimiter, line breaks and doubled quotes (one quote each);
// blank lines are skipped. Labels are class names; classes are the sorted distinct names. Throws
// DatasetError naming the file and the line a record begins on: a row with fewer fields than the
// columns read or more than the header, an empty path or an empty class, a quote never closed.
Dataset dataset_from_csv(const std::filesystem::path& csv_file, const CsvOptions& options = {});

// Validates an explicit list (labels within class_names, non-empty) and applies the split.
Dataset dataset_from_list(std::vector<Sample> samples, std::vector<std::string> class_names, const Split& split = {});

// The split on its own, for any dataset (per class, in the dataset's order).
Dataset apply_split(const Dataset& dataset, const Split& split);

}  // namespace stoker
