// `stoker train` on two ranks under mpirun (Open MPI, on this machine's loopback): the history and
// the head equal a one-process run's with the same global batch, seed and data, and only rank 0
// writes. Skipped in a build without MPI (STOKER_DISTRIBUTED) or without mpirun.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stoker/core/cuda.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/training/collective.hpp"
#include "test_support.hpp"

namespace {
namespace fs = std::filesystem;

using stoker::test::CommandResult;
using stoker::test::run_command;

// Two classes that differ in colour, 11 and 10 images: with a validation split of 0.3 the 15
// training images do not divide between two ranks (a share is padded with a repeat).
void make_dataset(const fs::path& root) {
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(root / (c ? "dog" : "cat"));
    for (int i = 0; i < 11 - c; ++i) {
      cv::Mat img = stoker::test::make_pattern_rgb(90 + i, 120, i);
      img.forEach<cv::Vec3b>(
          [&](cv::Vec3b& px, const int*) { px[c ? 2 : 0] = static_cast<unsigned char>(150 + 9 * i); });
      stoker::test::write_jpeg(root / (c ? "dog" : "cat") / ("img" + std::to_string(i) + ".jpg"), img);
    }
  }
}

nlohmann::json history(const fs::path& out) {
  std::ifstream in(out / "history.json");
  return nlohmann::json::parse(in);
}

// Two runs' histories of `epochs` epochs: the same phases, images and accuracies, the losses
// within `tolerance` (the order of the gradients' sums differs).
void expect_same_figures(const nlohmann::json& a, const nlohmann::json& b, std::size_t epochs, double tolerance) {
  ASSERT_EQ(a["epochs"].size(), epochs);
  ASSERT_EQ(b["epochs"].size(), epochs);
  for (std::size_t e = 0; e < epochs; ++e) {
    const auto &x = a["epochs"][e], &y = b["epochs"][e];
    EXPECT_EQ(x["fine_tuning"], y["fine_tuning"]) << e;
    EXPECT_EQ(x["images"], y["images"]) << e;
    EXPECT_EQ(x["accuracy"], y["accuracy"]) << e;
    EXPECT_EQ(x["val_accuracy"], y["val_accuracy"]) << e;
    EXPECT_NEAR(x["loss"].get<double>(), y["loss"].get<double>(), tolerance) << e;
    EXPECT_NEAR(x["val_loss"].get<double>(), y["val_loss"].get<double>(), tolerance) << e;
  }
}

using stoker::test::read_text;

