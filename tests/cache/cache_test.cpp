#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "stoker/cache/cache_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using test::TempDir;

struct Photos {
  explicit Photos(int per_class = 12) {
    for (int c = 0; c < 2; ++c) {
      fs::create_directories(dir / ("c" + std::to_string(c)));
      for (int i = 0; i < per_class; ++i) {
        test::write_jpeg(dir / ("c" + std::to_string(c)) / ("p" + std::to_string(i) + ".jpg"),
                         test::make_pattern_rgb(60 + i, 80, c * 50 + i));
      }
    }
  }
  Dataset dataset() const { return dataset_from_directory(dir.path()); }
  TempDir dir;
};

LoaderOptions options(CacheKind kind, std::size_t budget = std::size_t{1} << 30) {
  LoaderOptions o;
  o.image_height = 24;
  o.image_width = 32;
  o.batch_size = 5;
  o.threads = 2;
  o.prefetch = 2;
  o.seed = 9;
  o.cache.kind = kind;
  o.cache.budget_bytes = budget;
  return o;
}

using Pixels = std::map<std::int64_t, std::vector<std::byte>>;

Pixels run_epoch(Loader& loader, std::uint64_t epoch) {
  Pixels out;
  loader.begin_epoch(epoch);
  while (auto b = loader.next()) {
    const auto bytes = b->sample_shape().bytes();
    for (int i = 0; i < b->size(); ++i) {
      const std::byte* p = b->pixels() + bytes * static_cast<std::size_t>(i);
      out[b->sample_ids()[static_cast<std::size_t>(i)]] = std::vector<std::byte>(p, p + bytes);
    }
  }
  return out;
}

// Bytes this process has read through read()/pread() so far (page-cache hits included).
std::uint64_t process_rchar() {
  std::ifstream in("/proc/self/io");
  for (std::string key; in >> key;) {
    std::uint64_t v = 0;
    in >> v;
    if (key == "rchar:") return v;
  }
  return 0;
}

std::uint64_t dataset_bytes(const Dataset& ds) {
  std::uint64_t n = 0;
  for (const auto& s : ds.samples) n += fs::file_size(s.path);
  return n;
}

TEST(DecodedCache, SecondEpochReadsNoFileAndMatchesTheUncachedPath) {
  Photos photos;
  const Dataset ds = photos.dataset();
  Loader plain(ds, options(CacheKind::None));
  Loader cached(ds, options(CacheKind::Decoded));
  EXPECT_EQ(run_epoch(cached, 0), run_epoch(plain, 0));
  EXPECT_EQ(cached.stats().files_read, ds.size());
  EXPECT_EQ(cached.stats().cache_misses, ds.size());

  cached.reset_stats();
  const std::uint64_t rchar_before = process_rchar();
  const Pixels warm = run_epoch(cached, 1);
  const std::uint64_t rchar = process_rchar() - rchar_before;
  const LoaderStats st = cached.stats();
  EXPECT_EQ(st.files_read, 0u);
  EXPECT_EQ(st.bytes_read, 0u);
  EXPECT_EQ(st.cache_hits, ds.size());
  EXPECT_EQ(st.decode_seconds, 0.0);  // nothing decoded either
  if (rchar_before > 0) {
    EXPECT_LT(rchar, dataset_bytes(ds) / 10) << "the warm epoch read files";
  }
  EXPECT_EQ(warm, run_epoch(plain, 1));  // bit-identical to the uncached path
  EXPECT_GT(st.cache_bytes_held, ds.size() * 24u * 32u * 3u);
}

// A transform with per-epoch randomness: the decoded cache must then keep the decoder's output and
// run the transform every epoch.
class EpochTintedResize final : public SampleTransform {
 public:
  EpochTintedResize() : resize_(24, 32) {}
  SampleShape output_shape() const override { return resize_.output_shape(); }
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override {
    resize_.apply(src, ctx, dst);
    dst[0] = static_cast<std::byte>(ctx.epoch * 31 + static_cast<std::uint64_t>(ctx.sample_id));
  }

 private:
  ResizeTransform resize_;
};

