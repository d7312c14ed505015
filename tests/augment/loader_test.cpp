// The augmenter inside the real loader: same seed => bit-identical epochs whatever the number of
// decode threads; each sample is what Augmenter::apply gives for (seed, epoch, sample id).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/loader.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {

std::shared_ptr<const Augmenter> seed_augmenter() {
  AugmentSpec s = keras_example_augmentation(48, 48);
  s.dtype = DType::F32;
  s.normalization = ChannelNormalization::minus_one_to_one();
  return std::make_shared<const Augmenter>(s);
}

// root/cat and root/dog, `per_class` JPEGs each: image(i) for the i-th.
void write_two_classes(const std::filesystem::path& root, int per_class, const std::function<cv::Mat(int)>& image) {
  for (const char* cls : {"cat", "dog"}) {
    std::filesystem::create_directories(root / cls);
    for (int i = 0; i < per_class; ++i) test::write_jpeg(root / cls / ("im" + std::to_string(i) + ".jpg"), image(i));
  }
}

using SampleBytes = std::map<std::int64_t, std::vector<std::byte>>;

// Adds each sample of one epoch to `out` under its id + key_offset.
void collect_epoch(Loader& loader, std::uint64_t epoch, SampleBytes& out, std::int64_t key_offset = 0) {
  loader.begin_epoch(epoch);
  const std::size_t bytes = loader.sample_shape().bytes();
  while (auto batch = loader.next()) {
    for (int i = 0; i < batch->size(); ++i) {
      const std::byte* p = batch->pixels() + bytes * static_cast<std::size_t>(i);
      out[batch->sample_ids()[static_cast<std::size_t>(i)] + key_offset] = std::vector<std::byte>(p, p + bytes);
    }
  }
}

// What Augmenter::apply makes of sample ctx.sample_id's whole decoded file (decoded as the loader
// decodes for it: down to its minimum size).
std::vector<std::byte> applied_to_the_whole_file(const Augmenter& aug, const Dataset& ds, const SampleContext& ctx) {
  std::vector<std::uint8_t> bytes;
  read_file(ds.samples[static_cast<std::size_t>(ctx.sample_id)].path, bytes);
  ImageDecoder decoder;
  const ImageView v = decoder.decode(bytes, "x", aug.min_decode_height(), aug.min_decode_width());
  std::vector<std::byte> out(aug.output_shape().bytes());
  aug.apply(v, ctx, out.data());
  return out;
}

// sample id -> its bytes, over one epoch.
SampleBytes run_epoch(const std::filesystem::path& root, int threads, std::uint64_t epoch, std::uint64_t seed) {
  LoaderOptions o;
  o.batch_size = 5;
  o.threads = threads;
  o.seed = seed;
  o.transform = seed_augmenter();
  Loader loader(dataset_from_directory(root), o);
  SampleBytes out;
  collect_epoch(loader, epoch, out);
  return out;
}

TEST(AugmentInLoader, SameSeedSameEpochWhateverTheThreadCount) {
  test::TempDir dir;
  write_two_classes(dir.path(), 6, [](int i) { return test::make_pattern_rgb(60 + 7 * i, 80 - 5 * i, i % 3); });
  const auto one = run_epoch(dir.path(), 1, 0, 42);
  const auto two = run_epoch(dir.path(), 2, 0, 42);
  ASSERT_EQ(one.size(), 12u);
  EXPECT_EQ(one, two);
  EXPECT_NE(one, run_epoch(dir.path(), 2, 1, 42));  // another epoch draws other parameters
  EXPECT_NE(one, run_epoch(dir.path(), 2, 0, 43));  // and another seed

  // Each sample is Augmenter::apply of its decoded image with (seed, epoch, sample id).
  const Dataset ds = dataset_from_directory(dir.path());
  const auto aug = seed_augmenter();
  for (std::int64_t id : {std::int64_t{0}, std::int64_t{7}, std::int64_t{11}}) {
    EXPECT_EQ(one.at(id), applied_to_the_whole_file(*aug, ds, SampleContext{42, 0, id})) << "sample " << id;
  }
}

