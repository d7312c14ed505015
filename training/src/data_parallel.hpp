// Data-parallel training of the head across the ranks of a Collective (docs/distributed.md): the
// ranks compute the features of their shares, gather them in the order one process would have
// computed them, and split each global batch between them; the gradients are summed in rank order
// and every rank applies the same update, so the ranks' heads stay bit-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "stoker/trainer/fine_tune.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/collective.hpp"
#include "stoker/training/feature_source.hpp"
#include "stoker/training/train.hpp"

namespace stoker::training {

// Every rank's rows of `local` on every rank, in `order` (dataset indices, as one process's plan
// lists them); a row that pads a rank's share (a second copy of a sample) is kept once, and rows
// whose sample is not in `order` are dropped. The times stay this rank's; the unreadable samples
// become every rank's.
Features gather_features(Collective& collective, Features local, const std::vector<std::uint32_t>& order);

// Every rank's device (its description, machine and GPU), by rank, on every rank.
std::vector<RankDevice> gather_rank_devices(Collective& collective, const DeviceChoice& mine);

// The dataset indices of a loader's epoch as one process's plan lists them (no sharding).
std::vector<std::uint32_t> plan_order(std::size_t samples, std::uint64_t seed, std::uint64_t epoch, bool shuffle);

// What a phase's loop gathers with: the rows this rank computed in the loader's epoch `epoch` (of
// `samples` training samples, `loader`'s seed and shuffle) become every rank's, in plan_order.
std::function<Features(Features, std::uint64_t)> gather_in_plan_order(Collective& collective, std::size_t samples,
                                                                      std::uint64_t seed, bool shuffle);

// The sum over the ranks, in rank order, of each rank's `m` of a global batch of `nb` samples:
// every gradient f(...) visits, scaled by m / nb (a rank's mean over its slice is its share of the
// batch's mean), and the step's loss and correct count. Every rank calls it for every batch, a
// rank with m = 0 with zero gradients.
trainer::StepResult sum_step_over_ranks(
    Collective& collective, int m, int nb, const trainer::StepResult& local,
    const std::function<void(const std::function<void(std::vector<float>&)>&)>& for_each_gradient);

// The rows 0..n-1 in their order (an augmenting epoch's gathered features, already in the order
// one process's loader gave them).
std::vector<int> rows_in_order(int n);

// One epoch over the rows of `values` in `order`, in global batches of `batch_size` rows: with
// several ranks rank r of W takes rows [nb·r/W, nb·(r+1)/W) of each batch of nb, alone all of
// them. step(x, y, m, nb) is called on every batch with this rank's m rows (m may be 0 with more
// ranks than rows left).
void for_each_global_batch(const Features& values, const std::vector<int>& order, int batch_size,
                           const Collective* collective,
                           const std::function<void(const float* x, const int* y, int m, int nb)>& step);

}  // namespace stoker::training
