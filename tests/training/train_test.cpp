// A whole run through the training library, without the command: a data folder -> train() -> the
// model folder -> load_trained_model() -> predict() / evaluate() on images it has not seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/atomic_file.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/model_folder.hpp"
#include "stoker/training/run_folder.hpp"
#include "stoker/training/run_identity.hpp"
#include "stoker/training/train.hpp"
#include "test_support.hpp"

namespace stoker::training {
namespace {
namespace fs = std::filesystem;

// Two classes a frozen ImageNet backbone separates at once: the test pattern tinted red or blue.
// No smaller than the 64x64 input: the GPU path resizes to it in uint8 before its warp, the CPU path
// warps once, and an upsampled pattern makes that rounding difference approach the GPU check's bound.
cv::Mat tinted(int variant, bool red) {
  cv::Mat rgb = test::make_pattern_rgb(64 + variant % 5 * 4, 72, variant);
  for (int y = 0; y < rgb.rows; ++y) {
    for (int x = 0; x < rgb.cols; ++x) {
      auto& p = rgb.at<cv::Vec3b>(y, x);
      p[red ? 2 : 0] = static_cast<std::uint8_t>(p[red ? 2 : 0] / 4);  // RGB: weaken blue, or red
    }
  }
  return rgb;
}

void write_class_folders(const fs::path& root, int per_class, int first_variant) {
  for (const bool red : {false, true}) {
    const fs::path folder = root / (red ? "red" : "blue");
    fs::create_directories(folder);
    for (int i = 0; i < per_class; ++i) {
      test::write_jpeg(folder / ("img" + std::to_string(i) + ".jpg"), tinted(first_variant + i, red));
    }
  }
}

TrainOptions small_run(const fs::path& out) {
  TrainOptions o;
  o.backbone = {(test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5").string(), "sequential_9", ""};
  o.prepare.image_size = 64;
  o.loader.batch_size = 8;
  o.loader.threads = 2;
  o.epochs = 4;
  o.adam.learning_rate = 1e-2f;
  o.device = "cpu";
  o.out = out;
  return o;
}

class TrainRun : public ::testing::Test {
 protected:
  void SetUp() override {
    write_class_folders(dir / "data", 12, 0);
    write_class_folders(dir / "unseen", 6, 100);
  }
  test::TempDir dir;
};

TEST_F(TrainRun, DataFolderToSavedModelToPredictions) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  ASSERT_EQ(data.train.size(), 18u);
  ASSERT_EQ(data.validation.size(), 6u);
  const TrainOptions o = small_run(dir / "model");
  const TrainResult r = train(data, o);

  ASSERT_EQ(r.history.size(), 4u);
  ASSERT_GE(r.best_epoch, 0);
  EXPECT_FALSE(r.device.cuda);
  EXPECT_FALSE(r.history[0].features_cached);
  EXPECT_TRUE(r.history[1].features_cached) << "without augmentation the features are computed once";
  EXPECT_EQ(r.history[0].train.samples, 18);
  const EpochReport& best = r.history[static_cast<std::size_t>(r.best_epoch)];
  EXPECT_TRUE(best.improved);
  EXPECT_GE(best.validation.accuracy, 5.0 / 6.0) << "two colours a frozen backbone tells apart";
  ASSERT_TRUE(fs::exists(dir / "model" / "head.stkh"));
  ASSERT_TRUE(fs::exists(dir / "model" / "stoker_model.json"));

  const TrainedModel m = load_trained_model(dir / "model");
  EXPECT_EQ(m.info.class_names, (std::vector<std::string>{"blue", "red"}));
  EXPECT_EQ(m.info.prepare.image_size, 64);

  // The saved head, on the validation images, scores what the run reported for its best epoch.
  const trainer::EpochStats again = evaluate(m, (dir / "data").string()).stats;
  EXPECT_EQ(again.samples, 24);

  std::vector<std::string> paths;
  for (const char* c : {"blue", "red"})
    for (int i = 0; i < 6; ++i) paths.push_back((dir / "unseen" / c / ("img" + std::to_string(i) + ".jpg")).string());
  paths.push_back((dir / "missing.jpg").string());
  const Predictions p = predict(m, paths);
  ASSERT_EQ(p.predicted.size(), 12u);
  ASSERT_EQ(p.failed.size(), 1u) << "the missing file is reported, the rest predicted";
  EXPECT_NE(p.failed[0].path.find("missing.jpg"), std::string::npos);
  int correct = 0;
  for (std::size_t i = 0; i < p.predicted.size(); ++i) {
    EXPECT_EQ(p.predicted[i].path, paths[i]) << "predictions keep the order of the paths";
    ASSERT_EQ(p.predicted[i].probabilities.size(), 2u);
    EXPECT_NEAR(p.predicted[i].probabilities[0] + p.predicted[i].probabilities[1], 1.0, 1e-6);
    correct += p.predicted[i].class_index == (i < 6 ? 0 : 1);
  }
  EXPECT_GE(correct, 10) << "images of the same two colours the model has not seen";
}

TEST_F(TrainRun, AugmentedEpochsRunTheBackboneEachEpoch) {
  TrainOptions o = small_run(dir / "aug");
  o.epochs = 2;
  AugmentSpec random;
  random.horizontal_flip = true;
  random.rotation_range = 10;
  o.augmentation = random;
  struct Counter : TrainObserver {
    std::size_t batches = 0;
    int epochs = 0;
    void on_train_batch(std::size_t, std::size_t, double, double) override { ++batches; }
    void on_epoch_end(const EpochReport&) override { ++epochs; }
  } counter;
  const TrainResult r = train(training_data((dir / "data").string(), 0.25), o, &counter);
  ASSERT_EQ(r.history.size(), 2u);
  EXPECT_FALSE(r.history[1].features_cached);
  EXPECT_EQ(r.history[1].train.samples, 18);
  EXPECT_EQ(counter.epochs, 2);
  EXPECT_EQ(counter.batches, 2u * 3u) << "18 images in batches of 8, each epoch";
}

// With a GPU (and the cuDNN backend): the backbone and the augmentation run there behind the
// agreement checks, and the model folder it writes predicts on the CPU like any other.
TEST_F(TrainRun, OnTheGpuWhenThereIsOne) {
  if (cuda_device_count() == 0 || !trainer::built_with_cudnn()) {
    GTEST_SKIP() << "no CUDA device with the cuDNN backend here";
  }
  TrainOptions o = small_run(dir / "gpu");
  o.device = "cuda";
  o.epochs = 3;
  AugmentSpec random;
  random.horizontal_flip = true;
  o.augmentation = random;
  const TrainResult r = train(training_data((dir / "data").string(), 0.25), o);
  EXPECT_TRUE(r.device.cuda) << r.device.description;
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_TRUE(r.history[0].times.gpu_seconds.has_value()) << "the GPU path times its backbone with CUDA events";
  EXPECT_GE(r.history[static_cast<std::size_t>(r.best_epoch)].validation.accuracy, 5.0 / 6.0);
  const Predictions p = predict(load_trained_model(dir / "gpu"), {(dir / "unseen" / "red" / "img0.jpg").string()});
  ASSERT_EQ(p.predicted.size(), 1u);
  EXPECT_EQ(p.predicted[0].class_index, 1);
}

// Photos at a small size on the GPU: the half-precision path's error is largest there (the final
// pooling averages a 2x2 map), and a correct GPU must still pass the agreement checks.
TEST_F(TrainRun, SmallPhotosOnTheGpuPassTheAgreementChecks) {
  if (cuda_device_count() == 0 || !trainer::built_with_cudnn()) {
    GTEST_SKIP() << "no CUDA device with the cuDNN backend here";
  }
  TrainOptions o = small_run(dir / "small");
  o.device = "cuda";
  o.epochs = 1;
  o.loader.batch_size = 4;
  TrainingData data = training_data((test::source_dir() / "data/catsdogs-sample").string(), 0.1);
  data.train.samples.resize(std::min<std::size_t>(data.train.samples.size(), 40));
  const TrainResult r = train(data, o);
  EXPECT_TRUE(r.device.cuda) << r.device.description;
}

// Without a cut, a classifier is cut where Keras' include_top=False, pooling='avg' would end it
// (its last global pooling), not trained on its old head's class scores.
TEST_F(TrainRun, WithoutACutTheFeaturesComeFromTheLastGlobalPooling) {
  TrainOptions o = small_run(dir / "nocut");
  o.backbone.cut_at.clear();
  o.epochs = 1;
  struct Setup final : TrainObserver {
    TrainSetup seen;
    void on_setup(const TrainSetup& s) override { seen = s; }
  } setup;
  train(training_data((dir / "data").string(), 0.25), o, &setup);
  EXPECT_EQ(setup.seen.cut_at, "global_average_pooling2d_GlobalAveragePooling2D3");
  EXPECT_EQ(setup.seen.features, 1280) << "the 3-class model's last Dense gives 3";
  EXPECT_EQ(load_trained_model(dir / "nocut").info.backbone.cut_at, setup.seen.cut_at) << "recorded for predict";
}

// The model folder holds the whole classifier (model.h5): it predicts the same once the backbone
// file it was trained from is gone.
TEST_F(TrainRun, TheModelFolderNeedsNotTheOriginalBackboneFile) {
  fs::copy_file(test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5", dir / "backbone.h5");
  TrainOptions o = small_run(dir / "model");
  o.backbone.model = (dir / "backbone.h5").string();
  o.epochs = 2;
  train(training_data((dir / "data").string(), 0.25), o);
  ASSERT_TRUE(fs::exists(dir / "model" / kClassifierFile));
  const std::vector<std::string> images = {(dir / "unseen" / "red" / "img0.jpg").string(),
                                           (dir / "unseen" / "blue" / "img1.jpg").string()};
  const TrainedModel before = load_trained_model(dir / "model");
  EXPECT_TRUE(before.preprocessing_in_backbone);
  const Predictions p = predict(before, images);
  fs::remove(dir / "backbone.h5");
  const Predictions q = predict(load_trained_model(dir / "model"), images);
  ASSERT_EQ(p.predicted.size(), 2u);
  ASSERT_EQ(q.predicted.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(q.predicted[i].probabilities, p.predicted[i].probabilities);
  EXPECT_EQ(q.predicted[0].class_index, 1);
  EXPECT_EQ(q.predicted[1].class_index, 0);
}

// Keras' second phase: the head trains first, then the backbone's top with it; the best epoch's
// tuned backbone is what the folder holds and what predict uses.
TEST_F(TrainRun, FineTuningTrainsTheTopOfTheBackboneAndSavesIt) {
  TrainOptions o = small_run(dir / "tuned");
  o.epochs = 1;
  o.adam.learning_rate = 1e-4f;  // a weak first phase, so that the second improves on it
  o.fine_tune.from_layer = "block_16_expand";
  o.fine_tune.epochs = 3;
  o.fine_tune.optimizer.learning_rate = 1e-2f;
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  struct Seen : TrainObserver {
    std::optional<FineTuneSetup> setup;
    void on_fine_tune_begin(const FineTuneSetup& s) override { setup = s; }
  } seen;
  const TrainResult r = train(data, o, &seen);
  ASSERT_EQ(r.history.size(), 4u);
  EXPECT_FALSE(r.history[0].fine_tuning);
  for (int e = 1; e < 4; ++e) {
    EXPECT_TRUE(r.history[static_cast<std::size_t>(e)].fine_tuning) << e;
    EXPECT_EQ(r.history[static_cast<std::size_t>(e)].epoch, e);
    EXPECT_EQ(r.history[static_cast<std::size_t>(e)].train.samples, 18);
  }
  EXPECT_FALSE(r.history[1].features_cached);
  EXPECT_TRUE(r.history[2].features_cached) << "without augmentation the frozen part's output is computed once";
  ASSERT_TRUE(seen.setup);
  EXPECT_EQ(seen.setup->boundary, "block_15_add");
  EXPECT_GT(seen.setup->trainable_parameters, 10000u);
  EXPECT_GT(seen.setup->activation_bytes, 0u);
  ASSERT_GE(r.best_epoch, 1) << "the second phase improves on a head trained at 1e-4 for one epoch";
  EXPECT_GT(r.history[static_cast<std::size_t>(r.best_epoch)].validation.accuracy, r.history[0].validation.accuracy);

  // The saved backbone: the tuned layers moved, the frozen ones did not.
  const trainer::Model original = trainer::load_model(o.backbone.model).cut_at("sequential_9");
  ASSERT_TRUE(fs::exists(dir / "tuned" / kFineTunedBackboneFile));
  const trainer::Model tuned = trainer::load_model(dir / "tuned" / kFineTunedBackboneFile);
  auto weights = [](const trainer::Model& m, const std::string& layer, const std::string& key) {
    const trainer::Graph& g = m.graph();
    return *g.nodes[static_cast<std::size_t>(g.find(layer))].weight(key)->data;
  };
  EXPECT_NE(weights(tuned, "block_16_project", "kernel"), weights(original, "block_16_project", "kernel"));
  EXPECT_NE(weights(tuned, "Conv_1_bn", "gamma"), weights(original, "Conv_1_bn", "gamma"));
  EXPECT_EQ(weights(tuned, "Conv_1_bn", "moving_mean"), weights(original, "Conv_1_bn", "moving_mean"))
      << "BatchNormalization stays in inference mode";
  EXPECT_EQ(weights(tuned, "block_15_project", "kernel"), weights(original, "block_15_project", "kernel"));

  // The folder predicts with the tuned backbone: its validation accuracy is the best epoch's.
  const TrainedModel m = load_trained_model(dir / "tuned");
  std::vector<std::string> paths;
  std::vector<int> labels;
  for (const Sample& s : data.validation.samples) paths.push_back(s.path), labels.push_back(s.label);
  const Predictions p = predict(m, paths);
  ASSERT_EQ(p.predicted.size(), paths.size());
  int correct = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) correct += p.predicted[i].class_index == labels[i];
  EXPECT_NEAR(correct / static_cast<double>(paths.size()),
              r.history[static_cast<std::size_t>(r.best_epoch)].validation.accuracy, 1e-9);
}

TEST_F(TrainRun, BadSetupsAreTypedErrorsNamingTheCause) {
  EXPECT_THROW(training_data((dir / "data" / "red").string(), 0.25), DatasetError);  // no class folders
  EXPECT_THROW(training_data((dir / "data").string(), 0.0), InvalidArgument);
  TrainOptions o = small_run(dir / "x");
  o.backbone.cut_at = "no_such_layer";
  try {
    train(training_data((dir / "data").string(), 0.25), o);
    FAIL() << "an unknown cut layer trained";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_layer"), std::string::npos) << e.what();
  }
  o = small_run(dir / "x");
  o.prepare.preprocess = "yolo";
  EXPECT_THROW(train(training_data((dir / "data").string(), 0.25), o), InvalidArgument);
  o = small_run(dir / "x");
  o.device = "cuda:0,1";  // one process, two GPUs: the command starts a rank per GPU, train() refuses
  try {
    train(training_data((dir / "data").string(), 0.25), o);
    FAIL() << "one process trained on a list of GPUs";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("start one rank per GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_trained_model(dir / "nothing_here"), IoError);
  fs::create_directories(dir / "odd");
  std::ofstream(dir / "odd" / "stoker_model.json")
      << R"({"backbone": {"model": "m.h5", "cut_at": ""}, "image_size": 64, "interpolation": "bilinear",
             "keep_aspect_ratio": false, "preprocess": "yolo", "class_names": ["a", "b"]})";
  try {
    load_trained_model(dir / "odd");
    FAIL() << "a model folder with an unknown preprocessing loaded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("stoker_model.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("yolo"), std::string::npos) << e.what();
  }
}

// Keras' standardisation and a centre crop: the featurewise statistics are fitted on the training
// images (as ImageDataGenerator.fit(x_train)), recorded in the model folder with the rest, and
// evaluate() prepares images exactly as the run's validation did.
TEST_F(TrainRun, StandardisationAndCropsAreFittedRecordedAndReusedByEvaluate) {
  const TrainingData data = training_data((dir / "data").string(), 0, (dir / "unseen").string());
  TrainOptions o = small_run(dir / "model");
  o.epochs = 2;
  o.prepare.preprocess = "none";
  o.prepare.rescale = 1.0 / 255;
  o.prepare.center_crop = 0.8;
  o.prepare.featurewise_center = o.prepare.featurewise_std_normalization = true;
  const TrainResult r = train(data, o);

  // The same statistics from fit_featurewise over every training image, decoded by hand.
  ImageDecoder decoder;
  std::vector<std::vector<std::uint8_t>> pixels;
  std::vector<ImageView> views;
  for (const Sample& sample : data.train.samples) {
    std::vector<std::uint8_t> bytes;
    read_file(sample.path, bytes);
    const ImageView v = decoder.decode(bytes, sample.path);
    pixels.emplace_back(v.data, v.data + v.row_stride * static_cast<std::size_t>(v.height));
    views.push_back(v);
  }
  for (std::size_t i = 0; i < views.size(); ++i) views[i].data = pixels[i].data();
  const FeaturewiseStats expected = fit_featurewise(image_spec(o.prepare), views);

  const TrainedModel m = load_trained_model(dir / "model");
  const ImagePreparation& p = m.info.prepare;
  ASSERT_TRUE(p.featurewise.has_value()) << "the fitted statistics are in stoker_model.json";
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(p.featurewise->mean[c], expected.mean[c]) << "channel " << c;
    EXPECT_EQ(p.featurewise->std[c], expected.std[c]) << "channel " << c;
    EXPECT_GT(p.featurewise->std[c], 0.01f);
  }
  EXPECT_EQ(p.center_crop, 0.8);
  ASSERT_TRUE(p.rescale.has_value());
  EXPECT_DOUBLE_EQ(*p.rescale, 1.0 / 255);
  EXPECT_TRUE(p.featurewise_center && p.featurewise_std_normalization);
  EXPECT_FALSE(p.samplewise_center || p.samplewise_std_normalization);

  const EpochReport& best = r.history.at(static_cast<std::size_t>(r.best_epoch));
  const Evaluation again = evaluate(m, (dir / "unseen").string());
  EXPECT_EQ(again.stats.samples, best.validation.samples);
  EXPECT_NEAR(again.stats.loss, best.validation.loss, 1e-6) << "evaluate prepares images as validation did";
  EXPECT_EQ(again.stats.accuracy, best.validation.accuracy);
}

// A run stopped anywhere and resumed from its checkpoint ends where the uninterrupted run ends:
// the same heads (weights, Adam's moments and step count), bit for bit, and the same history.
class Resume : public TrainRun {
 protected:
  // Stops the run (as a crash would) after `batches` training batches or `epochs` epochs.
  struct Stop final : TrainObserver {
    std::size_t after_batches = 0, batches = 0;
    int after_epochs = 0, epochs = 0;
    void on_train_batch(std::size_t, std::size_t, double, double) override {
      if (after_batches > 0 && ++batches == after_batches) throw std::runtime_error("stopped");
    }
    void on_epoch_end(const EpochReport&) override {
      if (after_epochs > 0 && ++epochs == after_epochs) throw std::runtime_error("stopped");
    }
  };

