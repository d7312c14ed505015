// The tar index and writer, the WebDataset source, and the loader over tar members: against
// shards written by Python's tarfile (tests/pipeline/vectors/tar/, scripts/make_tar_vectors.py)
// and by write_webdataset_shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/tar.hpp"
#include "stoker/pipeline/webdataset.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using test::TempDir;

fs::path vectors() { return test::source_dir() / "tests" / "pipeline" / "vectors" / "tar"; }

const std::string kLongDir =
    "samples/a_rather_long_folder_name_a_rather_long_folder_name_a_rather_long_folder_name_a_rather_long_folder_name_";

// Pixel (y, x) of vector sample i, as scripts/make_tar_vectors.py draws it.
std::vector<std::uint8_t> vector_pixels(int i) {
  std::vector<std::uint8_t> px;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      px.push_back(static_cast<std::uint8_t>((40 * i + 10 * x) % 256));
      px.push_back(static_cast<std::uint8_t>(20 * y));
      px.push_back(static_cast<std::uint8_t>(200 - i));
    }
  }
  return px;
}

std::vector<std::uint8_t> decode_member(const Sample& s) {
  std::vector<std::uint8_t> bytes;
  read_file_range(s.path, *s.range, sample_name(s), bytes);
  ImageDecoder decoder;
  const ImageView v = decoder.decode(bytes, sample_name(s));
  std::vector<std::uint8_t> px;
  for (int y = 0; y < v.height; ++y) px.insert(px.end(), v.row(y), v.row(y) + v.width * 3);
  return px;
}

std::vector<std::string> names(const TarIndex& index) {
  std::vector<std::string> out;
  for (const auto& m : index.members) out.push_back(m.name);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TarIndex, ReadsPythonsPaxGnuAndUstarArchives) {
  const TarIndex pax = index_tar(vectors() / "pax.tar");
  EXPECT_TRUE(pax.problem.empty());
  EXPECT_EQ(names(pax), (std::vector<std::string>{"samples/s000.ppm", "samples/s000.cls", kLongDir + "/s001.ppm",
                                                  kLongDir + "/s001.cls",
                                                  "samples/s\xc3\xa9"
                                                  "002.ppm",
                                                  "samples/s\xc3\xa9"
                                                  "002.cls"}));
  const TarIndex gnu = index_tar(vectors() / "gnu.tar");
  EXPECT_EQ(names(gnu), (std::vector<std::string>{"samples/s003.ppm", "samples/s003.cls", kLongDir + "/s004.ppm",
                                                  kLongDir + "/s004.cls"}));
  const TarIndex ustar = index_tar(vectors() / "ustar.tar");
  EXPECT_EQ(names(ustar),
            (std::vector<std::string>{kLongDir + "/s005.ppm", kLongDir + "/s005.cls", "s006.ppm", "s006.cls"}));
  for (const auto* index : {&pax, &gnu, &ustar}) {
    for (const auto& m : index->members) {
      EXPECT_EQ(m.offset % 512, 0u);
      EXPECT_EQ(m.size, m.name.ends_with(".ppm") ? 59u : 1u) << m.name;
    }
  }
}

TEST(WebDataset, SamplesFromPythonShardsHaveTheirPixelsLabelsAndClassNames) {
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{
      (vectors() / "pax.tar").string(), (vectors() / "gnu.tar").string(), (vectors() / "ustar.tar").string()});
  EXPECT_EQ(ds.class_names, (std::vector<std::string>{"red", "green", "blue"}));
  ASSERT_EQ(ds.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const Sample& s = ds.samples[static_cast<std::size_t>(i)];
    ASSERT_TRUE(s.range);
    EXPECT_EQ(s.label, i % 3) << s.member;
    EXPECT_TRUE(s.member.ends_with(std::to_string(i) + ".ppm")) << s.member;
    EXPECT_EQ(decode_member(s), vector_pixels(i)) << sample_name(s);
  }
  EXPECT_EQ(ds.samples[1].member, kLongDir + "/s001.ppm");
  EXPECT_EQ(sample_name(ds.samples[0]), (vectors() / "pax.tar").string() + ":samples/s000.ppm");
}

