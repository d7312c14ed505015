// The counter-based generator: known answers and the properties the executors rely on.
#include <gtest/gtest.h>

#include <set>

#include "philox.hpp"

namespace stoker::augment {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Known-answer vectors of Random123's philox4x32_10 (kat_vectors).
  Philox4x32 zero = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  Philox4x32 ones =
      philox4x32_10(Philox4x32{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  Philox4x32 pi =
      philox4x32_10(Philox4x32{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(Philox, SameKeyAndCounterSameNumbersWhateverTheOrder) {
  SampleRng a(42, 3, 1234), b(42, 3, 1234);
  const std::uint32_t s9 = a.bits(9), s0 = a.bits(0), s17 = a.bits(17);
  EXPECT_EQ(b.bits(17), s17);
  EXPECT_EQ(b.bits(0), s0);
  EXPECT_EQ(b.bits(9), s9);
}

TEST(Philox, SeedEpochAndSampleChangeTheStream) {
  std::set<std::uint32_t> seen;
  seen.insert(SampleRng(1, 0, 0).bits(0));
  seen.insert(SampleRng(2, 0, 0).bits(0));
  seen.insert(SampleRng(1, 1, 0).bits(0));
  seen.insert(SampleRng(1, 0, 1).bits(0));
  seen.insert(SampleRng(1, 0, -1).bits(0));
  seen.insert(SampleRng(1, std::uint64_t{1} << 32, 0).bits(0));
  EXPECT_EQ(seen.size(), 6u);
}

TEST(Philox, UniformStaysInRange) {
  SampleRng r(7, 0, 0);
  for (std::int64_t id = 0; id < 2000; ++id) {
    SampleRng q(7, 0, id);
    const float u = q.uniform(3, -2.5f, 4.0f);
    EXPECT_GE(u, -2.5f);
    EXPECT_LT(u, 4.0f);
    EXPECT_LT(q.below(5, 7), 7u);
  }
}

}  // namespace
}  // namespace stoker::augment