TEST(DecodedCache, WithARandomTransformKeepsDecodedImagesAndStillTransformsEveryEpoch) {
  Photos photos;
  const Dataset ds = photos.dataset();
  auto plain_options = options(CacheKind::None);
  plain_options.transform = std::make_shared<EpochTintedResize>();
  auto cached_options = options(CacheKind::Decoded);
  cached_options.transform = plain_options.transform;
  Loader plain(ds, plain_options);
  Loader cached(ds, cached_options);
  run_epoch(cached, 0);
  // The decoder's output (80 wide → 40 after DCT scaling, >= 24x32), not the 24x32 output, is held.
  EXPECT_GT(cached.stats().cache_bytes_held, ds.size() * 24u * 32u * 3u * 5u / 4u);
  cached.reset_stats();
  EXPECT_EQ(run_epoch(cached, 1), run_epoch(plain, 1));
  EXPECT_EQ(cached.stats().files_read, 0u);
  EXPECT_EQ(cached.stats().decode_seconds, 0.0);
  EXPECT_GT(cached.stats().transform_seconds, 0.0);
}

TEST(EncodedCache, SecondEpochDecodesFromRamAndMatches) {
  Photos photos;
  const Dataset ds = photos.dataset();
  Loader plain(ds, options(CacheKind::None));
  Loader cached(ds, options(CacheKind::Encoded));
  run_epoch(cached, 0);
  cached.reset_stats();
  EXPECT_EQ(run_epoch(cached, 1), run_epoch(plain, 1));
  EXPECT_EQ(cached.stats().files_read, 0u);
  EXPECT_EQ(cached.stats().cache_hits, ds.size());
  EXPECT_GT(cached.stats().decode_seconds, 0.0);
  EXPECT_LE(cached.stats().cache_bytes_held, dataset_bytes(ds) + 64 * 1024);
}

TEST(CacheBudget, ADatasetThreeTimesTheBudgetKeepsAFixedPartAndNeverExceedsIt) {
  Photos photos(15);
  const Dataset ds = photos.dataset();
  // Learn the full size, then give a third of it.
  Loader probe(ds, options(CacheKind::Decoded));
  run_epoch(probe, 0);
  const std::size_t full = probe.stats().cache_bytes_held;
  const std::size_t budget = full / 3;

  Loader plain(ds, options(CacheKind::None));
  Loader cached(ds, options(CacheKind::Decoded, budget));
  std::uint64_t previous_hits = 0;
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    cached.reset_stats();
    EXPECT_EQ(run_epoch(cached, epoch), run_epoch(plain, epoch));
    const LoaderStats st = cached.stats();
    EXPECT_LE(st.cache_bytes_held, budget);
    EXPECT_GT(st.cache_bytes_held, budget / 2);  // the budget is used, not wasted
    if (epoch >= 2) {
      EXPECT_EQ(st.cache_hits, previous_hits) << "the cached part must stay fixed (no thrashing)";
    }
    if (epoch >= 1) {
      EXPECT_GT(st.cache_hits, 0u);
      EXPECT_LT(st.cache_hits, ds.size() / 2);
      EXPECT_EQ(st.files_read, ds.size() - st.cache_hits);  // the rest streams from disk
    }
    previous_hits = st.cache_hits;
  }
  EXPECT_GT(cached.cache_stats()->rejected_over_budget, 0u);
}

TEST(CacheBudget, ABudgetThatCannotHoldTheIndexFailsAtConstruction) {
  Photos photos(2);
  try {
    Loader loader(photos.dataset(), options(CacheKind::Decoded, 100));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold its own index"), std::string::npos) << e.what();
  }
}

