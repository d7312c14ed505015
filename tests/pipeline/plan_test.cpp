#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/plan.hpp"

#include "test_support.hpp"

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

// Every rank's plan for one epoch, as each rank computes it on its own.
std::vector<EpochPlan> all_ranks(std::uint32_t n, int world, ShardMode mode, bool drop, std::uint64_t epoch,
                                 bool shuffle = true) {
  std::vector<EpochPlan> plans;
  for (int r = 0; r < world; ++r) plans.push_back(epoch_plan(n, 9, epoch, shuffle, {r, world, mode, drop}));
  return plans;
}

TEST(Sharding, EveryRankGetsTheSameCountAndTogetherTheyCoverTheDatasetOnce) {
  for (ShardMode mode : {ShardMode::Interleaved, ShardMode::Fixed}) {
    for (int world = 1; world <= 5; ++world) {
      for (std::uint32_t n : {1u, 2u, 7u, 10u, 11u, 13u, 24u}) {
        for (bool drop : {false, true}) {
          if (drop && n < static_cast<std::uint32_t>(world)) continue;  // nothing per rank: refused
          const auto plans = all_ranks(n, world, mode, drop, 3);
          const std::size_t count = drop ? n / world : (n + world - 1) / world;
          std::map<std::uint32_t, int> real;  // sample -> ranks that have it as a real (not padding) entry
          std::size_t padding = 0;
          for (const EpochPlan& p : plans) {
            ASSERT_EQ(p.samples.size(), count) << "n " << n << " world " << world;
            ASSERT_EQ(p.padding.size(), count);
            for (std::size_t i = 0; i < count; ++i) {
              ASSERT_LT(p.samples[i], n);
              if (p.padding[i]) {
                ++padding;
              } else {
                ++real[p.samples[i]];
              }
            }
          }
          for (const auto& [sample, ranks] : real) EXPECT_EQ(ranks, 1) << "sample " << sample << " on two ranks";
          if (drop) {
            EXPECT_EQ(padding, 0u);
            EXPECT_EQ(real.size(), count * world);  // the remainder, n % world, is dropped
          } else {
            EXPECT_EQ(real.size(), n) << "every sample once";
            EXPECT_EQ(padding, count * world - n);
          }
        }
      }
    }
  }
}

TEST(Sharding, InterleavedIsDistributedSamplersSlicingOfTheEpochPermutation) {
  const std::uint32_t n = 11;
  const auto order = epoch_order(n, 9, 4, true);
  const auto plans = all_ranks(n, 3, ShardMode::Interleaved, false, 4);
  // Padded to 12 by wrapping: the global list is order + order[0]; rank r takes r, r + 3, ...
  for (int r = 0; r < 3; ++r) {
    for (std::size_t k = 0; k < 4; ++k) {
      const std::size_t i = static_cast<std::size_t>(r) + 3 * k;
      EXPECT_EQ(plans[static_cast<std::size_t>(r)].samples[k], order[i % n]);
      EXPECT_EQ(plans[static_cast<std::size_t>(r)].padding[k], i >= n ? 1 : 0);
    }
  }
  // Without shuffling, rank 1 of 2 takes the odd samples.
  const EpochPlan odd = epoch_plan(6, 0, 0, false, {1, 2});
  EXPECT_EQ(odd.samples, (std::vector<std::uint32_t>{1, 3, 5}));
}

TEST(Sharding, FixedKeepsEachRanksPartAcrossEpochsAndShufflesInsideIt) {
  const std::uint32_t n = 40;
  for (int r = 0; r < 3; ++r) {
    const Sharding s{r, 3, ShardMode::Fixed};
    const EpochPlan e0 = epoch_plan(n, 9, 0, true, s), e1 = epoch_plan(n, 9, 1, true, s);
    std::set<std::uint32_t> a, b;
    for (std::size_t i = 0; i < e0.samples.size(); ++i) {
      if (!e0.padding[i]) a.insert(e0.samples[i]);
      if (!e1.padding[i]) b.insert(e1.samples[i]);
    }
    EXPECT_EQ(a, b) << "rank " << r << " keeps its part";
    EXPECT_NE(e0.samples, e1.samples) << "shuffled inside it";
  }
  // Interleaved ranks see other samples in other epochs.
  const EpochPlan i0 = epoch_plan(n, 9, 0, true, {0, 3}), i1 = epoch_plan(n, 9, 1, true, {0, 3});
  EXPECT_NE(std::set<std::uint32_t>(i0.samples.begin(), i0.samples.end()),
            std::set<std::uint32_t>(i1.samples.begin(), i1.samples.end()));
}

TEST(Sharding, BadRanksAreRefusedNamingTheSetting) {
  EXPECT_THROW(check_sharding({2, 2}, 10), InvalidArgument);
  EXPECT_THROW(check_sharding({-1, 2}, 10), InvalidArgument);
  EXPECT_THROW(check_sharding({0, 0}, 10), InvalidArgument);
  EXPECT_THROW(check_sharding({0, 4, ShardMode::Interleaved, true}, 3), InvalidArgument);  // nothing left
  EXPECT_NO_THROW(check_sharding({0, 4, ShardMode::Interleaved, false}, 3));               // padded
  EXPECT_THROW(parse_shard_mode("round-robin"), InvalidArgument);
}

TEST(Sharding, FromTheEnvironmentOfTorchrunAndSlurm) {
  test::Env env;
  for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) env.set(v, nullptr);
  EXPECT_EQ(sharding_from_environment().world_size, 1);
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NTASKS", "4");
  EXPECT_EQ(sharding_from_environment().rank, 3);
  EXPECT_EQ(sharding_from_environment().world_size, 4);
  env.set("RANK", "1");  // torchrun's variables win
  env.set("WORLD_SIZE", "2");
  EXPECT_EQ(sharding_from_environment().rank, 1);
  EXPECT_EQ(sharding_from_environment().world_size, 2);
  env.set("RANK", "two");
  try {
    sharding_from_environment();
    ADD_FAILURE() << "a malformed RANK was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  env.set("RANK", "2");
  EXPECT_THROW(sharding_from_environment(), InvalidArgument);  // rank 2 of 2
  env.set("WORLD_SIZE", nullptr);
  EXPECT_THROW(sharding_from_environment(), InvalidArgument);  // RANK without WORLD_SIZE
}

}  // namespace
}  // namespace stoker
