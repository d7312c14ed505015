// The records of a CSV/TSV file as pandas' read_csv reads them with its defaults (the C parser):
// a leading UTF-8 byte order mark is skipped (Excel's "CSV UTF-8"); a quote opens a quoted field
// only at the field's start (`a"b.jpg` is those five characters); inside a quoted field the
// delimiter and line breaks are text and a doubled quote is one quote; after its closing quote a
// field goes on unquoted (`"a"b` is `ab`); lines that are empty or hold only spaces and tabs are
// skipped; a line ends at \n, \r\n or \r.
#pragma once

#include <string>
#include <vector>

namespace stoker::detail {

class CsvRecords {
 public:
  // `name` (the file) begins every error message.
  CsvRecords(std::string text, char delimiter, std::string name);

  // The next record's fields; false after the last. Throws DatasetError naming the file and the
  // line of a quoted field without its closing quote.
  bool next(std::vector<std::string>& fields);
  // The line (from 1) the record next() gave last begins on.
  int line() const noexcept { return line_; }

 private:
  bool skip_blank_lines();
  void end_of_line(char c);  // after a \n or \r: past the line break, counted

  std::string text_;
  char delimiter_;
  std::string name_;
  std::size_t at_ = 0;
  int line_ = 0;       // where the last record began
  int next_line_ = 1;  // the line at_ is on
};

}  // namespace stoker::detail