  TrainOptions augmented(const fs::path& out) {
    TrainOptions o = small_run(out);
    o.epochs = 2;
    o.checkpoint_every_batches = 1;
    AugmentSpec random;
    random.horizontal_flip = true;
    random.rotation_range = 15;
    random.zoom_range = AugmentSpec::zoom(0.1);
    o.augmentation = random;
    return o;
  }

  static std::string head_bytes(const fs::path& out) {
    return load_checkpoint(out / kCheckpointFile).head->serialize();
  }
  static std::string best_bytes(const fs::path& out) { return trainer::Head::load(out / "head.stkh").serialize(); }

  static void expect_same_history(const std::vector<EpochReport>& a, const std::vector<EpochReport>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].train.loss, b[i].train.loss) << "epoch " << i;
      EXPECT_EQ(a[i].train.accuracy, b[i].train.accuracy) << "epoch " << i;
      EXPECT_EQ(a[i].train.samples, b[i].train.samples) << "epoch " << i;
      EXPECT_EQ(a[i].validation.loss, b[i].validation.loss) << "epoch " << i;
      EXPECT_EQ(a[i].improved, b[i].improved) << "epoch " << i;
    }
  }
};

TEST_F(Resume, AfterEveryBatchOfAnAugmentedRunEqualsTheUninterruptedRun) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);  // 18 images: 3 batches of 8
  const TrainResult whole = train(data, augmented(dir / "whole"));
  ASSERT_EQ(whole.history.size(), 2u);
  for (std::size_t stop_after = 1; stop_after <= 6; ++stop_after) {
    SCOPED_TRACE("stopped after batch " + std::to_string(stop_after));
    const fs::path out = dir / ("stopped" + std::to_string(stop_after));
    Stop stop;
    stop.after_batches = stop_after;
    EXPECT_THROW(train(data, augmented(out), &stop), std::runtime_error);
    TrainOptions again = augmented(out);
    again.resume = true;
    again.loader.threads = 1;  // other threads: the same batches
    again.loader.prefetch = 1;
    const TrainResult resumed = train(data, again);
    expect_same_history(resumed.history, whole.history);
    EXPECT_EQ(resumed.best_epoch, whole.best_epoch);
    EXPECT_EQ(head_bytes(out), head_bytes(dir / "whole"));
    EXPECT_EQ(best_bytes(out), best_bytes(dir / "whole"));
  }
}

