// tune_loader: the fewest threads that keep a consumer fed, measured on the dataset; all of them
// when the loader cannot keep up; prefetch within the RAM budget.
#include <gtest/gtest.h>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/autotune.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

class Autotune : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int c = 0; c < 2; ++c) {
      const auto folder = dir.path() / ("class" + std::to_string(c));
      std::filesystem::create_directories(folder);
      for (int i = 0; i < 24; ++i)
        test::write_jpeg(folder / ("img" + std::to_string(i) + ".jpg"), test::make_pattern_rgb(90, 120, c * 50 + i));
    }
    options.batch_size = 4;
    options.image_height = options.image_width = 64;
  }
  test::TempDir dir;
  LoaderOptions options;
};

TuneOptions two_threads() {
  TuneOptions t;
  t.max_threads = 2;
  return t;
}

TEST_F(Autotune, ASlowConsumerGetsOneThreadAFastOneEveryThread) {
  const Dataset ds = dataset_from_directory(dir.path());
  const LoaderTuning slow = tune_loader(ds, options, 1.0, two_threads());
  EXPECT_EQ(slow.threads, 1);
  ASSERT_EQ(slow.curve.size(), 1u) << "one thread is enough: nothing more is measured";
  EXPECT_GT(slow.curve[0].second, 1.2);
  EXPECT_NE(slow.reason.find("1 thread load"), std::string::npos) << slow.reason;
  EXPECT_EQ(slow.prefetch, 2);

  const LoaderTuning fast = tune_loader(ds, options, 1e9, two_threads());
  EXPECT_EQ(fast.threads, 2);
  ASSERT_EQ(fast.curve.size(), 2u);
  EXPECT_EQ(fast.curve[0].first, 1);
  EXPECT_EQ(fast.curve[1].first, 2);
  EXPECT_NE(fast.reason.find("is below the consumer's"), std::string::npos) << fast.reason;
  EXPECT_EQ(fast.prefetch, 4) << "two batches per thread";

  // A RAM budget of three batches of 64x64x3 bytes caps the prefetch at 3.
  TuneOptions budget = two_threads();
  budget.ram_budget_bytes = 3 * 4 * 64 * 64 * 3;
  const LoaderTuning capped = tune_loader(ds, options, 1e9, budget);
  EXPECT_EQ(capped.prefetch, 3);

  // The caller's own prefetch is kept, and the reason says so.
  TuneOptions fixed = two_threads();
  fixed.prefetch = 7;
  const LoaderTuning kept = tune_loader(ds, options, 1.0, fixed);
  EXPECT_EQ(kept.prefetch, 7);
  EXPECT_NE(kept.reason.find("; prefetch 7 (--prefetch)"), std::string::npos) << kept.reason;
  EXPECT_THROW(tune_loader(ds, options, 0.0), InvalidArgument);
}

// A CPU backbone shares the cores with the loader: the loader is tuned for the rate both reach
// together, below the backbone's rate alone, as computed from the one-thread measurement.
TEST_F(Autotune, AConsumerOnTheSameCoresIsKeptFedAtTheRateBothReachTogether) {
  const Dataset ds = dataset_from_directory(dir.path());
  const double backbone_alone = 500;
  TuneOptions shared = two_threads();
  shared.consumer_shares_cores = true;
  const LoaderTuning t = tune_loader(ds, options, backbone_alone, shared);
  ASSERT_FALSE(t.curve.empty());
  const double r1 = t.curve[0].second;
  EXPECT_DOUBLE_EQ(t.consumer_images_per_second, 2 / (1 / r1 + 2 / backbone_alone));
  EXPECT_LT(t.consumer_images_per_second, backbone_alone);
  EXPECT_NE(t.reason.find("(500 img/s alone) reach together on 2 shared cores"), std::string::npos) << t.reason;
  EXPECT_EQ(t.threads, t.curve.back().first);

  // A slow backbone needs one thread whether or not it shares the cores.
  EXPECT_EQ(tune_loader(ds, options, 1.0, shared).threads, 1);
}

// A batch_size above the dataset: one batch per epoch, measured across epochs (it was 0 img/s, and
// the buffers were sized for batch_size).
TEST_F(Autotune, ADatasetOfOneBatchIsMeasuredAcrossEpochs) {
  const Dataset ds = dataset_from_directory(dir.path());
  options.batch_size = 20'000;
  const LoaderTuning t = tune_loader(ds, options, 1e9, two_threads());
  ASSERT_EQ(t.curve.size(), 2u);
  for (const auto& [threads, rate] : t.curve) EXPECT_GT(rate, 0) << threads << " threads";
  EXPECT_EQ(t.reason.find("the loader's 0 img/s"), std::string::npos) << t.reason;
  TuneOptions budget = two_threads();
  budget.ram_budget_bytes = 3 * 48 * 64 * 64 * 3;  // three batches of the 48 images there are
  EXPECT_EQ(tune_loader(ds, options, 1e9, budget).prefetch, 3);
}

}  // namespace
}  // namespace stoker
