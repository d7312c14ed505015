// Weighted sampling (WeightedSampling, PyTorch's WeightedRandomSampler): the draw is a function of
// (seed, epoch), its frequencies follow the weights, zero weights never come up, ranks share one
// global draw, without replacement no sample repeats, bad weights are refused with the reason, and
// a loader resumed mid-epoch continues the same draw (and refuses a state made with other weights).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "stoker/core/error.hpp"
#include "stoker/core/splitmix.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/plan.hpp"

#include "test_support.hpp"

namespace stoker {
namespace {

WeightedSampling weighted(std::vector<double> weights, std::optional<std::size_t> num_samples = std::nullopt,
                          bool replacement = true) {
  WeightedSampling w;
  w.weights = std::move(weights);
  w.num_samples = num_samples;
  w.replacement = replacement;
  return w;
}

// Pearson's statistic of observed counts against probabilities (categories with p = 0 must have
// no count: checked by the caller).
double chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p) {
  const double total = static_cast<double>(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
  double x = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) continue;
    const double expected = total * p[i];
    x += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return x;
}

std::vector<double> normalised(const std::vector<double>& w) {
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<double> p;
  for (double v : w) p.push_back(v / sum);
  return p;
}

TEST(WeightedDraw, DependsOnlyOnSeedAndEpoch) {
  const auto w = weighted({1, 2, 3, 4, 5, 6, 7, 8}, 100);
  const auto a = weighted_draw(w, 7, 2);
  ASSERT_EQ(a.size(), 100u);
  EXPECT_EQ(a, weighted_draw(w, 7, 2));
  EXPECT_NE(a, weighted_draw(w, 7, 3)) << "another epoch, another draw";
  EXPECT_NE(a, weighted_draw(w, 8, 2)) << "another seed, another draw";
  // shuffle does not apply: a weighted epoch is a draw either way.
  const EpochPlan p = epoch_plan(8, 7, 2, false, {}, w), q = epoch_plan(8, 7, 2, true, {}, w);
  EXPECT_EQ(p.samples, a);
  EXPECT_EQ(q.samples, a);
  EXPECT_EQ(std::vector<std::uint8_t>(100, 0), p.padding);
}

TEST(WeightedDraw, FrequenciesFollowTheWeightsAndZeroWeightsNeverComeUp) {
  // 8 samples, two of weight 0; 200000 draws over 4 epochs. Pearson's statistic with 5 degrees
  // of freedom exceeds 30 with probability 1.5e-5; the seed is fixed, so this never flickers.
  const std::vector<double> weights{1, 2, 3, 4, 0, 5, 0, 0.5};
  const auto w = weighted(weights, 50000);
  std::vector<std::size_t> counts(weights.size());
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    for (std::uint32_t i : weighted_draw(w, 11, epoch)) ++counts[i];
  }
  EXPECT_EQ(counts[4], 0u);
  EXPECT_EQ(counts[6], 0u);
  EXPECT_LT(chi_square(counts, normalised(weights)), 30.0) << "counts " << ::testing::PrintToString(counts);
  // The bound has power: the same counts against equal weights of the drawn samples are far off.
  EXPECT_GT(chi_square(counts, normalised({1, 1, 1, 1, 0, 1, 0, 1})), 1000.0);
}

TEST(WeightedDraw, ZeroWeightsAmongManyOfEverySizeNeverComeUp) {
  // 1000 samples, every third of weight 0, the others from 1e-12 to 1e12: the alias table's
  // rounding never lends a zero weight's column any mass.
  std::vector<double> weights(1000);
  SplitMix64 rng{42};
  for (std::size_t i = 0; i < weights.size(); ++i)
    weights[i] = i % 3 == 0 ? 0 : std::pow(10.0, 24 * rng.uniform() - 12);
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    for (std::uint32_t i : weighted_draw(weighted(weights, 50000), 1, epoch)) ASSERT_NE(i % 3, 0u) << "sample " << i;
    for (std::uint32_t i : weighted_draw(weighted(weights, 600, false), 1, epoch)) ASSERT_NE(i % 3, 0u);
  }
}

