// Keras' callbacks and cosine schedule (schedules.hpp) against tf-keras itself: the rates
// ReduceLROnPlateau leaves and the epoch EarlyStopping stops at on a fixed sequence of epoch
// metrics, and CosineDecay per step (tests/trainer/vectors/fit_options.json, written by
// scripts/keras_reference_fit_options.py). Also Keras' class_weight='balanced'.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "stoker/core/error.hpp"
#include "stoker/training/schedules.hpp"
#include "stoker/training/train.hpp"
#include "test_support.hpp"

namespace stoker::training {
namespace {

nlohmann::json reference() {
  std::ifstream in(test::source_dir() / "tests" / "trainer" / "vectors" / "fit_options.json");
  return nlohmann::json::parse(in);
}

TEST(Schedules, PlateauAndEarlyStoppingMatchKeras) {
  const auto ref = reference();
  ASSERT_EQ(ref["callbacks"].size(), 2u);
  for (const auto& c : ref["callbacks"]) {
    const std::string monitor = c["monitor"].get<std::string>();
    SCOPED_TRACE(monitor);
    const double sign = monitor == "val_loss" ? 1 : -1;  // lower is better, as BestEpoch
    ReduceLrOnPlateau plateau;
    plateau.factor = 0.5;
    plateau.patience = 2;
    EarlyStopping stopping;
    stopping.patience = 3;
    float lr = 0.01f;
    int stopped = -1;
    const auto values = c["values"].get<std::vector<double>>();
    for (std::size_t epoch = 0; epoch < values.size(); ++epoch) {
      lr = plateau.on_epoch_end(sign * values[epoch], lr);
      EXPECT_EQ(lr, c["learning_rate_after"][epoch].get<float>()) << "after epoch " << epoch;
      if (stopped < 0 && stopping.on_epoch_end(static_cast<int>(epoch), sign * values[epoch]))
        stopped = static_cast<int>(epoch);
    }
    ASSERT_FALSE(c["stopped_after"].is_null());
    EXPECT_EQ(stopped, c["stopped_after"].get<int>());
  }
}

TEST(Schedules, CosineDecayMatchesKeras) {
  const auto keras = reference()["cosine_decay_0.01_10"].get<std::vector<double>>();
  ASSERT_EQ(keras.size(), 13u);
  for (std::size_t step = 0; step < keras.size(); ++step)
    EXPECT_NEAR(cosine_decay(0.01f, static_cast<std::int64_t>(step), 10), keras[step], 1e-8) << "step " << step;
}

TEST(Schedules, BalancedClassWeightIsSklearns) {
  Dataset d;
  d.class_names = {"a", "b", "c"};
  for (int label : {0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2}) d.samples.push_back({"x.jpg", label});
  const std::vector<double> w = balanced_class_weight(d);  // 12 / (3 * count)
  ASSERT_EQ(w.size(), 3u);
  EXPECT_DOUBLE_EQ(w[0], 12.0 / 18);
  EXPECT_DOUBLE_EQ(w[1], 12.0 / 6);
  EXPECT_DOUBLE_EQ(w[2], 12.0 / 12);
  d.class_names.push_back("empty");
  EXPECT_THROW(balanced_class_weight(d), DatasetError);

  // The weights of the reference's imbalanced case, whose training steps Head's test checks.
  const nlohmann::json ref = reference();
  const nlohmann::json& c = ref["cases"][3];
  ASSERT_EQ(c["name"], "sigmoid_balanced_weights_on_an_imbalanced_set");
  Dataset imbalanced;
  imbalanced.class_names = {"a", "b"};
  for (int label : c["y"].get<std::vector<int>>()) imbalanced.samples.push_back({"x.jpg", label});
  EXPECT_EQ(balanced_class_weight(imbalanced), c["class_weight"].get<std::vector<double>>());
}

}  // namespace
}  // namespace stoker::training
