#include "csv_records.hpp"

#include <string_view>

#include "stoker/core/error.hpp"

namespace stoker::detail {

namespace {
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
}

CsvRecords::CsvRecords(std::string text, char delimiter, std::string name)
    : text_(std::move(text)), delimiter_(delimiter), name_(std::move(name)) {
  if (text_.starts_with(kByteOrderMark)) at_ = kByteOrderMark.size();
}

void CsvRecords::end_of_line(char c) {
  if (c == '\r' && at_ < text_.size() && text_[at_] == '\n') ++at_;
  ++next_line_;
}

// Past the lines that are empty or hold only spaces and tabs (that are not the delimiter); false
// at the end of the text.
bool CsvRecords::skip_blank_lines() {
  for (;;) {
    std::size_t p = at_;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t') && text_[p] != delimiter_) ++p;
    if (p == text_.size()) {
      at_ = p;
      return false;
    }
    if (text_[p] != '\n' && text_[p] != '\r') return true;
    at_ = p + 1;
    end_of_line(text_[p]);
  }
}

bool CsvRecords::next(std::vector<std::string>& fields) {
  fields.clear();
  if (!skip_blank_lines()) return false;
  line_ = next_line_;
  // pandas' tokenizer states: a field's start, inside an unquoted field, inside a quoted field, a
  // quote seen inside a quoted field (the closing one, or the first of a doubled one).
  enum class State { Start, Unquoted, Quoted, QuoteInQuoted } state = State::Start;
  std::string field;
  int quote_line = 0;
  while (at_ < text_.size()) {
    const char c = text_[at_++];
    if (state == State::Quoted) {
      if (c == '"') {
        state = State::QuoteInQuoted;
      } else {
        field += c;
        if (c == '\n' || (c == '\r' && (at_ == text_.size() || text_[at_] != '\n'))) ++next_line_;
      }
    } else if (c == delimiter_) {
      fields.push_back(std::move(field));
      field.clear();
      state = State::Start;
    } else if (c == '\n' || c == '\r') {
      end_of_line(c);
      fields.push_back(std::move(field));
      return true;
    } else if (c == '"' && state != State::Unquoted) {
      if (state == State::QuoteInQuoted) field += '"';
      else quote_line = next_line_;
      state = State::Quoted;
    } else {
      field += c;
      state = State::Unquoted;
    }
  }
  if (state == State::Quoted) {
    throw DatasetError(name_ + ":" + std::to_string(quote_line) +
                       ": a quoted field opened on this line has no closing quote");
  }
  fields.push_back(std::move(field));
  return true;
}

}  // namespace stoker::detail
