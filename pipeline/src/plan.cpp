#include "stoker/pipeline/plan.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>

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

namespace {

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// A uniform double in (0, 1): never 0, so that its logarithm is finite.
double open_uniform(std::uint64_t r) noexcept { return (static_cast<double>(r >> 11) + 0.5) * 0x1.0p-53; }

// Rank r's entries of a global list of `size` entries: every world_size-th from r, padded by
// wrapping around to count * world_size (DistributedSampler).
void interleave(const std::vector<std::uint32_t>& global, std::size_t count, const Sharding& s, EpochPlan& plan) {
  const auto w = static_cast<std::size_t>(s.world_size), r = static_cast<std::size_t>(s.rank);
  const std::size_t size = global.size();
  for (std::size_t i = r; i < count * w; i += w) {
    plan.samples.push_back(global[i % size]);
    plan.padding.push_back(i >= size ? 1 : 0);
  }
}

struct AliasColumn {
  double keep = 1;          // probability that the column gives itself
  std::uint32_t alias = 0;  // what it gives otherwise
};

// n columns of height n w_i / sum(w): each short column is topped up from a tall one, which is its
// alias. A weight of 0 keeps 0 and has a weight above 0 as its alias, so it is never drawn; so do
// columns left short only by rounding (a weight above 0 keeps 1 then).
std::vector<AliasColumn> alias_table(const std::vector<double>& weights) {
  const std::size_t n = weights.size();
  const double largest = *std::max_element(weights.begin(), weights.end());
  double total = 0;  // of the weights scaled by the largest: no overflow whatever their size
  for (double v : weights) total += v / largest;
  std::vector<double> height(n);
  std::vector<std::uint32_t> short_ones, tall_ones;
  std::uint32_t some_positive = 0;
  for (std::size_t i = 0; i < n; ++i) {
    height[i] = weights[i] / largest * static_cast<double>(n) / total;
    (height[i] < 1 ? short_ones : tall_ones).push_back(static_cast<std::uint32_t>(i));
    if (weights[i] > 0) some_positive = static_cast<std::uint32_t>(i);
  }
  std::vector<AliasColumn> table(n);
  while (!short_ones.empty() && !tall_ones.empty()) {
    const std::uint32_t s = short_ones.back(), t = tall_ones.back();
    short_ones.pop_back();
    table[s] = {height[s], t};
    height[t] = (height[t] + height[s]) - 1;  // >= 0: height[t] >= 1
    if (height[t] < 1) {
      tall_ones.pop_back();
      short_ones.push_back(t);
    }
  }
  for (std::uint32_t t : tall_ones) table[t] = {1, t};
  for (std::uint32_t s : short_ones) table[s] = weights[s] > 0 ? AliasColumn{1, s} : AliasColumn{0, some_positive};
  return table;
}

}  // namespace

void check_weighted_sampling(const WeightedSampling& w, std::size_t n, ShardMode mode) {
  if (!w.enabled()) {
    if (w.num_samples)
      throw InvalidArgument("num_samples needs sample_weights (without them an epoch is every sample)");
    if (!w.replacement)
      throw InvalidArgument("replacement=false needs sample_weights (without them no sample repeats)");
    return;
  }
  if (w.weights.size() != n) {
    throw InvalidArgument("sample_weights: " + std::to_string(w.weights.size()) + " weights for " + std::to_string(n) +
                          " samples (one weight per sample)");
  }
  std::size_t positive = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = w.weights[i];
    if (!std::isfinite(v)) {
      throw InvalidArgument("sample_weights: the weight of sample " + std::to_string(i) + " is " + number(v) +
                            " (weights must be finite)");
    }
    if (v < 0) {
      throw InvalidArgument("sample_weights: the weight of sample " + std::to_string(i) + " is negative (" + number(v) +
                            ")");
    }
    positive += v > 0 ? 1 : 0;
  }
  if (positive == 0) throw InvalidArgument("sample_weights: every weight is 0 (no sample could be drawn)");
  if (w.num_samples) {
    const std::size_t m = *w.num_samples;
    if (m == 0) throw InvalidArgument("num_samples must be >= 1, received 0");
    if (m > UINT32_MAX) throw InvalidArgument("num_samples over 4 billion draws per epoch is not supported");
    if (!w.replacement && m > n) {
      throw InvalidArgument("num_samples " + std::to_string(m) + " without replacement is more than the " +
                            std::to_string(n) + " samples (each is drawn at most once)");
    }
    if (!w.replacement && m > positive) {
      throw InvalidArgument("num_samples " + std::to_string(m) + " without replacement is more than the " +
                            std::to_string(positive) + " samples whose weight is above 0");
    }
  } else if (!w.replacement && positive < n) {
    throw InvalidArgument("without replacement, num_samples (unset: all " + std::to_string(n) + " samples) is more " +
                          "than the " + std::to_string(positive) + " samples whose weight is above 0");
  }
  if (mode == ShardMode::Fixed) {
    throw InvalidArgument(
        "sample_weights need shard_mode interleaved: fixed keeps each rank on one part of the data "
        "across epochs, while a weighted draw takes from all of it");
  }
}

