// splitmix64 (Steele, Lea and Flood 2014): the 64-bit mix that derives independent streams from
// keys, and the seedable generator built on it. Written out rather than taken from <random>, whose
// distributions differ between standard libraries: shuffles, dropout masks and initial weights
// are the same on every platform.
#pragma once

#include <cstdint>

namespace stoker {

// splitmix64's finaliser of x + the golden-ratio increment.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The splitmix64 generator: draw k from a state s is mix64(s + k * golden ratio).
struct SplitMix64 {
  std::uint64_t state;
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t z = mix64(state);
    state += 0x9E3779B97F4A7C15ull;
    return z;
  }
  constexpr double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

}  // namespace stoker
