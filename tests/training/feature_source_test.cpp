// gpu_path_error(): the check `stoker train` runs before it trusts the GPU feed. Here the "GPU
// features" are the CPU path's own, intact or damaged the way a broken feed would damage them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <utility>

#include "stoker/augment/augmenter.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/trainer/model.hpp"
#include "stoker/training/device.hpp"
#include "stoker/training/feature_source.hpp"
#include "test_support.hpp"

namespace stoker::training {
namespace {

class GpuPathCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int c = 0; c < 2; ++c) {
      const auto folder = dir.path() / (c ? "dog" : "cat");
      std::filesystem::create_directories(folder);
      for (int i = 0; i < 5; ++i) {
        test::write_jpeg(folder / ("img" + std::to_string(i) + ".jpg"),
                         test::make_pattern_rgb(50 + 7 * i, 70, 3 * i + c));
      }
    }
    dataset = dataset_from_directory(dir.path());
    trainer::LoadOptions lo;
    lo.input_hw = {64, 64};
    model = trainer::load_model((test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5").string(), lo)
                .cut_at("sequential_9");
    AugmentSpec spec;
    spec.height = spec.width = 64;
    spec.dtype = DType::F32;
    spec.normalization = ChannelNormalization::minus_one_to_one();
    augmenter = std::make_shared<const Augmenter>(spec.validation());
    options.batch_size = 4;
    options.threads = 2;
    options.label_mode = LabelMode::Sparse;
  }

  // Every sample's features through the CPU path, in plan order: what an intact GPU path yields.
  Features cpu_features() {
    LoaderOptions o = options;
    o.shuffle = false;
    o.transform = augmenter;
    Loader loader(dataset, o);
    return collect_features(*cpu_feature_source(loader, model), 0);
  }

  double error(const Features& f, int samples = 4) {
    return gpu_path_error(dataset, options, augmenter, model.graph(), f, samples);
  }

  test::TempDir dir;
  Dataset dataset;
  trainer::Model model;
  std::shared_ptr<const Augmenter> augmenter;
  LoaderOptions options;
};

TEST_F(GpuPathCheck, PassesIntactFeaturesAndCatchesDamagedOnes) {
  options.shuffle = true;  // the training loader's setting: the check must still compare plan order
  const Features good = cpu_features();
  ASSERT_EQ(good.n, 10);
  EXPECT_LE(error(good), 1e-6);
  EXPECT_LE(error(good, 100), 1e-6) << "more samples than the features hold";

  Features swapped = good;  // two samples' slots mixed up
  std::swap_ranges(swapped.x.begin(), swapped.x.begin() + swapped.dim, swapped.x.begin() + swapped.dim);
  EXPECT_GT(error(swapped), kGpuAgreementLimit);

  Features scaled = good;  // e.g. a normalisation applied twice: inputs off, features off
  for (int i = 0; i < scaled.dim; ++i) scaled.x[static_cast<std::size_t>(3 * scaled.dim + i)] *= 0.5f;
  EXPECT_GT(error(scaled), kGpuAgreementLimit);

  Features unwritten = good;
  unwritten.x[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(error(unwritten)));

  Features narrow = good;  // another feature width than the graph's
  narrow.dim -= 1;
  EXPECT_TRUE(std::isinf(error(narrow)));

  Features late = good;  // damage past the checked samples is not seen: only the first batch is compared
  late.x.back() = 1e6f;
  EXPECT_LE(error(late), 1e-6);
}

// An unreadable file among the first validation samples: both paths skip it, so the check
// compares the samples that loaded and passes; were it taken for a sample, every later row would
// be compared with its neighbour's features.
TEST_F(GpuPathCheck, ComparesTheSamplesThatLoadedWhenOneIsUnreadable) {
  std::ofstream(dir.path() / "cat" / "img1.jpg", std::ios::trunc) << "not a JPEG";
  options.on_bad_sample = BadSamplePolicy::Skip;
  const Features loaded = cpu_features();
  ASSERT_EQ(loaded.n, 9);
  ASSERT_EQ(loaded.skipped.size(), 1u);
  EXPECT_EQ(loaded.skipped[0].sample_id, 1);
  EXPECT_EQ(loaded.ids[1], 2) << "the row after the gap is sample 2";
  EXPECT_LE(error(loaded), 1e-6);
  EXPECT_LE(error(loaded, 32), 1e-6);

  Features shifted = loaded;  // rows taken as samples 0..n-1: the bad file's gap ignored
  for (std::size_t i = 0; i < shifted.ids.size(); ++i) shifted.ids[i] = static_cast<std::int64_t>(i);
  EXPECT_TRUE(std::isinf(error(shifted))) << "sample 1 cannot be read on the CPU side either";
}

}  // namespace
}  // namespace stoker::training