struct CacheFileFixture {
  Photos photos;
  Dataset ds = photos.dataset();
  fs::path file = photos.dir / "cache.stoker";
  LoaderOptions with_file(CacheKind kind = CacheKind::Decoded) {
    auto o = options(kind);
    o.cache.file = file;
    return o;
  }
  Pixels reference(std::uint64_t epoch) {
    Loader plain(ds, options(CacheKind::None));
    return run_epoch(plain, epoch);
  }
  // A second "process": a new loader over the same file.
  Pixels warm_run(std::uint64_t epoch, LoaderStats* stats = nullptr, std::string* status = nullptr,
                  CacheStats* cstats = nullptr) {
    Loader loader(ds, with_file());
    if (status) *status = loader.cache_status();
    Pixels p = run_epoch(loader, epoch);
    if (stats) *stats = loader.stats();
    if (cstats) *cstats = *loader.cache_stats();
    return p;
  }
};

TEST(CacheFile, ASecondProcessStartsWarm) {
  for (auto kind : {CacheKind::Decoded, CacheKind::Encoded}) {
    CacheFileFixture f;
    {
      Loader first(f.ds, f.with_file(kind));
      EXPECT_NE(first.cache_status().find("no cache file yet"), std::string::npos);
      run_epoch(first, 0);
    }
    ASSERT_TRUE(fs::exists(f.file));
    Loader second(f.ds, f.with_file(kind));
    EXPECT_NE(second.cache_status().find("24 of 24 samples"), std::string::npos) << second.cache_status();
    EXPECT_EQ(run_epoch(second, 3), f.reference(3));
    EXPECT_EQ(second.stats().files_read, 0u);
    EXPECT_EQ(second.cache_stats()->file_entries, f.ds.size());
    for (const auto& e : fs::directory_iterator(f.photos.dir.path())) {
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary file left behind";
    }
  }
}

TEST(CacheFile, AFlippedDataByteIsCaughtAndThatSampleIsReRead) {
  CacheFileFixture f;
  f.warm_run(0);
  auto bytes = test::read_bytes(f.file);
  auto file = CacheFile::inspect(f.file);
  ASSERT_EQ(file->state(), CacheFileState::Valid);
  const auto& victim = file->entries()[3];
  bytes[victim.data_offset + victim.data_size / 2] ^= 0x5A;
  file.reset();
  test::write_bytes(f.file, bytes);

  LoaderStats st;
  CacheStats cs;
  EXPECT_EQ(f.warm_run(1, &st, nullptr, &cs), f.reference(1));
  EXPECT_EQ(cs.corrupt_entries, 1u);
  EXPECT_EQ(st.files_read, 1u);
  // The file was rewritten with the good entry.
  auto fixed = CacheFile::inspect(f.file);
  EXPECT_EQ(fixed->state(), CacheFileState::Valid);
  EXPECT_EQ(f.warm_run(2, &st), f.reference(2));
  EXPECT_EQ(st.files_read, 0u);
}

// Another process truncates the file in place while a loader has it mapped (and has verified its
// entries): the pages past the new end are gone. Reading them raised SIGBUS and ended the process;
// now every epoch after it fails with an IoError naming the file, whatever the cache kind and the
// bad-sample policy, and the bytes it read as zeros never reach a batch.
TEST(CacheFile, TruncatedByAnotherProcessWhileInUseIsAnErrorNamingItNotSIGBUS) {
  for (auto kind : {CacheKind::Decoded, CacheKind::Encoded}) {
    for (auto policy : {BadSamplePolicy::Fail, BadSamplePolicy::Skip}) {
      CacheFileFixture f;
      {
        Loader first(f.ds, f.with_file(kind));
        run_epoch(first, 0);
      }
      LoaderOptions o = f.with_file(kind);
      o.on_bad_sample = policy;
      Loader loader(f.ds, o);
      EXPECT_EQ(run_epoch(loader, 1), f.reference(1));  // every entry read from the file
      ASSERT_EQ(loader.stats().files_read, 0u);
      ASSERT_EQ(::truncate(f.file.c_str(), 128), 0);  // the header stays; the data goes
      loader.begin_epoch(2);
      try {
        while (auto b = loader.next()) {
          ADD_FAILURE() << "a batch was delivered from a cache file cut short";
        }
        ADD_FAILURE() << "the epoch ended without an error";
      } catch (const IoError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(f.file.string()), std::string::npos) << what;
        EXPECT_NE(what.find("cut short by another process"), std::string::npos) << what;
      }
      // A new loader finds the file stale (truncated) and rebuilds it.
      std::string status;
      EXPECT_EQ(f.warm_run(3, nullptr, &status), f.reference(3));
      EXPECT_NE(status.find("rebuilt"), std::string::npos) << status;
    }
  }
}

