#include "plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"

namespace stoker::app {
namespace {

constexpr int kWidth = 900, kHeight = 360;
constexpr int kLeft = 80, kRight = 170, kTop = 40, kBottom = 50;
const cv::Scalar kColors[] = {{200, 90, 30}, {40, 120, 230}, {60, 160, 60}, {160, 60, 160}, {30, 30, 200}};

std::string tick(double v) {
  char b[32];
  std::snprintf(b, sizeof b, std::fabs(v) >= 1000 ? "%.0f" : (std::fabs(v) >= 10 ? "%.1f" : "%.3g"), v);
  return b;
}

// 1, 2 or 5 × 10^k: the step that gives about `target` ticks over `span`.
double nice_step(double span, int target, bool integer) {
  const double raw = span / std::max(1, target - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  return integer ? std::max(1.0, std::round(step)) : step;
}

// A tick's label with as many decimals as its step needs (0.25 steps: two; 2,000 steps: none).
std::string tick_label(double v, double step) {
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v == 0 ? 0.0 : v);  // no "-0"
  return b;
}

constexpr double kFont = 0.4;
const cv::Scalar kGrid{225, 225, 225}, kInk{60, 60, 60}, kShade{248, 236, 222}, kMarker{90, 90, 90};

void put(cv::Mat& img, const std::string& text, cv::Point at, double scale = kFont, cv::Scalar color = kInk) {
  cv::putText(img, text, at, cv::FONT_HERSHEY_SIMPLEX, scale, color, 1, cv::LINE_AA);
}

int text_width(const std::string& text, double scale = kFont) {
  int baseline = 0;
  return cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, scale, 1, &baseline).width;
}

void draw_chart(cv::Mat& img, const Chart& c) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : c.series) {
    for (double v : s.x) x0 = std::min(x0, v), x1 = std::max(x1, v);
    for (double v : s.y) y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (y0 > y1) y0 = 0, y1 = 1;
  if (c.integer_x && x1 - x0 < 1) x0 -= 0.5, x1 += 0.5;  // one epoch: its tick in the middle
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  y0 = std::min(y0, 0.0);  // bars of throughput and loss read best from zero
  if (y1 - y0 < 1e-12) y1 = y0 + 1;
  std::tie(y0, y1) = nice_range(y0, y1, 6);
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + static_cast<int>(std::lround((x - x0) / (x1 - x0) * pw)); };
  auto py = [&](double y) { return kTop + ph - static_cast<int>(std::lround((y - y0) / (y1 - y0) * ph)); };

  put(img, c.title + " (" + c.y_label + ")", {kLeft, 25}, 0.6, {0, 0, 0});
  for (const Span& s : c.shaded) {
    const int a = px(std::clamp(s.from, x0, x1)), b = px(std::clamp(s.to, x0, x1));
    if (b <= a) continue;
    cv::rectangle(img, {a, kTop}, {b, kTop + ph}, kShade, cv::FILLED);
    put(img, s.label, {a + 4, kTop + 14});
  }
  const double y_step = nice_step(y1 - y0, 6, false), x_step = nice_step(x1 - x0, 8, c.integer_x);
  for (double yv : nice_ticks(y0, y1, 6)) {
    cv::line(img, {kLeft, py(yv)}, {kLeft + pw, py(yv)}, kGrid);
    const std::string label = tick_label(yv, y_step);
    put(img, label, {kLeft - 6 - text_width(label), py(yv) + 4});
  }
  for (double xv : nice_ticks(x0, x1, 8, c.integer_x)) {
    cv::line(img, {px(xv), kTop + ph}, {px(xv), kTop + ph + 4}, kInk);
    const std::string label = tick_label(xv, x_step);
    put(img, label, {px(xv) - text_width(label) / 2, kTop + ph + 18});
  }
  cv::rectangle(img, {kLeft, kTop}, {kLeft + pw, kTop + ph}, {120, 120, 120});
  put(img, c.x_label, {kLeft + pw / 2 - text_width(c.x_label, 0.45) / 2, kHeight - 10}, 0.45, {0, 0, 0});
  if (c.marker && c.marker->x >= x0 && c.marker->x <= x1) {
    const int x = px(c.marker->x);
    for (int y = kTop; y < kTop + ph; y += 10) cv::line(img, {x, y}, {x, std::min(y + 5, kTop + ph)}, kMarker, 1);
    const int w = text_width(c.marker->label);
    put(img, c.marker->label, {x + 4 + w > kLeft + pw ? x - 4 - w : x + 4, kTop + 30}, kFont, {0, 0, 0});
  }
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const auto& s = c.series[k];
    const cv::Scalar color = kColors[k % std::size(kColors)];
    std::vector<cv::Point> pts;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) pts.emplace_back(px(s.x[i]), py(s.y[i]));
    if (pts.size() > 1) cv::polylines(img, pts, false, color, 2, cv::LINE_AA);
    for (const auto& p : pts) cv::circle(img, p, pts.size() > 60 ? 1 : 3, color, cv::FILLED, cv::LINE_AA);
    const int ly = kTop + 15 + 20 * static_cast<int>(k);
    cv::line(img, {kLeft + pw + 10, ly - 4}, {kLeft + pw + 30, ly - 4}, color, 2);
    put(img, s.name, {kLeft + pw + 35, ly}, 0.45, {0, 0, 0});
  }
}

