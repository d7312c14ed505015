#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <typeinfo>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using test::TempDir;

// A class-per-folder dataset of small JPEG/PNG files, each with distinct content.
struct Fixture {
  explicit Fixture(int per_class = 10, int classes = 2) {
    for (int c = 0; c < classes; ++c) {
      const fs::path folder = dir / ("class" + std::to_string(c));
      fs::create_directories(folder);
      for (int i = 0; i < per_class; ++i) {
        const cv::Mat img = test::make_pattern_rgb(40 + i, 50 + 2 * i, c * 100 + i);
        if (i % 3 == 0) {
          test::write_png(folder / ("img" + std::to_string(i) + ".png"), img);
        } else {
          test::write_jpeg(folder / ("img" + std::to_string(i) + ".jpg"), img);
        }
      }
    }
  }
  Dataset dataset() const { return dataset_from_directory(dir.path()); }
  TempDir dir;
};

LoaderOptions small_options(int threads = 2) {
  LoaderOptions o;
  o.image_height = 16;
  o.image_width = 24;
  o.batch_size = 4;
  o.threads = threads;
  o.prefetch = 2;
  o.seed = 123;
  return o;
}

// What one sample should look like: decoded and transformed on its own.
std::vector<std::byte> expected_pixels(const Sample& sample, const LoaderOptions& o) {
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  read_file(sample.path, bytes);
  const ResizeTransform resize(o.image_height, o.image_width, o.interpolation, o.keep_aspect_ratio);
  const ImageView v = decoder.decode(bytes, sample.path, o.image_height, o.image_width);
  std::vector<std::byte> out(resize.output_shape().bytes());
  resize.apply(v, {}, out.data());
  return out;
}

struct Delivered {
  std::vector<std::int64_t> ids;
  std::vector<std::vector<std::byte>> pixels;
  std::vector<float> labels;
  std::vector<int> batch_sizes;
};

Delivered run_epoch(Loader& loader, std::uint64_t epoch) {
  Delivered d;
  loader.begin_epoch(epoch);
  while (auto batch = loader.next()) {
    const auto bytes = batch->sample_shape().bytes();
    d.batch_sizes.push_back(batch->size());
    for (int i = 0; i < batch->size(); ++i) {
      d.ids.push_back(batch->sample_ids()[static_cast<std::size_t>(i)]);
      const std::byte* p = batch->pixels() + bytes * static_cast<std::size_t>(i);
      d.pixels.emplace_back(p, p + bytes);
    }
    d.labels.insert(d.labels.end(), batch->labels().begin(), batch->labels().end());
  }
  return d;
}

TEST(Loader, DeliversEverySampleOnceWithTheRightPixelsAndLabels) {
  Fixture f(5, 3);
  const Dataset ds = f.dataset();
  auto o = small_options();
  o.label_mode = LabelMode::Categorical;
  Loader loader(ds, o);
  EXPECT_EQ(loader.batches_per_epoch(), 4u);  // 15 samples, batch 4, last one partial
  EXPECT_EQ(loader.label_width(), 3);
  const Delivered d = run_epoch(loader, 0);
  EXPECT_EQ(d.batch_sizes, (std::vector<int>{4, 4, 4, 3}));
  ASSERT_EQ(d.ids.size(), 15u);
  EXPECT_EQ(std::set<std::int64_t>(d.ids.begin(), d.ids.end()).size(), 15u);
  for (std::size_t i = 0; i < d.ids.size(); ++i) {
    const Sample& s = ds.samples[static_cast<std::size_t>(d.ids[i])];
    EXPECT_EQ(d.pixels[i], expected_pixels(s, o)) << s.path;
    for (int c = 0; c < 3; ++c) EXPECT_EQ(d.labels[i * 3 + static_cast<std::size_t>(c)], c == s.label ? 1.0f : 0.0f);
  }
  const LoaderStats st = loader.stats();
  EXPECT_EQ(st.files_read, 15u);
  EXPECT_EQ(st.samples_decoded, 15u);
  EXPECT_EQ(st.batches_delivered, 4u);
  EXPECT_GT(st.bytes_read, 15u * 100);
  EXPECT_GT(st.decode_seconds, 0.0);
}

