#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "stoker/pipeline/plan.hpp"

namespace stoker {
namespace {

TEST(EpochOrder, WithoutShuffleIsTheIdentity) {
  const auto order = epoch_order(10, 42, 3, false);
  for (std::uint32_t i = 0; i < 10; ++i) EXPECT_EQ(order[i], i);
}

TEST(EpochOrder, IsAPermutationThatDependsOnlyOnSeedAndEpoch) {
  const auto a = epoch_order(1000, 7, 2, true);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, epoch_order(1000, 7, 2, true));
  EXPECT_NE(a, epoch_order(1000, 7, 3, true));
  EXPECT_NE(a, epoch_order(1000, 8, 2, true));
}

TEST(EpochOrder, IsUniformEnough) {
  // Position of element 0 over many epochs: each of 4 positions about 1/4 of the time.
  std::array<int, 4> counts{};
  for (std::uint64_t e = 0; e < 4000; ++e) {
    const auto o = epoch_order(4, 1, e, true);
    counts[static_cast<std::size_t>(std::find(o.begin(), o.end(), 0u) - o.begin())]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 120);
}

TEST(EpochOrder, HandlesTinyInputs) {
  EXPECT_TRUE(epoch_order(0, 1, 1, true).empty());
  EXPECT_EQ(epoch_order(1, 1, 1, true), std::vector<std::uint32_t>{0});
}

}  // namespace
}  // namespace stoker