TEST(WebDataset, KeysFollowWebDatasetsFirstDotRule) {
  std::string key, ext;
  ASSERT_TRUE(split_member_name("train/a.b/0001.seg.png", key, ext));
  EXPECT_EQ(key, "train/a.b/0001");
  EXPECT_EQ(ext, "seg.png");
  EXPECT_FALSE(split_member_name("README", key, ext));
  EXPECT_FALSE(split_member_name("dir/.hidden", key, ext));
}

TEST(WebDataset, SampleWithoutLabelIsAnErrorOrSkippedAndReported) {
  const std::string shard = (vectors() / "nolabel.tar").string();
  const std::string what = error_of([&] { dataset_from_webdataset(std::vector<std::string>{shard}); });
  EXPECT_NE(what.find("nolabel.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("'s008'"), std::string::npos) << what;
  EXPECT_NE(what.find("no label"), std::string::npos) << what;

  WebDatasetOptions o;
  o.skip_bad_samples = true;
  WebDatasetReport report;
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{shard}, o, &report);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.samples[0].member, "s007.ppm");
  EXPECT_EQ(ds.samples[1].member, "s009.ppm");
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].key, "s008");
  EXPECT_EQ(report.skipped[0].shard, shard);

  o.require_labels = false;
  o.skip_bad_samples = false;
  EXPECT_EQ(dataset_from_webdataset(std::vector<std::string>{shard}, o).samples[1].label, -1);
}

TEST(WebDataset, TruncatedShardIsAnErrorOrKeepsItsCompleteSamples) {
  TempDir dir;
  auto bytes = test::read_bytes(vectors() / "ustar.tar");
  // ustar.tar: s005.ppm header 0, data 512; s005.cls header 1024, data 1536; s006.ppm header 2048.
  bytes.resize(2048 + 512 + 30);  // s006.ppm's data cut short
  const std::string shard = (dir / "cut.tar").string();
  test::write_bytes(shard, bytes);
  const std::string what = error_of([&] { index_tar(shard); });
  EXPECT_NE(what.find("cut.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("'s006.ppm'"), std::string::npos) << what;
  EXPECT_NE(what.find("header at byte 2048"), std::string::npos) << what;
  EXPECT_NE(what.find("truncated"), std::string::npos) << what;
  EXPECT_THROW(dataset_from_webdataset(std::vector<std::string>{shard}), DatasetError);

  WebDatasetOptions o;
  o.skip_bad_samples = true;
  WebDatasetReport report;
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{shard}, o, &report);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds.samples[0].member, kLongDir + "/s005.ppm");
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_TRUE(report.skipped[0].key.empty());
  EXPECT_NE(report.skipped[0].reason.find("truncated"), std::string::npos);

  bytes.resize(2048 + 100);  // a partial header block
  test::write_bytes(shard, bytes);
  EXPECT_NE(error_of([&] { index_tar(shard); }).find("less than a header block"), std::string::npos);
}

TEST(WebDataset, CorruptedHeaderChecksumIsAnErrorOrEndsTheShard) {
  TempDir dir;
  auto bytes = test::read_bytes(vectors() / "ustar.tar");
  bytes[2048 + 1] ^= 0x20;  // "s006.ppm" -> "S006.ppm": the stored checksum no longer holds
  const std::string shard = (dir / "bad.tar").string();
  test::write_bytes(shard, bytes);
  const std::string what = error_of([&] { dataset_from_webdataset(std::vector<std::string>{shard}); });
  EXPECT_NE(what.find("bad.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("header at byte 2048"), std::string::npos) << what;
  EXPECT_NE(what.find("bad header checksum"), std::string::npos) << what;

  WebDatasetOptions o;
  o.skip_bad_samples = true;
  WebDatasetReport report;
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{shard}, o, &report);
  EXPECT_EQ(ds.size(), 1u);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].reason.find("checksum"), std::string::npos);
}