TEST(Loader, RanksShareAnEpochWithoutOverlapAndMarkThePadding) {
  Fixture f(5, 2);  // 10 samples over 3 ranks: 4 each, 2 of the 12 are padding
  const Dataset ds = f.dataset();
  std::map<std::int64_t, int> real;
  int padded = 0;
  for (int r = 0; r < 3; ++r) {
    auto o = small_options();
    o.sharding = Sharding{r, 3};
    Loader loader(ds, o);
    EXPECT_EQ(loader.samples_per_epoch(), 4u);
    EXPECT_EQ(loader.batches_per_epoch(), 1u);
    loader.begin_epoch(2);
    while (auto b = loader.next()) {
      ASSERT_EQ(b->padding().size(), static_cast<std::size_t>(b->size()));
      for (int i = 0; i < b->size(); ++i) {
        const auto k = static_cast<std::size_t>(i);
        if (b->padding()[k]) {
          ++padded;
        } else {
          ++real[b->sample_ids()[k]];
        }
      }
    }
  }
  EXPECT_EQ(padded, 2);
  EXPECT_EQ(real.size(), 10u);
  for (const auto& [id, ranks] : real) EXPECT_EQ(ranks, 1) << "sample " << id;

  auto o = small_options();
  o.sharding = Sharding{3, 3};
  EXPECT_THROW(Loader(ds, o), InvalidArgument);
}

TEST(Loader, SameSeedGivesBitIdenticalBatchesWhateverTheThreadCount) {
  Fixture f(8, 2);
  const Dataset ds = f.dataset();
  std::vector<Delivered> runs;
  for (int threads : {1, 2, 4}) {
    Loader loader(ds, small_options(threads));
    runs.push_back(run_epoch(loader, 3));
  }
  for (std::size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].ids, runs[0].ids);
    EXPECT_EQ(runs[r].pixels, runs[0].pixels);
    EXPECT_EQ(runs[r].labels, runs[0].labels);
  }
  // Another epoch is another order; no shuffle keeps dataset order.
  Loader loader(ds, small_options());
  EXPECT_NE(run_epoch(loader, 4).ids, runs[0].ids);
  auto o = small_options();
  o.shuffle = false;
  Loader ordered(ds, o);
  const auto d = run_epoch(ordered, 9);
  for (std::size_t i = 0; i < d.ids.size(); ++i) EXPECT_EQ(d.ids[i], static_cast<std::int64_t>(i));
}

TEST(Loader, LabelModes) {
  Fixture f(3, 2);
  const Dataset ds = f.dataset();
  for (auto mode : {LabelMode::Binary, LabelMode::Sparse, LabelMode::None}) {
    auto o = small_options();
    o.label_mode = mode;
    o.shuffle = false;
    Loader loader(ds, o);
    loader.begin_epoch(0);
    auto b = loader.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->label_width(), mode == LabelMode::None ? 0 : 1);
    EXPECT_EQ(b->labels().size(), mode == LabelMode::None ? 0u : 4u);
    if (mode != LabelMode::None) {
      EXPECT_EQ(b->labels()[0], 0.0f);
      EXPECT_EQ(b->labels()[3], 1.0f);  // sample 3 is the first of class 1
    }
    EXPECT_EQ(b->classes()[3], 1);
  }
  Fixture three(2, 3);
  auto o = small_options();
  o.label_mode = LabelMode::Binary;
  try {
    Loader bad(three.dataset(), o);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exactly 2 classes, the dataset has 3"), std::string::npos);
  }
}

TEST(Loader, DropLastAndPartialBatches) {
  Fixture f(5, 2);
  auto o = small_options();
  o.drop_last = true;
  Loader loader(f.dataset(), o);
  EXPECT_EQ(loader.batches_per_epoch(), 2u);
  EXPECT_EQ(run_epoch(loader, 0).batch_sizes, (std::vector<int>{4, 4}));
  o.batch_size = 11;
  EXPECT_THROW(Loader(f.dataset(), o), InvalidArgument);
}