// TrainOptions::should_stop (a command's Ctrl-C): the run saves itself at that batch, without
// --checkpoint-every, and returns stopped; resumed, it ends as the uninterrupted run. Asked after
// an epoch's last batch it stops at the epoch's end; after the run's last, it finishes.
TEST_F(Resume, StopRequestedAfterABatchEqualsTheUninterruptedRun) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);  // 3 batches per epoch
  auto options = [&](const fs::path& out) {
    TrainOptions o = augmented(out);
    o.checkpoint_every_batches = 0;
    return o;
  };
  const TrainResult whole = train(data, options(dir / "whole"));
  ASSERT_EQ(whole.history.size(), 2u);
  const std::vector<std::pair<int, std::size_t>> expected = {{0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
  for (std::size_t stop_after = 1; stop_after <= 6; ++stop_after) {
    SCOPED_TRACE("asked after batch " + std::to_string(stop_after));
    const fs::path out = dir / ("stopped" + std::to_string(stop_after));
    struct Batches final : TrainObserver {
      std::size_t n = 0;
      void on_train_batch(std::size_t, std::size_t, double, double) override { ++n; }
    } seen;
    TrainOptions o = options(out);
    o.should_stop = [&] { return seen.n >= stop_after; };
    const TrainResult stopped = train(data, o, &seen);
    if (stop_after == 6) {
      EXPECT_FALSE(stopped.stopped) << "asked after the last batch: the run is done";
      continue;
    }
    ASSERT_TRUE(stopped.stopped);
    EXPECT_EQ(stopped.stopped->epoch, expected[stop_after - 1].first);
    EXPECT_EQ(stopped.stopped->batch, expected[stop_after - 1].second);
    EXPECT_EQ(seen.n, stop_after) << "no batch after the request";
    EXPECT_FALSE(fs::exists(out / kClassifierFile));
    const Checkpoint c = load_checkpoint(out / kCheckpointFile);
    EXPECT_EQ(c.epoch, stopped.stopped->epoch);
    EXPECT_EQ(c.loader.next_batch, stopped.stopped->batch);
    TrainOptions again = options(out);
    again.resume = true;
    const TrainResult resumed = train(data, again);
    EXPECT_FALSE(resumed.stopped);
    expect_same_history(resumed.history, whole.history);
    EXPECT_EQ(resumed.best_epoch, whole.best_epoch);
    EXPECT_EQ(head_bytes(out), head_bytes(dir / "whole"));
    EXPECT_EQ(best_bytes(out), best_bytes(dir / "whole"));
  }
}

// Without augmentation a stop asked during the training features' pass ends it after its batch
// (the run resumes at the first epoch's start); one asked in a later epoch waits for its end.
TEST_F(Resume, StopRequestedWithoutAugmentationEqualsTheUninterruptedRun) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  const TrainResult whole = train(data, small_run(dir / "whole"));
  struct Seen final : TrainObserver {
    bool training_pass = false;
    std::size_t pass_batches = 0;
    int epochs = 0;
    void on_features_begin(const std::string& what, std::size_t) override {
      training_pass = !what.starts_with("validation");
    }
    void on_features_progress(std::size_t, std::size_t) override { pass_batches += training_pass ? 1 : 0; }
    void on_epoch_end(const EpochReport&) override { ++epochs; }
  };
  for (const bool in_the_pass : {true, false}) {
    SCOPED_TRACE(in_the_pass ? "asked in the features' pass" : "asked in the second epoch");
    const fs::path out = dir / (in_the_pass ? "pass" : "second");
    Seen seen;
    TrainOptions o = small_run(out);
    o.should_stop = [&] { return in_the_pass ? seen.pass_batches >= 1 : seen.epochs >= 1; };
    const TrainResult stopped = train(data, o, &seen);
    ASSERT_TRUE(stopped.stopped);
    EXPECT_EQ(stopped.stopped->epoch, in_the_pass ? 0 : 1);
    EXPECT_EQ(stopped.stopped->batch, 0u);
    if (in_the_pass) EXPECT_EQ(seen.pass_batches, 1u) << "the pass ends after its batch";
    EXPECT_EQ(load_checkpoint(out / kCheckpointFile).epoch, stopped.stopped->epoch);
    TrainOptions again = small_run(out);
    again.resume = true;
    const TrainResult resumed = train(data, again);
    EXPECT_FALSE(resumed.stopped);
    expect_same_history(resumed.history, whole.history);
    EXPECT_EQ(head_bytes(out), head_bytes(dir / "whole"));
    EXPECT_EQ(best_bytes(out), best_bytes(dir / "whole"));
  }
}