TEST(WebDataset, BraceExpansionAndShardLists) {
  EXPECT_EQ(expand_braces("s/train-{000000..000002}.tar"),
            (std::vector<std::string>{"s/train-000000.tar", "s/train-000001.tar", "s/train-000002.tar"}));
  EXPECT_EQ(expand_braces("{a,b}-{1..2}"), (std::vector<std::string>{"a-1", "a-2", "b-1", "b-2"}));
  EXPECT_EQ(expand_braces("x{08..10}"), (std::vector<std::string>{"x08", "x09", "x10"}));
  EXPECT_EQ(expand_braces("x{3..1}"), (std::vector<std::string>{"x3", "x2", "x1"}));
  EXPECT_EQ(expand_braces("{a,b{1,2}}"), (std::vector<std::string>{"a", "b1", "b2"}));
  EXPECT_EQ(expand_braces("plain.tar"), (std::vector<std::string>{"plain.tar"}));
  EXPECT_EQ(expand_braces("{x}"), (std::vector<std::string>{"{x}"}));
  EXPECT_THROW(expand_braces("a{1..2"), InvalidArgument);
  EXPECT_THROW(expand_braces("a}b"), InvalidArgument);
  EXPECT_THROW(expand_braces("{1..z}"), InvalidArgument);
  EXPECT_TRUE(is_shard_spec("a/b.tar"));
  EXPECT_TRUE(is_shard_spec("list.txt"));
  EXPECT_FALSE(is_shard_spec("data/catsdogs"));

  TempDir dir;
  {
    std::ofstream list(dir / "shards.txt");
    list << "# train\n" << (vectors() / "pax.tar").string() << "\n\nsub/x-{1..2}.tar\n";
  }
  EXPECT_EQ(shard_paths((dir / "shards.txt").string()),
            (std::vector<std::string>{(vectors() / "pax.tar").string(), (dir / "sub/x-1.tar").string(),
                                      (dir / "sub/x-2.tar").string()}));
}

TEST(WebDataset, LabelFromAJsonField) {
  TempDir dir;
  {
    TarWriter w(dir / "j.tar");
    const auto img = test::read_bytes(vectors() / "ustar.tar");  // any bytes: the index does not decode
    const std::string a = R"({"label": 1})", b = R"({"label": "blue"})", c = R"({"other": 0})";
    w.add("k1.jpg", {img.data(), 10});
    w.add("k1.json", {reinterpret_cast<const std::uint8_t*>(a.data()), a.size()});
    w.add("k2.jpg", {img.data(), 10});
    w.add("k2.json", {reinterpret_cast<const std::uint8_t*>(b.data()), b.size()});
    w.add("k3.jpg", {img.data(), 10});
    w.add("k3.json", {reinterpret_cast<const std::uint8_t*>(c.data()), c.size()});
    w.finish();
  }
  WebDatasetOptions o;
  o.label_field = "label";
  o.classes_file = vectors() / "classes.txt";
  o.skip_bad_samples = true;
  WebDatasetReport report;
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{(dir / "j.tar").string()}, o, &report);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.samples[0].label, 1);
  EXPECT_EQ(ds.samples[1].label, 2);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].key, "k3");
}

// A class-per-folder dataset of JPEGs and PNGs (names with dots, spaces) and its shards.
struct ShardFixture {
  ShardFixture() {
    for (int c = 0; c < 2; ++c) {
      const fs::path folder = dir / "data" / ("class" + std::to_string(c));
      fs::create_directories(folder);
      for (int i = 0; i < 9; ++i) {
        const cv::Mat img = test::make_pattern_rgb(30 + i, 40 + 3 * i, c * 50 + i);
        const std::string stem = "img " + std::to_string(i) + ".v1";
        if (i % 4 == 0) test::write_png(folder / (stem + ".png"), img);
        else test::write_jpeg(folder / (stem + ".JPG"), img);
      }
    }
    folder = dataset_from_directory(dir / "data");
    ShardWriteOptions o;
    o.pattern = (dir / "shards" / "train-%06d.tar").string();
    o.max_bytes = 20000;  // several shards
    written = write_webdataset_shards(folder, o);
  }
  TempDir dir;
  Dataset folder;
  ShardWriteResult written;
};