TEST(WeightedDraw, HugeAndTinyWeightsAreDrawnInProportion) {
  // Weights scaled by 1e300 or 1e-300 give the same draw: only their ratios count.
  const auto base = weighted({1, 3, 0, 2}, 1000);
  const auto huge = weighted({1e300, 3e300, 0, 2e300}, 1000);
  const auto tiny = weighted({1e-300, 3e-300, 0, 2e-300}, 1000);
  const auto a = weighted_draw(base, 5, 1);
  EXPECT_EQ(a, weighted_draw(huge, 5, 1));
  EXPECT_EQ(a, weighted_draw(tiny, 5, 1));
  const auto once = weighted({1, 3, 0, 2}, 3, false), tiny_once = weighted({1e-300, 3e-300, 0, 2e-300}, 3, false);
  EXPECT_EQ(weighted_draw(once, 5, 1), weighted_draw(tiny_once, 5, 1));
}

TEST(WeightedDraw, WithoutReplacementEachSampleAtMostOnceInTorchsOrder) {
  // torch.multinomial without replacement: the first index is drawn by weight, the next by the
  // weights left, and so on. Over 20000 epochs the first two positions follow those laws.
  const std::vector<double> weights{1, 2, 3, 4, 0};
  const auto w = weighted(weights, 4, false);
  const std::vector<double> p = normalised(weights);
  std::vector<std::size_t> first(5), second(5);
  for (std::uint64_t epoch = 0; epoch < 20000; ++epoch) {
    const auto d = weighted_draw(w, 3, epoch);
    ASSERT_EQ(d.size(), 4u);
    ASSERT_EQ(std::set<std::uint32_t>(d.begin(), d.end()), (std::set<std::uint32_t>{0, 1, 2, 3}));
    ++first[d[0]];
    ++second[d[1]];
  }
  std::vector<double> p_second(5, 0.0);  // sum over the first draw i of p_i p_j / (1 - p_i)
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 5; ++j)
      if (i != j) p_second[j] += p[i] * p[j] / (1 - p[i]);
  // 3 degrees of freedom: above 25 with probability 1.6e-5.
  EXPECT_LT(chi_square(first, p), 25.0) << ::testing::PrintToString(first);
  EXPECT_LT(chi_square(second, p_second), 25.0) << ::testing::PrintToString(second);
  EXPECT_GT(chi_square(second, p), 100.0) << "the second draw is not from the first's weights";
  // All of the samples with a weight: a permutation of them, zero weights left out.
  const auto all = weighted_draw(weighted({5, 0, 1, 1, 0, 2}, 4, false), 1, 1);
  EXPECT_EQ(std::set<std::uint32_t>(all.begin(), all.end()), (std::set<std::uint32_t>{0, 2, 3, 5}));
}

TEST(WeightedDraw, RanksShareOneGlobalDrawDisjointlyWithPaddingAndDrop) {
  const auto w = weighted({0.5, 1, 0, 2, 1, 1, 3, 0.25, 1, 1, 2}, 23);
  for (std::uint64_t epoch : {0u, 5u}) {
    const auto global = weighted_draw(w, 9, epoch);
    for (int world : {1, 2, 3, 4}) {
      for (bool drop : {false, true}) {
        const std::size_t count = drop ? 23 / world : (23 + world - 1) / world;
        // Entry i of the padded global list is global[i % 23]; rank r has i = r, r + world, ...
        std::vector<int> seen(count * static_cast<std::size_t>(world), 0);
        for (int r = 0; r < world; ++r) {
          const EpochPlan p = epoch_plan(11, 9, epoch, true, {r, world, ShardMode::Interleaved, drop}, w);
          ASSERT_EQ(p.samples.size(), count);
          for (std::size_t k = 0; k < count; ++k) {
            const std::size_t i = static_cast<std::size_t>(r) + k * static_cast<std::size_t>(world);
            EXPECT_EQ(p.samples[k], global[i % 23]);
            EXPECT_EQ(p.padding[k], i >= 23 ? 1 : 0);
            ++seen[i];
          }
        }
        for (int s : seen) EXPECT_EQ(s, 1) << "each entry of the global draw on exactly one rank";
        if (!drop) {
          EXPECT_GE(seen.size(), 23u) << "together the ranks hold the whole draw";
        }
      }
    }
  }
}

