// The plan: which samples an epoch visits, in what order. A pure function of (seed, epoch), so a
// run can be reproduced or resumed, and it does not depend on thread count or scheduling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoker/core/splitmix.hpp"

namespace stoker {

// Sample indices [0, n) in epoch order: identity without shuffle, otherwise a Fisher-Yates
// permutation drawn from a generator keyed by (seed, epoch), identical on every platform.
std::vector<std::uint32_t> epoch_order(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle);

// One process's share of the data when a job runs one process per GPU (torchrun, Slurm, MPI).
enum class ShardMode : std::uint8_t {
  // PyTorch's DistributedSampler: every rank computes the epoch's global permutation alike and
  // takes every world_size-th sample of it, starting at its rank.
  Interleaved,
  // Each rank keeps one fixed part of the data across epochs (a block of a permutation drawn from
  // the seed alone), shuffled inside it each epoch: a per-rank decoded cache holds only its part.
  Fixed,
};

struct Sharding {
  int rank = 0;
  int world_size = 1;
  ShardMode mode = ShardMode::Interleaved;
  // Every rank gets the same number of samples: false pads the short ranks by wrapping around
  // (the repeats are marked, Batch::padding(), so evaluation counts each sample once); true drops
  // the remainder, as DistributedSampler's drop_last.
  bool drop_remainder = false;
};

ShardMode parse_shard_mode(const std::string& name);  // interleaved|fixed

// The rank and world size the launcher set: RANK / WORLD_SIZE (torchrun, and MPI launchers that
// export them), else SLURM_PROCID / SLURM_NTASKS (srun), else rank 0 of 1. A malformed or
// inconsistent value is an InvalidArgument naming the variable.
Sharding sharding_from_environment();

// Checks rank and world size against a dataset of n samples (InvalidArgument naming the setting).
void check_sharding(const Sharding& sharding, std::size_t n);

// Samples each rank gets per epoch: ceil(n / world_size) padded, floor(n / world_size) dropped.
std::size_t samples_per_rank(std::size_t n, const Sharding& sharding) noexcept;

// Weighted sampling, as PyTorch's WeightedRandomSampler: each epoch draws num_samples indices,
// sample i with probability weights[i] / sum(weights), with or without replacement. Empty weights:
// no draw, every sample once per epoch (the permutation above).
struct WeightedSampling {
  std::vector<double> weights;  // one per sample: finite, >= 0, not all 0 (need not sum to 1)
  // Draws per epoch; unset: as many as there are samples (torch's num_samples = len(weights)).
  std::optional<std::size_t> num_samples;
  // false: each sample at most once per epoch, drawn in order as torch.multinomial draws them
  // without replacement (num_samples <= the samples whose weight is above 0).
  bool replacement = true;

  bool enabled() const noexcept { return !weights.empty(); }
};

// Checks the weights against a dataset of n samples and the shard mode: an InvalidArgument naming
// the reason (their count, a negative, NaN or infinite weight, all zero, num_samples without
// weights, 0 or more than can be drawn without replacement, a fixed shard mode).
void check_weighted_sampling(const WeightedSampling& sampling, std::size_t n, ShardMode mode = ShardMode::Interleaved);

// The samples an epoch visits before sharding: n without weights, else num_samples (n if unset).
std::size_t draws_per_epoch(std::size_t n, const WeightedSampling& sampling) noexcept;

// The epoch's weighted draw, the same on every rank: a pure function of (weights, num_samples,
// replacement, seed, epoch). With replacement each draw is a column of Walker's alias table and a
// coin (O(n) once, O(1) a draw), identical on every platform; without, the num_samples smallest
// keys log(E_i) - log(w_i), E_i exponential (Efraimidis-Spirakis: the order of successive draws
// from the remaining weights, as torch.multinomial's), O(n + m log m), identical wherever the C
// library's log is (as the crop draw's logf). Zero weights are never drawn. Checks `sampling`
// first (check_weighted_sampling with n = weights.size()).
std::vector<std::uint32_t> weighted_draw(const WeightedSampling& sampling, std::uint64_t seed, std::uint64_t epoch);

// This rank's samples of an epoch, in order, and which of them are padding repeats. A pure
// function of (n, seed, epoch, shuffle, sharding[, sampling]): every rank computes its share alone.
// With weights the global list is weighted_draw() (shuffle does not apply: the draw is random),
// cut for the rank as the permutation is (Interleaved; Fixed is refused), padding and drop as there.
struct EpochPlan {
  std::vector<std::uint32_t> samples;
  std::vector<std::uint8_t> padding;  // 1: a repeat that evens out the ranks' counts
};
EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& sharding);
EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& sharding,
                     const WeightedSampling& sampling);

}  // namespace stoker