LoaderOptions options(int threads) {
  LoaderOptions o;
  o.image_height = 16;
  o.image_width = 20;
  o.batch_size = 5;
  o.threads = threads;
  o.prefetch = 2;
  o.seed = 7;
  o.label_mode = LabelMode::Sparse;
  return o;
}

// sample id -> (pixels, label), one epoch.
std::map<std::int64_t, std::pair<std::vector<std::byte>, float>> epoch(Loader& loader, std::uint64_t e,
                                                                       std::vector<std::int64_t>* order = nullptr) {
  std::map<std::int64_t, std::pair<std::vector<std::byte>, float>> out;
  loader.begin_epoch(e);
  while (auto b = loader.next()) {
    const auto n = b->sample_shape().bytes();
    for (int i = 0; i < b->size(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      const std::byte* p = b->pixels() + n * k;
      const float label = b->label_width() ? b->labels()[k * static_cast<std::size_t>(b->label_width())] : -1.0f;
      out[b->sample_ids()[k]] = {std::vector<std::byte>(p, p + n), label};
      if (order) order->push_back(b->sample_ids()[k]);
    }
  }
  return out;
}

TEST(WebDataset, ShardsWrittenFromAFolderLoadWithTheSameSamplesAndPixels) {
  ShardFixture f;
  ASSERT_GE(f.written.shards.size(), 3u);
  EXPECT_EQ(f.written.samples, f.folder.size());
  for (const auto& s : f.written.shards) EXPECT_LE(fs::file_size(s), 20000u) << s;
  const std::string pattern =
      (f.dir / "shards" / ("train-{000000..00000" + std::to_string(f.written.shards.size() - 1) + "}.tar")).string();
  const Dataset tar = dataset_from_webdataset(pattern);
  EXPECT_EQ(tar.class_names, f.folder.class_names);
  ASSERT_EQ(tar.size(), f.folder.size());
  for (std::size_t i = 0; i < tar.size(); ++i) {
    EXPECT_EQ(tar.samples[i].label, f.folder.samples[i].label);
    const std::string ext = fs::path(f.folder.samples[i].path).extension().string() == ".png" ? ".png" : ".jpg";
    EXPECT_TRUE(tar.samples[i].member.ends_with(ext)) << tar.samples[i].member;
  }
  for (int threads : {1, 2}) {
    Loader a(f.folder, options(threads)), b(tar, options(threads));
    std::vector<std::int64_t> order_a, order_b;
    const auto da = epoch(a, 3, &order_a), db = epoch(b, 3, &order_b);
    EXPECT_EQ(order_a, order_b);  // shuffled alike: same order, same pixels, same labels
    EXPECT_EQ(da, db);
    EXPECT_EQ(da.size(), f.folder.size());
  }
}

TEST(WebDataset, ShuffledShardsHoldEverySampleOnce) {
  ShardFixture f;
  ShardWriteOptions o;
  o.pattern = (f.dir / "mixed" / "m-%d.tar").string();
  o.shuffle = true;
  o.seed = 3;
  const auto w = write_webdataset_shards(f.folder, o);
  ASSERT_EQ(w.shards.size(), 1u);
  const Dataset tar = dataset_from_webdataset(w.shards);
  ASSERT_EQ(tar.size(), f.folder.size());
  std::set<std::string> keys;
  bool reordered = false;
  for (std::size_t i = 0; i < tar.size(); ++i) {
    keys.insert(tar.samples[i].member.substr(0, 8));
    char position[24];
    std::snprintf(position, sizeof position, "%08zu", i);
    reordered = reordered || tar.samples[i].member.substr(0, 8) != position;
  }
  EXPECT_EQ(keys.size(), f.folder.size());
  EXPECT_TRUE(reordered);
  EXPECT_THROW(write_webdataset_shards(f.folder, {.pattern = "x.tar"}), InvalidArgument);
  EXPECT_THROW(write_webdataset_shards(f.folder, {.pattern = "x-%d-%d.tar"}), InvalidArgument);
}

// Stopped (should_stop) in the middle of its third shard: no shard, temporary or classes.txt is
// left, and the folder takes a new write of the same pattern.
TEST(WebDataset, StoppedShardWriteLeavesNothing) {
  ShardFixture f;
  ASSERT_GE(f.written.shards.size(), 4u);
  ShardWriteOptions o;
  o.pattern = (f.dir / "stopped" / "s-%03d.tar").string();
  o.max_bytes = 20000;
  int asked = 0;
  const std::size_t stop_at = f.folder.size() / 2;  // past two closed shards
  o.should_stop = [&] { return static_cast<std::size_t>(++asked) > stop_at; };
  const auto w = write_webdataset_shards(f.folder, o);
  EXPECT_TRUE(w.stopped);
  EXPECT_TRUE(w.shards.empty());
  EXPECT_EQ(static_cast<std::size_t>(asked), stop_at + 1);
  EXPECT_TRUE(fs::is_empty(f.dir / "stopped"));
  o.should_stop = {};
  const auto again = write_webdataset_shards(f.folder, o);  // nothing refused
  EXPECT_FALSE(again.stopped);
  EXPECT_EQ(again.shards.size(), f.written.shards.size());
  EXPECT_EQ(again.samples, f.folder.size());
}

TEST(WebDataset, RanksShareTarSamplesWithoutOverlap) {
  ShardFixture f;
  const Dataset tar = dataset_from_webdataset(f.written.shards);
  std::map<std::int64_t, int> seen;
  for (int r = 0; r < 3; ++r) {
    auto o = options(2);
    o.sharding = Sharding{r, 3};
    Loader loader(tar, o);
    loader.begin_epoch(1);
    while (auto b = loader.next()) {
      for (int i = 0; i < b->size(); ++i) {
        if (!b->padding()[static_cast<std::size_t>(i)]) ++seen[b->sample_ids()[static_cast<std::size_t>(i)]];
      }
    }
  }
  EXPECT_EQ(seen.size(), tar.size());
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
}

TEST(WebDataset, CachesKeepMembersApartAndAChangedShardInvalidatesThem) {
  ShardFixture f;
  const Dataset tar = dataset_from_webdataset(f.written.shards);
  const Dataset folder = f.folder;
  for (CacheKind kind : {CacheKind::Encoded, CacheKind::Decoded}) {
    auto o = options(2);
    o.cache.kind = kind;
    o.cache.file = f.dir / ("cache-" + std::string(to_string(kind)) + ".bin");
    Loader plain(folder, options(2));
    const auto expected = epoch(plain, 0);
    {
      Loader loader(tar, o);
      EXPECT_EQ(epoch(loader, 0), expected);
      EXPECT_EQ(epoch(loader, 1).size(), expected.size());
      EXPECT_EQ(loader.stats().cache_hits, tar.size());
    }
    {
      Loader warm(tar, o);  // from the cache file: every member is its own entry
      EXPECT_NE(warm.cache_status().find(std::to_string(tar.size()) + " of " + std::to_string(tar.size())),
                std::string::npos)
          << warm.cache_status();
      EXPECT_EQ(epoch(warm, 0), expected);
      EXPECT_EQ(warm.stats().cache_hits, tar.size());
    }
    // Rewriting one shard (a new mtime) makes its members stale, and only its members.
    const std::string changed = f.written.shards[1];
    fs::last_write_time(changed, fs::last_write_time(changed) + std::chrono::seconds(5));
    std::size_t in_changed = 0;
    for (const auto& s : tar.samples) in_changed += s.path == changed;
    Loader stale(tar, o);
    EXPECT_EQ(epoch(stale, 0), expected);
    EXPECT_EQ(stale.stats().cache_hits, tar.size() - in_changed);
    EXPECT_EQ(stale.stats().cache_misses, in_changed);
  }
}

// The shard index file: a second open reads every unchanged shard from it and lists the same samples;
// a rewritten shard, other options or a damaged file make it scan again, and skips are kept.
TEST(WebDataset, ShardIndexFileSkipsTheScanOfUnchangedShards) {
  ShardFixture f;
  const std::vector<std::string>& shards = f.written.shards;
  WebDatasetOptions o;
  o.index_file = f.dir / "shards.index";
  WebDatasetReport first, second;
  const Dataset scanned = dataset_from_webdataset(shards, o, &first);
  EXPECT_EQ(first.shards_from_index, 0u);
  ASSERT_TRUE(fs::exists(o.index_file));
  const Dataset indexed = dataset_from_webdataset(shards, o, &second);
  EXPECT_EQ(second.shards_from_index, shards.size());
  EXPECT_EQ(second.members, first.members);
  ASSERT_EQ(indexed.size(), scanned.size());
  EXPECT_EQ(indexed.class_names, scanned.class_names);
  for (std::size_t i = 0; i < scanned.size(); ++i) {
    EXPECT_EQ(indexed.samples[i].path, scanned.samples[i].path);
    EXPECT_EQ(indexed.samples[i].member, scanned.samples[i].member);
    EXPECT_EQ(indexed.samples[i].label, scanned.samples[i].label);
    EXPECT_EQ(indexed.samples[i].range, scanned.samples[i].range);
  }
  // The same pixels through a loader.
  Loader a(scanned, options(1)), b(indexed, options(2));
  EXPECT_EQ(epoch(a, 0), epoch(b, 0));

  // A shard rewritten (another mtime, here also another size) is scanned again; the others are not.
  {
    const std::string bytes = read_whole_file(shards.back());
    std::ofstream(shards.back(), std::ios::binary | std::ios::trunc) << bytes << std::string(512 * 2, '\0');
  }
  WebDatasetReport third;
  EXPECT_EQ(dataset_from_webdataset(shards, o, &third).size(), scanned.size());
  EXPECT_EQ(third.shards_from_index, shards.size() - 1);

  // Other options are another index; a damaged index file is rebuilt without an error.
  WebDatasetOptions skipping = o;
  skipping.skip_bad_samples = true;
  WebDatasetReport fourth;
  dataset_from_webdataset(shards, skipping, &fourth);
  EXPECT_EQ(fourth.shards_from_index, 0u);
  for (const std::size_t keep : {std::size_t{0}, std::size_t{20}, fs::file_size(o.index_file) - 3}) {
    const std::string bytes = read_whole_file(o.index_file);
    std::ofstream(o.index_file, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
    WebDatasetReport again;
    EXPECT_EQ(dataset_from_webdataset(shards, skipping, &again).size(), scanned.size()) << keep;
    EXPECT_EQ(again.shards_from_index, 0u) << "a cut index is not trusted: " << keep;
  }
}

// A shard's skipped samples are reported again when the shard comes from the index.
TEST(WebDataset, ShardIndexKeepsTheSkippedSamples) {
  TempDir dir;
  const std::string shard = (dir / "nolabel.tar").string();
  fs::copy_file(vectors() / "nolabel.tar", shard);
  WebDatasetOptions o;
  o.skip_bad_samples = true;
  o.index_file = dir / "index";
  WebDatasetReport first, second;
  dataset_from_webdataset(std::vector<std::string>{shard}, o, &first);
  const Dataset ds = dataset_from_webdataset(std::vector<std::string>{shard}, o, &second);
  EXPECT_EQ(second.shards_from_index, 1u);
  ASSERT_EQ(ds.size(), 2u);
  ASSERT_EQ(second.skipped.size(), 1u);
  EXPECT_EQ(second.skipped[0].key, "s008");
  EXPECT_EQ(second.skipped[0].reason, first.skipped[0].reason);
}

TEST(WebDataset, UndecodableMemberIsADecodeErrorNamingShardAndMember) {
  TempDir dir;
  const std::string shard = (dir / "s.tar").string();
  {
    TarWriter w(shard);
    const std::string text = "not a jpeg at all", label = "0";
    const auto img = test::read_bytes(vectors() / "ustar.tar");
    w.add("good.ppm", {img.data() + 512, 59});  // s005.ppm's bytes
    w.add("good.cls", {reinterpret_cast<const std::uint8_t*>(label.data()), 1});
    w.add("bad.jpg", {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
    w.add("bad.cls", {reinterpret_cast<const std::uint8_t*>(label.data()), 1});
    w.finish();
  }
  const Dataset tar = dataset_from_webdataset(std::vector<std::string>{shard});
  ASSERT_EQ(tar.size(), 2u);
  auto o = options(1);
  o.label_mode = LabelMode::None;
  {
    Loader loader(tar, o);
    try {
      epoch(loader, 0);
      ADD_FAILURE() << "no error";
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.path(), shard + ":bad.jpg");
      EXPECT_NE(e.reason().find("not an image"), std::string::npos) << e.reason();
    }
  }
  o.on_bad_sample = BadSamplePolicy::Skip;
  Loader loader(tar, o);
  EXPECT_EQ(epoch(loader, 0).size(), 1u);
  ASSERT_EQ(loader.skipped().size(), 1u);
  EXPECT_EQ(loader.skipped()[0].path, shard + ":bad.jpg");

  // A shard cut short after indexing: the member's range lies past the end.
  fs::resize_file(shard, 1024);
  Loader cut(tar, o);
  EXPECT_EQ(epoch(cut, 0).size(), 1u);
  ASSERT_EQ(cut.skipped().size(), 1u);
  EXPECT_NE(cut.skipped()[0].reason.find("past the end"), std::string::npos) << cut.skipped()[0].reason;
}

TEST(TarWriter, NamesOverAHundredBytesUseThePrefixAndAnUnfinishedArchiveIsRemoved) {
  TempDir dir;
  const std::string name = kLongDir + "/member.bin";
  {
    TarWriter w(dir / "a.tar");
    const std::uint8_t b[3] = {1, 2, 3};
    w.add(name, b);
    w.finish();
    EXPECT_EQ(w.bytes_written() % 10240, 0u);
  }
  const TarIndex index = index_tar(dir / "a.tar");
  ASSERT_EQ(index.members.size(), 1u);
  EXPECT_EQ(index.members[0].name, name);
  EXPECT_EQ(index.members[0].size, 3u);
  {
    TarWriter w(dir / "b.tar");
    EXPECT_THROW(w.add(std::string(120, 'x'), {}), InvalidArgument);
  }
  EXPECT_FALSE(fs::exists(dir / "b.tar"));
}

// The shards in `folder` whose names start with `prefix`, sorted.
std::vector<std::string> files_starting(const fs::path& folder, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Writing again into a pattern that has shards (any number of them) or another classes.txt is
// refused; --overwrite removes every earlier shard first, so that the pattern then loads the new
// set alone (a larger shard size used to leave train-000001.tar and its duplicates behind).
TEST(WebDataset, ShardsOfAnEarlierWriteAreRefusedOrAllReplaced) {
  ShardFixture f;  // several shards of 20000 bytes in dir/shards
  const std::size_t before = f.written.shards.size();
  ASSERT_GE(before, 3u);
  const std::string bytes0 = read_whole_file(f.written.shards[0]);
  ShardWriteOptions o;
  o.pattern = (f.dir / "shards" / "train-%06d.tar").string();
  o.max_bytes = 1 << 20;  // one shard
  try {
    write_webdataset_shards(f.folder, o);
    FAIL() << "wrote over earlier shards";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(before) + " shards of 'train-%06d.tar'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_starting(f.dir / "shards", "train-").size(), before) << "nothing removed";
  EXPECT_EQ(read_whole_file(f.written.shards[0]), bytes0) << "nothing rewritten";

  // Another number width still belongs to the pattern.
  {
    TarWriter stray(f.dir / "shards" / "train-1234567.tar");
    stray.finish();
  }
  o.overwrite = true;
  const ShardWriteResult w = write_webdataset_shards(f.folder, o);
  EXPECT_EQ(w.replaced, before + 1);
  ASSERT_EQ(w.shards.size(), 1u);
  EXPECT_EQ(files_starting(f.dir / "shards", "train-"), std::vector<std::string>{"train-000000.tar"});
  EXPECT_EQ(dataset_from_webdataset(w.shards).size(), f.folder.size()) << "one set of samples, no duplicates";

  // Another pattern beside them with the same class names is no conflict; other class names are.
  o.overwrite = false;
  o.pattern = (f.dir / "shards" / "val-%d.tar").string();
  EXPECT_NO_THROW(write_webdataset_shards(f.folder, o));
  Dataset renamed = f.folder;
  renamed.class_names = {"cat", "dog"};
  o.pattern = (f.dir / "shards" / "other-%d.tar").string();
  EXPECT_THROW(write_webdataset_shards(renamed, o), IoError);
  EXPECT_TRUE(files_starting(f.dir / "shards", "other-").empty());
  EXPECT_THROW(write_webdataset_shards(f.folder, {.pattern = (f.dir / "x-%d" / "s.tar").string()}), InvalidArgument);
  // A file of another kind under a shard's name is not removed, even with overwrite.
  std::ofstream(f.dir / "shards" / "val-7.tar") << "my notes\n";
  o.pattern = (f.dir / "shards" / "val-%d.tar").string();
  o.overwrite = true;
  EXPECT_THROW(write_webdataset_shards(f.folder, o), IoError);
  EXPECT_EQ(read_whole_file(f.dir / "shards" / "val-7.tar"), "my notes\n");
  EXPECT_TRUE(fs::exists(f.dir / "shards" / "val-0.tar"));
}

// A shard is written under a temporary name: while it is being written, and after a writer that
// never finished, no file has the shard's name.
TEST(TarWriter, NoFileHasTheShardsNameUntilItIsComplete) {
  TempDir dir;
  const std::uint8_t b[3] = {1, 2, 3};
  {
    TarWriter w(dir / "s.tar");
    w.add("a.bin", b);
    EXPECT_FALSE(fs::exists(dir / "s.tar"));
    EXPECT_EQ(files_starting(dir.path(), "s.tar.tmp.").size(), 1u);
    w.finish();
    EXPECT_TRUE(fs::exists(dir / "s.tar"));
  }
  EXPECT_TRUE(files_starting(dir.path(), "s.tar.tmp.").empty());
  EXPECT_EQ(index_tar(dir / "s.tar").members.size(), 1u);
}

// The disk fills (a file-size limit, which binds root too): the shard's error names it, no file is
// left under its name, and a file written atomically keeps its previous content.
TEST(TarWriter, AFailedWriteNamesTheFileAndLeavesNothingUnderItsName) {
  TempDir dir;
  write_file_atomically(dir / "kept.txt", "previous\n");
  const std::vector<std::uint8_t> big(64 * 1024, 7);
  {
    test::FileSizeLimit full(16 * 1024);
    TarWriter w(dir / "s.tar");
    try {
      w.add("a.bin", big);
      w.finish();
      FAIL() << "the write did not fail";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find((dir / "s.tar").string()), std::string::npos) << e.what();
    }
    try {
      write_file_atomically(dir / "kept.txt", std::string(big.begin(), big.end()));
      FAIL() << "the write did not fail";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find((dir / "kept.txt").string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(dir / "s.tar"));
  EXPECT_EQ(read_whole_file(dir / "kept.txt"), "previous\n");
  EXPECT_EQ(files_starting(dir.path(), "kept.txt").size(), 1u) << "no temporary left";
  EXPECT_TRUE(files_starting(dir.path(), "s.tar").empty());
}

// --shard-index naming a file that is not an index (the user's notes) is refused, the file untouched.
TEST(WebDataset, AShardIndexPathHoldingAnotherFileIsRefusedAndLeftAlone) {
  ShardFixture f;
  const fs::path notes = f.dir / "shards" / "notes.txt";
  std::ofstream(notes) << "my notes\n";
  WebDatasetOptions o;
  o.index_file = notes;
  try {
    dataset_from_webdataset(f.written.shards, o);
    FAIL() << "a foreign file was taken as the index";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt: exists and is not a shard index"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_whole_file(notes), "my notes\n");
  o.index_file = f.dir / "shards" / "index";
  dataset_from_webdataset(f.written.shards, o);
  EXPECT_NO_THROW(dataset_from_webdataset(f.written.shards, o)) << "its own file is read again";
}

}  // namespace
}  // namespace stoker
