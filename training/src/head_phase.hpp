// The first phase of train(): the new head trains with Adam on the frozen backbone's features,
// under the cosine decay or the plateau reduction.
#pragma once

#include "phase.hpp"

namespace stoker::training {

class HeadPhase final : public Phase {
 public:
  HeadPhase(RunState& run, FeatureSource& source) : run_(run), source_(source) {}

  std::string values_name() const override { return "training features"; }
  bool reports_value_batches() const override { return false; }  // Head::train_epoch runs them
  void values_computed(const Features& values) override;
  trainer::StepResult step(const float* x, const int* y, int n) override;
  trainer::EpochStats train_on_values(const Features& values, int epoch) override;
  trainer::EpochStats train_in_order(const Features& values) override;
  void complete(EpochReport& e) override;
  trainer::EpochStats validate() override;
  trainer::BestEpoch& best() override { return run_.best; }
  const trainer::Head& head() const override { return run_.head; }
  double learning_rate() const override { return run_.head.adam().learning_rate; }
  void after_epoch(double monitored) override;
  EarlyStopping& early_stopping() override { return run_.early_stopping; }
  void checkpoint(int done, int epoch, const EpochProgress* progress) override;

 private:
  trainer::EpochStats train_rows(const Features& values, const std::vector<int>& order);

  RunState& run_;
  FeatureSource& source_;
};

}  // namespace stoker::training
