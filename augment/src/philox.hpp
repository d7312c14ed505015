// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so any thread (or CUDA lane) can draw the numbers of any sample
// without shared state. Bit-identical to Random123's philox4x32_10 (see the known-answer test).
#pragma once

#include <cstdint>

#include "hd_math.hpp"

namespace stoker::augment {

struct Philox4x32 {
  std::uint32_t v[4];
};

STOKER_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * ctr.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * ctr.v[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The random numbers of one sample. Slot s is word s % 4 of block s / 4, where block b is
// philox(counter = {b, epoch_lo, id_lo, id_hi}, key = {seed_lo, seed_hi ^ epoch_hi}).
// Every parameter owns fixed slots (see params.hpp), so switching one augmentation on or off
// never changes the values drawn for the others.
class SampleRng {
 public:
  STOKER_HOST_DEVICE SampleRng(std::uint64_t seed, std::uint64_t epoch, std::int64_t sample_id)
      : k0_(static_cast<std::uint32_t>(seed)),
        k1_(static_cast<std::uint32_t>(seed >> 32) ^ static_cast<std::uint32_t>(epoch >> 32)),
        epoch_lo_(static_cast<std::uint32_t>(epoch)),
        id_lo_(static_cast<std::uint32_t>(static_cast<std::uint64_t>(sample_id))),
        id_hi_(static_cast<std::uint32_t>(static_cast<std::uint64_t>(sample_id) >> 32)) {}

  STOKER_HOST_DEVICE std::uint32_t bits(std::uint32_t slot) {
    const std::uint32_t block = slot >> 2;
    if (!have_ || block != block_) {
      cached_ = philox4x32_10(Philox4x32{{block, epoch_lo_, id_lo_, id_hi_}}, k0_, k1_);
      block_ = block;
      have_ = true;
    }
    return cached_.v[slot & 3u];
  }

  // Uniform in [0, 1) with 24 random bits: exact in float on every platform.
  STOKER_HOST_DEVICE float uniform01(std::uint32_t slot) {
    return static_cast<float>(bits(slot) >> 8) * (1.0f / 16777216.0f);
  }
  // Uniform in [lo, hi).
  STOKER_HOST_DEVICE float uniform(std::uint32_t slot, float lo, float hi) {
    return hd::add(lo, hd::mul(hd::add(hi, -lo), uniform01(slot)));
  }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-32 * n).
  STOKER_HOST_DEVICE std::uint32_t below(std::uint32_t slot, std::uint32_t n) {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(bits(slot)) * n) >> 32);
  }
  // True with probability 1/2.
  STOKER_HOST_DEVICE bool coin(std::uint32_t slot) { return (bits(slot) >> 31) != 0u; }

 private:
  std::uint32_t k0_, k1_, epoch_lo_, id_lo_, id_hi_;
  Philox4x32 cached_{{0, 0, 0, 0}};
  std::uint32_t block_ = 0;
  bool have_ = false;
};

}  // namespace stoker::augment