void expect_refused(const WeightedSampling& w, std::size_t n, const std::string& reason,
                    ShardMode mode = ShardMode::Interleaved) {
  try {
    check_weighted_sampling(w, n, mode);
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(WeightedDraw, BadWeightsAreRefusedWithTheReason) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  expect_refused(weighted({1, 2}), 3, "2 weights for 3 samples");
  expect_refused(weighted({1, -0.5, 2}), 3, "sample 1 is negative (-0.5)");
  expect_refused(weighted({1, std::nan(""), 2}), 3, "sample 1 is nan (weights must be finite)");
  expect_refused(weighted({1, 2, kInf}), 3, "sample 2 is inf (weights must be finite)");
  expect_refused(weighted({0, 0, 0}), 3, "every weight is 0");
  expect_refused(weighted({1, 2, 3}, 0), 3, "num_samples must be >= 1");
  expect_refused(weighted({1, 2, 3}, 4, false), 3, "num_samples 4 without replacement is more than the 3 samples");
  expect_refused(weighted({1, 0, 3}, 3, false), 3, "more than the 2 samples whose weight is above 0");
  expect_refused(weighted({1, 0, 3}, std::nullopt, false), 3, "more than the 2 samples whose weight is above 0");
  expect_refused(weighted({1, 2, 3}), 3, "need shard_mode interleaved", ShardMode::Fixed);
  expect_refused(weighted({}, 5), 3, "num_samples needs sample_weights");
  expect_refused(weighted({}, std::nullopt, false), 3, "replacement=false needs sample_weights");
  EXPECT_NO_THROW(check_weighted_sampling(weighted({1, 0, 3}, 2, false), 3));
  EXPECT_NO_THROW(check_weighted_sampling(weighted({1, 0, 3}, 1000), 3));  // with replacement, any count
  EXPECT_NO_THROW(check_weighted_sampling(weighted({}), 3));
  EXPECT_THROW(epoch_plan(3, 0, 0, true, {}, weighted({1, 2})), InvalidArgument);
  EXPECT_EQ(draws_per_epoch(3, weighted({})), 3u);
  EXPECT_EQ(draws_per_epoch(3, weighted({1, 2, 3})), 3u);
  EXPECT_EQ(draws_per_epoch(3, weighted({1, 2, 3}, 10)), 10u);
}

// ---- in the loader ---------------------------------------------------------------------------

struct Images {
  explicit Images(int count) {
    for (int i = 0; i < count; ++i) {
      const auto folder = dir / (i % 2 == 0 ? "even" : "odd");
      std::filesystem::create_directories(folder);
      test::write_png(folder / ("img" + std::to_string(i) + ".png"), test::make_pattern_rgb(12 + i, 14, i));
    }
  }
  test::TempDir dir;
};

LoaderOptions weighted_options(std::vector<double> weights, std::size_t num_samples) {
  LoaderOptions o;
  o.image_height = 8;
  o.image_width = 8;
  o.batch_size = 3;
  o.threads = 2;
  o.prefetch = 2;
  o.seed = 77;
  o.sharding = Sharding{};
  o.sampling = weighted(std::move(weights), num_samples);
  return o;
}

std::vector<std::int64_t> ids_until_end(Loader& loader, std::vector<std::int64_t> ids = {}) {
  while (auto b = loader.next()) ids.insert(ids.end(), b->sample_ids().begin(), b->sample_ids().end());
  return ids;
}

TEST(WeightedLoader, DeliversTheDrawAndResumesItMidEpoch) {
  Images images(6);
  const Dataset ds = dataset_from_directory(images.dir.path());
  const LoaderOptions o = weighted_options({1, 0, 2, 1, 0, 4}, 14);
  Loader loader(ds, o);
  EXPECT_EQ(loader.samples_per_epoch(), 14u);
  EXPECT_EQ(loader.batches_per_epoch(), 5u);  // 14 draws in batches of 3
  loader.begin_epoch(3);
  const auto whole = ids_until_end(loader);
  const auto draw = weighted_draw(o.sampling, o.seed, 3);
  ASSERT_EQ(whole, std::vector<std::int64_t>(draw.begin(), draw.end()));
  for (auto id : whole) EXPECT_TRUE(id != 1 && id != 4) << "a sample of weight 0 was delivered";

  // Two batches, then the state, as text; another loader continues with the same draws.
  loader.begin_epoch(3);
  std::vector<std::int64_t> first;
  for (int k = 0; k < 2; ++k) {
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    first.insert(first.end(), b->sample_ids().begin(), b->sample_ids().end());
  }
  const LoaderState saved = loader.state();
  Loader resumed(ds, o);
  resumed.resume(LoaderState::parse(saved.to_string()));
  EXPECT_EQ(ids_until_end(resumed, first), whole);

  // A loader with other weights, another count or without replacement refuses the state.
  auto refused = [&](const LoaderOptions& other, const char* what) {
    Loader b(ds, other);
    try {
      b.resume(saved);
      ADD_FAILURE() << "accepted a state saved with " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("sample weights"), std::string::npos) << e.what();
    }
  };
  refused(weighted_options({1, 0, 2, 1, 0, 5}, 14), "other weights");
  refused(weighted_options({1, 0, 2, 1, 0, 4}, 15), "another num_samples");
  LoaderOptions without = o;
  without.sampling = {};
  refused(without, "no weights");
  LoaderOptions once = weighted_options({1, 0, 2, 1, 0, 4}, 4);
  LoaderOptions once_more = once;
  once.sampling.replacement = false;
  Loader a(ds, once);
  a.begin_epoch(0);
  ASSERT_TRUE(a.next().has_value());
  Loader b(ds, once_more);
  EXPECT_THROW(b.resume(a.state()), InvalidArgument) << "with and without replacement";
}