TEST_F(Resume, AfterAnEpochWithoutAugmentationReusesTheSavedFeatures) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  const TrainResult whole = train(data, small_run(dir / "whole"));
  Stop stop;
  stop.after_epochs = 2;
  EXPECT_THROW(train(data, small_run(dir / "stopped"), &stop), std::runtime_error);
  ASSERT_TRUE(fs::exists(dir / "stopped" / kCheckpointFeaturesFile));
  TrainOptions again = small_run(dir / "stopped");
  again.resume = true;
  struct Extractions final : TrainObserver {
    std::vector<std::string> what;
    void on_features_begin(const std::string& w, std::size_t) override { what.push_back(w); }
  } seen;
  const TrainResult resumed = train(data, again, &seen);
  EXPECT_EQ(seen.what, std::vector<std::string>{"validation features"}) << "the training features come from the file";
  expect_same_history(resumed.history, whole.history);
  EXPECT_EQ(head_bytes(dir / "stopped"), head_bytes(dir / "whole"));
  EXPECT_EQ(best_bytes(dir / "stopped"), best_bytes(dir / "whole"));

  // A finished run trains on when asked for more epochs.
  again.epochs = 6;
  EXPECT_EQ(train(data, again).history.size(), 6u);
}

// Unreadable files skipped: each epoch reports them, and a resumed run (mid-epoch, or reusing the
// saved features) reports what the uninterrupted one reports.
TEST_F(Resume, WithUnreadableFilesSkippedEqualsTheUninterruptedRun) {
  std::ofstream(dir / "data" / "blue" / "img7.jpg", std::ios::trunc) << "not a JPEG";
  std::ofstream(dir / "data" / "red" / "img9.jpg", std::ios::trunc);
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  auto skipping = [](TrainOptions o) {
    o.loader.on_bad_sample = BadSamplePolicy::Skip;
    return o;
  };
  for (const bool augmenting : {true, false}) {
    SCOPED_TRACE(augmenting ? "augmenting" : "features reused");
    const std::string name = augmenting ? "aug" : "plain";
    auto options = [&](const fs::path& out) {
      TrainOptions o = skipping(augmented(out));
      if (!augmenting) o.augmentation.reset();
      return o;
    };
    const TrainResult whole = train(data, options(dir / (name + "_whole")));
    ASSERT_EQ(whole.history.size(), 2u);
    for (const EpochReport& e : whole.history) {
      ASSERT_EQ(e.skipped.size(), 2u);
      EXPECT_EQ(e.train.samples, 16);
      const std::string both = e.skipped[0].path + " " + e.skipped[1].path;  // in the epoch's shuffled order
      EXPECT_NE(both.find("blue/img7.jpg"), std::string::npos) << both;
      EXPECT_NE(both.find("red/img9.jpg"), std::string::npos) << both;
      EXPECT_FALSE(e.skipped[0].reason.empty());
    }
    Stop stop;
    if (augmenting) stop.after_batches = 5;  // epoch 1's second batch: its checkpoint is after the first
    else stop.after_epochs = 1;
    const fs::path out = dir / (name + "_stopped");
    EXPECT_THROW(train(data, options(out), &stop), std::runtime_error);
    TrainOptions again = options(out);
    again.resume = true;
    const TrainResult resumed = train(data, again);
    expect_same_history(resumed.history, whole.history);
    for (std::size_t i = 0; i < resumed.history.size(); ++i)
      EXPECT_EQ(resumed.history[i].skipped.size(), whole.history[i].skipped.size()) << "epoch " << i;
    EXPECT_EQ(head_bytes(out), head_bytes(dir / (name + "_whole")));
  }
}

