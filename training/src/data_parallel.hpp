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

namespace stoker::training {

// Every rank's rows of `local` on every rank, in `order` (dataset indices, as one process's plan
// lists them); a row that pads a rank's share (a second copy of a sample) is kept once, and rows
// whose sample is not in `order` are dropped. The times stay this rank's; the unreadable samples
// become every rank's.
Features gather_features(Collective& collective, Features local, const std::vector<std::uint32_t>& order);

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

// The head's training when the ranks exchange gradients: every step, each rank's slice's
// gradients summed over the ranks, then the same Adam step (the head's own) on every rank.
class HeadExchange {
 public:
  explicit HeadExchange(Collective& collective) : collective_(collective) {}

  // One epoch over n rows of `values` in the order trainer::epoch_rows(n, seed, epoch) gives, in
  // global batches of `batch_size` rows: each rank takes its slice of each (rows [b·r/W, b·(r+1)/W)
  // of a batch of b), their gradients are summed over the ranks and divided by b, and every rank
  // makes the same step. `before_step(head, steps)` runs before each (a schedule).
  trainer::EpochStats train_epoch(trainer::Head& head, const Features& values, int batch_size, std::uint64_t epoch,
                                  std::uint64_t seed, const trainer::LossOptions& loss,
                                  const std::function<void(trainer::Head&, std::int64_t)>& before_step);
  // The same over the rows in their order: an augmenting epoch's features, gathered in the order
  // one process's loader gave that epoch's samples, in the batches it gave them.
  trainer::EpochStats train_in_order(trainer::Head& head, const Features& values, int batch_size,
                                     const trainer::LossOptions& loss,
                                     const std::function<void(trainer::Head&, std::int64_t)>& before_step);

 private:
  trainer::EpochStats train_rows(trainer::Head& head, const Features& values, const std::vector<int>& order,
                                 int batch_size, const trainer::LossOptions& loss,
                                 const std::function<void(trainer::Head&, std::int64_t)>& before_step);

  Collective& collective_;
};

}  // namespace stoker::training
