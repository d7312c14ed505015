// Hostile WebDataset input: a label, a class count read back from a shard index or a brace
// pattern never sizes an allocation beyond fixed bounds; each is refused with a stoker::Error
// naming what was received (or, for a shard index, the index is not trusted and rebuilt).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/tar.hpp"
#include "stoker/pipeline/webdataset.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// A shard of one sample: k.ppm (any bytes: the index does not decode) and k.cls holding `label`.
void write_shard(const fs::path& shard, const std::string& label) {
  TarWriter w(shard);
  const std::uint8_t image[4] = {1, 2, 3, 4};
  w.add("k.ppm", image);
  w.add("k.cls", {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()});
  w.finish();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a stoker::Error: ") + e.what();
  }
  return "(no error)";
}

#define EXPECT_MENTIONS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "'" << (part) << "' not in: " << (message)

// Without classes.txt the classes are "0".."K-1": a .cls of two billion must not make two billion names.
TEST(HostileShards, ALabelBeyondTheClassLimitWithoutClassNamesIsRefused) {
  test::TempDir dir;
  const fs::path shard = dir / "big.tar";
  write_shard(shard, "1100000");
  const std::string why = error_of([&] { dataset_from_webdataset(std::vector<std::string>{shard.string()}); });
  EXPECT_MENTIONS(why, "big.tar");
  EXPECT_MENTIONS(why, "'k'");
  EXPECT_MENTIONS(why, "1100000");
  EXPECT_MENTIONS(why, "classes.txt");

  write_shard(shard, "2000000000");
  EXPECT_MENTIONS(error_of([&] { dataset_from_webdataset(std::vector<std::string>{shard.string()}); }), "2000000000");

  // Skipped when asked, as any bad sample.
  write_shard(dir / "ok.tar", "3");
  WebDatasetOptions o;
  o.skip_bad_samples = true;
  WebDatasetReport report;
  const Dataset ds =
      dataset_from_webdataset(std::vector<std::string>{shard.string(), (dir / "ok.tar").string()}, o, &report);
  EXPECT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds.class_names.size(), 4u);
  EXPECT_EQ(report.skipped.size(), 1u);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The index's sample table starts after the 16-byte preamble and its JSON header: i32 label,
// u64 offset, u64 size, u32 name length, name.
void patch_first_sample(const fs::path& index, std::int32_t label, std::uint64_t offset) {
  std::string bytes = read_all(index);
  std::uint64_t len = 0;
  std::memcpy(&len, bytes.data() + 8, 8);
  std::memcpy(bytes.data() + 16 + len, &label, 4);
  std::memcpy(bytes.data() + 16 + len + 4, &offset, 8);
  std::ofstream(index, std::ios::binary | std::ios::trunc) << bytes;
}

// Labels and ranges read back from a shard index are those a scan could give, else the index is rebuilt.
TEST(HostileShards, LabelsAndRangesFromAShardIndexAreValidated) {
  test::TempDir dir;
  const fs::path shard = dir / "s.tar";
  write_shard(shard, "0");
  WebDatasetOptions o;
  o.index_file = dir / "shards.index";
  const std::vector<std::string> shards{shard.string()};
  const Dataset scanned = dataset_from_webdataset(shards, o);
  ASSERT_EQ(scanned.class_names.size(), 1u);
  const std::uint64_t offset = scanned.samples.at(0).range->offset;

  struct Case {
    std::int32_t label;
    std::uint64_t offset;
  };
  for (const Case c : {Case{1100000, offset}, Case{2000000000, offset}, Case{-1, offset}, Case{-7, offset},
                       Case{0, std::uint64_t{1} << 40}, Case{0, ~std::uint64_t{0}}}) {
    SCOPED_TRACE("label " + std::to_string(c.label) + " offset " + std::to_string(c.offset));
    patch_first_sample(o.index_file, c.label, c.offset);
    WebDatasetReport report;
    const Dataset ds = dataset_from_webdataset(shards, o, &report);
    EXPECT_EQ(report.shards_from_index, 0u) << "an implausible index is rebuilt, not trusted";
    EXPECT_EQ(ds.class_names.size(), 1u);
    ASSERT_EQ(ds.size(), 1u);
    EXPECT_EQ(ds.samples[0].label, 0);
    EXPECT_EQ(ds.samples[0].range->offset, offset);
  }
  WebDatasetReport report;
  dataset_from_webdataset(shards, o, &report);
  EXPECT_EQ(report.shards_from_index, 1u) << "the rebuilt index is used";
}