TEST(WeightedLoader, RanksSplitTheDrawAndBadWeightsAreRefusedAtConstruction) {
  Images images(5);
  const Dataset ds = dataset_from_directory(images.dir.path());
  std::vector<std::int64_t> together;
  const LoaderOptions base = weighted_options({3, 1, 1, 0, 2}, 9);
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = base;
    o.sharding = Sharding{r, 2};
    Loader loader(ds, o);
    EXPECT_EQ(loader.samples_per_epoch(), 5u);  // 9 draws over 2 ranks, padded to 10
    loader.begin_epoch(1);
    const auto ids = ids_until_end(loader);
    ASSERT_EQ(ids.size(), 5u);
    together.resize(10);
    for (std::size_t k = 0; k < ids.size(); ++k) together[static_cast<std::size_t>(r) + 2 * k] = ids[k];
  }
  const auto draw = weighted_draw(base.sampling, base.seed, 1);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(together[i], draw[i % 9]) << "entry " << i;

  auto refused = [&](LoaderOptions o, const std::string& reason) {
    try {
      Loader loader(ds, o);
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refused(weighted_options({1, 1, 1}, 3), "3 weights for 5 samples");
  refused(weighted_options({1, 1, 1, 0, -1}, 3), "negative");
  LoaderOptions fixed = base;
  fixed.sharding = Sharding{0, 2, ShardMode::Fixed};
  refused(fixed, "shard_mode interleaved");
  LoaderOptions dropped = weighted_options({1, 1, 1, 1, 1}, 1);
  dropped.sharding = Sharding{0, 2, ShardMode::Interleaved, true};
  refused(dropped, "leaves no sample per rank: 1 samples for 2 ranks");
}

}  // namespace
}  // namespace stoker