// Schedules and callbacks continue across a resume: the cosine rate (from the head's step count),
// the plateau's and early stopping's counters (from the checkpoint), and an early stop stays one.
TEST_F(Resume, WithScheduleAndCallbacksEqualsTheUninterruptedRun) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  struct Setup {
    std::string name;
    bool augmenting;
    std::function<void(TrainOptions&)> set;
    std::size_t stop_after_batches;
    int stop_after_epochs;
  };
  const std::vector<Setup> setups = {
      {"cosine", true, [](TrainOptions& o) { o.cosine_decay = true; }, 4, 0},
      {"plateau and early stopping", false,
       [](TrainOptions& o) {
         o.epochs = 8;
         o.adam.learning_rate = 0.5f;  // large steps: the validation loss stalls and the callbacks act
         o.monitor = trainer::Monitor::ValAccuracy;
         o.reduce_lr_on_plateau.factor = 0.5;
         o.reduce_lr_on_plateau.patience = 1;
         o.early_stopping.patience = 2;
       },
       0, 2},
  };
  for (const Setup& s : setups) {
    SCOPED_TRACE(s.name);
    auto options = [&](const fs::path& out) {
      TrainOptions o = augmented(out);
      if (!s.augmenting) o.augmentation.reset();
      s.set(o);
      return o;
    };
    const fs::path whole_dir = dir / (s.name + " whole"), out = dir / (s.name + " stopped");
    const TrainResult whole = train(data, options(whole_dir));
    Stop stop;
    stop.after_batches = s.stop_after_batches;
    stop.after_epochs = s.stop_after_epochs;
    EXPECT_THROW(train(data, options(out), &stop), std::runtime_error);
    TrainOptions again = options(out);
    again.resume = true;
    const TrainResult resumed = train(data, again);
    expect_same_history(resumed.history, whole.history);
    for (std::size_t i = 0; i < whole.history.size() && i < resumed.history.size(); ++i) {
      EXPECT_EQ(resumed.history[i].learning_rate, whole.history[i].learning_rate) << "epoch " << i;
      EXPECT_EQ(resumed.history[i].stopped_early, whole.history[i].stopped_early) << "epoch " << i;
    }
    EXPECT_TRUE(head_bytes(out) == head_bytes(whole_dir)) << "the last epoch's head";
    EXPECT_TRUE(best_bytes(out) == best_bytes(whole_dir)) << "the best epoch's head";
    if (s.augmenting) {  // 2 epochs of 3 batches: the rate of each epoch's last step, from 1e-2 to 0
      ASSERT_EQ(whole.history.size(), 2u);
      EXPECT_NEAR(whole.history[0].learning_rate, cosine_decay(1e-2f, 2, 6), 1e-9);
      EXPECT_NEAR(whole.history[1].learning_rate, cosine_decay(1e-2f, 5, 6), 1e-9);
    } else {
      ASSERT_TRUE(whole.history.back().stopped_early) << "8 epochs on 6 validation images: accuracy must stall";
      EXPECT_LT(whole.history.size(), 8u);
      bool reduced = false;
      for (std::size_t i = 1; i < whole.history.size(); ++i)
        reduced = reduced || whole.history[i].learning_rate < whole.history[i - 1].learning_rate;
      EXPECT_TRUE(reduced) << "the plateau halved the rate at least once";
      // A stopped run stays stopped when resumed again.
      EXPECT_EQ(train(data, again).history.size(), whole.history.size());
    }
    // A resume with another schedule is refused, naming it.
    TrainOptions other = again;
    if (s.augmenting) other.cosine_decay = false;
    else other.reduce_lr_on_plateau.factor = 0.25;
    try {
      train(data, other);
      FAIL() << "resumed with another schedule";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(s.augmenting ? "cosine_decay_steps" : "reduce_lr_on_plateau"),
                std::string::npos)
          << e.what();
    }
  }
}