// Random-resized crops read only their box: the loader decodes only that part of each JPEG, and
// the batches are those of whole-image decoding (a decoded cache keeps whole images, so its
// loader decodes them whole, and Augmenter::apply on the whole decode gives the same again).
TEST(AugmentInLoader, DecodingOnlyTheCropBoxGivesTheWholeDecodesBatches) {
  test::TempDir dir;
  write_two_classes(dir.path(), 5, [](int i) { return test::make_pattern_rgb(90 + 13 * i, 140 - 11 * i, i % 3); });
  AugmentSpec spec;
  spec.height = spec.width = 32;
  spec.random_resized_crop = RandomResizedCrop{};
  spec.horizontal_flip = true;
  spec.brightness_range = Range{0.8, 1.2};
  const auto aug = std::make_shared<const Augmenter>(spec);
  auto epoch = [&](CacheKind cache, LoaderStats& stats) {
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = 2;
    o.seed = 5;
    o.transform = aug;
    o.cache.kind = cache;
    Loader loader(dataset_from_directory(dir.path()), o);
    SampleBytes out;
    for (std::uint64_t e = 0; e < 2; ++e) collect_epoch(loader, e, out, 100 * static_cast<std::int64_t>(e));
    stats = loader.stats();
    return out;
  };
  LoaderStats parts_stats, cached_stats;
  const auto parts = epoch(CacheKind::None, parts_stats);
  const auto cached = epoch(CacheKind::Decoded, cached_stats);
  ASSERT_EQ(parts.size(), 20u);
  EXPECT_EQ(parts, cached);
  EXPECT_GT(parts_stats.samples_decoded_in_part, 10u);  // a box of the whole image is decoded whole
  EXPECT_EQ(cached_stats.samples_decoded_in_part, 0u);

  const Dataset ds = dataset_from_directory(dir.path());
  for (std::int64_t id : {std::int64_t{0}, std::int64_t{3}, std::int64_t{9}}) {
    EXPECT_EQ(parts.at(id + 100), applied_to_the_whole_file(*aug, ds, SampleContext{5, 1, id})) << "sample " << id;
  }
}

// An augmenter made for grayscale input behind the RGB decoder is a configuration error, not 24 bad
// files: under the skip policy too, the first next() throws the augmenter's InvalidArgument (it
// used to skip every sample and deliver an empty epoch).
TEST(AugmentInLoader, AnAugmenterForAnotherChannelCountStopsTheEpochUnderSkip) {
  test::TempDir dir;
  write_two_classes(dir.path(), 12, [](int i) { return test::make_pattern_rgb(50, 60, i); });
  AugmentSpec s = keras_example_augmentation(32, 32);
  s.channels = 1;
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.on_bad_sample = BadSamplePolicy::Skip;
  o.transform = std::make_shared<const Augmenter>(s);
  Loader loader(dataset_from_directory(dir.path()), o);
  loader.begin_epoch(0);
  try {
    int batches = 0;
    while (auto b = loader.next()) ++batches;
    FAIL() << "the epoch ended after " << batches << " batches, " << loader.stats().samples_skipped << " skipped";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Augmenter: source has 3 channels, expected 1"), std::string::npos) << what;
    EXPECT_NE(what.find("(loading " + dir.path().string()), std::string::npos) << what;
  }
  EXPECT_EQ(loader.stats().samples_skipped, 0u);
}

// Batches of an epoch from `loader` as (sample ids, bytes), from wherever it stands.
struct Delivered {
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::vector<std::byte>> pixels;
};
Delivered rest_of_epoch(Loader& loader) {
  Delivered d;
  const std::size_t bytes = loader.sample_shape().bytes();
  while (auto b = loader.next()) {
    d.ids.emplace_back(b->sample_ids().begin(), b->sample_ids().end());
    d.pixels.emplace_back(b->pixels(), b->pixels() + bytes * static_cast<std::size_t>(b->size()));
  }
  return d;
}

