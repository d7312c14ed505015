// Small PNG line charts (OpenCV drawing), for the training report in --out.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace stoker::app {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
};

// Charts stacked vertically in one PNG. Throws IoError when the file cannot be written.
void write_charts(const std::filesystem::path& png, const std::vector<Chart>& charts);

// One horizontal bar per (label, value), largest scale at the right, values printed.
void write_bar_chart(const std::filesystem::path& png, const std::string& title,
                     const std::vector<std::pair<std::string, double>>& bars);

}  // namespace stoker::app
