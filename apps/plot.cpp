#include "plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

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

void draw_chart(cv::Mat& img, const Chart& c) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : c.series) {
    for (double v : s.x) x0 = std::min(x0, v), x1 = std::max(x1, v);
    for (double v : s.y) y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (y0 > y1) y0 = 0, y1 = 1;
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) y1 = y0 + 1;
  y0 = std::min(y0, 0.0);  // bars of throughput and loss read best from zero
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + static_cast<int>((x - x0) / (x1 - x0) * pw); };
  auto py = [&](double y) { return kTop + ph - static_cast<int>((y - y0) / (y1 - y0) * ph); };

  cv::putText(img, c.title + " (" + c.y_label + ")", {kLeft, 25}, cv::FONT_HERSHEY_SIMPLEX, 0.6, {0, 0, 0}, 1,
              cv::LINE_AA);
  cv::rectangle(img, {kLeft, kTop}, {kLeft + pw, kTop + ph}, {120, 120, 120});
  for (int i = 0; i <= 4; ++i) {
    const double yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
    cv::line(img, {kLeft, py(yv)}, {kLeft + pw, py(yv)}, {225, 225, 225});
    cv::putText(img, tick(yv), {5, py(yv) + 4}, cv::FONT_HERSHEY_SIMPLEX, 0.4, {60, 60, 60}, 1, cv::LINE_AA);
    cv::putText(img, tick(xv), {px(xv) - 10, kTop + ph + 18}, cv::FONT_HERSHEY_SIMPLEX, 0.4, {60, 60, 60}, 1,
                cv::LINE_AA);
  }
  cv::putText(img, c.x_label, {kLeft + pw / 2 - 30, kHeight - 10}, cv::FONT_HERSHEY_SIMPLEX, 0.45, {0, 0, 0}, 1,
              cv::LINE_AA);
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const auto& s = c.series[k];
    const cv::Scalar color = kColors[k % std::size(kColors)];
    std::vector<cv::Point> pts;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) pts.emplace_back(px(s.x[i]), py(s.y[i]));
    if (pts.size() > 1) cv::polylines(img, pts, false, color, 2, cv::LINE_AA);
    for (const auto& p : pts) cv::circle(img, p, pts.size() > 60 ? 1 : 3, color, cv::FILLED, cv::LINE_AA);
    const int ly = kTop + 15 + 20 * static_cast<int>(k);
    cv::line(img, {kLeft + pw + 10, ly - 4}, {kLeft + pw + 30, ly - 4}, color, 2);
    cv::putText(img, s.name, {kLeft + pw + 35, ly}, cv::FONT_HERSHEY_SIMPLEX, 0.45, {0, 0, 0}, 1, cv::LINE_AA);
  }
}

}  // namespace

void write_charts(const std::filesystem::path& png, const std::vector<Chart>& charts) {
  cv::Mat img(kHeight * static_cast<int>(std::max<std::size_t>(1, charts.size())), kWidth, CV_8UC3,
              cv::Scalar(255, 255, 255));
  for (std::size_t i = 0; i < charts.size(); ++i) {
    cv::Mat part = img(cv::Rect(0, kHeight * static_cast<int>(i), kWidth, kHeight));
    draw_chart(part, charts[i]);
  }
  if (!cv::imwrite(png.string(), img)) throw IoError(png.string() + ": cannot write PNG");
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
  if (!cv::imwrite(png.string(), img)) throw IoError(png.string() + ": cannot write PNG");
}

}  // namespace stoker::app