TEST(Loader, InvalidOptionsNameTheParameter) {
  Fixture f(2, 2);
  auto expect_invalid = [&](auto mutate, const std::string& name) {
    auto o = small_options();
    mutate(o);
    try {
      Loader loader(f.dataset(), o);
      FAIL() << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expect_invalid([](LoaderOptions& o) { o.batch_size = 0; }, "batch_size");
  expect_invalid([](LoaderOptions& o) { o.prefetch = 0; }, "prefetch");
  expect_invalid([](LoaderOptions& o) { o.threads = -1; }, "threads");
  expect_invalid([](LoaderOptions& o) { o.image_height = 0; }, "image size");
  EXPECT_THROW(Loader(Dataset{}, small_options()), DatasetError);
  EXPECT_THROW(parse_label_mode("onehot"), InvalidArgument);
  EXPECT_THROW(parse_interpolation("cubic"), InvalidArgument);
}

// A dataset with every kind of bad file mixed into good ones.
struct BadFixture : Fixture {
  BadFixture() : Fixture(6, 2) {
    const fs::path c0 = dir / "class0";
    test::write_bytes(c0 / "empty.jpg", {});
    const std::string text = "not an image";
    test::write_bytes(c0 / "text.png", {text.begin(), text.end()});
    auto jpeg = test::read_bytes(c0 / "img1.jpg");
    jpeg.resize(jpeg.size() / 2);
    test::write_bytes(dir / "class1" / "truncated.jpg", jpeg);
  }
};

TEST(Loader, FailPolicyStopsTheEpochWithTheFileAndTheReason) {
  BadFixture f;
  auto o = small_options();
  o.shuffle = false;
  Loader loader(f.dataset(), o);
  loader.begin_epoch(0);
  int good_batches = 0;
  try {
    while (auto b = loader.next()) ++good_batches;
    FAIL() << "no error";
  } catch (const DecodeError& e) {
    // In dataset order the first bad file is class0/empty.jpg (index 0), in the first batch.
    EXPECT_EQ(fs::path(e.path()).filename(), "empty.jpg");
    EXPECT_EQ(e.reason(), "empty file");
  }
  EXPECT_EQ(good_batches, 0);
  EXPECT_THROW(loader.next(), DecodeError);  // sticky until the next epoch
  loader.begin_epoch(1);                     // a new epoch starts cleanly
  EXPECT_THROW(while (loader.next()){}, DecodeError);
}

TEST(Loader, SkipPolicyCountsBadFilesAndNeverLeavesAGarbageSlot) {
  BadFixture f;
  const Dataset ds = f.dataset();
  auto o = small_options();
  o.on_bad_sample = BadSamplePolicy::Skip;
  for (int threads : {1, 2}) {
    o.threads = threads;
    Loader loader(ds, o);
    const Delivered d = run_epoch(loader, 5);
    EXPECT_EQ(d.ids.size(), ds.size() - 3);
    for (std::size_t i = 0; i < d.ids.size(); ++i) {
      const Sample& s = ds.samples[static_cast<std::size_t>(d.ids[i])];
      EXPECT_EQ(d.pixels[i], expected_pixels(s, o)) << s.path;  // compacted, never stale
    }
    EXPECT_EQ(loader.stats().samples_skipped, 3u);
    const auto skipped = loader.skipped();
    ASSERT_EQ(skipped.size(), 3u);
    std::set<std::string> names;
    for (const auto& k : skipped) {
      names.insert(fs::path(k.path).filename().string());
      EXPECT_FALSE(k.reason.empty());
    }
    EXPECT_EQ(names, (std::set<std::string>{"empty.jpg", "text.png", "truncated.jpg"}));
  }
}

// The default resize, except that in epoch 0 sample `fail_id` (every sample when it is negative)
// throws what `raise` throws: a transform that is misconfigured or runs out of memory.
class ThrowingTransform final : public SampleTransform {
 public:
  ThrowingTransform(const LoaderOptions& o, std::function<void()> raise, std::int64_t fail_id)
      : resize_(o.image_height, o.image_width, o.interpolation), raise_(std::move(raise)), fail_id_(fail_id) {}
  SampleShape output_shape() const override { return resize_.output_shape(); }
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override {
    if (ctx.epoch == 0 && (fail_id_ < 0 || ctx.sample_id == fail_id_)) raise_();
    resize_.apply(src, ctx, dst);
  }

 private:
  ResizeTransform resize_;
  std::function<void()> raise_;
  std::int64_t fail_id_;
};

// An epoch run to its end or to its first error.
struct EpochResult {
  std::exception_ptr error;  // null: the epoch ended normally
  std::size_t samples = 0;
};

EpochResult try_epoch(Loader& loader, std::uint64_t epoch) {
  EpochResult r;
  loader.begin_epoch(epoch);
  try {
    while (auto b = loader.next()) r.samples += static_cast<std::size_t>(b->size());
  } catch (...) {
    r.error = std::current_exception();
  }
  return r;
}

// Under both policies a transform throwing E stops epoch 0 with exactly E, whose message holds
// `in_message`; nothing is counted as skipped; next() keeps throwing it; epoch 1 (where the
// transform no longer throws) delivers every sample; the loader can be destroyed right after the
// throw, with the rest of the epoch in flight.
template <typename E>
void expect_epoch_stops_with(const Dataset& ds, const std::function<void()>& raise, std::int64_t fail_id,
                             const std::string& in_message) {
  for (const auto policy : {BadSamplePolicy::Skip, BadSamplePolicy::Fail}) {
    SCOPED_TRACE(policy == BadSamplePolicy::Skip ? "skip" : "fail");
    auto o = small_options();
    o.shuffle = false;
    o.on_bad_sample = policy;
    o.transform = std::make_shared<ThrowingTransform>(o, raise, fail_id);
    Loader loader(ds, o);
    const EpochResult r = try_epoch(loader, 0);
    ASSERT_TRUE(r.error) << "the epoch ended without an error after " << r.samples << " samples";
    try {
      std::rethrow_exception(r.error);
    } catch (const E& e) {
      EXPECT_EQ(typeid(e), typeid(E)) << typeid(e).name();
      EXPECT_NE(std::string(e.what()).find(in_message), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "stopped with " << typeid(e).name() << ": " << e.what();
    }
    EXPECT_EQ(loader.stats().samples_skipped, 0u);
    EXPECT_TRUE(loader.skipped().empty());
    EXPECT_THROW(loader.next(), E);  // sticky until the next epoch
    const EpochResult again = try_epoch(loader, 1);
    EXPECT_FALSE(again.error);
    EXPECT_EQ(again.samples, ds.size());
  }
  auto o = small_options();
  o.on_bad_sample = BadSamplePolicy::Skip;
  o.transform = std::make_shared<ThrowingTransform>(o, raise, fail_id);
  Loader loader(ds, o);
  EXPECT_TRUE(try_epoch(loader, 0).error);
}  // ~Loader joins the cancelled tasks

TEST(Loader, OnlyASamplesOwnDecodeErrorIsABadSampleOtherErrorsKeepTheirType) {
  Fixture f(10, 2);  // 20 samples, 5 batches of 4: work is in flight when sample 5 throws
  const Dataset ds = f.dataset();
  const std::string sample5 = ds.samples[5].path;
  // A misconfigured transform fails on every sample: under skip that used to be an empty epoch.
  expect_epoch_stops_with<InvalidArgument>(
      ds, [] { throw InvalidArgument("the transform needs 4 channels, the decoder gives 3"); }, -1,
      "needs 4 channels, the decoder gives 3 (loading " + ds.samples[0].path + ")");
  expect_epoch_stops_with<BadAlloc>(
      ds, [] { throw BadAlloc("cannot allocate 1073741824 bytes of transform scratch"); }, 5,
      "1073741824 bytes of transform scratch (loading " + sample5 + ")");
  expect_epoch_stops_with<std::bad_alloc>(
      ds, [] { throw std::bad_alloc(); }, 5, "bad_alloc");
  expect_epoch_stops_with<IoError>(
      ds, [] { throw IoError("/models/lut.bin: cannot read the colour table"); }, 5,
      "/models/lut.bin: cannot read the colour table (loading " + sample5 + ")");
  // A DecodeError about a file other than the sample's (one the transform reads) is not a bad sample.
  const std::string lut = (f.dir / "lut.png").string();
  expect_epoch_stops_with<DecodeError>(
      ds, [&] { throw DecodeError(lut, "not an image"); }, 5, lut + ": not an image");
}

// A JPEG whose header is intact but whose entropy-coded data is cut off: skip leaves it out and
// counts it; fail stops the epoch with a DecodeError naming it.
TEST(Loader, CorruptJpegIsSkippedAndCountedOrFailsNamingTheFile) {
  Fixture f(4, 2);
  auto jpeg = test::read_bytes(f.dir / "class0" / "img1.jpg");
  jpeg.resize(jpeg.size() / 2);
  const fs::path corrupt = f.dir / "class1" / "corrupt.jpg";
  test::write_bytes(corrupt, jpeg);
  const Dataset ds = f.dataset();
  ASSERT_EQ(ds.size(), 9u);

  auto o = small_options();
  o.on_bad_sample = BadSamplePolicy::Skip;
  Loader skipping(ds, o);
  const Delivered d = run_epoch(skipping, 0);
  EXPECT_EQ(d.ids.size(), 8u);
  EXPECT_EQ(skipping.stats().samples_skipped, 1u);
  const auto skipped = skipping.skipped();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, corrupt.string());
  EXPECT_NE(skipped[0].reason.find("corrupt or truncated JPEG data"), std::string::npos) << skipped[0].reason;

  o.on_bad_sample = BadSamplePolicy::Fail;
  Loader failing(ds, o);
  const EpochResult r = try_epoch(failing, 0);
  ASSERT_TRUE(r.error);
  try {
    std::rethrow_exception(r.error);
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.path(), corrupt.string());
    EXPECT_NE(e.reason().find("corrupt or truncated JPEG data"), std::string::npos) << e.reason();
    EXPECT_EQ(std::string(e.what()).rfind(corrupt.string() + ": ", 0), 0u) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stopped with " << typeid(e).name() << ": " << e.what();
  }
}

// The cache file is written when an epoch ends; its folder removed after the loader checked it is
// an IoError naming the file from that next(), under skip too, after every batch was delivered.
TEST(Loader, CacheFileThatCannotBeWrittenIsAnIoErrorAtTheEndOfTheEpoch) {
  Fixture f(5, 2);
  TempDir cache_dir;
  const fs::path folder = cache_dir / "cache";
  fs::create_directories(folder);
  auto o = small_options();
  o.on_bad_sample = BadSamplePolicy::Skip;
  o.cache.kind = CacheKind::Decoded;
  o.cache.file = folder / "train.stkc";
  Loader loader(f.dataset(), o);
  fs::remove_all(folder);
  loader.begin_epoch(0);
  std::size_t samples = 0;
  try {
    while (auto b = loader.next()) samples += static_cast<std::size_t>(b->size());
    ADD_FAILURE() << "the cache file's folder is gone, yet the epoch ended without an error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(o.cache.file.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(samples, 10u);
  EXPECT_EQ(loader.stats().samples_skipped, 0u);
  // The entries are still in RAM: the next epoch is served from them, and with the folder back
  // it writes the file the failed save could not (nothing new was cached in between).
  fs::create_directories(folder);
  EXPECT_EQ(run_epoch(loader, 1).ids.size(), 10u);
  EXPECT_EQ(loader.stats().cache_hits, 10u);
  EXPECT_TRUE(fs::exists(o.cache.file)) << "a failed save is retried after the next epoch";
}

// A deterministic transform of any channel count: nearest-neighbour resize of the decoded RGB
// image; channel c is source channel c, or (for a 4th) the inverse of the first.
class ChannelTransform final : public SampleTransform {
 public:
  ChannelTransform(int height, int width, int channels, std::string identity)
      : shape_{height, width, channels, DType::U8, Layout::NHWC}, identity_(std::move(identity)) {}
  SampleShape output_shape() const override { return shape_; }
  std::string cache_identity() const override { return identity_; }
  void apply(const ImageView& src, const SampleContext&, std::byte* dst) const override {
    auto* out = reinterpret_cast<std::uint8_t*>(dst);
    for (int y = 0; y < shape_.height; ++y) {
      const std::uint8_t* row = src.row(y * src.height / shape_.height);
      for (int x = 0; x < shape_.width; ++x) {
        const std::uint8_t* px = row + static_cast<std::size_t>(x * src.width / shape_.width) * 3;
        for (int c = 0; c < shape_.channels; ++c) *out++ = c < 3 ? px[c] : static_cast<std::uint8_t>(255 - px[0]);
      }
    }
  }

 private:
  SampleShape shape_;
  std::string identity_;
};

// Entries of a cache file written by a transform with the same cache_identity() but another output
// shape would be copied past their end: an IoError naming the cache file, under skip too.
TEST(Loader, CachedOutputOfAnotherShapeIsAnIoErrorNamingTheCacheFile) {
  Fixture f(4, 2);
  TempDir cache_dir;
  auto o = small_options();
  o.cache.kind = CacheKind::Decoded;
  o.cache.file = cache_dir / "train.stkc";
  o.transform = std::make_shared<ChannelTransform>(16, 24, 3, "my-transform");
  {
    Loader writer(f.dataset(), o);
    run_epoch(writer, 0);
  }
  ASSERT_TRUE(fs::exists(o.cache.file));
  o.transform = std::make_shared<ChannelTransform>(16, 24, 1, "my-transform");  // the identity forgot the channels
  o.on_bad_sample = BadSamplePolicy::Skip;
  Loader reader(f.dataset(), o);
  ASSERT_NE(reader.cache_status().find("8 of 8 samples"), std::string::npos) << reader.cache_status();
  const EpochResult r = try_epoch(reader, 0);
  ASSERT_TRUE(r.error) << "the epoch ended without an error after " << r.samples << " samples";
  try {
    std::rethrow_exception(r.error);
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(o.cache.file.string() + ": the cached output is 16x24x3, the transform makes 16x24x1", 0), 0u)
        << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stopped with " << typeid(e).name() << ": " << e.what();
  }
  EXPECT_EQ(reader.stats().samples_skipped, 0u);
}

// A decoded cache behind a deterministic transform keeps the transform's output, copied from the
// batch slot: a warm epoch must give the cold epoch's pixels for 1 and 4 channels as for 3.
TEST(Loader, DecodedCacheOfTransformOutputsWithOneThreeOrFourChannels) {
  Fixture f(5, 2);
  for (const int channels : {1, 3, 4}) {
    SCOPED_TRACE(std::to_string(channels) + " channels");
    auto o = small_options();
    o.cache.kind = CacheKind::Decoded;
    o.transform = std::make_shared<ChannelTransform>(16, 24, channels, "channels " + std::to_string(channels));
    Loader loader(f.dataset(), o);
    ASSERT_EQ(loader.sample_shape().channels, channels);
    const Delivered cold = run_epoch(loader, 0);
    const Delivered warm = run_epoch(loader, 0);  // same order, every sample from the cache
    EXPECT_EQ(loader.stats().cache_hits, 10u);
    EXPECT_EQ(loader.stats().files_read, 10u);
    ASSERT_EQ(warm.ids, cold.ids);
    for (std::size_t i = 0; i < cold.ids.size(); ++i)
      EXPECT_EQ(warm.pixels[i], cold.pixels[i]) << "sample " << cold.ids[i];
  }
}

TEST(Loader, SkipPolicyWithABatchOfOnlyBadFiles) {
  TempDir dir;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  for (int i = 0; i < 4; ++i) test::write_bytes(dir / "a" / ("bad" + std::to_string(i) + ".jpg"), {1, 2, 3});
  test::write_jpeg(dir / "b" / "good.jpg", test::make_pattern_rgb(20, 20));
  auto o = small_options();
  o.shuffle = false;
  o.on_bad_sample = BadSamplePolicy::Skip;
  Loader loader(dataset_from_directory(dir.path()), o);
  const Delivered d = run_epoch(loader, 0);
  EXPECT_EQ(d.batch_sizes, (std::vector<int>{1}));  // the first batch was empty and is not delivered
  EXPECT_EQ(loader.stats().samples_skipped, 4u);
}

TEST(Loader, ConsumerHoldingEveryBufferGetsAnErrorNotAHang) {
  Fixture f(10, 2);
  auto o = small_options();
  o.prefetch = 1;  // two buffers
  Loader loader(f.dataset(), o);
  loader.begin_epoch(0);
  auto a = loader.next();
  auto b = loader.next();
  ASSERT_TRUE(a && b);
  EXPECT_THROW(loader.next(), Error);
  a->release();
  EXPECT_TRUE(loader.next());
}

// The default resize behind a gate: samples after the first batch (no shuffle) wait in apply()
// until open(). Counts the samples that entered and, on each entry, by how many it exceeds the
// loader's bound: (buffers released by the consumer + prefetch + 1) batches.
class GateTransform final : public SampleTransform {
 public:
  explicit GateTransform(const LoaderOptions& o)
      : resize_(o.image_height, o.image_width), batch_(o.batch_size), buffers_(o.prefetch + 1) {}
  SampleShape output_shape() const override { return resize_.output_shape(); }
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override {
    {
      std::unique_lock lock(mu_);
      ++entered_;
      worst_excess_ = std::max(worst_excess_, entered_ - (released_ + buffers_) * batch_);
      cv_.notify_all();
      if (ctx.sample_id >= batch_) cv_.wait(lock, [&] { return open_; });
    }
    resize_.apply(src, ctx, dst);
  }
  void wait_until_entered(int samples) const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= samples; });
  }
  void open() const {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void releasing_one() const {  // called before the consumer gives a buffer back
    std::lock_guard lock(mu_);
    ++released_;
  }
  int entered() const {
    std::lock_guard lock(mu_);
    return entered_;
  }
  int worst_excess() const {
    std::lock_guard lock(mu_);
    return worst_excess_;
  }

 private:
  ResizeTransform resize_;
  int batch_, buffers_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int entered_ = 0, released_ = 0, worst_excess_ = INT_MIN;
  mutable bool open_ = false;
};