// The same at the level of the file: a verified entry read after the truncation is zeros and
// truncated_in_use() says so (the SIGBUS guard), then an entry of a second mapping is untouched.
TEST(CacheFile, AGuardedMappingReadsZerosPastAnEndThatMoved) {
  CacheFileFixture f;
  f.warm_run(0);
  auto copy = f.photos.dir / "copy.stoker";
  fs::copy_file(f.file, copy);
  auto file = CacheFile::inspect(f.file);
  auto other = CacheFile::inspect(copy);
  ASSERT_EQ(file->state(), CacheFileState::Valid);
  const auto& last = file->entries().back();
  const auto before = file->data(last);
  std::uint64_t sum = 0;
  for (auto v : before) sum += v;
  EXPECT_GT(sum, 0u);
  EXPECT_FALSE(file->truncated_in_use());
  ASSERT_EQ(::truncate(f.file.c_str(), 128), 0);
  sum = 0;
  for (auto v : file->data(last)) sum += v;
  EXPECT_EQ(sum, 0u);
  EXPECT_TRUE(file->truncated_in_use());
  EXPECT_FALSE(other->truncated_in_use());
  const auto& kept = other->entries().back();
  EXPECT_EQ(checksum64(other->data(kept).data(), kept.data_size), kept.checksum);
  EXPECT_FALSE(other->truncated_in_use());
}

// A rank's epoch can hold a sample twice (the padding that evens out the ranks), and both copies
// can be in flight at once. They used to race on the one entry: both admitted it (counted twice in
// the budget, one copy's buffer freed while it was written), both dropped a stale one (the budget
// lowered twice, the bytes freed under the other's read).
TEST(SampleCacheRace, TwoCopiesOfASampleInFlightAdmitAndDropItOnce) {
  Photos photos(1);
  const std::string source = photos.dataset().samples.front().path;
  const SourceStamp stamp = *stamp_of(source);
  std::vector<std::uint8_t> pixels(512 * 512 * 3, 7);
  const ImageView image{pixels.data(), 512, 512, 3, 512 * 3};
  CacheOptions o;
  o.kind = CacheKind::Decoded;
  o.budget_bytes = std::size_t{1} << 30;
  for (int round = 0; round < 100; ++round) {
    SampleCache cache(o, CacheKey{CacheKind::Decoded, 0, 0, 0}, {source});
    const std::uint64_t empty = cache.bytes_held();
    std::atomic<int> ready{0};
    auto both = [&](auto&& work) {
      ready = 0;
      auto run = [&] {
        ready.fetch_add(1);
        while (ready.load() < 2) {}
        work();
      };
      std::thread a(run), b(run);
      a.join();
      b.join();
    };
    // Made from a source as it was before a change: both copies find the entry stale.
    SourceStamp before = stamp;
    before.mtime_ns -= 1;
    both([&] { cache.admit_decoded(0, image, before); });
    ASSERT_EQ(cache.stats().admitted, 1u) << "round " << round;
    ASSERT_GE(cache.bytes_held(), empty + pixels.size());
    both([&] { EXPECT_FALSE(cache.find(0)); });
    ASSERT_EQ(cache.stats().stale_refreshed, 1u) << "round " << round;
    cache.save_if_changed();  // an epoch's end: the bytes dropped are freed now
    ASSERT_EQ(cache.bytes_held(), empty) << "round " << round;
  }
}

