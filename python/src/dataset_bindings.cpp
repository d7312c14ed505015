// Dataset: the samples a loader visits (path + class index) and the class names, from a folder of
// class folders, a CSV/TSV file or lists built in Python. Splits follow Keras' validation_split.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/webdataset.hpp"

namespace stoker::python {
namespace {

Split make_split(double validation_split, const std::string& subset) {
  Split s;
  s.validation_fraction = validation_split;
  if (subset == "all" || subset.empty()) {
    s.subset = Subset::All;
  } else if (subset == "training") {
    s.subset = Subset::Training;
  } else if (subset == "validation") {
    s.subset = Subset::Validation;
  } else {
    throw InvalidArgument("subset must be 'training', 'validation' or None, received '" + subset + "'");
  }
  return s;
}

}  // namespace

void bind_dataset(nb::module_& m) {
  nb::class_<Dataset>(m, "Dataset", "The samples a loader visits: file paths, class indices, class names.")
      .def("__len__", &Dataset::size)
      .def_prop_ro(
          "paths",
          [](const Dataset& d) {
            nb::list p;
            for (const auto& s : d.samples) p.append(fs_str(sample_name(s)));
            return p;
          },
          "The file of each sample, in dataset order ('shard.tar:member' for a tar shard's).")
      .def_prop_ro(
          "labels",
          [](const Dataset& d) {
            std::vector<int> l;
            l.reserve(d.size());
            for (const auto& s : d.samples) l.push_back(s.label);
            return l;
          },
          "The class index of each sample (-1: unlabelled).")
      .def_prop_ro(
          "class_names", [](const Dataset& d) { return fs_strs(d.class_names); },
          "Class names; the index is the label.")
      .def("__repr__", [](const Dataset& d) {
        return "<stoker.Dataset: " + std::to_string(d.size()) + " samples, " + std::to_string(d.class_names.size()) +
               " classes>";
      });

  m.def(
      "dataset_from_directory",
      [](const std::filesystem::path& root, const std::vector<nb::object>& classes, std::vector<std::string> extensions,
         bool follow_links, double validation_split, const std::string& subset) {
        DirectoryOptions o;
        o.classes = fs_bytes(classes);
        if (!extensions.empty()) o.extensions = std::move(extensions);
        o.follow_links = follow_links;
        o.split = make_split(validation_split, subset);
        nb::gil_scoped_release unlocked;  // walks the folder tree
        return dataset_from_directory(root, o);
      },
      nb::arg("root"), nb::arg("classes") = std::vector<nb::object>{},
      nb::arg("extensions") = std::vector<std::string>{}, nb::arg("follow_links") = false,
      nb::arg("validation_split") = 0.0, nb::arg("subset") = "all",
      "One sub-folder per class, files found recursively and sorted, as Keras' flow_from_directory.");

  m.def(
      "dataset_from_csv",
      [](const std::filesystem::path& file, const std::filesystem::path& base_dir, const std::string& path_column,
         const std::string& label_column, const std::string& delimiter, double validation_split,
         const std::string& subset) {
        CsvOptions o;
        o.base_dir = base_dir;
        o.path_column = path_column;
        o.label_column = label_column;
        if (delimiter.size() > 1)
          throw InvalidArgument("delimiter must be one character, received '" + delimiter + "'");
        o.delimiter = delimiter.empty() ? '\0' : delimiter[0];
        o.split = make_split(validation_split, subset);
        nb::gil_scoped_release unlocked;
        return dataset_from_csv(file, o);
      },
      nb::arg("file"), nb::arg("base_dir") = std::filesystem::path{}, nb::arg("path_column") = "filename",
      nb::arg("label_column") = "class", nb::arg("delimiter") = "", nb::arg("validation_split") = 0.0,
      nb::arg("subset") = "all", "A CSV/TSV file with a header row (Keras' flow_from_dataframe columns).");

  m.def(
      "is_shard_spec", [](const std::string& spec) { return is_shard_spec(spec); },
      "Whether --data-like text names WebDataset tar shards (a .tar path or pattern, or a .txt list)");
  m.def(
      "dataset_from_webdataset",
      [](const std::string& spec, const std::string& label_field, bool skip_bad_samples) {
        WebDatasetOptions o;
        o.label_field = label_field;
        o.skip_bad_samples = skip_bad_samples;
        WebDatasetReport report;
        Dataset d;
        {
          nb::gil_scoped_release unlocked;  // reads every shard's headers
          d = dataset_from_webdataset(spec, o, &report);
        }
        nb::list skipped;
        for (const auto& p : report.skipped)
          skipped.append(nb::make_tuple(fs_str(p.shard), fs_str(p.key), message_str(p.reason.c_str())));
        return nb::make_tuple(d, skipped);
      },
      nb::arg("spec"), nb::arg("label_field") = "", nb::arg("skip_bad_samples") = false,
      "WebDataset tar shards (a brace pattern, a .tar, or a .txt list of shards) -> (Dataset, skipped), where "
      "skipped lists (shard, key, reason) of the samples left out with skip_bad_samples");
  m.def(
      "dataset_from_list",
      [](const std::vector<std::filesystem::path>& paths, const std::vector<int>& labels,
         const std::vector<nb::object>& class_names, double validation_split, const std::string& subset) {
        if (!labels.empty() && labels.size() != paths.size()) {
          throw InvalidArgument("labels: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(paths.size()) + " paths");
        }
        std::vector<Sample> samples(paths.size());
        for (std::size_t i = 0; i < paths.size(); ++i) {
          samples[i].path = paths[i].string();
          samples[i].label = labels.empty() ? -1 : labels[i];
        }
        return dataset_from_list(std::move(samples), fs_bytes(class_names), make_split(validation_split, subset));
      },
      nb::arg("paths"), nb::arg("labels") = std::vector<int>{}, nb::arg("class_names") = std::vector<nb::object>{},
      nb::arg("validation_split") = 0.0, nb::arg("subset") = "all",
      "Samples from lists: file paths and their class indices into class_names.");
}

}  // namespace stoker::python