// Stopped during fine-tuning (after a whole epoch of it, or inside one), the run resumes in the
// second phase from the checkpoint's backbone and optimizers: the same history, heads and
// fine-tuned backbone as the uninterrupted run, with augmentation and without. Stopped inside an
// epoch with checkpoints every batch, it resumes at the batch after the last one saved.
TEST_F(Resume, DuringFineTuningEqualsTheUninterruptedRun) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);  // 18 images: 3 batches of 8
  auto fine_tuning = [&](const fs::path& out, bool augmenting, int checkpoint_every = 0) {
    TrainOptions o = augmenting ? augmented(out) : small_run(out);
    o.checkpoint_every_batches = checkpoint_every;
    o.epochs = 1;
    o.adam.learning_rate = 1e-4f;
    o.fine_tune.from_layer = "block_16_expand";
    o.fine_tune.epochs = 3;
    o.fine_tune.optimizer.learning_rate = 1e-2f;
    return o;
  };
  auto tuned_weights = [](const fs::path& out) {
    const trainer::Graph g = trainer::load_model(out / kFineTunedBackboneFile).graph();
    std::vector<float> all;
    for (const char* layer : {"block_16_project", "Conv_1", "Conv_1_bn"}) {
      for (const char* key : {"kernel", "gamma"}) {
        const auto* w = g.nodes[static_cast<std::size_t>(g.find(layer))].weight(key);
        if (w) all.insert(all.end(), w->data->begin(), w->data->end());
      }
    }
    return all;
  };
  for (const bool augmenting : {true, false}) {
    const fs::path whole_out = dir / (augmenting ? "ft-whole-aug" : "ft-whole");
    const TrainResult whole = train(data, fine_tuning(whole_out, augmenting));
    ASSERT_EQ(whole.history.size(), 4u);
    // After fine-tuning epochs 1 and 2; inside the second (3 batches of phase 1, 3 of the first, 2
    // of it), without checkpoints inside it and with one after each batch.
    struct Case {
      int epochs;
      std::size_t batches;
      int checkpoint_every;
    };
    for (const Case c : {Case{2, 0, 0}, Case{3, 0, 0}, Case{0, 8, 0}, Case{0, 8, 1}}) {
      if (c.batches > 0 && !augmenting) continue;  // without augmentation no batch of images is seen
      SCOPED_TRACE(std::string(augmenting ? "augmenting" : "cached values") + ", stopped after " +
                   (c.batches > 0 ? std::to_string(c.batches) + " batches" : std::to_string(c.epochs) + " epochs") +
                   ", checkpoints every " + std::to_string(c.checkpoint_every) + " batches");
      const fs::path out = dir / ("ft-stopped-" + std::to_string(augmenting) + std::to_string(c.epochs + c.batches) +
                                  "-" + std::to_string(c.checkpoint_every));
      Stop stop;
      stop.after_epochs = c.epochs;
      stop.after_batches = c.batches;
      EXPECT_THROW(train(data, fine_tuning(out, augmenting, c.checkpoint_every), &stop), std::runtime_error);
      // The first phase's features are not needed in the second.
      if (!augmenting) ASSERT_TRUE(fs::remove(out / kCheckpointFeaturesFile));
      TrainOptions again = fine_tuning(out, augmenting, c.checkpoint_every);
      again.resume = true;
      struct Begun final : TrainObserver {
        std::vector<int> epochs;
        std::size_t next_batch = 0;
        void on_resume(const std::vector<EpochReport>&, int, std::size_t batch) override { next_batch = batch; }
        void on_epoch_begin(int epoch, std::size_t) override { epochs.push_back(epoch); }
      } begun;
      const TrainResult resumed = train(data, again, &begun);
      ASSERT_FALSE(begun.epochs.empty());
      // The epoch in progress or the next one, not the second phase from its start; with
      // checkpoints every batch, after the first batch of the epoch (the second's stopped it).
      EXPECT_EQ(begun.epochs.front(), c.batches > 0 ? 2 : c.epochs);
      EXPECT_EQ(begun.next_batch, c.checkpoint_every > 0 ? 1u : 0u);
      expect_same_history(resumed.history, whole.history);
      EXPECT_EQ(resumed.best_epoch, whole.best_epoch);
      EXPECT_EQ(head_bytes(out), head_bytes(whole_out));
      EXPECT_EQ(best_bytes(out), best_bytes(whole_out));
      EXPECT_EQ(tuned_weights(out), tuned_weights(whole_out));
    }
  }
  EXPECT_TRUE(fs::exists(dir / "ft-whole" / "checkpoint-backbone-4.h5")) << "the last checkpoint's backbone";
  EXPECT_FALSE(fs::exists(dir / "ft-whole" / "checkpoint-backbone-3.h5")) << "the one before is removed";
  // The resumed run with checkpoints every batch left only its last checkpoint's backbone.
  std::vector<std::string> backbones;
  for (const auto& f : fs::directory_iterator(dir / "ft-stopped-18-1"))
    if (f.path().filename().string().starts_with("checkpoint-backbone-"))
      backbones.push_back(f.path().filename().string());
  EXPECT_EQ(backbones, std::vector<std::string>{"checkpoint-backbone-4.h5"});
}

