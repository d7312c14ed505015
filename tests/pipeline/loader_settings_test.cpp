// The settings' table: its defaults are LoaderOptions' own, every setting reaches LoaderOptions,
// and values are checked with messages that name the setting and what was received.
#include "stoker/pipeline/loader_settings.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "stoker/core/error.hpp"

namespace stoker {
namespace {

// Every field of LoaderOptions a setting sets, as one line.
std::string describe(const LoaderOptions& o) {
  std::ostringstream s;
  s << o.batch_size << ' ' << o.image_height << 'x' << o.image_width << ' ' << static_cast<int>(o.interpolation) << ' '
    << o.keep_aspect_ratio << ' ' << o.dct_scaling << ' ' << static_cast<int>(o.label_mode) << ' ' << o.shuffle << ' '
    << o.seed << ' ' << o.drop_last << ' ' << o.threads << ' ' << o.prefetch << ' ' << static_cast<int>(o.on_bad_sample)
    << ' ' << static_cast<int>(o.cache.kind) << ' ' << o.cache.budget_bytes << ' ' << o.cache.file << ' '
    << o.limits.max_pixels;
  if (o.sharding) {
    s << ' ' << o.sharding->rank << '/' << o.sharding->world_size << ' ' << static_cast<int>(o.sharding->mode) << ' '
      << o.sharding->drop_remainder;
  }
  return s.str();
}

class LoaderSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) unsetenv(v);
  }
};

TEST_F(LoaderSettings, TheTablesDefaultsAreLoaderOptionsDefaults) {
  LoaderOptions plain;
  plain.sharding = Sharding{};
  EXPECT_EQ(describe(loader_options_from({})), describe(plain));
}

TEST_F(LoaderSettings, NamesAreUniqueAndEveryDefaultIsValid) {
  std::set<std::string_view> names;
  for (const auto& s : loader_settings()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.help.empty()) << s.name;
    EXPECT_EQ(&loader_setting(s.name), &s);
    for (const auto where : {kWhereCommand, kWhereTrain, kWhereCacheBuild, kWherePython, kWhereTorch, kWhereJax}) {
      EXPECT_NO_THROW(setting_value({{std::string(s.name), std::string(s.default_for(where))}}, s.name, where))
          << s.name << " at " << where;
    }
    for (const auto& d : s.differences) {
      EXPECT_TRUE(d.where == kWhereCommand || d.where == kWhereTrain || d.where == kWhereCacheBuild ||
                  d.where == kWherePython || d.where == kWhereTorch || d.where == kWhereJax)
          << s.name << ": " << d.where;
      EXPECT_NE(d.value, s.default_value) << s.name << " lists a difference that is none";
      EXPECT_FALSE(d.why.empty()) << s.name << " at " << d.where << " says not why";
    }
  }
  EXPECT_EQ(loader_setting("batch_size").flag(), "--batch-size");
  EXPECT_EQ(loader_setting("interpolation").default_for(kWhereTorch), "bilinear");
  EXPECT_EQ(loader_setting("interpolation").default_for(kWherePython), "nearest");
  EXPECT_EQ(loader_setting("prefetch").default_for(kWhereTrain), "0");  // a subcommand takes the command's
}

// A setting that loader_options_from() did not read would leave the options unchanged.
TEST_F(LoaderSettings, EverySettingReachesLoaderOptions) {
  const std::string base = describe(loader_options_from({}));
  for (const auto& s : loader_settings()) {
    LoaderSettingValues given;
    std::string v;
    switch (s.type) {
      case SettingType::Integer:
        v = s.default_value.empty() ? "1" : std::to_string(std::stoll(std::string(s.default_value)) + 1);
        break;
      case SettingType::Boolean: v = s.default_value == "true" ? "false" : "true"; break;
      case SettingType::Choice: v = std::string(s.choices.at(s.choices[0] == s.default_value ? 1 : 0)); break;
      case SettingType::ByteSize: v = "1MiB"; break;
      case SettingType::ImageSize: v = "20,30"; break;
      case SettingType::Text: v = "some.cache"; break;
    }
    if (s.name == "world_size") v = "3";
    given[std::string(s.name)] = v;
    if (s.name == "rank" || s.name == "world_size") {  // given together; compared with rank 0 of 1
      given.emplace("world_size", "2");
      given.emplace("rank", "0");
      EXPECT_NE(describe(loader_options_from(given)), base) << s.name << "=" << v << " did not change LoaderOptions";
      continue;
    }
    if (s.name == "cache_file") given["cache"] = "encoded";
    LoaderSettingValues without_it = given;
    without_it.erase(std::string(s.name));
    EXPECT_NE(describe(loader_options_from(given)), describe(loader_options_from(without_it)))
        << s.name << "=" << v << " did not change LoaderOptions";
  }
}