std::size_t draws_per_epoch(std::size_t n, const WeightedSampling& w) noexcept {
  return w.enabled() ? w.num_samples.value_or(n) : n;
}

std::vector<std::uint32_t> weighted_draw(const WeightedSampling& w, std::uint64_t seed, std::uint64_t epoch) {
  check_weighted_sampling(w, w.weights.size());
  const std::size_t n = w.weights.size(), m = draws_per_epoch(n, w);
  // Its own stream, apart from the permutation's: draw k is mix64(key + k).
  const std::uint64_t key = mix64(seed ^ mix64(epoch + 0x5745'4947'4854ull));  // "WEIGHT"
  std::vector<std::uint32_t> out;
  out.reserve(m);
  if (w.replacement) {
    // Walker's alias table (Vose's construction): column c keeps itself with probability prob[c],
    // else gives alias[c]. A draw is a uniform column and a coin: O(1), one cache line.
    const std::vector<AliasColumn> table = alias_table(w.weights);
    const std::uint64_t coin_key = mix64(key ^ 0x434F'494Eull);  // "COIN"
    const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    std::uint64_t counter = 0;
    for (std::size_t k = 0; k < m; ++k) {
      std::uint64_t r;
      do {
        r = mix64(key + counter++);
      } while (r >= limit);  // unbiased column by rejection, as epoch_order draws
      const AliasColumn& c = table[static_cast<std::size_t>(r % n)];
      const double coin = static_cast<double>(mix64(coin_key + k) >> 11) * 0x1.0p-53;  // [0, 1)
      out.push_back(coin < c.keep ? static_cast<std::uint32_t>(r % n) : c.alias);
    }
    return out;
  }
  // Without replacement: the m smallest keys log(E) - log(w), E ~ Exp(1), ties by index; a zero
  // weight's key is +inf. In the log domain a tiny weight's key stays finite.
  std::vector<std::pair<double, std::uint32_t>> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double e = -std::log(open_uniform(mix64(key + i)));
    keys[i] = {w.weights[i] > 0 ? std::log(e) - std::log(w.weights[i]) : HUGE_VAL, static_cast<std::uint32_t>(i)};
  }
  const auto middle = keys.begin() + static_cast<std::ptrdiff_t>(m);
  if (m < n) std::nth_element(keys.begin(), middle, keys.end());
  std::sort(keys.begin(), middle);
  for (auto it = keys.begin(); it != middle; ++it) out.push_back(it->second);
  return out;
}

EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& s) {
  return epoch_plan(n, seed, epoch, shuffle, s, WeightedSampling{});
}

EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& s,
                     const WeightedSampling& sampling) {
  EpochPlan plan;
  check_weighted_sampling(sampling, n, s.mode);
  const std::size_t count = samples_per_rank(draws_per_epoch(n, sampling), s);
  plan.samples.reserve(count);
  plan.padding.reserve(count);
  const auto w = static_cast<std::size_t>(s.world_size), r = static_cast<std::size_t>(s.rank);
  if (sampling.enabled()) {
    // The global list: the epoch's weighted draw, cut as the permutation is.
    interleave(weighted_draw(sampling, seed, epoch), count, s, plan);
    return plan;
  }
  if (s.mode == ShardMode::Interleaved) {
    // The global list: the permutation, padded by wrapping around to count * world_size.
    interleave(epoch_order(n, seed, epoch, shuffle), count, s, plan);
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