// A shell command run in the background, its output in `log`; its process group is killed when the
// test ends.
class Background {
 public:
  Background(const std::string& command, const fs::path& log) : pid_(stoker::test::start_command(command, log)) {}
  ~Background() {
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // The exit status once the command ends within `limit`; nullopt if it is still running.
  std::optional<int> wait(std::chrono::duration<double> limit) {
    if (!status_) status_ = stoker::test::wait_for(pid_, limit);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Polls `ready` every few milliseconds for up to `limit`.
bool wait_until(const std::function<bool()>& ready, std::chrono::duration<double> limit) {
  for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ready();
}

// The process of rank `rank` whose command line mentions `marker` (its --out), from the
// environment Open MPI gives its ranks; -1 when there is none.
pid_t find_rank(int rank, const std::string& marker) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(entry.path() / "cmdline"), environ = read_text(entry.path() / "environ");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    environ.push_back('\0');
    if (cmdline.find(marker) != std::string::npos && cmdline.find(" train ") != std::string::npos &&
        environ.find(wanted + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stoker::training::mpi_available()) GTEST_SKIP() << "built without MPI (STOKER_DISTRIBUTED)";
    if (std::string(STOKER_MPIEXEC).empty() || !fs::exists(STOKER_MPIEXEC)) GTEST_SKIP() << "no mpirun";
    make_dataset(dir / "data");
  }
  // The run's arguments but --out: --batch-size is the global batch.
  std::string train_args() const {
    return std::string(STOKER_CLI) + " train --data " + (dir / "data").string() + " --model " +
           (stoker::test::source_dir() / "data/models/mobilenet_v2_0.35_224_3class.h5").string() +
           " --cut-at sequential_9 --image-size 64 --epochs 3 --batch-size 4 --threads 1 --device cpu"
           " --validation-split 0.3 --seed 5";
  }
  // Open MPI's mpirun: two ranks on this machine (more ranks than cores allowed; as root in a
  // container, allowed too). `out0`/`out1` are each rank's --out, as an MPMD app context, and
  // `both` arguments for both ranks.
  std::string mpirun(const std::string& out0, const std::string& out1, const std::string& both = "") const {
    return launcher() + " -np 1 " + train_args() + both + " --out " + out0 + " : -np 1 " + train_args() + both +
           " --out " + out1;
  }
  // A bound, so that a rank waiting for a dead peer fails the test instead of hanging it. In the
  // sanitizer build the ranks keep AddressSanitizer but not its leak report at exit: Open MPI
  // leaves its own allocations (and those of plugins it has unloaded) to the process's end.
  static std::string launcher() {
    return "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 timeout 120 " + std::string(STOKER_MPIEXEC) +
           " --oversubscribe" + (::geteuid() == 0 ? " --allow-run-as-root" : "") + " --mca btl self,vader";
  }
  stoker::test::TempDir dir;
};

TEST_F(Distributed, TwoRanksEqualOneProcessAndOnlyRankZeroWrites) {
  const CommandResult one = run_command(train_args() + " --out " + (dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult two = run_command(mpirun((dir / "two").string(), (dir / "rank1").string()));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_NE(two.out.find("data-parallel: 2 ranks"), std::string::npos) << two.out;
  // Rank 1 was given its own --out: it must not exist (rank 1 writes nothing), and rank 0 wrote
  // the files one process writes.
  EXPECT_FALSE(fs::exists(dir / "rank1")) << "rank 1 wrote into its --out";
  for (const char* f : {"head.stkh", "model.h5", "stoker_model.json", "history.json", "checkpoint.stkc"})
    EXPECT_EQ(fs::exists(dir / "one" / f), fs::exists(dir / "two" / f)) << f;
  // One line per epoch, from rank 0 only.
  EXPECT_EQ(two.out.find("epoch 1/3"), two.out.rfind("epoch 1/3")) << two.out;

  // The same figures: the same samples in each global batch, the gradients summed in another
  // order (halves, then their sum) — float32 rounding, a few ulps a step, over 12 Adam steps
  // (measured: the losses within 3e-8).
  const nlohmann::json h1 = history(dir / "one"), h2 = history(dir / "two");
  ASSERT_EQ(h1["epochs"].size(), 3u);
  ASSERT_EQ(h2["epochs"].size(), 3u);
  EXPECT_EQ(h1["best_epoch"], h2["best_epoch"]);
  for (std::size_t e = 0; e < 3; ++e) {
    const auto &a = h1["epochs"][e], &b = h2["epochs"][e];
    EXPECT_EQ(a["images"], 15) << e;
    EXPECT_EQ(b["images"], 15) << e;
    EXPECT_EQ(a["val_images"], b["val_images"]) << e;
    EXPECT_EQ(a["accuracy"], b["accuracy"]) << e;
    EXPECT_EQ(a["val_accuracy"], b["val_accuracy"]) << e;
    EXPECT_NEAR(a["loss"].get<double>(), b["loss"].get<double>(), 1e-6) << e;
    EXPECT_NEAR(a["val_loss"].get<double>(), b["val_loss"].get<double>(), 1e-6) << e;
    EXPECT_EQ(a["improved"], b["improved"]) << e;
  }
  const auto head1 = stoker::trainer::Head::load(dir / "one" / "head.stkh");
  const auto head2 = stoker::trainer::Head::load(dir / "two" / "head.stkh");
  ASSERT_EQ(head1.kernel().size(), head2.kernel().size());
  double most = 0;
  for (std::size_t i = 0; i < head1.kernel().size(); ++i)
    most = std::max(most, static_cast<double>(std::abs(head1.kernel()[i] - head2.kernel()[i])));
  EXPECT_LT(most, 1e-5) << "largest kernel difference";
}

// The gradients are summed in rank order, not in the order MPI's reduction algorithm picks: two
// runs of the same world size end with the same head, bit for bit.
TEST_F(Distributed, TwoRunsOfTwoRanksAreBitIdentical) {
  const CommandResult a = run_command(mpirun((dir / "a").string(), (dir / "a1").string()));
  ASSERT_EQ(a.exit_code, 0) << a.out;
  const CommandResult b = run_command(mpirun((dir / "b").string(), (dir / "b1").string()));
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(stoker::trainer::Head::load(dir / "a" / "head.stkh").serialize(),
            stoker::trainer::Head::load(dir / "b" / "head.stkh").serialize());
  const nlohmann::json ha = history(dir / "a"), hb = history(dir / "b");
  ASSERT_EQ(ha["epochs"].size(), hb["epochs"].size());
  for (std::size_t e = 0; e < ha["epochs"].size(); ++e) {
    EXPECT_EQ(ha["epochs"][e]["loss"], hb["epochs"][e]["loss"]) << e;
    EXPECT_EQ(ha["epochs"][e]["val_loss"], hb["epochs"][e]["val_loss"]) << e;
  }
}

// Augmentation across ranks: each rank augments its share of each epoch, the features are gathered
// in the order one process's loader gives the epoch and trained on in its batches. The
// augmentation of a sample depends on the seed, the epoch and the sample alone, so the figures
// are one process's up to the order of the gradients' sums.
TEST_F(Distributed, AugmentationAcrossRanksEqualsOneProcess) {
  const std::string augment = " --horizontal-flip --rotation-range 15 --zoom-range 0.1";
  const CommandResult one = run_command(train_args() + augment + " --out " + (dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult two = run_command(mpirun((dir / "two").string(), (dir / "rank1").string(), augment));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_NE(two.out.find("this rank's augmented features"), std::string::npos) << two.out;
  EXPECT_FALSE(fs::exists(dir / "rank1")) << "rank 1 wrote into its --out";
  expect_same_figures(history(dir / "one"), history(dir / "two"), 3, 1e-6);
}

// A two-rank run stopped after its first epoch and resumed, across the two ranks or in one process,
// ends as the uninterrupted two-rank run: the checkpoint holds the head with its own Adam moments
// whatever the ranks, and ranks resume at an epoch's end (every rank reads rank 0's --out).
TEST_F(Distributed, ResumeAcrossRanksEqualsTheUninterruptedRun) {
  const fs::path full = dir / "full", part = dir / "part", single = dir / "single";
  ASSERT_EQ(run_command(mpirun(full.string(), (dir / "rank1").string())).exit_code, 0);
  auto first_epoch_only = [&](const fs::path& out) {
    std::string cmd = mpirun(out.string(), out.string());
    for (std::size_t at; (at = cmd.find(" --epochs 3")) != std::string::npos;) cmd.replace(at, 11, " --epochs 1");
    const CommandResult r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  };
  first_epoch_only(part);
  first_epoch_only(single);
  const std::string resume = std::string(STOKER_CLI) + " train --epochs 3 --resume ";
  const CommandResult across = run_command(launcher() + " -np 2 " + resume + part.string());
  ASSERT_EQ(across.exit_code, 0) << across.out;
  const CommandResult alone = run_command(resume + single.string());
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  const nlohmann::json h = history(full), ha = history(part), h1 = history(single);
  ASSERT_EQ(ha["epochs"].size(), 3u);
  ASSERT_EQ(h1["epochs"].size(), 3u);
  for (std::size_t e = 0; e < 3; ++e) {
    // Across the same ranks: the same sums in the same order, bit for bit.
    EXPECT_EQ(h["epochs"][e]["loss"], ha["epochs"][e]["loss"]) << e;
    EXPECT_EQ(h["epochs"][e]["val_loss"], ha["epochs"][e]["val_loss"]) << e;
    // In one process: its epochs' sums in one piece.
    EXPECT_NEAR(h["epochs"][e]["loss"].get<double>(), h1["epochs"][e]["loss"].get<double>(), 1e-6) << e;
    EXPECT_EQ(h["epochs"][e]["val_accuracy"], h1["epochs"][e]["val_accuracy"]) << e;
  }
  EXPECT_EQ(stoker::trainer::Head::load(full / "head.stkh").serialize(),
            stoker::trainer::Head::load(part / "head.stkh").serialize());

  // In the second phase: stopped after the first of two fine-tuning epochs, resumed on two ranks.
  const std::string tune = " --fine-tune-from block_16_expand --fine-tune-epochs ";
  const fs::path tuned = dir / "tuned", tuned_part = dir / "tuned_part";
  ASSERT_EQ(run_command(mpirun(tuned.string(), (dir / "rank1").string(), tune + "2")).exit_code, 0);
  ASSERT_EQ(run_command(mpirun(tuned_part.string(), tuned_part.string(), tune + "1")).exit_code, 0);
  const CommandResult tuned_resume = run_command(launcher() + " -np 2 " + std::string(STOKER_CLI) +
                                                 " train --fine-tune-epochs 2 --resume " + tuned_part.string());
  ASSERT_EQ(tuned_resume.exit_code, 0) << tuned_resume.out;
  const nlohmann::json ht = history(tuned), htp = history(tuned_part);
  ASSERT_EQ(htp["epochs"].size(), ht["epochs"].size());
  for (std::size_t e = 0; e < ht["epochs"].size(); ++e)
    EXPECT_EQ(ht["epochs"][e]["loss"], htp["epochs"][e]["loss"]) << e;
}

// A flag given to one rank only: every rank stops, naming the rank and the setting.
TEST_F(Distributed, RanksWithOtherSettingsAreRefused) {
  const CommandResult two =
      run_command(mpirun((dir / "two").string(), (dir / "rank1").string()) + " --horizontal-flip");
  EXPECT_NE(two.exit_code, 0) << two.out;
  EXPECT_NE(two.out.find("rank 1 runs with other settings than rank 0"), std::string::npos) << two.out;
}

// Fine-tuning across ranks (the head's phase, then the top from block_16_expand with the head):
// the frozen part's values gathered, each global batch split, the top's and the head's gradients
// summed every step. With and without augmentation, the history is one process's up to the order
// of the sums: a few ulps a step through Adam.
TEST_F(Distributed, FineTuningAcrossRanksEqualsOneProcess) {
  for (const std::string augment : {"", " --horizontal-flip --rotation-range 15"}) {
    SCOPED_TRACE(augment.empty() ? "without augmentation" : "with augmentation");
    const std::string tune = " --fine-tune-from block_16_expand --fine-tune-epochs 2" + augment;
    const fs::path one = dir / ("one" + std::to_string(augment.size())),
                   two = dir / ("two" + std::to_string(augment.size()));
    const CommandResult a = run_command(train_args() + tune + " --out " + one.string());
    ASSERT_EQ(a.exit_code, 0) << a.out;
    const CommandResult b = run_command(mpirun(two.string(), (dir / "rank1").string(), tune));
    ASSERT_EQ(b.exit_code, 0) << b.out;
    EXPECT_FALSE(fs::exists(dir / "rank1")) << "rank 1 wrote into its --out";
    expect_same_figures(history(one), history(two), 5, 1e-5);
    EXPECT_EQ(fs::exists(one / "backbone.h5"), fs::exists(two / "backbone.h5"));
  }
}

// One machine, two GPUs, no launcher: --device cuda:0,1 starts the command again as one rank per
// GPU under mpirun, each rank on its own device (its local rank), and the run is one process's on
// one of them. On the emulated CUDA device (STOKER_EMULATED_DEVICES=2) or a machine with two GPUs.
TEST_F(Distributed, OneRankPerGpuWithoutALauncher) {
  stoker::test::Env env;
  env.set("STOKER_EMULATED_DEVICES", "2");  // read by the emulated runtime only
  if (stoker::cuda_device_count() < 2) GTEST_SKIP() << "fewer than two CUDA devices";
  auto on = [&](const std::string& device, const fs::path& out) {
    std::string args = train_args();
    args.replace(args.find("--device cpu"), 12, "--device " + device);
    return run_command("ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 timeout 600 " + args + " --out " + out.string());
  };
  // Without augmentation (the features once), then with it and a fine-tuning phase on the GPUs.
  for (const std::string more : {"", " --horizontal-flip --fine-tune-from block_16_expand --fine-tune-epochs 1"}) {
    SCOPED_TRACE(more);
    const fs::path one = dir / ("one" + std::to_string(more.size())), two = dir / ("two" + std::to_string(more.size()));
    const CommandResult a = on("cuda:0" + more, one);
    ASSERT_EQ(a.exit_code, 0) << a.out;
    const CommandResult b = on("cuda:0,1" + more, two);
    ASSERT_EQ(b.exit_code, 0) << b.out;
    EXPECT_NE(b.out.find("one rank per GPU: "), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("data-parallel: 2 ranks"), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("; device cuda:0 ("), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("rank 1: device cuda:1 ("), std::string::npos) << b.out;
    // Rank 0's utilisation line watches rank 1's GPU too (NVML; none on the emulated device).
    EXPECT_NE(b.out.find("other ranks' GPUs (NVML): cuda:1 "), std::string::npos) << b.out;
    if (!more.empty())
      EXPECT_NE(b.out.find("of GPU memory for the training step at batch 4; on the GPU: "), std::string::npos) << b.out;
    const nlohmann::json h1 = history(one), h2 = history(two);
    ASSERT_EQ(h1["epochs"].size(), h2["epochs"].size());
    for (std::size_t e = 0; e < h1["epochs"].size(); ++e) {
      EXPECT_EQ(h2["epochs"][e]["utilisation"]["other_gpus"][0]["index"], 1) << e;
      EXPECT_EQ(h1["epochs"][e]["val_accuracy"], h2["epochs"][e]["val_accuracy"]) << e;
      EXPECT_NEAR(h1["epochs"][e]["loss"].get<double>(), h2["epochs"][e]["loss"].get<double>(), 1e-5) << e;
    }
    if (more.empty()) {  // resumed without --device: the recorded list, so again one rank per GPU
      const CommandResult resumed = run_command("ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 timeout 600 " +
                                                std::string(STOKER_CLI) + " train --epochs 4 --resume " + two.string());
      ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
      EXPECT_NE(resumed.out.find("one rank per GPU: "), std::string::npos) << resumed.out;
      EXPECT_EQ(history(two)["epochs"].size(), 4u);
    }
  }
}

// Three ranks (15 training images: shares of 5), both phases, with augmentation: one process's
// history up to the order of the sums.
TEST_F(Distributed, ThreeRanksEqualOneProcess) {
  const std::string run = " --fine-tune-from block_16_expand --fine-tune-epochs 1 --horizontal-flip --zoom-range 0.1";
  const CommandResult one = run_command(train_args() + run + " --out " + (dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult three =
      run_command(launcher() + " -np 3 " + train_args() + run + " --out " + (dir / "three").string());
  ASSERT_EQ(three.exit_code, 0) << three.out;
  EXPECT_NE(three.out.find("data-parallel: 3 ranks"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("exchange between ranks"), std::string::npos) << three.out;
  const nlohmann::json h3 = history(dir / "three");
  expect_same_figures(history(dir / "one"), h3, 4, 1e-5);
  for (const auto& e : h3["epochs"]) EXPECT_TRUE(e["utilisation"].contains("exchange_share"));
}

// A rank that stops answering without exiting (SIGSTOP: hung, or a machine lost without a reset)
// ends every rank after --peer-timeout, with the message, instead of leaving them waiting.
TEST_F(Distributed, AHungRankEndsEveryRankWithinThePeerTimeout) {
  const fs::path out = dir / "hung";
  Background job(
      launcher() + " -np 2 " + train_args() + " --epochs 200 --horizontal-flip --peer-timeout 2 --out " + out.string(),
      dir / "hung.log");
  ASSERT_TRUE(
      wait_until([&] { return read_text(dir / "hung.log").find("data-parallel: 2 ranks") != std::string::npos; },
                 std::chrono::seconds(60)))
      << read_text(dir / "hung.log");
  const pid_t rank1 = find_rank(1, out.string());
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const std::optional<int> status = job.wait(std::chrono::seconds(60));
  ASSERT_TRUE(status) << "the job still runs a minute after rank 1 stopped:\n" << read_text(dir / "hung.log");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  EXPECT_NE(*status, 0);
  EXPECT_LT(seconds, 30) << "ended long after the 2 s timeout";
  const std::string log = read_text(dir / "hung.log");
  EXPECT_NE(log.find("rank 0 of 2): no answer from the other ranks for 2 s"), std::string::npos) << log;
}

// A rank killed in the middle of a run (SIGKILL) ends every rank, the launcher naming it; the
// model folder holds the last epoch's checkpoint, from which --resume ends as the uninterrupted
// run does, bit for bit.
TEST_F(Distributed, AKilledRankEndsTheJobAndResumeFinishesTheRun) {
  const std::string run = " --epochs 40 --horizontal-flip --rotation-range 10";
  const fs::path full = dir / "full", killed = dir / "killed";
  const CommandResult uninterrupted =
      run_command(launcher() + " -np 2 " + train_args() + run + " --out " + full.string());
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.out;

  Background job(launcher() + " -np 2 " + train_args() + run + " --out " + killed.string(), dir / "killed.log");
  // history.json is written at the end of each epoch, with the checkpoint.
  ASSERT_TRUE(wait_until([&] { return fs::exists(killed / "history.json"); }, std::chrono::seconds(60)))
      << read_text(dir / "killed.log");
  const pid_t rank1 = find_rank(1, killed.string());
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  const auto at = std::chrono::steady_clock::now();
  const std::optional<int> status = job.wait(std::chrono::seconds(60));
  ASSERT_TRUE(status) << read_text(dir / "killed.log");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count(), 30);
  EXPECT_NE(*status, 0);
  const std::string log = read_text(dir / "killed.log");
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
  EXPECT_NE(log.find("signal 9"), std::string::npos) << log;
  const std::size_t done = history(killed)["epochs"].size();
  ASSERT_LT(done, 40u) << "the run ended before rank 1 was killed";

  const CommandResult resumed =
      run_command(launcher() + " -np 2 " + std::string(STOKER_CLI) + " train --resume " + killed.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  const nlohmann::json h = history(full), hk = history(killed);
  ASSERT_EQ(hk["epochs"].size(), 40u);
  for (std::size_t e = 0; e < 40; ++e) EXPECT_EQ(h["epochs"][e]["loss"], hk["epochs"][e]["loss"]) << e;
  EXPECT_EQ(stoker::trainer::Head::load(full / "head.stkh").serialize(),
            stoker::trainer::Head::load(killed / "head.stkh").serialize());
}

}  // namespace
