// The plan: which samples an epoch visits, in what order. A pure function of (seed, epoch), so a
// run can be reproduced or resumed, and it does not depend on thread count or scheduling.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker {

// splitmix64 finaliser: a good 64-bit mix, used to derive independent streams from keys.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Sample indices [0, n) in epoch order: identity without shuffle, otherwise a Fisher-Yates
// permutation drawn from a generator keyed by (seed, epoch), identical on every platform.
std::vector<std::uint32_t> epoch_order(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle);

}  // namespace stoker