// More decode threads than the bound, samples held at a gate, the consumer holding the first
// batch: the loader fills its other buffers and stops there; then, through the epoch, no sample
// ever starts more than prefetch + 1 batches ahead of the buffers the consumer gave back.
TEST(Loader, BackpressureBoundsWorkAheadOfTheConsumer) {
  Fixture f(20, 2);  // 40 samples, 10 batches of 4
  auto o = small_options();
  o.prefetch = 2;  // 3 buffers: 12 samples before the consumer gives one back
  o.shuffle = false;
  o.threads = 16;  // only the loader's backpressure keeps these workers from running ahead
  const auto gate = std::make_shared<GateTransform>(o);
  o.transform = gate;
  Loader loader(f.dataset(), o);
  struct Opener {
    const GateTransform& gate;
    ~Opener() { gate.open(); }  // before ~Loader joins the gated tasks, also when an ASSERT returns
  } opener{*gate};

  loader.begin_epoch(0);
  std::optional<Batch> held = loader.next();  // the first batch does not wait at the gate
  ASSERT_TRUE(held);
  gate->wait_until_entered(12);  // the two other buffers' samples are at the gate
  EXPECT_EQ(loader.stats().files_read, 12u);
  EXPECT_EQ(gate->worst_excess(), 0);
  gate->open();
  int batches = 1;
  for (;;) {
    gate->releasing_one();
    held.reset();
    held = loader.next();
    if (!held) break;
    ++batches;
  }
  EXPECT_EQ(batches, 10);
  EXPECT_EQ(gate->entered(), 40);
  EXPECT_LE(gate->worst_excess(), 0) << "a sample started more than prefetch + 1 batches ahead of the consumer";
  EXPECT_EQ(loader.buffer_bytes() % 4096, 0u);
  EXPECT_GE(loader.buffer_bytes(), static_cast<std::size_t>(3 * 4 * 16 * 24 * 3));
}

