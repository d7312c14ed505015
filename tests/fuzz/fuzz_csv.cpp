// Fuzzes dataset_from_csv, the reader of `--data-csv` lists (read as pandas.read_csv reads them):
// a list it accepts has a non-empty path per sample, each label inside the classes (or none
// without a class column) and the classes sorted, distinct and non-empty; an error that names a
// line names one of the file's lines.
//
// Input: byte 0 a mode, the rest the file. Mode bit 0: a .tsv (tab-delimited) file; bit 1: no
// class column (unlabelled); bit 2: the training subset of a 0.5 validation split.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <stoker/core/error.hpp>
#include <stoker/pipeline/dataset.hpp>

#include "fuzz_util.hpp"

namespace {

void check(const stoker::Dataset& ds, bool labelled) {
  for (std::size_t c = 0; c < ds.class_names.size(); ++c) {
    if (ds.class_names[c].empty() || (c > 0 && !(ds.class_names[c - 1] < ds.class_names[c]))) std::abort();
  }
  if (!labelled && !ds.class_names.empty()) std::abort();
  const auto classes = static_cast<std::int64_t>(ds.class_names.size());
  for (const auto& s : ds.samples) {
    if (s.path.empty()) std::abort();
    if (labelled ? (s.label < 0 || s.label >= classes) : s.label != -1) std::abort();
  }
}

// Lines as an editor counts them: each \n, \r\n or lone \r ends one.
std::size_t lines_in(const std::string& text) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) ++n;
  }
  return n;
}

// "FILE:LINE: ...": LINE must be a line of the file.
void check_line(const std::string& message, const std::string& file, std::size_t lines) {
  if (message.rfind(file + ":", 0) != 0) std::abort();  // every message names the file first
  const std::string rest = message.substr(file.size() + 1);
  if (rest.empty() || rest[0] < '0' || rest[0] > '9') return;  // about the whole file
  const unsigned long line = std::strtoul(rest.c_str(), nullptr, 10);
  if (line < 1 || line > lines) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto file = stoker_fuzz::scratch_dir() / ((mode & 1) ? "list.tsv" : "list.csv");
  stoker_fuzz::write_file(file, text);
  stoker::CsvOptions options;
  if (mode & 2) options.label_column.clear();
  if (mode & 4) options.split = {0.5, stoker::Subset::Training};
  try {
    check(stoker::dataset_from_csv(file, options), !options.label_column.empty());
  } catch (const stoker::DatasetError& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
    check_line(e.what(), file.string(), lines_in(text));
  }
  return 0;
}
