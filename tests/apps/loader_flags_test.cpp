// The command's loader flags come from the settings' table: every setting has its flag, with the
// table's help and default, and the flags convert through loader_options_from().
#include "loader_flags.hpp"

#include "commands.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "stoker/core/error.hpp"

namespace stoker::app {
namespace {

class LoaderFlagsTable : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) unsetenv(v);
  }
};

TEST_F(LoaderFlagsTable, EverySettingHasAFlagWithTheTablesHelpAndDefault) {
  LoaderFlags flags;
  CLI::App app;
  flags.add_to(app);
  for (const auto& s : loader_settings()) {
    const CLI::Option* option = app.get_option_no_throw(s.flag());
    ASSERT_NE(option, nullptr) << s.flag();
    EXPECT_NE(option->get_description().find(std::string(s.help)), std::string::npos) << s.flag();
    EXPECT_EQ(flags.text(s), s.default_for(kWhereCommand)) << s.name;
    if (s.type == SettingType::Boolean && s.default_value == "true") {
      EXPECT_NE(app.get_option_no_throw("--no-" + s.flag().substr(2)), nullptr) << s.flag();
    }
  }
  EXPECT_EQ(LoaderFlags::members().size(), loader_settings().size()) << "a field for a setting the table lacks";
}

TEST_F(LoaderFlagsTable, TrainTakesItsOwnDefaults) {
  LoaderFlags flags;
  flags.use_defaults_of(kWhereTrain);
  EXPECT_EQ(flags.interpolation, "opencv_linear");
  EXPECT_EQ(flags.prefetch, 0);
  for (const auto& s : loader_settings()) EXPECT_EQ(flags.text(s), s.default_for(kWhereTrain)) << s.name;
}

// What each command shows as a flag's default is the table's for it (train: its own differences).
TEST_F(LoaderFlagsTable, EachCommandShowsTheTablesDefaults) {
  CLI::App app;
  add_load_command(app);
  add_bench_command(app);
  add_cache_command(app);
  add_train_command(app);
  const std::vector<std::pair<CLI::App*, std::string_view>> commands = {
      {app.get_subcommand("load"), kWhereCommand},
      {app.get_subcommand("bench"), kWhereCommand},
      {app.get_subcommand("cache")->get_subcommand("build"), kWhereCacheBuild},
      {app.get_subcommand("train"), kWhereTrain}};
  for (const auto& [cmd, where] : commands) {
    for (const auto& s : loader_settings()) {
      const CLI::Option* option = cmd->get_option_no_throw(s.flag());
      ASSERT_NE(option, nullptr) << cmd->get_name() << " " << s.flag();
      if (s.type == SettingType::Boolean || s.may_be_unset() || s.default_value.empty()) continue;
      EXPECT_EQ(option->get_default_str(), s.default_for(where)) << cmd->get_name() << " " << s.flag();
    }
  }
}

TEST_F(LoaderFlagsTable, DefaultFlagsGiveTheTablesOptions) {
  const LoaderOptions o = LoaderFlags().options();
  const LoaderOptions t = loader_options_from({}, kWhereCommand);
  EXPECT_EQ(o.batch_size, t.batch_size);
  EXPECT_EQ(o.image_height, t.image_height);
  EXPECT_EQ(o.prefetch, t.prefetch);
  EXPECT_EQ(o.label_mode, LabelMode::Sparse);
  EXPECT_EQ(o.interpolation, Interpolation::Nearest);
  EXPECT_EQ(o.cache.budget_bytes, t.cache.budget_bytes);
  EXPECT_EQ(o.sharding->world_size, 1);
}

LoaderOptions parsed(std::vector<std::string> args) {
  LoaderFlags flags;
  CLI::App app;
  flags.add_to(app);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return flags.options();
}

TEST_F(LoaderFlagsTable, FlagsReachTheOptions) {
  const LoaderOptions o = parsed({"--no-shuffle", "--drop-last", "--no-dct-scaling", "--label-mode", "categorical",
                                  "--rank", "1", "--world-size", "2", "--drop-remainder", "--prefetch", "3"});
  EXPECT_FALSE(o.shuffle);
  EXPECT_TRUE(o.drop_last);
  EXPECT_FALSE(o.dct_scaling);
  EXPECT_EQ(o.label_mode, LabelMode::Categorical);
  EXPECT_EQ(o.prefetch, 3);
  EXPECT_EQ(o.sharding->rank, 1);
  EXPECT_EQ(o.sharding->world_size, 2);
  EXPECT_TRUE(o.sharding->drop_remainder);
  EXPECT_TRUE(parsed({"--shard-remainder", "drop"}).sharding->drop_remainder);  // the older spelling
  EXPECT_THROW(parsed({"--shard-remainder", "cut"}), InvalidArgument);
  EXPECT_THROW(parsed({"--rank", "1"}), InvalidArgument);
  EXPECT_THROW(parsed({"--interpolation", "cubic"}), InvalidArgument);
}

}  // namespace
}  // namespace stoker::app