TEST(Loader, StoppingMidEpochJoinsAndBatchesOutliveTheLoader) {
  Fixture f(20, 2);
  std::optional<Batch> kept;
  {
    Loader loader(f.dataset(), small_options());
    loader.begin_epoch(0);
    kept = loader.next();
    loader.next();  // dropped at once
  }                 // destroyed mid-epoch with work in flight
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->size(), 4);
  EXPECT_EQ(kept->sample_ids().size(), 4u);
  kept.reset();

  // An exception thrown by the consumer unwinds through the loader.
  EXPECT_THROW(
      {
        Loader loader(f.dataset(), small_options());
        loader.begin_epoch(0);
        while (auto b = loader.next()) throw std::runtime_error("consumer failed");
      },
      std::runtime_error);
}

TEST(Loader, RestartingAnEpochAbandonsTheOldOne) {
  Fixture f(10, 2);
  Loader loader(f.dataset(), small_options());
  loader.begin_epoch(0);
  auto held = loader.next();  // keep one from the old epoch
  loader.begin_epoch(1);
  const Delivered d = [&] {
    Delivered out;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->epoch(), 1u);
      for (auto id : b->sample_ids()) out.ids.push_back(id);
    }
    return out;
  }();
  EXPECT_EQ(d.ids.size(), 20u);
  EXPECT_EQ(held->epoch(), 0u);
}

