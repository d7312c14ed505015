// The plan: which samples an epoch visits, in what order. A pure function of (seed, epoch), so a
// run can be reproduced or resumed, and it does not depend on thread count or scheduling.
#pragma once

#include <cstddef>
#include <cstdint>
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

// This rank's samples of an epoch, in order, and which of them are padding repeats. A pure
// function of (n, seed, epoch, shuffle, sharding): every rank computes its share alone.
struct EpochPlan {
  std::vector<std::uint32_t> samples;
  std::vector<std::uint8_t> padding;  // 1: a repeat that evens out the ranks' counts
};
EpochPlan epoch_plan(std::uint32_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle, const Sharding& sharding);

}  // namespace stoker
