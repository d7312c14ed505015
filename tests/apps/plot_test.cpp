// The training report's charts: tick values a person reads at a glance, the fine-tuning phase
// shaded and the best epoch marked where the chart says they are.
#include <gtest/gtest.h>

#include <cmath>

#include <opencv2/imgcodecs.hpp>

#include "plot.hpp"
#include "test_support.hpp"

namespace stoker::app {
namespace {

TEST(NiceTicks, EpochAxesTickAtWholeNumbers) {
  EXPECT_EQ(nice_ticks(1, 2, 8, true), (std::vector<double>{1, 2}));
  EXPECT_EQ(nice_ticks(0.5, 1.5, 8, true), (std::vector<double>{1}));
  EXPECT_EQ(nice_ticks(1, 10, 8, true), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(nice_ticks(1, 40, 8, true), (std::vector<double>{5, 10, 15, 20, 25, 30, 35, 40}));
  for (int epochs = 1; epochs <= 300; ++epochs)
    for (double t : nice_ticks(1, epochs + 0.0, 8, true)) ASSERT_EQ(t, std::round(t)) << epochs << " epochs";
}

TEST(NiceTicks, ValuesAreOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_EQ(nice_range(0, 0.93, 6), (std::pair<double, double>{0, 1}));
  EXPECT_EQ(nice_range(0, 5123, 6), (std::pair<double, double>{0, 6000}));
  EXPECT_EQ(nice_range(0.213, 0.694, 6), (std::pair<double, double>{0.2, 0.7}));
  const std::vector<double> t = nice_ticks(0, 1, 6);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t, (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_EQ(nice_ticks(0, 6000, 6), (std::vector<double>{0, 1000, 2000, 3000, 4000, 5000, 6000}));
  EXPECT_TRUE(nice_ticks(3, 3, 6).empty());
}

TEST(Charts, ShadeThePhaseAndMarkTheBestEpoch) {
  test::TempDir dir;
  Series flat{"loss", {}, {}};
  for (int epoch = 1; epoch <= 10; ++epoch) flat.x.push_back(epoch), flat.y.push_back(0.5);
  const Chart chart{"loss per epoch", "epoch", "loss", {flat}, true, {{5.5, 10.5, "fine-tuning"}}, Marker{3, "best"}};
  const auto png = dir.path() / "chart.png";
  write_charts(png, {chart});
  const cv::Mat img = cv::imread(png.string());
  ASSERT_FALSE(img.empty());

  // The plot spans x 80..730 for epochs 1..10 and y 40..310 for 0..1 (kLeft, kTop and the sizes
  // in plot.cpp); y 280 lies between the gridlines at 0 and 0.2.
  auto at = [&](int x, int y) { return img.at<cv::Vec3b>(y, x); };
  const cv::Vec3b white{255, 255, 255}, shade{248, 236, 222};
  EXPECT_EQ(at(600, 280), shade) << "inside the fine-tuning epochs";
  EXPECT_EQ(at(420, 280), shade) << "just after epoch 5.5";
  EXPECT_EQ(at(380, 280), white) << "epochs 1..5 are not shaded";
  const int marker_x = 80 + static_cast<int>(std::lround(2.0 / 9 * 650));
  EXPECT_LT(at(marker_x, 282)[0], 128) << "the best epoch's dashed line";
  EXPECT_EQ(at(marker_x, 287), white) << "and its gap";
  EXPECT_EQ(at(marker_x + 30, 282), white);
}

}  // namespace
}  // namespace stoker::app
