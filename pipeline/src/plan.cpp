#include "stoker/pipeline/plan.hpp"

#include <charconv>
#include <cstdlib>
#include <numeric>
#include <optional>

#include "stoker/core/error.hpp"

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

ShardMode parse_shard_mode(const std::string& name) {
  if (name == "interleaved") return ShardMode::Interleaved;
  if (name == "fixed") return ShardMode::Fixed;
  throw InvalidArgument("shard mode must be 'interleaved' or 'fixed', received '" + name + "'");
}

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string text(v);
  int out = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw InvalidArgument(std::string("environment variable ") + name + " must be an integer, received '" + text + "'");
  }
  return out;
}

}  // namespace

Sharding sharding_from_environment() {
  Sharding s;
  const char* rank_name = "RANK";
  const char* world_name = "WORLD_SIZE";
  auto rank = env_int(rank_name);
  auto world = env_int(world_name);
  if (!rank && !world) {
    rank_name = "SLURM_PROCID";
    world_name = "SLURM_NTASKS";
    rank = env_int(rank_name);
    world = env_int(world_name);
  }
  if (!rank && !world) return s;
  if (!rank || !world) {
    throw InvalidArgument(std::string("the environment sets ") + (rank ? rank_name : world_name) + " but not " +
                          (rank ? world_name : rank_name));
  }
  if (*world < 1 || *rank < 0 || *rank >= *world) {
    throw InvalidArgument(std::string("the environment's ") + rank_name + "=" + std::to_string(*rank) + " and " +
                          world_name + "=" + std::to_string(*world) + " do not name a rank of the job");
  }
  s.rank = *rank;
  s.world_size = *world;
  return s;
}

void check_sharding(const Sharding& s, std::size_t n) {
  if (s.world_size < 1) throw InvalidArgument("world_size must be >= 1, received " + std::to_string(s.world_size));
  if (s.rank < 0 || s.rank >= s.world_size) {
    throw InvalidArgument("rank must be in [0, world_size = " + std::to_string(s.world_size) + "), received " +
                          std::to_string(s.rank));
  }
  if (samples_per_rank(n, s) == 0) {
    throw InvalidArgument("dropping the remainder leaves no sample per rank: " + std::to_string(n) + " samples for " +
                          std::to_string(s.world_size) + " ranks");
  }
}

std::size_t samples_per_rank(std::size_t n, const Sharding& s) noexcept {
  const auto w = static_cast<std::size_t>(s.world_size < 1 ? 1 : s.world_size);
  return s.drop_remainder ? n / w : (n + w - 1) / w;
}

EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& s) {
  EpochPlan plan;
  const std::size_t count = samples_per_rank(n, s);
  plan.samples.reserve(count);
  plan.padding.reserve(count);
  const auto w = static_cast<std::size_t>(s.world_size), r = static_cast<std::size_t>(s.rank);
  if (s.mode == ShardMode::Interleaved) {
    // The global list: the permutation, padded by wrapping around to count * world_size.
    const std::vector<std::uint32_t> order = epoch_order(n, seed, epoch, shuffle);
    for (std::size_t i = r; i < count * w; i += w) {
      plan.samples.push_back(order[i % n]);
      plan.padding.push_back(i >= n ? 1 : 0);
    }
    return plan;
  }
  // Fixed: block r of a permutation drawn from the seed alone (the same in every epoch) ...
  const std::vector<std::uint32_t> base = epoch_order(n, mix64(seed ^ 0x53'48'41'52'44ull), 0, shuffle);
  const std::size_t begin = r * n / w, end = (r + 1) * n / w;
  const auto size = static_cast<std::uint32_t>(end - begin);
  // ... shuffled inside it each epoch, then cut or wrapped to the common count.
  const std::vector<std::uint32_t> inside = epoch_order(size, seed, epoch, shuffle);
  for (std::size_t i = 0; i < count; ++i) {
    // A rank whose block is empty (fewer samples than ranks) repeats others' samples.
    plan.samples.push_back(size > 0 ? base[begin + inside[i % size]] : base[(r + i * w) % n]);
    plan.padding.push_back(i >= size ? 1 : 0);
  }
  return plan;
}

}  // namespace stoker