TEST(CacheFile, TornTruncatedAndOldVersionFilesAreRebuilt) {
  CacheFileFixture f;
  f.warm_run(0);
  const auto good = test::read_bytes(f.file);
  auto expect_rebuilt = [&](std::vector<std::uint8_t> damaged, const std::string& problem) {
    test::write_bytes(f.file, damaged);
    std::string status;
    LoaderStats st;
    EXPECT_EQ(f.warm_run(1, &st, &status), f.reference(1)) << problem;
    EXPECT_NE(status.find(problem), std::string::npos) << status;
    EXPECT_EQ(st.files_read, f.ds.size()) << "nothing may be read from a broken file";
    EXPECT_EQ(CacheFile::inspect(f.file)->state(), CacheFileState::Valid) << "not rebuilt";
  };
  auto header_flip = good;
  header_flip[20] ^= 1;
  expect_rebuilt(header_flip, "corrupt header");
  expect_rebuilt(std::vector<std::uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() / 2)),
                 "truncated");
  expect_rebuilt(std::vector<std::uint8_t>(good.begin(), good.begin() + 100), "truncated header");
  auto index_flip = good;
  index_flip[128 + 70] ^= 1;
  expect_rebuilt(index_flip, "corrupt index");
  auto old_version = good;
  old_version[8] = 0;  // version field; re-seal the header so only the version is wrong
  const std::uint64_t sum = checksum64(old_version.data(), 120);
  std::memcpy(old_version.data() + 120, &sum, 8);
  expect_rebuilt(old_version, "format version 0");
}

TEST(CacheFile, AFileBuiltForOtherSettingsIsRebuilt) {
  CacheFileFixture f;
  f.warm_run(0);
  auto o = f.with_file();
  o.image_height = o.image_width = 48;
  Loader other(f.ds, o);
  EXPECT_NE(other.cache_status().find("built for a decoded cache at minimum size 24x32"), std::string::npos)
      << other.cache_status();
}

TEST(CacheFile, AForeignFileIsRefusedAndLeftUntouched) {
  CacheFileFixture f;
  const std::string precious = "my thesis, not a cache";
  test::write_bytes(f.file, {precious.begin(), precious.end()});
  try {
    Loader loader(f.ds, f.with_file());
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a stoker cache file"), std::string::npos) << e.what();
  }
  const auto after = test::read_bytes(f.file);
  EXPECT_EQ(std::string(after.begin(), after.end()), precious);
}

// The file is written after the first epoch; where it cannot be, the loader says so at once.
TEST(CacheFile, AMissingFolderFailsAtConstruction) {
  CacheFileFixture f;
  for (const fs::path& bad :
       {f.photos.dir / "no_such_folder" / "cache.stoker", fs::path(f.ds.samples[0].path) / "cache.stoker"}) {
    auto o = f.with_file();
    o.cache.file = bad;
    try {
      Loader loader(f.ds, o);
      FAIL() << bad;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is not an existing folder"), std::string::npos) << e.what();
    }
  }
}

TEST(CacheFile, AReadOnlyFolderFailsAtConstruction) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: a read-only folder is still writable";
  CacheFileFixture f;
  const fs::path locked = f.photos.dir / "locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  auto o = f.with_file();
  o.cache.file = locked / "cache.stoker";
  EXPECT_THROW(Loader(f.ds, o), IoError);
  fs::permissions(locked, fs::perms::owner_all);
}

TEST(CacheFile, AChangedSourceImageIsReRead) {
  CacheFileFixture f;
  f.warm_run(0);
  const Sample& changed = f.ds.samples[5];
  test::write_jpeg(changed.path, test::make_pattern_rgb(70, 90, 777));
  fs::last_write_time(changed.path, fs::last_write_time(changed.path) + std::chrono::seconds(5));

  LoaderStats st;
  CacheStats cs;
  EXPECT_EQ(f.warm_run(1, &st, nullptr, &cs), f.reference(1));  // the new picture, not the cached one
  EXPECT_EQ(cs.stale_refreshed, 1u);
  EXPECT_EQ(st.files_read, 1u);
}

TEST(CacheOptions, ParsesKindsAndSizes) {
  EXPECT_EQ(parse_cache_kind("decoded"), CacheKind::Decoded);
  EXPECT_THROW(parse_cache_kind("pixels"), InvalidArgument);
  EXPECT_EQ(parse_byte_size("8GiB"), std::size_t{8} << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), std::size_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), std::size_t{1500000000});
  EXPECT_EQ(parse_byte_size("1000"), 1000u);
  EXPECT_THROW(parse_byte_size("lots"), InvalidArgument);
  EXPECT_THROW(parse_byte_size("5 parsecs"), InvalidArgument);
}

