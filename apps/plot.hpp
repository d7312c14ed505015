// Small PNG line charts (OpenCV drawing), for the training report in --out.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace stoker::app {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// A stretch of the x axis drawn shaded behind the lines, named at its top (the fine-tuning phase).
struct Span {
  double from = 0, to = 0;
  std::string label;
};

// A dashed vertical line with its label (the best epoch).
struct Marker {
  double x = 0;
  std::string label;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  bool integer_x = false;  // the x axis counts epochs: ticks at whole numbers only
  std::vector<Span> shaded;
  std::optional<Marker> marker;
};

// Tick values at 1, 2 or 5 × 10^k apart, about `target` of them, from the first multiple of the
// step at or above `lo` to the last at or below `hi`. `integer`: the step is a whole number.
std::vector<double> nice_ticks(double lo, double hi, int target, bool integer = false);

// The range [lo, hi] widened outwards to multiples of its nice tick step.
std::pair<double, double> nice_range(double lo, double hi, int target);

// Charts stacked vertically in one PNG. Throws IoError when the file cannot be written.
void write_charts(const std::filesystem::path& png, const std::vector<Chart>& charts);

// One horizontal bar per (label, value), largest scale at the right, values printed.
void write_bar_chart(const std::filesystem::path& png, const std::string& title,
                     const std::vector<std::pair<std::string, double>>& bars);

}  // namespace stoker::app