TEST_F(Resume, RefusesAnotherRunsCheckpointNamingTheDifference) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  TrainOptions o = small_run(dir / "run");
  o.epochs = 1;
  train(data, o);

  TrainOptions other = o;
  other.resume = true;
  other.adam.learning_rate = 5e-3f;
  try {
    train(data, other);
    FAIL() << "resumed with another learning rate";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
  }
  other = o;
  other.resume = true;
  other.augmentation = AugmentSpec{};
  other.augmentation->horizontal_flip = true;
  EXPECT_THROW(train(data, other), InvalidArgument);
  other = o;
  other.resume = true;
  try {
    train(training_data((dir / "data").string(), 0.5), other);  // another split: other files
    FAIL() << "resumed on other data";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("other data"), std::string::npos) << e.what();
  }

  other = o;
  other.resume = true;
  other.out = dir / "never_trained";
  EXPECT_THROW(train(data, other), IoError);
  // A checkpoint cut short (a disk that filled up) is an IoError naming it, never a crash.
  const std::string bytes = read_whole_file(dir / "run" / kCheckpointFile);
  for (const std::size_t keep : {std::size_t{0}, std::size_t{12}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(dir / "run" / kCheckpointFile, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
    TrainOptions cut = o;
    cut.resume = true;
    try {
      train(data, cut);
      FAIL() << "resumed from a checkpoint of " << keep << " of " << bytes.size() << " bytes";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(kCheckpointFile), std::string::npos) << e.what();
    }
  }
}