// Found by tests/fuzz/fuzz_cache_file: 64-bit offset/size fields whose sum wraps passed the
// layout checks (a path or data span pointing before the mapping), an unknown kind became a key,
// and a height × width × channels product that wraps to data_size passed the shape check. Each
// file is re-sealed (index and header checksums) so only the bogus field is wrong.
TEST(CacheFile, BogusSizeFieldsWithValidChecksumsAreStaleNotMapped) {
  TempDir dir;
  const fs::path file = dir / "bogus.stoker";
  const std::vector<std::uint8_t> pixels(2 * 4 * 3, 7);
  CacheFileRecord rec;
  rec.meta.path = "a/cat.jpg";
  rec.meta.height = 2, rec.meta.width = 4, rec.meta.channels = 3;
  rec.data = pixels;
  write_cache_file(file, CacheKey{CacheKind::Decoded, 32, 32, 0}, {rec});
  const auto good = test::read_bytes(file);
  ASSERT_EQ(CacheFile::inspect(file)->state(), CacheFileState::Valid);

  auto put64 = [](std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) { std::memcpy(b.data() + at, &v, 8); };
  auto put32 = [](std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) { std::memcpy(b.data() + at, &v, 4); };
  auto reseal = [&](std::vector<std::uint8_t> b) {
    std::uint64_t strings_size;
    std::memcpy(&strings_size, b.data() + 48, 8);
    put64(b, 80, checksum64(b.data() + 128, 64 + strings_size));  // one record + the path strings
    put64(b, 120, checksum64(b.data(), 120));
    return b;
  };
  auto expect_stale = [&](const std::vector<std::uint8_t>& bytes, const std::string& problem) {
    test::write_bytes(file, bytes);
    auto f = CacheFile::inspect(file);
    EXPECT_EQ(f->state(), CacheFileState::Stale) << problem;
    EXPECT_NE(f->problem().find(problem), std::string::npos) << f->problem();
    EXPECT_TRUE(f->entries().empty());
  };
  constexpr std::size_t rec0 = 128;  // the first record: path_offset +0, data_offset +32, data_size +40, height +48
  auto b = good;
  put64(b, rec0 + 0, ~std::uint64_t{0} - 2);  // path_offset + path_size wraps to 6
  expect_stale(reseal(b), "points outside the file");
  b = good;
  std::uint64_t data_offset;
  std::memcpy(&data_offset, b.data() + rec0 + 32, 8);
  put64(b, rec0 + 32, data_offset + 64);
  put64(b, rec0 + 40, ~std::uint64_t{0} - 40);  // data_offset + data_size wraps
  expect_stale(reseal(b), "points outside the file");
  b = good;
  put64(b, 64, ~std::uint64_t{0} - 100);  // header data_offset + data_size wraps
  expect_stale(reseal(b), "inconsistent layout");
  b = good;
  put32(b, 12, 7);  // kind
  expect_stale(reseal(b), "unknown cache kind 7");
  b = good;
  put32(b, rec0 + 12, 4);            // channels
  put32(b, rec0 + 48, 0x80000000u);  // height: 2^31 x 2^31 x 4 = 2^64, wraps to data_size 0
  put32(b, rec0 + 52, 0x80000000u);  // width
  put64(b, rec0 + 40, 0);
  expect_stale(reseal(b), "does not match its image shape");
}

TEST(Checksum, DetectsSingleBitFlipsAnywhere) {
  std::vector<std::uint8_t> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7);
  const auto base = checksum64(data.data(), data.size());
  for (std::size_t i = 0; i < data.size(); i += 37) {
    data[i] ^= 4;
    EXPECT_NE(checksum64(data.data(), data.size()), base) << i;
    data[i] ^= 4;
  }
  EXPECT_NE(checksum64(data.data(), 999), base);
}

}  // namespace
}  // namespace stoker