// A brace pattern's names are bounded as a product, not only range by range.
// Found by fuzz_webdataset: names that are not UTF-8 (a member's key, a class name in a Latin-1
// classes.txt) made the shard index's JSON writer throw nlohmann's type_error out of
// dataset_from_webdataset. They are written as U+FFFD there; the samples keep their own bytes, and
// the index still serves the next call.
TEST(HostileShards, NamesThatAreNotUtf8GoThroughTheShardIndex) {
  test::TempDir dir;
  const fs::path shard = dir / "s.tar";
  {
    TarWriter w(shard);
    const std::uint8_t image[4] = {1, 2, 3, 4};
    const std::string one = "1";
    w.add("caf\xe9.ppm", image);
    w.add("caf\xe9.cls", {reinterpret_cast<const std::uint8_t*>(one.data()), one.size()});
    w.add("lonely\xff.cls", {reinterpret_cast<const std::uint8_t*>(one.data()), one.size()});  // no image
    w.finish();
  }
  std::ofstream(dir / "classes.txt") << "th\xe9\nca\xff\n";
  WebDatasetOptions o;
  o.index_file = dir / "shards.index";
  o.skip_bad_samples = true;
  const std::vector<std::string> shards{shard.string()};
  WebDatasetReport first, second;
  const Dataset scanned = dataset_from_webdataset(shards, o, &first);
  ASSERT_EQ(scanned.samples.size(), 1u);
  EXPECT_EQ(scanned.samples[0].member, "caf\xe9.ppm");
  EXPECT_EQ(scanned.class_names.at(1), "ca\xff");
  ASSERT_EQ(first.skipped.size(), 1u);
  const Dataset indexed = dataset_from_webdataset(shards, o, &second);
  EXPECT_EQ(second.shards_from_index, 1u);
  ASSERT_EQ(indexed.samples.size(), 1u);
  EXPECT_EQ(indexed.samples[0].member, "caf\xe9.ppm");
  EXPECT_EQ(indexed.samples[0].label, 1);
  // Class names that differ only in bytes that are not UTF-8 are other options: the index is not used.
  std::ofstream(dir / "classes.txt") << "th\xe8\nca\xff\n";
  WebDatasetReport third;
  dataset_from_webdataset(shards, o, &third);
  EXPECT_EQ(third.shards_from_index, 0u);
}

TEST(HostileShards, TheProductOfBraceRangesIsBounded) {
  EXPECT_EQ(expand_braces("{0..99}{0..99}").size(), 10000u);
  // Refused before any name is made, whichever part holds the product (25 two-way groups in a row,
  // or a small group before a large range, used to build millions of names first).
  std::string two_way;
  for (int i = 0; i < 25; ++i) two_way += "{a,b}";
  for (const std::string& pattern : {std::string("s{0..3999}-{0..3999}.tar"), std::string("{0..99999}{0..99999}"),
                                     two_way, std::string("{a,b}{0..9999999}")}) {
    SCOPED_TRACE(pattern.substr(0, 60));
    const std::string why = error_of([&] { expand_braces(pattern); });
    EXPECT_MENTIONS(why, "brace pattern");
    EXPECT_MENTIONS(why, "over 10000000 names");
  }
  // Braces nested (or chained) without end: refused, not a deep recursion.
  const std::string deep = std::string(100000, '{') + "x" + std::string(100000, '}');
  EXPECT_MENTIONS(error_of([&] { expand_braces(deep); }), "brace groups");
  std::string chain;
  for (int i = 0; i < 100000; ++i) chain += "{x}";
  EXPECT_MENTIONS(error_of([&] { expand_braces(chain); }), "brace groups");
}

}  // namespace
}  // namespace stoker
