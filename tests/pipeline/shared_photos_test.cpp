// Integration over the real cats-vs-dogs photos in ../shared/data (skipped when absent).
#include <gtest/gtest.h>

#include "stoker/pipeline/loader.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

TEST(SharedPhotos, EveryCatAndDogPhotoLoadsAt224) {
  const auto data = test::shared_data_dir();
  if (!data || !std::filesystem::is_directory(*data / "catsdogs")) GTEST_SKIP() << "../shared/data/catsdogs is absent";
  const Dataset ds = dataset_from_directory(*data / "catsdogs");
  ASSERT_EQ(ds.class_names, (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(ds.size(), 1120u);
  LoaderOptions o;
  o.image_height = o.image_width = 224;
  o.batch_size = 64;
  o.label_mode = LabelMode::Binary;
  o.threads = 2;
  Loader loader(ds, o);
  loader.begin_epoch(0);
  std::size_t samples = 0;
  double label_sum = 0;
  while (auto b = loader.next()) {
    samples += static_cast<std::size_t>(b->size());
    for (float l : b->labels()) label_sum += l;
    // Real photos are not blank: the mean pixel of each batch is far from 0 and 255.
    double mean = 0;
    const auto n = static_cast<std::size_t>(b->size()) * b->sample_shape().bytes();
    for (std::size_t i = 0; i < n; ++i) mean += static_cast<double>(b->pixels()[i]);
    mean /= static_cast<double>(n);
    EXPECT_GT(mean, 40);
    EXPECT_LT(mean, 215);
  }
  EXPECT_EQ(samples, 1120u);
  EXPECT_EQ(label_sum, 560.0);
  EXPECT_EQ(loader.stats().samples_skipped, 0u);
}

}  // namespace
}  // namespace stoker