TEST(Loader, NextBeforeBeginEpochIsAnError) {
  Fixture f(2, 2);
  Loader loader(f.dataset(), small_options());
  EXPECT_THROW(loader.next(), Error);
}

TEST(Loader, KeepAspectRatioAndInterpolationsProduceTheExpectedPixels) {
  Fixture f(3, 2);
  const Dataset ds = f.dataset();
  for (auto interp : {Interpolation::Nearest, Interpolation::Bilinear, Interpolation::Area}) {
    auto o = small_options();
    o.interpolation = interp;
    o.keep_aspect_ratio = true;
    Loader loader(ds, o);
    const Delivered d = run_epoch(loader, 0);
    for (std::size_t i = 0; i < d.ids.size(); ++i) {
      EXPECT_EQ(d.pixels[i], expected_pixels(ds.samples[static_cast<std::size_t>(d.ids[i])], o));
    }
  }
}

// A host allocator that records what it is asked for.
class RecordingAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    requests.push_back(bytes);
    return std::aligned_alloc(4096, (std::max<std::size_t>(bytes, 1) + 4095) / 4096 * 4096);
  }
  void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
  const char* name() const noexcept override { return "recording"; }
  std::vector<std::size_t> requests;
};

// A batch_size above the dataset: each buffer holds what a batch can, this rank's samples of an
// epoch, not batch_size of them (20,000 on 24 images reserved 14 GiB).
TEST(Loader, BuffersHoldWhatABatchCanHoldNotBatchSize) {
  Fixture f(3, 2);  // 6 samples
  const Dataset ds = f.dataset();
  auto o = small_options();
  o.batch_size = 1'000'000'000;
  const auto allocator = std::make_shared<RecordingAllocator>();
  o.allocator = allocator;
  Loader loader(ds, o);
  EXPECT_EQ(loader.batch_capacity(), 6);
  const std::size_t slot = (6 * 16 * 24 * 3 + 4095) / 4096 * 4096;
  EXPECT_EQ(loader.buffer_bytes(), 3 * slot) << "prefetch 2 + 1 batches of 6 samples";
  EXPECT_EQ(allocator->requests, std::vector<std::size_t>{3 * slot});
  const Delivered d = run_epoch(loader, 0);
  EXPECT_EQ(d.batch_sizes, std::vector<int>{6});
  for (std::size_t i = 0; i < d.ids.size(); ++i) {
    EXPECT_EQ(d.pixels[i], expected_pixels(ds.samples[static_cast<std::size_t>(d.ids[i])], o));
  }

  o.sharding = Sharding{1, 4};  // 6 samples on 4 ranks: 2 each, padded
  EXPECT_EQ(Loader(ds, o).batch_capacity(), 2);
  o.sharding.reset();
  o.batch_size = 4;  // below the epoch: batch_size
  EXPECT_EQ(Loader(ds, o).batch_capacity(), 4);
}