// k steps: k / (1/step) when the step is below one, so that 7 steps of 0.1 are 0.7, not 0.7000000000000001.
double steps(double k, double step) { return step < 1 ? k / std::round(1 / step) : k * step; }

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, bool integer) {
  std::vector<double> ticks;
  if (!(hi > lo)) return ticks;
  const double step = nice_step(hi - lo, target, integer);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; ++k) ticks.push_back(steps(k, step));
  return ticks;
}

std::pair<double, double> nice_range(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo, hi};
  const double step = nice_step(hi - lo, target, false);
  return {steps(std::floor(lo / step + 1e-9), step), steps(std::ceil(hi / step - 1e-9), step)};
}

namespace {

// Encoded in memory, then written atomically: a failed write leaves the previous chart.
void write_png(const std::filesystem::path& png, const cv::Mat& img) {
  std::vector<std::uint8_t> bytes;
  if (!cv::imencode(".png", img, bytes)) throw IoError(png.string() + ": cannot encode PNG");
  write_file_atomically(png, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace

void write_charts(const std::filesystem::path& png, const std::vector<Chart>& charts) {
  cv::Mat img(kHeight * static_cast<int>(std::max<std::size_t>(1, charts.size())), kWidth, CV_8UC3,
              cv::Scalar(255, 255, 255));
  for (std::size_t i = 0; i < charts.size(); ++i) {
    cv::Mat part = img(cv::Rect(0, kHeight * static_cast<int>(i), kWidth, kHeight));
    draw_chart(part, charts[i]);
  }
  write_png(png, img);
}

void write_bar_chart(const std::filesystem::path& png, const std::string& title,
                     const std::vector<std::pair<std::string, double>>& bars) {
  constexpr int kLabel = 430, kBar = 22, kGap = 8, kBarWidth = 420;
  const int height = kTop + static_cast<int>(bars.size()) * (kBar + kGap) + 20;
  cv::Mat img(height, kLabel + kBarWidth + 120, CV_8UC3, cv::Scalar(255, 255, 255));
  double top = 0, bottom = 1e300;
  for (const auto& b : bars) top = std::max(top, b.second), bottom = std::min(bottom, b.second);
  if (top <= 0) top = 1;
  // Figures that span orders of magnitude (a decoded cache vs a cold epoch) read better on a log axis.
  const bool log_scale = bottom > 0 && top / bottom > 30;
  const double floor_value = log_scale ? bottom / 2 : 0;
  auto length = [&](double v) {
    const double f = log_scale ? std::log(v / floor_value) / std::log(top / floor_value) : v / top;
    return std::max(1, static_cast<int>(f * kBarWidth));
  };
  cv::putText(img, title + (log_scale ? " (log scale)" : ""), {10, 25}, cv::FONT_HERSHEY_SIMPLEX, 0.6, {0, 0, 0}, 1,
              cv::LINE_AA);
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const int y = kTop + static_cast<int>(i) * (kBar + kGap);
    cv::putText(img, bars[i].first, {10, y + 16}, cv::FONT_HERSHEY_SIMPLEX, 0.42, {0, 0, 0}, 1, cv::LINE_AA);
    const int w = length(bars[i].second);
    cv::rectangle(img, {kLabel, y}, {kLabel + w, y + kBar}, kColors[i % std::size(kColors)], cv::FILLED);
    cv::putText(img, tick(bars[i].second), {kLabel + w + 6, y + 16}, cv::FONT_HERSHEY_SIMPLEX, 0.42, {0, 0, 0}, 1,
                cv::LINE_AA);
  }
  write_png(png, img);
}

}  // namespace stoker::app
