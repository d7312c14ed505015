#include "stoker/pipeline/plan.hpp"

#include <numeric>

namespace stoker {

std::vector<std::uint32_t> epoch_order(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  if (!shuffle || n < 2) return order;
  // Counter-based stream: draw k is mix64(key + k), so the permutation depends only on the key.
  const std::uint64_t key = mix64(seed ^ mix64(epoch + 0x5354'4F4B'4552ull));
  std::uint64_t counter = 0;
  for (std::uint32_t i = n - 1; i > 0; --i) {
    // Unbiased draw in [0, i] by rejection (Lemire's multiply-shift would need 128-bit math).
    const std::uint64_t bound = static_cast<std::uint64_t>(i) + 1;
    const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
    std::uint64_t r;
    do {
      r = mix64(key + counter++);
    } while (r >= limit);
    std::swap(order[i], order[static_cast<std::uint32_t>(r % bound)]);
  }
  return order;
}

}  // namespace stoker