TEST(AugmentInLoader, ResumingAfterEveryBatchGivesWhatAnUninterruptedRunGives) {
  test::TempDir dir;
  write_two_classes(dir.path(), 7, [](int i) { return test::make_pattern_rgb(50 + 3 * i, 70 - 2 * i, i % 3); });
  const Dataset ds = dataset_from_directory(dir.path());
  auto options = [](int threads) {
    LoaderOptions o;
    o.batch_size = 4;  // 14 samples: batches of 4, 4, 4, 2
    o.threads = threads;
    o.seed = 7;
    o.prefetch = 2;
    o.transform = seed_augmenter();
    o.sharding = Sharding{};
    return o;
  };
  Loader whole(ds, options(2));
  whole.begin_epoch(3);
  const Delivered uninterrupted = rest_of_epoch(whole);
  ASSERT_EQ(uninterrupted.ids.size(), 4u);
  for (std::int64_t k = 0; k <= 4; ++k) {
    // A run stopped after k batches...
    Loader first(ds, options(2));
    first.begin_epoch(3);
    for (std::int64_t i = 0; i < k; ++i) ASSERT_TRUE(first.next().has_value());
    const LoaderState saved = first.state();
    EXPECT_EQ(saved.epoch, 3u);
    EXPECT_EQ(saved.next_batch, k);
    // ... continued by another process (another thread count) from the saved text.
    Loader second(ds, options(1));
    second.resume(LoaderState::parse(saved.to_string()));
    const Delivered rest = rest_of_epoch(second);
    ASSERT_EQ(rest.ids.size(), static_cast<std::size_t>(4 - k)) << "after " << k << " batches";
    for (std::size_t i = 0; i < rest.ids.size(); ++i) {
      EXPECT_EQ(rest.ids[i], uninterrupted.ids[static_cast<std::size_t>(k) + i]) << "batch " << k + 1 << "+" << i;
      EXPECT_EQ(rest.pixels[i], uninterrupted.pixels[static_cast<std::size_t>(k) + i]);
    }
  }
}

TEST(AugmentInLoader, AStateFromOtherDataOrSettingsIsRefusedWithTheReason) {
  test::TempDir dir;
  write_two_classes(dir.path(), 3, [](int i) { return test::make_pattern_rgb(30, 40, i); });
  const Dataset ds = dataset_from_directory(dir.path());
  LoaderOptions o;
  o.batch_size = 2;
  o.sharding = Sharding{};
  Loader a(ds, o);
  a.begin_epoch(1);
  ASSERT_TRUE(a.next().has_value());
  const LoaderState st = a.state();
  auto refused = [&](LoaderOptions other, const Dataset& data, const char* why) {
    Loader b(data, other);
    try {
      b.resume(st);
      ADD_FAILURE() << "accepted a state from " << why;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("cannot resume"), std::string::npos) << e.what();
    }
  };
  LoaderOptions bigger = o;
  bigger.batch_size = 3;
  refused(bigger, ds, "another batch size");
  LoaderOptions seeded = o;
  seeded.seed = 99;
  refused(seeded, ds, "another seed");
  Dataset fewer = ds;
  fewer.samples.pop_back();
  refused(o, fewer, "other data");
  LoaderOptions rank1 = o;
  rank1.sharding = Sharding{1, 2};
  refused(rank1, ds, "another rank");
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=1"), InvalidArgument);
  EXPECT_THROW(LoaderState::parse("not a state"), InvalidArgument);
  EXPECT_EQ(LoaderState::parse(st.to_string()), st);
  // Found by fuzz_loader_state: a field given twice stood in for a missing one (world_size and
  // digest left at their defaults), and a rank beyond int came back as another number.
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=0510 epoch=2 next_batch=3234567 epoch=4 next_batch=3 "
                                  "rank=1034789567890"),
               InvalidArgument);
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=1 epoch=2 next_batch=3 rank=0 world_size=1 digest=5 "
                                  "digest=5"),
               InvalidArgument);
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=1 epoch=2 next_batch=3 rank=4294967296 world_size=8 "
                                  "digest=5"),
               InvalidArgument);
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=1 epoch=2 next_batch=3 rank=2 world_size=2 digest=5"),
               InvalidArgument);
  EXPECT_THROW(LoaderState::parse("stoker-loader-state 1 seed=1 epoch=2 next_batch=18446744073709551615 rank=0 "
                                  "world_size=1 digest=5"),
               InvalidArgument);
}

}  // namespace
}  // namespace stoker
