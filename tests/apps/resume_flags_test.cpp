// `stoker train --resume` takes along exactly the flags that training::run_identity() says may
// change: each is a flag of the command that apply_override() sets, and each flag of a defining
// setting is refused.
#include "train_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "stoker/core/error.hpp"
#include "stoker/training/run_identity.hpp"

namespace stoker::app {
namespace {

std::vector<std::string> flags_of(const training::RunSetting& s) {
  std::vector<std::string> flags;
  std::string_view rest = s.flags;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find(' '), rest.size());
    flags.emplace_back(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return flags;
}

TEST(ResumeFlags, EveryFlagOfTheRunIdentityIsATrainFlag) {
  TrainConfig config;
  CLI::App app;
  config.add_to(app);
  std::size_t flags = 0;
  for (const training::RunSetting& s : training::run_identity()) {
    for (const std::string& f : flags_of(s)) {
      EXPECT_NO_THROW(app.get_option("--" + f)) << s.name << ": --" << f;
      ++flags;
    }
  }
  EXPECT_GT(flags, 40u);
}

TEST(ResumeFlags, WhatMayChangeIsAppliedAndADefiningSettingIsRefused) {
  TrainConfig saved, given;
  given.epochs = 25;
  given.loader.threads = 3;
  given.fine_tune_epochs = 7;
  given.learning_rate = 0.5;
  std::size_t may_change = 0;
  for (const training::RunSetting& s : training::run_identity()) {
    for (const std::string& f : flags_of(s)) {
      EXPECT_EQ(resumable_override(f), s.may_change) << f;
      if (s.may_change) {
        EXPECT_NO_THROW(apply_override(saved, given, f)) << f;
        EXPECT_NE(resumable_flags().find("--" + f), std::string::npos) << f;
        ++may_change;
      } else {
        EXPECT_THROW(apply_override(saved, given, f), InvalidArgument) << f;
      }
    }
  }
  EXPECT_GE(may_change, 10u);
  EXPECT_EQ(saved.epochs, 25);
  EXPECT_EQ(saved.loader.threads, 3);
  EXPECT_EQ(saved.fine_tune_epochs, 7);
  EXPECT_EQ(saved.learning_rate, TrainConfig{}.learning_rate) << "a defining setting is never taken along";
  EXPECT_TRUE(resumable_override("resume"));
  EXPECT_FALSE(resumable_override("data"));
  EXPECT_EQ(resumable_flags().substr(0, 22), "--epochs, --threads, -");
  EXPECT_EQ(training::flags_of_setting("learning_rate"), "--learning-rate");
  EXPECT_EQ(training::flags_of_setting("epochs"), "") << "not a defining setting";
}

}  // namespace
}  // namespace stoker::app
