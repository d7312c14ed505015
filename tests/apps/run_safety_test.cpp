// What the command must never do, whatever the user or the machine does: save a diverged epoch as
// the best, let two runs mix their files in one folder, take a wrong count of values or a
// misspelled setting silently, read a damaged checkpoint, crash on a full disk, or lose its output
// without a word.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "command_support.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/run_folder.hpp"
#include "test_support.hpp"

namespace {
namespace fs = std::filesystem;
using stoker::test::CommandResult;
using stoker::test::TempDir;

CommandResult stoker(const std::string& args, const std::string& prefix = "") {
  return stoker::test::run_command(prefix + (prefix.empty() ? "" : " ") + stoker::test::stoker_binary() + " " + args);
}

const std::string kModel = (stoker::test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5").string();

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

class RunSafety : public ::testing::Test {
 protected:
  void SetUp() override { stoker::test::make_dataset(dir / "data", 8); }
  // A small run: 96x96, features computed once.
  std::string train_args(const std::string& out, const std::string& extra = "") const {
    return "train --data " + (dir / "data").string() + " --model " + kModel +
           " --image-size 96 --epochs 2 --batch-size 8 --threads 2 --device cpu --out " + (dir / out).string() + " " +
           extra;
  }
  TempDir dir;
};

// A fine-tuning rate that makes the loss NaN: the run stops at once with a named error, the best
// epoch stays the last finite one (head.stkh, history.json) and the checkpoint is that epoch's end.
TEST_F(RunSafety, ANonFiniteLossStopsTheRunAndKeepsTheLastFiniteBest) {
  const CommandResult t = stoker(train_args("out",
                                            "--fine-tune-from block_16_expand --fine-tune-epochs 2 "
                                            "--fine-tune-learning-rate 1e30 --fine-tune-optimizer sgd"));
  EXPECT_EQ(t.exit_code, 2) << t.out;
  EXPECT_TRUE(contains(t.out, "stoker: error: epoch 3: the training loss is")) << t.out;
  EXPECT_FALSE(contains(t.out, "nan | best so far")) << t.out;
  const fs::path out = dir / "out";
  const auto history = nlohmann::json::parse(stoker::test::read_text(out / "history.json"));
  ASSERT_EQ(history["epochs"].size(), 2u) << history.dump();
  for (const auto& e : history["epochs"]) {
    EXPECT_TRUE(e["loss"].is_number() && std::isfinite(e["loss"].get<double>())) << e.dump();
    EXPECT_TRUE(e["val_loss"].is_number() && std::isfinite(e["val_loss"].get<double>())) << e.dump();
  }
  const stoker::trainer::Head head = stoker::trainer::Head::load(out / "head.stkh");
  for (float w : head.kernel()) ASSERT_TRUE(std::isfinite(w));
  const auto checkpoint = stoker::training::load_checkpoint(out / stoker::training::kCheckpointFile);
  EXPECT_EQ(checkpoint.epoch, 2);
  EXPECT_EQ(checkpoint.best_epoch, 1);
  // The folder predicts with the best finite head.
  const CommandResult p =
      stoker("predict --json --model-dir " + out.string() + " " + (dir / "data" / "dog" / "img1.jpg").string());
  ASSERT_EQ(p.exit_code, 0) << p.out;
  const auto rows = nlohmann::json::parse(p.out.substr(p.out.find('[')));
  EXPECT_TRUE(std::isfinite(rows[0]["probability"].get<double>())) << p.out;
}

// A folder another run holds is refused before anything is written into it.
TEST_F(RunSafety, AFolderAnotherRunHoldsIsRefused) {
  const fs::path out = dir / "held";
  {
    const stoker::training::RunFolderLock held(out);
    const CommandResult t = stoker(train_args("held"));
    EXPECT_EQ(t.exit_code, 2) << t.out;
    EXPECT_TRUE(contains(t.out, "held: another stoker train is running in this folder")) << t.out;
    EXPECT_TRUE(fs::is_empty(out));
    // A second lock in the same process is refused as well (two threads training into one folder).
    EXPECT_THROW(stoker::training::RunFolderLock{out}, stoker::IoError);
  }
  // Released with its holder: the folder trains.
  const CommandResult t = stoker(train_args("held", "--epochs 1"));
  EXPECT_EQ(t.exit_code, 0) << t.out;
}

// Two runs started together on one --out: one trains, the other is refused; the folder holds one
// run, which continues.
TEST_F(RunSafety, TwoRunsStartedTogetherOnOneFolderDoNotMix) {
  const std::string command = "exec " + stoker::test::stoker_binary() + " " + train_args("same");
  const pid_t a = stoker::test::start_command(command, dir / "a.log");
  const pid_t b = stoker::test::start_command(command, dir / "b.log");
  const int ra = stoker::test::wait_for(a), rb = stoker::test::wait_for(b);
  const std::string logs = stoker::test::read_text(dir / "a.log") + stoker::test::read_text(dir / "b.log");
  EXPECT_EQ(std::min(ra, rb), 0) << logs;
  EXPECT_EQ(std::max(ra, rb), 2) << logs;
  EXPECT_TRUE(contains(logs, "another stoker train is running in this folder")) << logs;
  const CommandResult resumed = stoker("train --resume " + (dir / "same").string() + " --epochs 3");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
}

// Values of several-value flags are counted, on the command line and in a config file; a config
// file's misspelled key, table or header is an error naming it.
TEST_F(RunSafety, FlagCountsAndConfigFilesAreChecked) {
  const CommandResult three = stoker(train_args("z", "--zoom-range 0.8 1.2 5"));
  EXPECT_NE(three.exit_code, 0) << three.out;
  EXPECT_FALSE(fs::exists(dir / "z"));
  const CommandResult one = stoker(train_args("b", "--brightness-range 0.5"));
  EXPECT_NE(one.exit_code, 0) << one.out;
  EXPECT_TRUE(contains(one.out, "--brightness-range: At least 2 required but received 1")) << one.out;
  EXPECT_FALSE(fs::exists(dir / "b"));
  const CommandResult crop = stoker(train_args("r", "--random-resized-crop 0.1,0.5,1"));
  EXPECT_EQ(crop.exit_code, 2) << crop.out;
  EXPECT_TRUE(contains(crop.out, "--random-resized-crop takes SCALE_LO,SCALE_HI[,RATIO_LO,RATIO_HI], received 3"))
      << crop.out;
  EXPECT_FALSE(fs::exists(dir / "r"));
  const CommandResult commas = stoker(train_args("c", "--epochs 1 --brightness-range 0.9,1.1 --zoom-range 0.9,1.1"));
  EXPECT_EQ(commas.exit_code, 0) << commas.out;
  const auto settings = nlohmann::json::parse(stoker::test::read_text(dir / "c" / "train_settings.json"));
  EXPECT_TRUE(contains(settings.dump(), "[0.9,1.1]")) << settings.dump();

  const auto with_config = [&](const std::string& text) {
    std::ofstream(dir / "c.toml") << text;
    return stoker("--config " + (dir / "c.toml").string() + " " + train_args("cfg"));
  };
  const CommandResult single = with_config("[train]\nbrightness-range = 0.5\n");
  EXPECT_NE(single.exit_code, 0) << single.out;
  EXPECT_TRUE(contains(single.out, "--brightness-range: At least 2 required but received 1")) << single.out;
  const CommandResult zoom = with_config("[train]\nzoom-range = [0.5, 0.6, 0.7]\n");
  EXPECT_NE(zoom.exit_code, 0) << zoom.out;
  EXPECT_TRUE(contains(zoom.out, "--zoom-range")) << zoom.out;
  const CommandResult key = with_config("[train]\nepoch = 2\n");
  EXPECT_EQ(key.exit_code, 2) << key.out;
  EXPECT_TRUE(contains(key.out, "c.toml: 'epoch' is not a setting of [train]")) << key.out;
  const CommandResult table = with_config("[trian]\nepochs = 2\n");
  EXPECT_EQ(table.exit_code, 2) << table.out;
  EXPECT_TRUE(contains(table.out, "c.toml: [trian] is not a command's table")) << table.out;
  const CommandResult header = with_config("[train\nepochs = 2\n");
  EXPECT_EQ(header.exit_code, 2) << header.out;
  EXPECT_TRUE(contains(header.out, "c.toml: malformed table header '[train'")) << header.out;
  EXPECT_FALSE(fs::exists(dir / "cfg"));
}

// Checkpoints, heads and saved features carry checksums: four bytes overwritten anywhere and
// --resume or predict refuse the file by name.
TEST_F(RunSafety, ADamagedCheckpointOrHeadIsRefused) {
  const fs::path out = dir / "out";
  ASSERT_EQ(stoker(train_args("out", "--epochs 1")).exit_code, 0);
  const auto damage = [](const fs::path& file, std::size_t at) {
    std::vector<std::uint8_t> bytes = stoker::test::read_bytes(file);
    ASSERT_GT(bytes.size(), at + 4);
    for (std::size_t i = at; i < at + 4; ++i) bytes[i] ^= 0x5a;
    stoker::test::write_bytes(file, bytes);
  };
  const fs::path checkpoint = out / stoker::training::kCheckpointFile;
  damage(checkpoint, stoker::test::read_bytes(checkpoint).size() / 2);
  const CommandResult resumed = stoker("train --resume " + out.string() + " --epochs 2");
  EXPECT_EQ(resumed.exit_code, 2) << resumed.out;
  EXPECT_TRUE(contains(resumed.out, "checkpoint.stkc: damaged")) << resumed.out;
  damage(out / "head.stkh", 200);
  const CommandResult p = stoker("predict --model-dir " + out.string() + " " + (dir / "data/cat/img0.jpg").string());
  EXPECT_EQ(p.exit_code, 2) << p.out;
  EXPECT_TRUE(contains(p.out, "head.stkh: damaged")) << p.out;
}

// The disk fills while the exported model is written: a named error, exit 2, no crash in libhdf5
// at exit, and the folder keeps no partial model.h5.
TEST_F(RunSafety, AFullDiskWhileExportingIsANamedError) {
  const CommandResult t = stoker(train_args("out", "--epochs 1"), "trap '' XFSZ; ulimit -f 1000; exec");
  EXPECT_EQ(t.exit_code, 2) << t.out;
  EXPECT_TRUE(contains(t.out, "model.h5: cannot write")) << t.out;
  EXPECT_FALSE(fs::exists(dir / "out" / "model.h5"));
}

// Output to a device that is full is an error, stdout included.
TEST_F(RunSafety, OutputThatCannotBeWrittenIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  ASSERT_EQ(stoker(train_args("out", "--epochs 1")).exit_code, 0);
  const std::string image = (dir / "data/cat/img0.jpg").string();
  // Braces: stdout to the device, stderr still to the test.
  const auto to_full = [](const std::string& args) {
    return stoker::test::run_command("{ " + stoker::test::stoker_binary() + " " + args + " >/dev/full; }");
  };
  const CommandResult p = to_full("predict --json --model-dir " + (dir / "out").string() + " " + image);
  EXPECT_EQ(p.exit_code, 2) << p.out;
  EXPECT_TRUE(contains(p.out, "stoker: error: cannot write the output (stdout)")) << p.out;
  const CommandResult v = to_full("verify --json --data " + (dir / "data").string());
  EXPECT_EQ(v.exit_code, 2) << v.out;
  const CommandResult l = stoker("load --data " + (dir / "data").string() +
                                 " --image-size 32 --batch-size 4 --epochs 1 --list-samples /dev/full");
  EXPECT_EQ(l.exit_code, 2) << l.out;
  EXPECT_TRUE(contains(l.out, "/dev/full: cannot write the sample list")) << l.out;
  EXPECT_TRUE(fs::is_character_file("/dev/full")) << "the device was replaced";
}

// shard stopped by a file it cannot read, after finishing some shards: none is left, so no
// pattern reads the part written as a smaller dataset.
TEST_F(RunSafety, AShardRunThatFailsLeavesNoShards) {
  std::ofstream{dir / "data" / "dog" / "zzz_empty.jpg"};  // read last
  const fs::path shards = dir / "shards";
  const CommandResult r =
      stoker("shard --data " + (dir / "data").string() + " --max-size 10240 --out " + (shards / "s-%04d.tar").string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "zzz_empty.jpg")) << r.out;
  if (fs::exists(shards))
    for (const auto& entry : fs::directory_iterator(shards)) ADD_FAILURE() << "left behind: " << entry.path();
}

// The model.h5 a run exports normalises its input itself: predict --model on it gives what the
// folder gives, and a preprocessing given for it (which would normalise twice) is refused.
TEST_F(RunSafety, TheExportedModelPredictsAsItsFolder) {
  ASSERT_EQ(stoker(train_args("out", "--epochs 1")).exit_code, 0);
  const std::string image = (dir / "data/dog/img2.jpg").string(), out = (dir / "out").string();
  const auto probability = [](const CommandResult& r) {
    return nlohmann::json::parse(r.out.substr(r.out.find('[')))[0]["probabilities"]["1"].get<double>();
  };
  const CommandResult folder = stoker("predict --json --model-dir " + out + " " + image);
  const CommandResult file = stoker("predict --json --model " + out + "/model.h5 " + image);
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  ASSERT_EQ(file.exit_code, 0) << file.out;
  const double from_folder =
      nlohmann::json::parse(folder.out.substr(folder.out.find('[')))[0]["probabilities"]["dog"].get<double>();
  EXPECT_NEAR(probability(file), from_folder, 1e-4) << file.out << folder.out;
  const CommandResult twice = stoker("predict --preprocess tf --model " + out + "/model.h5 " + image);
  EXPECT_EQ(twice.exit_code, 2) << twice.out;
  EXPECT_TRUE(contains(twice.out, "would normalise twice")) << twice.out;
}

// shard reads each file's header as the loader would: GIF bytes named .jpg fail the write by
// name, or are left out and named with --on-bad-sample skip.
TEST_F(RunSafety, ShardRefusesOrSkipsWhatTheLoaderWouldRefuse) {
  std::ofstream(dir / "data" / "cat" / "fake.jpg") << "GIF89a\x01\x00\x01\x00";
  const std::string args = "shard --data " + (dir / "data").string() + " --out ";
  const CommandResult fail = stoker(args + (dir / "a" / "s-%04d.tar").string());
  EXPECT_EQ(fail.exit_code, 2) << fail.out;
  EXPECT_TRUE(contains(fail.out, "fake.jpg")) << fail.out;
  const CommandResult skip = stoker(args + (dir / "b" / "s-%04d.tar").string() + " --on-bad-sample skip");
  ASSERT_EQ(skip.exit_code, 0) << skip.out;
  EXPECT_TRUE(contains(skip.out, "stoker: skipped " + (dir / "data" / "cat" / "fake.jpg").string())) << skip.out;
  EXPECT_TRUE(contains(skip.out, "16 samples in 2 classes")) << skip.out;
}

}  // namespace