// One description (run_identity.hpp) says what a resume may change: the checkpoint records every
// defining setting and nothing that may change; a changed defining setting is refused naming it
// and its flag, while more epochs and other threads continue the run.
TEST_F(Resume, TheRunIdentityTableDecidesWhatMayChange) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  TrainOptions o = small_run(dir / "run");
  o.epochs = 1;
  train(data, o);

  const auto saved = nlohmann::json::parse(load_checkpoint(dir / "run" / kCheckpointFile).settings);
  std::size_t defining = 0;
  for (const RunSetting& s : run_identity()) {
    EXPECT_EQ(saved.contains(s.name), !s.may_change) << s.name;
    defining += s.may_change ? 0 : 1;
  }
  EXPECT_EQ(saved.size(), defining) << saved.dump();

  const std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>> changes = {
      {[](TrainOptions& t) { t.loader.batch_size = 4; }, "batch_size = 8, this one 4 (--batch-size)"},
      {[](TrainOptions& t) { t.loss.label_smoothing = 0.1; },
       "label_smoothing = 0.0, this one 0.1 (--label-smoothing)"},
      {[](TrainOptions& t) { t.prepare.preprocess = "torch"; },
       "preprocess = \"tf\", this one \"torch\" (--preprocess)"},
      {[](TrainOptions& t) { t.adam.beta_1 = 0.8f; }, "beta_1 = "},
  };
  for (const auto& [change, message] : changes) {
    TrainOptions other = o;
    other.resume = true;
    change(other);
    try {
      train(data, other);
      ADD_FAILURE() << "resumed with " << message;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(may_change_on_resume("epochs") && may_change_on_resume("threads"));
  EXPECT_FALSE(may_change_on_resume("batch-size") || may_change_on_resume("learning-rate"));

  TrainOptions longer = o;
  longer.resume = true;
  longer.epochs = 2;
  longer.loader.threads = 1;
  const TrainResult r = train(data, longer);
  ASSERT_EQ(r.history.size(), 2u) << "the resumed run went on from its first epoch";
}

// The run folder's files told apart from the user's: recognised by name and content, removed
// alone; a folder that mixes two runs, or a run stopped in its first epoch, is refused by
// load_trained_model with the reason (never a prediction under the wrong class names); a
// checkpoint naming a file outside its folder is refused; a failed write keeps the previous file.
TEST_F(TrainRun, RunFilesAreKnownAndAFolderMixingTwoRunsIsRefused) {
  const TrainingData data = training_data((dir / "data").string(), 0.25);
  TrainOptions o = small_run(dir / "run");
  o.epochs = 1;
  train(data, o);
  auto copy_of = [&](const std::string& name) {
    fs::copy(dir / "run", dir / name, fs::copy_options::recursive);
    return dir / name;
  };

  {
    const fs::path f = copy_of("mine");
    std::ofstream(f / "notes.txt") << "the user's\n";
    std::ofstream(f / "history.json") << "not stoker's history\n";
    std::ofstream(f / "head.stkh.tmp.12345") << "cut";
    fs::create_directories(f / "photos");
    const RunFolder run = inspect_run_folder(f);
    std::vector<std::string> own;
    for (const auto& p : run.run_files) own.push_back(p.filename().string());
    for (const char* name : {"head.stkh", "model.h5", "stoker_model.json", kCheckpointFile, kCheckpointFeaturesFile,
                             "head.stkh.tmp.12345"})
      EXPECT_NE(std::find(own.begin(), own.end(), name), own.end()) << name << " not recognised";
    ASSERT_EQ(run.foreign_run_names.size(), 1u);
    EXPECT_EQ(run.foreign_run_names[0].filename(), "history.json");
    EXPECT_EQ(run.other_files.size(), 2u);  // notes.txt, photos/
    remove_run_files(run);
    EXPECT_TRUE(fs::exists(f / "notes.txt") && fs::exists(f / "photos") && fs::exists(f / "history.json"));
    EXPECT_FALSE(fs::exists(f / "head.stkh") || fs::exists(f / "model.h5") || fs::exists(f / kCheckpointFile));
    EXPECT_TRUE(inspect_run_folder(dir / "nowhere").empty());
  }

  // stoker_model.json of a three-class run over this two-class head (and its model.h5).
  auto expect_refused = [](const fs::path& folder, const std::string& reason) {
    try {
      load_trained_model(folder);
      FAIL() << folder << " was loaded";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  {
    const fs::path f = copy_of("mixed");
    ModelInfo info = load_trained_model(f).info;
    info.class_names = {"blue", "green", "red"};
    write_model_info(f, info);
    expect_refused(f, "head.stkh has 1 output (two classes) but stoker_model.json names 3 classes");
  }
  // Killed in its first epoch: the settings and a checkpoint, no head yet.
  {
    const fs::path f = copy_of("killed");
    fs::remove(f / "head.stkh");
    fs::remove(f / "model.h5");
    expect_refused(f, "the run has not finished an epoch yet (no head.stkh)");
  }
  // A head newer than model.h5 (a continued run stopped before its end).
  {
    const fs::path f = copy_of("stale");
    trainer::BackboneRef ref;
    trainer::Head h = trainer::Head::load(f / "head.stkh", &ref);
    h.kernel()[0] += 1.0f;
    h.save(f / "head.stkh", ref);
    expect_refused(f, "model.h5: its head is not head.stkh's");
  }
  EXPECT_NO_THROW(load_trained_model(dir / "run"));

  // A checkpoint naming its fine-tuned backbone outside the folder.
  for (const char* outside : {"../elsewhere.h5", "/tmp/elsewhere.h5", "sub/../../x.h5"}) {
    Checkpoint c = load_checkpoint(dir / "run" / kCheckpointFile);
    c.fine_tune = FineTuneProgress{};
    c.fine_tune->backbone_file = outside;
    save_checkpoint(dir / "forged.stkc", c);
    try {
      load_checkpoint(dir / "forged.stkc");
      FAIL() << outside;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("not a file of the run's folder"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(is_plain_file_name("checkpoint-backbone-3-b2.h5"));
  EXPECT_TRUE(is_inside(dir / "run" / "model.h5", dir / "run"));
  EXPECT_TRUE(is_inside(dir / "run" / "sub" / ".." / "x", dir / "run"));
  EXPECT_FALSE(is_inside(dir / "run" / ".." / "data", dir / "run"));
  EXPECT_FALSE(is_inside(dir / "runs", dir / "run"));

  // The disk fills while the model folder is written: an error naming the file, the old one kept.
  const std::string before = read_whole_file(dir / "run" / "stoker_model.json");
  ModelInfo info = load_trained_model(dir / "run").info;
  info.class_names = {std::string(4096, 'x'), "red"};
  {
    test::FileSizeLimit full(1024);
    try {
      write_model_info(dir / "run", info);
      FAIL() << "the write did not fail";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("stoker_model.json"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_whole_file(dir / "run" / "stoker_model.json"), before);
}

}  // namespace
}  // namespace stoker::training
