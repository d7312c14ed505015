// The stoker command stopped by SIGINT or SIGTERM: it finishes its batch, saves where it stands and
// says how to continue; --resume then ends where an uninterrupted run ends.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include "command_support.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stop_signals.hpp"
#include "test_support.hpp"

namespace {
namespace fs = std::filesystem;
using stoker::test::make_dataset;
using stoker::test::read_text;
using stoker::test::stoker_binary;
using stoker::test::TempDir;
using stoker::test::wait_for;

const std::string kModel = (stoker::test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5").string();

// The command in a child process (the command itself, for the signals), its output into `log`.
pid_t start(const std::string& args, const fs::path& log) {
  return stoker::test::start_command("exec " + stoker_binary() + " " + args, log);
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) found.push_back(e.path().string());
  return found;
}

class Stop : public ::testing::Test {
 protected:
  TempDir tmp;
  fs::path dir = tmp.path();
};

// SIGINT in the second epoch: exit 130 with the message, a checkpoint where it stopped and no
// temporary file; --resume ends with the history and heads of the uninterrupted run.
TEST_F(Stop, TrainInterruptedResumesToTheSameHead) {
  make_dataset(dir / "data", 24);
  const std::string args = "train --data " + (dir / "data").string() + " --model " + kModel +
                           " --cut-at sequential_9 --image-size 160 --epochs 3 --batch-size 4 --threads 2 --device cpu"
                           " --horizontal-flip --rotation-range 20 --out ";
  const pid_t whole_pid = start(args + (dir / "whole").string(), dir / "whole.log");
  ASSERT_EQ(wait_for(whole_pid), 0) << read_text(dir / "whole.log");

  const fs::path out = dir / "stopped";
  const pid_t pid = start(args + out.string(), dir / "stopped.log");
  // Interrupted as soon as the first epoch's history is written: inside the second epoch.
  bool sent = false;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       !sent && std::chrono::steady_clock::now() < until;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL() << "the run ended first: " << read_text(dir / "stopped.log");
    if (fs::exists(out / "history.json")) sent = ::kill(pid, SIGINT) == 0;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(sent);
  const int code = wait_for(pid);
  const std::string log = read_text(dir / "stopped.log");
  ASSERT_EQ(code, 130) << log;
  const stoker::training::Checkpoint at_stop =
      stoker::training::load_checkpoint(out / stoker::training::kCheckpointFile);
  ASSERT_GE(at_stop.epoch, 1) << log;
  const std::string where = at_stop.loader.next_batch > 0
                                ? "stopped at epoch " + std::to_string(at_stop.epoch + 1) + ", batch " +
                                      std::to_string(at_stop.loader.next_batch)
                                : "stopped at the start of epoch " + std::to_string(at_stop.epoch + 1);
  EXPECT_NE(log.find(where + ": continue with stoker train --resume " + out.string()), std::string::npos) << log;
  EXPECT_EQ(temporaries(out), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(out / "model.h5")) << "the classifier is written when the run ends";

  const pid_t resumed = start("train --resume " + out.string(), dir / "resumed.log");
  ASSERT_EQ(wait_for(resumed), 0) << read_text(dir / "resumed.log");
  auto heads = [](const fs::path& run) {
    const auto c = stoker::training::load_checkpoint(run / stoker::training::kCheckpointFile);
    return std::pair{c.head->serialize(), stoker::trainer::Head::load(run / "head.stkh").serialize()};
  };
  EXPECT_EQ(heads(out).first, heads(dir / "whole").first) << "the last epoch's head, with Adam's moments";
  EXPECT_EQ(heads(out).second, heads(dir / "whole").second) << "the best epoch's head";
  const auto ha = nlohmann::json::parse(read_text(dir / "whole" / "history.json"));
  const auto hb = nlohmann::json::parse(read_text(out / "history.json"));
  ASSERT_EQ(hb["epochs"].size(), 3u);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(ha["epochs"][e]["loss"], hb["epochs"][e]["loss"]) << "epoch " << e;
    EXPECT_EQ(ha["epochs"][e]["val_loss"], hb["epochs"][e]["val_loss"]) << "epoch " << e;
  }
  EXPECT_EQ(ha["best_epoch"], hb["best_epoch"]);
  EXPECT_TRUE(temporaries(out).empty());
}

// shard stopped once its first shard is in place: exit 130, and no shard, temporary or
// classes.txt is left (an incomplete set would read as a smaller dataset).
TEST_F(Stop, ShardInterruptedLeavesNoShard) {
  make_dataset(dir / "data", 40);
  const fs::path shards = dir / "shards";
  const pid_t pid =
      start("shard --data " + (dir / "data").string() + " --max-size 10240 --out " + (shards / "s-%04d.tar").string(),
            dir / "shard.log");
  auto first_shard = [&] {
    std::error_code ec;
    return fs::exists(shards / "s-0000.tar", ec);
  };
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       !first_shard() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  const int code = wait_for(pid);
  const std::string log = read_text(dir / "shard.log");
  if (code == 0 && log.find("80 samples") != std::string::npos) GTEST_SKIP() << "it finished before the signal";
  ASSERT_EQ(code, 130) << log;
  EXPECT_NE(log.find("stopped: no shard written"), std::string::npos) << log;
  EXPECT_TRUE(fs::is_empty(shards)) << log;
}

// The first signal is recorded and puts the default disposition of both back (a second one
// kills); the handlers go when the StopSignals does.
TEST(StopSignals, FirstSignalIsRecordedSecondKills) {
  auto handler = [](int sig) {
    struct sigaction now {};
    ::sigaction(sig, nullptr, &now);
    return now.sa_handler;
  };
  {
    const stoker::app::StopSignals signals;
    EXPECT_EQ(stoker::app::StopSignals::received(), 0);
    EXPECT_NE(handler(SIGINT), SIG_DFL);
    EXPECT_NE(handler(SIGTERM), SIG_DFL);
    ASSERT_EQ(::raise(SIGTERM), 0);  // handled: the test goes on
    EXPECT_EQ(stoker::app::StopSignals::received(), SIGTERM);
    EXPECT_EQ(stoker::app::StopSignals::exit_status(), 143);
    EXPECT_EQ(handler(SIGINT), SIG_DFL);
    EXPECT_EQ(handler(SIGTERM), SIG_DFL);
  }
  EXPECT_EQ(handler(SIGINT), SIG_DFL);  // gtest's own dispositions
  const stoker::app::StopSignals again;
  EXPECT_EQ(stoker::app::StopSignals::received(), 0);
  ASSERT_EQ(::raise(SIGINT), 0);
  EXPECT_EQ(stoker::app::StopSignals::exit_status(), 130);
}

}  // namespace