// Buffers that cannot be had are refused before anything is allocated, with the settings and the
// bytes: more than the machine's memory is a BadAlloc, bytes past 64 bits an InvalidArgument.
TEST(Loader, BuffersBeyondMemoryAreRefusedNamingTheSettingsBeforeAllocating) {
  std::vector<Sample> many(100'000, Sample{"never-read.jpg", 0});
  const Dataset ds = dataset_from_list(std::move(many), {"a"});
  auto o = small_options();
  const auto allocator = std::make_shared<RecordingAllocator>();
  o.allocator = allocator;
  o.batch_size = 100'000;
  o.image_height = o.image_width = 8192;  // 100,000 x 192 MiB: 19 TiB a batch
  try {
    Loader loader(ds, o);
    ADD_FAILURE() << "accepted";
  } catch (const BadAlloc& e) {
    const std::string m = e.what();
    // 3 x 100,000 x 8192 x 8192 x 3 bytes of pixels and the batches' bookkeeping
    EXPECT_NE(m.find("the batch buffers for 3 batches (prefetch 2 + 1) of 100000 samples (batch_size 100000) x "
                     "8192x8192x3 uint8 would take 603980"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("of memory this process may use; lower batch_size, prefetch or the image size"), std::string::npos)
        << m;
  }
  o.prefetch = INT_MAX;  // and bytes that overflow
  try {
    Loader loader(ds, o);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(prefetch 2147483647 + 1) of 100000 samples (batch_size 100000) x "
                                         "8192x8192x3 uint8 would take more bytes than 64 bits count"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(allocator->requests.empty()) << "nothing is allocated for a refused request";
}

// max_image_pixels reaches the decoder: an image over it is a bad sample naming the limit.
TEST(Loader, AnImageOverMaxImagePixelsIsABadSample) {
  Fixture f(1, 1);  // one 40x50 PNG
  auto o = small_options();
  o.limits.max_pixels = 40 * 50 - 1;
  Loader loader(f.dataset(), o);
  loader.begin_epoch(0);
  try {
    loader.next();
    ADD_FAILURE() << "decoded";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("50x40 pixels, over the limit of 1999"), std::string::npos) << e.what();
  }
  o.limits.max_pixels = 40 * 50;
  Loader at_the_limit(f.dataset(), o);
  EXPECT_EQ(run_epoch(at_the_limit, 0).ids.size(), 1u);
}

}  // namespace
}  // namespace stoker