void expect_refused(const LoaderSettingValues& given, const std::string& message) {
  try {
    loader_options_from(given);
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST_F(LoaderSettings, ValuesAreCheckedAndTheMessageNamesTheSetting) {
  expect_refused({{"batch_sise", "3"}}, "unknown loader setting 'batch_sise'");
  expect_refused({{"batch_size", "0"}}, "batch_size must be >= 1, received '0'");
  expect_refused({{"batch_size", "ten"}}, "batch_size must be a whole number, received 'ten'");
  expect_refused({{"interpolation", "cubic"}}, "interpolation must be one of nearest, bilinear");
  expect_refused({{"shuffle", "maybe"}}, "shuffle must be true or false, received 'maybe'");
  expect_refused({{"image_size", "0"}}, "image_size must be >= 1");
  expect_refused({{"cache_budget", "lots"}}, "byte size");
  expect_refused({{"cache_file", "x.cache"}}, "cache_file needs cache encoded or decoded");
  expect_refused({{"rank", "1"}}, "give rank and world_size together (received only rank)");
  expect_refused({{"world_size", "2"}}, "give rank and world_size together (received only world_size)");
  expect_refused({{"rank", "2"}, {"world_size", "2"}}, "rank must be in [0, world_size = 2), received 2");
  EXPECT_EQ(loader_options_from({{"label_mode", "Categorical"}}).label_mode, LabelMode::Categorical);
  EXPECT_EQ(loader_options_from({{"shuffle", "no"}}).shuffle, false);
}

TEST_F(LoaderSettings, PrefetchZeroIsTwoBatchesPerDecodeThread) {
  EXPECT_EQ(loader_options_from({{"prefetch", "0"}, {"threads", "3"}}).prefetch, 6);
  EXPECT_GE(loader_options_from({{"prefetch", "0"}}).prefetch, 2);
  EXPECT_EQ(loader_options_from({}, kWhereCommand).prefetch, loader_options_from({{"prefetch", "0"}}).prefetch);
}

TEST_F(LoaderSettings, RankAndWorldSizeTogetherOrFromTheEnvironment) {
  const Sharding given = resolve_sharding(1, 3, ShardMode::Fixed, true);
  EXPECT_EQ(given.rank, 1);
  EXPECT_EQ(given.world_size, 3);
  EXPECT_EQ(given.mode, ShardMode::Fixed);
  EXPECT_TRUE(given.drop_remainder);
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  const Sharding env = resolve_sharding(std::nullopt, std::nullopt);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(loader_options_from({{"rank", "0"}, {"world_size", "1"}}).sharding->world_size, 1);  // given wins
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  EXPECT_THROW(resolve_sharding(0, std::nullopt), InvalidArgument);
}

// A wrong rank or world size is named with its value, whichever is wrong (a world size of 0 read
// "rank must be in [0, world_size = 0), received 0").
TEST_F(LoaderSettings, AWrongRankOrWorldSizeIsNamedWithItsValue) {
  expect_refused({{"rank", "-1"}, {"world_size", "2"}}, "rank must be >= 0, received '-1'");
  expect_refused({{"world_size", "0"}}, "world_size must be >= 1, received '0'");
  expect_refused({{"rank", "0"}, {"world_size", "0"}}, "world_size must be >= 1, received '0'");
  for (const auto& [rank, world, message] :
       {std::tuple{0, 0, "world_size must be >= 1, received 0"}, std::tuple{-1, 2, "received -1"},
        std::tuple{0, -3, "world_size must be >= 1, received -3"}}) {
    try {
      resolve_sharding(rank, world);
      ADD_FAILURE() << rank << " of " << world << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The decoder's pixel cap is a setting, by default Pillow's Image.MAX_IMAGE_PIXELS (about 179 MP;
// it was a fixed 100 MP).
TEST_F(LoaderSettings, TheDecodersPixelCapIsASettingWithPillowsDefault) {
  EXPECT_EQ(loader_setting("max_image_pixels").default_value, "178956970");
  EXPECT_EQ(loader_options_from({}).limits.max_pixels, 178'956'970);
  EXPECT_EQ(DecodeLimits{}.max_pixels, 178'956'970);
  EXPECT_EQ(loader_options_from({{"max_image_pixels", "400000000"}}).limits.max_pixels, 400'000'000);
  expect_refused({{"max_image_pixels", "0"}}, "max_image_pixels must be >= 1, received '0'");
}

}  // namespace
}  // namespace stoker
