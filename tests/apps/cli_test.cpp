// End-to-end tests of the stoker command on generated data: what a user types and sees.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include "command_support.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/trainer/cudnn_backend.hpp"
#include "stoker/training/checkpoint.hpp"
#include "test_support.hpp"

namespace {
namespace fs = std::filesystem;
using stoker::test::make_dataset;
using stoker::test::stoker_binary;
using stoker::test::TempDir;

using stoker::test::CommandResult;

// `prefix` runs before the command in the same shell (a limit: "ulimit -f 4; exec").
CommandResult stoker(const std::string& args, const std::string& prefix = "") {
  return stoker::test::run_command(prefix + (prefix.empty() ? "" : " ") + stoker_binary() + " " + args);
}

std::string repo(const std::string& rel) { return (stoker::test::source_dir() / rel).string(); }
const std::string kModel = repo("data/models/mobilenet_v2_0.35_224_3class.h5");

// Three files a decoder cannot read, named to sort before the good ones: with a validation split of
// 0.2 the first two of the class are validation images, the third a training image.
std::vector<fs::path> add_unreadable_files(const fs::path& folder) {
  const fs::path text = folder / "bad0_text.jpg", truncated = folder / "bad1_truncated.jpg",
                 empty = folder / "bad2_empty.jpg";
  std::ofstream(text) << "this is not a JPEG\n";
  stoker::test::write_jpeg(truncated, stoker::test::make_pattern_rgb(100, 100, 3));
  fs::resize_file(truncated, 200);
  std::ofstream{empty};
  return {text, truncated, empty};
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { make_dataset(dir / "data", 10); }
  std::string train_args(const std::string& extra = "") {
    return "train --data " + (dir / "data").string() + " --model " + kModel +
           " --cut-at sequential_9 --image-size 224 --epochs 2 --batch-size 8 --threads 2 --out " +
           (dir / "out").string() + " " + extra;
  }
  // `stoker predict` of the trained model on the GPU and on the CPU: the same class, the
  // probabilities within 0.05.
  void expect_devices_predict_alike(const std::string& img) {
    const std::string args = " --json --model-dir " + (dir / "out").string() + " " + img;
    const CommandResult gpu = stoker("predict --device cuda" + args);
    const CommandResult cpu = stoker("predict --device cpu" + args);
    ASSERT_EQ(gpu.exit_code, 0) << gpu.out;
    ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
    const auto g = nlohmann::json::parse(gpu.out.substr(gpu.out.find('[')));
    const auto c = nlohmann::json::parse(cpu.out.substr(cpu.out.find('[')));
    EXPECT_EQ(g[0]["class"], c[0]["class"]);
    EXPECT_NEAR(g[0]["probabilities"]["dog"].get<double>(), c[0]["probabilities"]["dog"].get<double>(), 0.05);
  }
  TempDir dir;
};

TEST_F(Cli, TrainTwoEpochsThenPredictAndEvaluate) {
  const CommandResult t = stoker(train_args("--device cpu"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("epoch 2/2"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("utilisation: disk"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("limited by"), std::string::npos);
  EXPECT_NE(t.out.find("GPU not used"), std::string::npos) << "a CPU run reports no GPU figures: " << t.out;
  for (const char* f : {"head.stkh", "stoker_model.json", "history.json", "metrics.png", "throughput.png"}) {
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
  }
  std::ifstream h(dir / "out" / "history.json");
  const auto history = nlohmann::json::parse(h);
  ASSERT_EQ(history["epochs"].size(), 2u);
  EXPECT_TRUE(history["epochs"][0].contains("utilisation"));
  // The first epoch decoded every image: the loader's stages have their shares.
  EXPECT_NE(t.out.find("loader (2 threads): read "), std::string::npos) << t.out;
  const auto& first = history["epochs"][0]["utilisation"];
  EXPECT_GT(first["decode_share"].get<double>(), 0.0) << first.dump();
  EXPECT_GT(first["transform_share"].get<double>(), 0.0) << first.dump();
  EXPECT_EQ(first["loader_threads"], 2);

  const std::string img = (dir / "data" / "dog" / "img3.jpg").string();
  const CommandResult p = stoker("predict --model-dir " + (dir / "out").string() + " --json " + img);
  ASSERT_EQ(p.exit_code, 0) << p.out;
  const auto rows = nlohmann::json::parse(p.out.substr(p.out.find('[')));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["path"], img);
  EXPECT_EQ(rows[0]["class"], "dog");
  EXPECT_GT(rows[0]["probability"].get<double>(), 0.5);

  const CommandResult e =
      stoker("evaluate --json --model-dir " + (dir / "out").string() + " --data " + (dir / "data").string());
  ASSERT_EQ(e.exit_code, 0) << e.out;
  const auto ev = nlohmann::json::parse(e.out.substr(e.out.rfind('{')));
  EXPECT_EQ(ev["images"], 20);
  EXPECT_GE(ev["accuracy"].get<double>(), 0.9);
}

// --fine-tune-from: the second phase's epochs are counted on, marked, and its errors name the layer.
TEST_F(Cli, FineTuneFromALayer) {
  const CommandResult t =
      stoker(train_args("--device cpu --epochs 1 --fine-tune-from block_16_expand "
                        "--fine-tune-epochs 1 --fine-tune-learning-rate 1e-4"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("fine-tuning from block_16_expand:"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("the frozen part ends at block_15_add"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("epoch 2/2 (fine-tuning)"), std::string::npos) << t.out;
  std::ifstream h(dir / "out" / "history.json");
  const auto history = nlohmann::json::parse(h);
  ASSERT_EQ(history["epochs"].size(), 2u);
  EXPECT_FALSE(history["epochs"][0]["fine_tuning"].get<bool>());
  EXPECT_TRUE(history["epochs"][1]["fine_tuning"].get<bool>());

  // The finished run resumed with one more fine-tuning epoch: the second phase goes on from its
  // checkpoint (its first epoch is not run again).
  const CommandResult resumed = stoker("train --resume " + (dir / "out").string() + " --fine-tune-epochs 2");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resuming " + (dir / "out").string() + " at epoch 3/3 (2 epochs done)"), std::string::npos)
      << resumed.out;
  EXPECT_EQ(resumed.out.find("epoch 2/3"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("epoch 3/3"), std::string::npos) << resumed.out;
  std::ifstream h2(dir / "out" / "history.json");
  EXPECT_EQ(nlohmann::json::parse(h2)["epochs"].size(), 3u);
  // Once fine-tuning has begun the first phase is settled.
  const CommandResult longer = stoker("train --resume " + (dir / "out").string() + " --epochs 2");
  EXPECT_EQ(longer.exit_code, 2) << longer.out;
  EXPECT_NE(longer.out.find("resume it with --epochs 1"), std::string::npos) << longer.out;

  const CommandResult bad = stoker(train_args("--overwrite --device cpu --epochs 1 --fine-tune-from block_14_project"));
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("block_14_project"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("first layer of a block"), std::string::npos) << bad.out;
  const CommandResult optimizer =
      stoker(train_args("--overwrite --fine-tune-from block_16_expand --fine-tune-optimizer rmsprop"));
  EXPECT_EQ(optimizer.exit_code, 2) << optimizer.out;
  EXPECT_NE(optimizer.out.find("rmsprop"), std::string::npos) << optimizer.out;
}

// --on-bad-sample skip: the epochs say how many images were left out and each file is named once
// with its reason; history.json has the counts and the list; evaluate and predict report them too.
TEST_F(Cli, UnreadableFilesAreSkippedCountedAndNamed) {
  const std::vector<fs::path> bad = add_unreadable_files(dir / "data" / "cat");
  const CommandResult failing = stoker(train_args("--device cpu"));
  EXPECT_EQ(failing.exit_code, 2) << failing.out;
  EXPECT_NE(failing.out.find("bad0_text.jpg"), std::string::npos) << "fail (the default) names the file";

  // Augmenting: every epoch decodes again and meets the bad training file again.
  const CommandResult t = stoker(train_args("--device cpu --image-size 96 --horizontal-flip --on-bad-sample skip"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("validation: 2 unreadable images skipped"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("18 images trained, 1 unreadable skipped; 2 validated, 2 skipped"), std::string::npos) << t.out;
  for (const fs::path& f : bad) EXPECT_EQ(occurrences(t.out, "skipped " + f.string() + ": "), 1u) << f << t.out;
  std::ifstream h(dir / "out" / "history.json");
  const auto history = nlohmann::json::parse(h);
  ASSERT_EQ(history["epochs"].size(), 2u);
  for (const auto& e : history["epochs"]) {
    EXPECT_EQ(e["images"], 18);
    EXPECT_EQ(e["skipped"], 1);
    EXPECT_EQ(e["val_images"], 2);
    EXPECT_EQ(e["val_skipped"], 2);
  }
  ASSERT_EQ(history["skipped_files"].size(), 3u) << history["skipped_files"].dump();
  for (const auto& f : history["skipped_files"]) EXPECT_FALSE(f["reason"].get<std::string>().empty());
  EXPECT_EQ(history["skipped_files"][2]["path"], bad[2].string()) << "validation's first, then training's";

  const std::string data = " --data " + (dir / "data").string();
  const std::string model = " --model-dir " + (dir / "out").string();
  const CommandResult stop = stoker("evaluate" + model + data);
  EXPECT_EQ(stop.exit_code, 2) << stop.out;
  EXPECT_NE(stop.out.find("bad0_text.jpg"), std::string::npos) << stop.out;
  const CommandResult e = stoker("evaluate --json --on-bad-sample skip" + model + data);
  ASSERT_EQ(e.exit_code, 0) << e.out;
  for (const fs::path& f : bad) EXPECT_EQ(occurrences(e.out, "stoker: error: " + f.string() + ": "), 1u) << e.out;
  const auto ev = nlohmann::json::parse(e.out.substr(e.out.find("{\"")));
  EXPECT_EQ(ev["images"], 20);
  EXPECT_EQ(ev["skipped"], 3);
  EXPECT_EQ(ev["skipped_files"].size(), 3u);

  const std::string good = (dir / "data" / "dog" / "img3.jpg").string();
  const CommandResult p = stoker("predict --json" + model + " " + bad[1].string() + " " + good);
  EXPECT_EQ(p.exit_code, 1) << "1: some images could not be read, the rest were predicted\n" << p.out;
  EXPECT_NE(p.out.find("stoker: error: " + bad[1].string() + ": "), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("1 of 2 images could not be read"), std::string::npos) << p.out;
  const auto rows = nlohmann::json::parse(p.out.substr(p.out.find('['), p.out.rfind(']') - p.out.find('[') + 1));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["path"], good);
  EXPECT_EQ(rows[0]["class"], "dog");
  EXPECT_EQ(rows[1]["path"], bad[1].string());
  EXPECT_TRUE(rows[1].contains("error"));
  const CommandResult pf = stoker("predict --on-bad-sample fail" + model + " " + bad[1].string() + " " + good);
  EXPECT_EQ(pf.exit_code, 2) << pf.out;
  EXPECT_NE(pf.out.find(bad[1].string()), std::string::npos) << pf.out;
}

// Names that are not UTF-8 (a Latin-1 "café"): a class folder is refused by train with its bytes
// shown, before anything is computed and without making a run folder; an image so named is
// predicted, its path in the JSON report with U+FFFD. Never an internal error from a JSON writer.
TEST_F(Cli, NamesThatAreNotUtf8) {
  const fs::path latin1 = dir / "data" / std::string("caf\xe9");
  fs::rename(dir / "data" / "cat", latin1);
  const CommandResult r = stoker(train_args("--device cpu --epochs 1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("the class 'caf\\xe9' has a name that is not UTF-8"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "out")) << r.out;

  fs::rename(latin1, dir / "data" / "cat");
  ASSERT_EQ(stoker(train_args("--device cpu --epochs 1 --image-size 96")).exit_code, 0);
  const fs::path image = dir / std::string("x\xe9.jpg");
  fs::copy_file(dir / "data" / "dog" / "img3.jpg", image);
  const CommandResult p = stoker("predict --json --model-dir " + (dir / "out").string() + " " + image.string());
  ASSERT_EQ(p.exit_code, 0) << p.out;
  const auto rows = nlohmann::json::parse(p.out.substr(p.out.find('[')));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["path"], (dir / "x").string() + "\xef\xbf\xbd.jpg");  // U+FFFD in UTF-8
  EXPECT_TRUE(rows[0].contains("probabilities")) << p.out;
}

// verify: every file decoded once; exit 0 when all are readable, 1 with each unreadable one named.
TEST_F(Cli, VerifyListsTheUnreadableFiles) {
  const std::string data = (dir / "data").string();
  const CommandResult clean = stoker("verify --threads 2 --data " + data);
  EXPECT_EQ(clean.exit_code, 0) << clean.out;
  EXPECT_NE(clean.out.find("20 files, 20 readable, 0 unreadable"), std::string::npos) << clean.out;

  const std::vector<fs::path> bad = add_unreadable_files(dir / "data" / "cat");
  const CommandResult text = stoker("verify --threads 2 --data " + data);
  EXPECT_EQ(text.exit_code, 1) << text.out;
  EXPECT_NE(text.out.find("23 files, 20 readable, 3 unreadable"), std::string::npos) << text.out;
  for (const fs::path& f : bad) EXPECT_EQ(occurrences(text.out, "  " + f.string() + ": "), 1u) << f << text.out;

  const CommandResult json = stoker("verify --json --data " + data);
  EXPECT_EQ(json.exit_code, 1) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["files"], 23);
  EXPECT_EQ(j["readable"], 20);
  ASSERT_EQ(j["unreadable"].size(), 3u);
  EXPECT_EQ(j["unreadable"][0]["path"], bad[0].string());
  EXPECT_NE(j["unreadable"][2]["reason"].get<std::string>().find("empty"), std::string::npos) << j.dump();

  // Tar shards: `stoker shard` keeps out what the loader would refuse (here all three), so what
  // it writes verifies whole.
  const CommandResult shard =
      stoker("shard --on-bad-sample skip --data " + data + " --out " + (dir / "shards" / "s-%d.tar").string());
  ASSERT_EQ(shard.exit_code, 0) << shard.out;
  EXPECT_EQ(occurrences(shard.out, "stoker: skipped "), 3u) << shard.out;
  const CommandResult tar = stoker("verify --data " + (dir / "shards" / "s-{0..0}.tar").string());
  EXPECT_EQ(tar.exit_code, 0) << tar.out;
  EXPECT_NE(tar.out.find("20 files, 20 readable, 0 unreadable"), std::string::npos) << tar.out;
}

// Keras' fit() options from the command line: the learning rate of each epoch in the epoch line
// and history.json, the cosine schedule, the plateau, early stopping, class weights and label
// smoothing; --label-mode, which train cannot honour, is refused.
TEST_F(Cli, KerasFitOptions) {
  auto history = [&] {
    std::ifstream h(dir / "out" / "history.json");
    return nlohmann::json::parse(h);
  };
  // 16 training images in batches of 8: 4 steps over 2 epochs; each epoch logs its last step's rate.
  const CommandResult cosine = stoker(train_args("--device cpu --cosine-decay"));
  ASSERT_EQ(cosine.exit_code, 0) << cosine.out;
  EXPECT_NE(cosine.out.find("| lr 0.000854 |"), std::string::npos) << cosine.out;
  auto h = history();
  EXPECT_NEAR(h["epochs"][0]["learning_rate"].get<double>(), 1e-3 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-9);
  EXPECT_NEAR(h["epochs"][1]["learning_rate"].get<double>(), 1e-3 * 0.5 * (1 + std::cos(3 * M_PI / 4)), 1e-9);

  // val_accuracy on 4 images takes at most 5 values: it stalls within 8 epochs, and each stall
  // halves the rate (patience 1) and, twice in a row, stops the run (patience 2).
  const CommandResult plateau =
      stoker(train_args("--overwrite --device cpu --epochs 8 --learning-rate 0.3 --monitor val_accuracy "
                        "--reduce-lr-on-plateau 0.5,1 "
                        "--early-stopping-patience 2"));
  ASSERT_EQ(plateau.exit_code, 0) << plateau.out;
  EXPECT_NE(plateau.out.find("early stopping: val_accuracy has not improved for 2 epochs; stopped after epoch"),
            std::string::npos)
      << plateau.out;
  h = history();
  const auto& epochs = h["epochs"];
  ASSERT_LT(epochs.size(), 8u) << epochs.dump();
  EXPECT_TRUE(epochs.back()["stopped_early"].get<bool>());
  for (std::size_t e = 0; e + 1 < epochs.size(); ++e) {
    const float lr = epochs[e]["learning_rate"].get<float>(), next = epochs[e + 1]["learning_rate"].get<float>();
    EXPECT_EQ(next, epochs[e]["improved"].get<bool>() ? lr : static_cast<float>(lr * 0.5)) << "after epoch " << e;
  }
  EXPECT_EQ(h["best_epoch"].get<int>() + 1 + 2, static_cast<int>(epochs.size())) << "two epochs after the best";

  // Label smoothing 0.2 enters the validation loss too: no prediction gets it below the entropy of
  // (0.9, 0.1), 0.325.
  const CommandResult smooth =
      stoker(train_args("--overwrite --device cpu --label-smoothing 0.2 --class-weight cat:1,dog:3"));
  ASSERT_EQ(smooth.exit_code, 0) << smooth.out;
  const nlohmann::json smoothed = history();  // named: a range-for over a temporary's member dangles
  for (const auto& e : smoothed["epochs"]) EXPECT_GT(e["val_loss"].get<double>(), 0.325) << e.dump();
  const CommandResult balanced = stoker(train_args("--overwrite --device cpu --class-weight auto"));
  EXPECT_EQ(balanced.exit_code, 0) << balanced.out;

  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--class-weight cat:1", "give a weight for every class; 'dog' has none"},
           {"--class-weight cat:1,dog:-2", "class weights must be finite and >= 0"},
           {"--class-weight cat:1,bird:2", "no class 'bird' (classes: cat, dog)"},
           {"--class-weight cat:1,dog:x", "'x' is not a number"},
           {"--label-smoothing 1", "label smoothing must be in [0, 1)"},
           {"--reduce-lr-on-plateau 2,1", "factor must be in (0, 1)"},
           {"--cosine-decay --reduce-lr-on-plateau 0.5,2", "choose one"},
           {"--label-mode categorical", "--label-mode does not apply to train"},
       }) {
    const CommandResult r = stoker(train_args("--overwrite --device cpu " + c.flags));
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
  }
  // A resume keeps the schedule: changing it is refused by name.
  const CommandResult changed = stoker("train --resume " + (dir / "out").string() + " --cosine-decay");
  EXPECT_NE(changed.exit_code, 0);
  EXPECT_NE(changed.out.find("--cosine-decay cannot change"), std::string::npos) << changed.out;
}

// Keras' class_weight on an imbalanced set (10 cats, 4 dogs): 'auto' is sklearn's balanced weights,
// printed; a weighted loss is not the plain one; weights all doubled double the loss while Adam's
// steps, invariant to the gradient's scale, train the same head (the same validation loss).
TEST_F(Cli, ClassWeightsOnAnImbalancedSet) {
  for (int i = 4; i < 10; ++i) fs::remove(dir / "data" / "dog" / ("img" + std::to_string(i) + ".jpg"));
  make_dataset(dir / "val", 3);
  const std::string common = "--device cpu --val " + (dir / "val").string();
  struct Run {
    std::string out;
    std::vector<double> loss, val_loss;
  };
  auto run = [&](const std::string& flags) {
    Run r;
    const CommandResult c = stoker(train_args("--overwrite " + common + " " + flags));
    EXPECT_EQ(c.exit_code, 0) << flags << "\n" << c.out;
    r.out = c.out;
    std::ifstream h(dir / "out" / "history.json");
    const nlohmann::json history = nlohmann::json::parse(h);
    for (const auto& e : history["epochs"]) {
      r.loss.push_back(e["loss"].get<double>());
      r.val_loss.push_back(e["val_loss"].get<double>());
    }
    EXPECT_EQ(r.loss.size(), 2u) << flags << "\n" << c.out;
    return r;
  };
  const Run plain = run(""), balanced = run("--class-weight auto"), doubled = run("--class-weight cat:2,dog:2");
  ASSERT_TRUE(plain.loss.size() == 2 && balanced.loss.size() == 2 && doubled.loss.size() == 2);
  EXPECT_NE(balanced.out.find("class weights: cat 0.7, dog 1.75"), std::string::npos) << "14 / (2 x 10), 14 / (2 x 4)\n"
                                                                                      << balanced.out;
  EXPECT_EQ(plain.out.find("class weights"), std::string::npos);
  for (std::size_t e = 0; e < 2; ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e + 1));
    EXPECT_GT(std::abs(balanced.loss[e] - plain.loss[e]), 1e-3);
    EXPECT_NEAR(doubled.loss[e], 2 * plain.loss[e], 1e-4 * plain.loss[e]);
    EXPECT_NEAR(doubled.val_loss[e], plain.val_loss[e], 1e-4 * plain.val_loss[e]);
  }
}

// Without --threads, train calibrates the loader: on the CPU for the rate loading and the backbone
// reach together on the shared cores; a given --prefetch is kept.
TEST_F(Cli, TrainWithoutThreadsCalibratesTheLoaderForTheSharedCores) {
  std::string args = train_args("--device cpu --epochs 1 --horizontal-flip");
  args.erase(args.find(" --threads 2"), std::string(" --threads 2").size());
  const CommandResult chosen = stoker(args);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.out;
  EXPECT_NE(chosen.out.find("loader: "), std::string::npos) << chosen.out;
  EXPECT_NE(chosen.out.find("alone) reach together on"), std::string::npos) << chosen.out;
  EXPECT_NE(chosen.out.find("; prefetch "), std::string::npos) << chosen.out;
  const CommandResult kept = stoker(args + " --prefetch 3 --overwrite");
  ASSERT_EQ(kept.exit_code, 0) << kept.out;
  EXPECT_NE(kept.out.find("; prefetch 3 (--prefetch)"), std::string::npos) << kept.out;
  const CommandResult given = stoker(args + " --threads 1 --overwrite");
  ASSERT_EQ(given.exit_code, 0) << given.out;
  EXPECT_EQ(given.out.find("loader: "), std::string::npos) << "--threads given: nothing to calibrate\n" << given.out;
}

// A CSV list instead of class folders (Keras' flow_from_dataframe), and the extensions a class
// folder is read with: WebP among the defaults, --extensions to choose.
TEST_F(Cli, TrainFromACsvAndChooseExtensions) {
  {
    std::ofstream csv(dir / "list.csv");
    csv << "file,label\n";
    for (const char* c : {"cat", "dog"})
      for (int i = 0; i < 10; ++i) csv << c << "/img" << i << ".jpg," << c << "\n";
  }
  const std::string common =
      " --model " + kModel +
      " --cut-at sequential_9 --image-size 96 --epochs 1 --batch-size 8 --threads 2 --device cpu";
  const CommandResult csv =
      stoker("train --data-csv " + (dir / "list.csv").string() + " --directory " + (dir / "data").string() +
             " --x-col file --y-col label" + common + " --out " + (dir / "csv").string());
  ASSERT_EQ(csv.exit_code, 0) << csv.out;
  EXPECT_NE(csv.out.find("train: 16 images, validation: 4 images, classes: cat dog"), std::string::npos) << csv.out;
  const CommandResult folder =
      stoker("train --data " + (dir / "data").string() + common + " --out " + (dir / "folder").string());
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  EXPECT_EQ(stoker::trainer::Head::load(dir / "csv" / "head.stkh").serialize(),
            stoker::trainer::Head::load(dir / "folder" / "head.stkh").serialize())
      << "the same files in the same order: the same head";
  const CommandResult wrong_column = stoker("train --data-csv " + (dir / "list.csv").string() + " --directory " +
                                            (dir / "data").string() + common + " --out " + (dir / "x").string());
  EXPECT_EQ(wrong_column.exit_code, 2) << wrong_column.out;
  EXPECT_NE(wrong_column.out.find("filename"), std::string::npos)
      << "the missing x column is named: " << wrong_column.out;

  // A WebP image: read by default, left out with --extensions jpg.
  const fs::path webp = dir / "data" / "dog" / "extra.webp";
  ASSERT_TRUE(cv::imwrite(webp.string(), stoker::test::make_pattern_rgb(64, 80, 1))) << "OpenCV without WebP";
  const CommandResult with = stoker("verify --data " + (dir / "data").string());
  EXPECT_EQ(with.exit_code, 0) << with.out;
  EXPECT_NE(with.out.find("21 files, 21 readable"), std::string::npos) << with.out;
  const CommandResult load = stoker("load --data " + (dir / "data").string() + " --extensions .JPG --epochs 1");
  EXPECT_EQ(load.exit_code, 0) << load.out;
  EXPECT_NE(load.out.find("dataset: 20 images"), std::string::npos) << load.out;
}

// The AugmentSpec settings beyond the Keras basics: crops, colour jitter, a two-value zoom range,
// rescale and Keras' standardisation (featurewise statistics fitted on the training images); the
// deterministic ones are recorded in the model folder for predict and evaluate.
TEST_F(Cli, TrainWithCropsColourJitterAndStandardisation) {
  const CommandResult t = stoker(
      train_args("--device cpu --image-size 96 --epochs 1 --zoom-range 0.8 1.1 --random-resized-crop 0.5,1,0.8,1.25 "
                 "--contrast 0.2 --saturation 0.3 --hue 0.05 --center-crop 0.9 --rescale 1/255 --preprocess none "
                 "--featurewise-center --featurewise-std-normalization --samplewise-center"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_EQ(t.out.find("computing each image's features once"), std::string::npos) << "the jitter augments";
  EXPECT_NE(t.out.find("featurewise statistics of the training images: mean 0."), std::string::npos) << t.out;
  std::ifstream settings_file(dir / "out" / "train_settings.json"), model_file(dir / "out" / "stoker_model.json");
  const auto settings = nlohmann::json::parse(settings_file)["settings"];
  EXPECT_EQ(settings["zoom_range"], nlohmann::json({0.8, 1.1}));
  EXPECT_EQ(settings["random_resized_crop"], nlohmann::json({0.5, 1.0, 0.8, 1.25}));
  const auto model = nlohmann::json::parse(model_file);
  EXPECT_EQ(model["center_crop"], 0.9);
  EXPECT_NEAR(model["rescale"].get<double>(), 1.0 / 255, 1e-15);
  EXPECT_TRUE(model["featurewise_center"].get<bool>() && model["samplewise_center"].get<bool>());
  ASSERT_EQ(model["featurewise"]["mean"].size(), 4u) << model.dump();
  for (int c = 0; c < 3; ++c) {
    EXPECT_GT(model["featurewise"]["mean"][c].get<double>(), 0.05) << "on the rescaled 0..1 scale";
    EXPECT_LT(model["featurewise"]["mean"][c].get<double>(), 1.0);
  }
  const std::string img = (dir / "data" / "dog" / "img3.jpg").string();
  const CommandResult p = stoker("predict --model-dir " + (dir / "out").string() + " " + img);
  EXPECT_EQ(p.exit_code, 0) << p.out;

  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--hue 0.7", "hue"},
           {"--rescale 1/x", "--rescale takes a number or a fraction like 1/255, received '1/x'"},
           {"--random-resized-crop 0.5,1,2", "--random-resized-crop takes SCALE_LO,SCALE_HI[,RATIO_LO,RATIO_HI]"},
           {"--center-crop 1.5", "center_crop"},
       }) {
    const CommandResult r = stoker(train_args("--overwrite --device cpu " + c.flags));
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
  }
}

TEST_F(Cli, TrainWithAugmentationAndAConfigFile) {
  std::ofstream(dir / "train.toml")
      << "[train]\nepochs = 2\nrotation-range = 20\nhorizontal-flip = true\nbrightness-range = [0.8, 1.2]\n";
  const CommandResult t = stoker(train_args("--config " + (dir / "train.toml").string() + " --epochs 1"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("epoch 1/1"), std::string::npos) << "the flag must override the file: " << t.out;
  EXPECT_EQ(t.out.find("computing each image's features once"), std::string::npos) << "augmentation was ignored";
}

TEST_F(Cli, ErrorsExitNonZeroWithAOneLineReason) {
  struct Case {
    std::string args, message;
  };
  TempDir empty;
  fs::create_directories(empty / "a");
  fs::create_directories(empty / "b");
  std::ofstream(dir / "not_a_model.h5") << "hello";
  const std::vector<Case> cases = {
      {"train --data /no/such/dir --model " + kModel + " --out " + (dir / "o").string(), "Directory does not exist"},
      {"train --data " + empty.path().string() + " --model " + kModel + " --cut-at sequential_9 --out " +
           (dir / "o").string(),
       "holds no images"},
      {train_args("--model " + (dir / "not_a_model.h5").string()), "not_a_model.h5"},
      {train_args("--device cuda:1x"), "--device must be auto, cpu, cuda, cuda:N, a list cuda:N,M,... or cuda:all"},
      {train_args("--device gpu"), "--device must be auto, cpu, cuda, cuda:N, a list cuda:N,M,... or cuda:all"},
      {train_args("--cut-at no_such_layer"), "no_such_layer"},
      {train_args("--validation-split 1.5"), "validation_split must be in [0, 1)"},
      {train_args("--preprocess yolo"), "preprocess must be tf, caffe, torch, rescale or none, received 'yolo'"},
      {"predict --model-dir " + dir.path().string() + " x.jpg", "stoker_model.json"},
      {"inspect /no/such/model.h5", "/no/such/model.h5"},
      {"frobnicate", "frobnicate"},
      // Mistakes in the flags themselves: one line and exit 2 as every error, a typo with the flag meant.
      {train_args("--epoch 3"), "unknown flag --epoch for stoker train; did you mean --epochs?"},
      {train_args("--rotation-rang 3"), "did you mean --rotation-range?"},
      {train_args("--frobnicate-everything 1"),
       "unknown flag --frobnicate-everything for stoker train (stoker "
       "train --help lists the flags)"},
      {"load --data " + (dir / "data").string() + " --batch-size many", "--batch-size"},
      {"predict --model-dir", "--model-dir"},
      {"cache build --data " + (dir / "data").string() + " --cache-fil x", "did you mean --cache-file?"},
  };
  for (const auto& c : cases) {
    const CommandResult r = stoker(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("stoker: error: "), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 3) << "not a one-line reason: " << r.out;
  }
}

// Keras' spelling of a flag (--batch_size) is its dashed name; --version, --help and env exit 0.
TEST_F(Cli, KerasSpellingVersionHelpAndEnv) {
  const CommandResult underscores =
      stoker("load --data " + (dir / "data").string() + " --batch_size 4 --image_size 32");
  ASSERT_EQ(underscores.exit_code, 0) << underscores.out;
  EXPECT_NE(underscores.out.find("batch 4"), std::string::npos) << underscores.out;
  const CommandResult version = stoker("--version");
  EXPECT_EQ(version.exit_code, 0) << version.out;
  EXPECT_EQ(version.out, "stoker " STOKER_VERSION "\n");
  const CommandResult help = stoker("train --help");
  EXPECT_EQ(help.exit_code, 0) << help.out;
  EXPECT_NE(help.out.find("--epochs"), std::string::npos) << help.out;
  // Where the GPU is or why there is none, and the CPU, said in one place.
  const CommandResult env = stoker("env");
  EXPECT_EQ(env.exit_code, 0) << env.out;
  for (const char* line : {"stoker " STOKER_VERSION "\n", "\nbuild: CUDA ", "\nGPUs: ", "\nNVML",
                           "\nCPU: ", "\nCPU features: ", "\nlibraries: OpenCV "}) {
    EXPECT_NE(env.out.find(line), std::string::npos) << line << "\n" << env.out;
  }
  if (stoker::cuda_device_count() == 0) {
    EXPECT_NE(env.out.find("GPUs: none (" + stoker::cuda_unavailable_reason() + ")"), std::string::npos) << env.out;
  }
}

// A training process killed with SIGKILL in the middle of an epoch, then `stoker train --resume`,
// ends with the heads an uninterrupted run ends with: bit for bit on the CPU backend.
TEST_F(Cli, TrainKilledMidEpochResumesToTheSameHead) {
  make_dataset(dir / "more", 24);
  const std::string args = "train --data " + (dir / "more").string() + " --model " + kModel +
                           " --cut-at sequential_9 --image-size 160 --epochs 4 --batch-size 4 --threads 2 --device cpu"
                           " --horizontal-flip --rotation-range 20 --checkpoint-every 1 --out ";
  const CommandResult whole = stoker(args + (dir / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.out;

  const fs::path out = dir / "killed";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec " + stoker_binary() + " " + args + out.string() + " > /dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Killed as soon as a checkpoint shows it inside epoch 2 or later.
  bool killed = false;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       !killed && std::chrono::steady_clock::now() < until;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL() << "the run ended before it could be killed";
    try {
      const stoker::training::Checkpoint c = stoker::training::load_checkpoint(out / stoker::training::kCheckpointFile);
      if (c.epoch >= 1 && c.loader.next_batch > 0) killed = ::kill(pid, SIGKILL) == 0;
    } catch (const stoker::IoError&) {  // not written yet
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(killed && WIFSIGNALED(status)) << "the run was not killed mid-epoch";
  const stoker::training::Checkpoint at_kill =
      stoker::training::load_checkpoint(out / stoker::training::kCheckpointFile);
  ASSERT_LT(at_kill.epoch, 4);

  const CommandResult resumed = stoker("train --resume " + out.string() + " --threads 1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resuming " + out.string() + " at epoch"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("epoch 4/4"), std::string::npos) << resumed.out;
  auto heads = [](const fs::path& run) {
    const auto c = stoker::training::load_checkpoint(run / stoker::training::kCheckpointFile);
    return std::pair{c.head->serialize(), stoker::trainer::Head::load(run / "head.stkh").serialize()};
  };
  EXPECT_EQ(heads(out).first, heads(dir / "whole").first) << "the last epoch's head, with Adam's moments";
  EXPECT_EQ(heads(out).second, heads(dir / "whole").second) << "the best epoch's head";
  std::ifstream a(dir / "whole" / "history.json"), b(out / "history.json");
  const auto ha = nlohmann::json::parse(a), hb = nlohmann::json::parse(b);
  ASSERT_EQ(hb["epochs"].size(), 4u) << "the history spans the killed and the resumed process";
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(ha["epochs"][e]["loss"], hb["epochs"][e]["loss"]) << "epoch " << e;
    EXPECT_EQ(ha["epochs"][e]["val_loss"], hb["epochs"][e]["val_loss"]) << "epoch " << e;
  }
  EXPECT_EQ(ha["best_epoch"], hb["best_epoch"]);

  // --resume repeats the recorded settings: one that changes the results is refused by name.
  const CommandResult changed = stoker("train --resume " + out.string() + " --learning-rate 0.1");
  EXPECT_NE(changed.exit_code, 0);
  EXPECT_NE(changed.out.find("--learning-rate cannot change"), std::string::npos) << changed.out;
  EXPECT_NE(changed.out.find("--ram-budget and --fine-tune-epochs can)"), std::string::npos) << changed.out;
  const CommandResult nothing = stoker("train --resume " + (dir / "data").string());
  EXPECT_NE(nothing.exit_code, 0);
  EXPECT_NE(nothing.out.find("train_settings.json"), std::string::npos) << nothing.out;
  const CommandResult no_data = stoker("train --model " + kModel + " --out " + (dir / "o").string());
  EXPECT_NE(no_data.exit_code, 0);
  EXPECT_NE(no_data.out.find("--data is required"), std::string::npos) << no_data.out;
}

// predict on a folder follows links to folders, but a loop (a link to the folder itself, one to an
// ancestor) is listed once and named: not "internal error".
TEST_F(Cli, PredictOnAFolderWithALinkLoop) {
  const fs::path photos = dir / "photos";
  fs::create_directories(photos / "sub");
  fs::copy_file(dir / "data" / "cat" / "img0.jpg", photos / "a.jpg");
  fs::copy_file(dir / "data" / "dog" / "img1.jpg", photos / "sub" / "b.jpg");
  fs::create_directory_symlink(".", photos / "self");
  fs::create_directory_symlink("..", photos / "sub" / "up");
  const CommandResult r = stoker("predict --json --device cpu --model " + kModel + " " + photos.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stoker: note: " + (photos / "self").string() + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stoker: note: " + (photos / "sub" / "up").string() + ": "), std::string::npos) << r.out;
  const auto rows = nlohmann::json::parse(r.out.substr(r.out.find('['), r.out.rfind(']') - r.out.find('[') + 1));
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0]["path"], (photos / "a.jpg").string());
  EXPECT_EQ(rows[1]["path"], (photos / "sub" / "b.jpg").string());
}

// predict --model takes any whole classifier: the shared Darknet-tiny ImageNet model (TF.js, logits
// out: softmax applied) with its labels, on a folder, gives the reference classes and probabilities.
TEST_F(Cli, PredictWithAnyClassifierOnAFolder) {
  const auto shared = stoker::test::shared_data_dir();
  if (!shared) GTEST_SKIP() << "no ../shared/data";
  const fs::path darknet = *shared / "models" / "tfjs" / "darknet_tiny_imagenet";
  const CommandResult r = stoker("predict --json --model " + (darknet / "model.json").string() + " --labels " +
                                 (darknet / "darknet_imagenet1k_shortnames.txt").string() + " --preprocess rescale " +
                                 (*shared / "images").string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(rows.size(), 2u) << "bird.png and sunflower.png; the .rgb files are not images: " << r.out;
  EXPECT_EQ(rows[0]["class"], "chickadee");
  EXPECT_NEAR(rows[0]["probability"].get<double>(), 0.924, 0.002);  // the data README's reference
  EXPECT_EQ(rows[1]["class"], "daisy");
  EXPECT_NEAR(rows[1]["probability"].get<double>(), 0.330, 0.002);

  const CommandResult both = stoker("predict --model " + (darknet / "model.json").string() + " --model-dir " +
                                    dir.path().string() + " " + (*shared / "images").string());
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.out.find("give --model-dir DIR or --model FILE"), std::string::npos) << both.out;
  const CommandResult labels =
      stoker("predict --model " + (darknet / "model.json").string() + " --labels " +
             (darknet / "LICENSE.ml5-data-and-models").string() + " " + (*shared / "images").string());
  EXPECT_NE(labels.exit_code, 0);
  EXPECT_NE(labels.out.find("labels for 1000 classes"), std::string::npos) << labels.out;
}

// Without a GPU: a one-line reason and a non-zero exit. With one: the GPU path trains, reports its
// GPU time, and the head it wrote predicts the same on the CPU and on the GPU.
TEST_F(Cli, DeviceCuda) {
  if (stoker::cuda_device_count() > 0 && !stoker::trainer::built_with_cudnn()) {
    GTEST_SKIP() << "a CUDA device but no cuDNN backend (e.g. the emulated device)";
  }
  if (stoker::cuda_device_count() == 0) {
    for (const std::string& args : {train_args("--device cuda"), train_args("--device cuda:0 --rotation-range 10")}) {
      const CommandResult r = stoker(args);
      EXPECT_NE(r.exit_code, 0) << r.out;
      EXPECT_NE(r.out.find("--device cuda"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("use --device cpu"), std::string::npos) << r.out;
      EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "not a one-line reason: " << r.out;
    }
    GTEST_SKIP() << "no CUDA device: only the error path was checked";
  }
  const CommandResult t = stoker(train_args("--device cuda --horizontal-flip --rotation-range 10"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("epoch 2/2"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("backbone"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("(CUDA events)"), std::string::npos) << t.out;
  std::ifstream h(dir / "out" / "history.json");
  const auto history = nlohmann::json::parse(h);
  const auto& epochs = history["epochs"];
  ASSERT_EQ(epochs.size(), 2u);
  // The classes differ in colour: the head separates them in two epochs, as on the CPU path
  // (TrainTwoEpochsThenPredictAndEvaluate), and the second epoch's loss is below the first's.
  EXPECT_GE(epochs[1]["accuracy"].get<double>(), 0.9) << epochs.dump();
  EXPECT_LT(epochs[1]["loss"].get<double>(), epochs[0]["loss"].get<double>()) << epochs.dump();
  for (const auto& e : epochs) {
    EXPECT_LE(e["accuracy"].get<double>(), 1.0);
    const auto& u = e["utilisation"];
    EXPECT_TRUE(u["gpu_run"].get<bool>());
    ASSERT_TRUE(u["backbone_gpu_share"].is_number()) << u.dump();
    EXPECT_GT(u["backbone_gpu_share"].get<double>(), 0.0);
    EXPECT_LE(u["backbone_gpu_share"].get<double>(), 1.0);
    EXPECT_LE(u["data_wait_share"].get<double>() + u["compute_share"].get<double>(), 1.05) << u.dump();
  }
  const std::string img = (dir / "data" / "dog" / "img3.jpg").string();
  expect_devices_predict_alike(img);
}

// Fine-tuning on the device the first phase ran on: the GPU trainer (cuDNN on a GPU, its bf16 host
// twin on the emulated device) after its gradients agreed with the CPU backward, and the frozen
// part on the cuDNN backend; the tuned model predicts on either device alike.
TEST_F(Cli, FineTuneOnTheDevice) {
  if (stoker::cuda_device_count() == 0 || !stoker::trainer::built_with_cudnn())
    GTEST_SKIP() << "no CUDA device with the cuDNN backend";
  const CommandResult t =
      stoker(train_args("--device cuda --epochs 1 --horizontal-flip --fine-tune-from "
                        "block_16_expand --fine-tune-epochs 1 --fine-tune-learning-rate 1e-4"));
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("on the GPU: "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("; the frozen part on cudnn"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("the GPU is not used: fine-tuning"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("epoch 2/2 (fine-tuning)"), std::string::npos) << t.out;
  std::ifstream h(dir / "out" / "history.json");
  const auto epochs = nlohmann::json::parse(h)["epochs"];
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_TRUE(std::isfinite(epochs[1]["loss"].get<double>())) << epochs.dump();
  const std::string img = (dir / "data" / "cat" / "img2.jpg").string();
  expect_devices_predict_alike(img);
}

// The default device: the GPU when there is one (after its backbone agreed with the CPU
// reference), else the CPU with the reason.
TEST_F(Cli, DeviceAuto) {
  const CommandResult t = stoker(train_args());
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("epoch 2/2"), std::string::npos) << t.out;
  if (stoker::cuda_device_count() == 0 || !stoker::trainer::built_with_cudnn()) {
    EXPECT_NE(t.out.find("device cpu (auto: no GPU found; stoker env says why)"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("GPU not used"), std::string::npos) << t.out;
    GTEST_SKIP() << "no usable CUDA device or no cuDNN backend: auto chose the CPU, as it should";
  }
  EXPECT_NE(t.out.find("device cuda:0 ("), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("chosen by --device auto"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("GPU is not used"), std::string::npos) << "the GPU failed its setup or check: " << t.out;
}

TEST_F(Cli, InspectPrintsTheLayerGraph) {
  const CommandResult r = stoker("inspect " + kModel + " --cut-at sequential_9");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Conv2D"), std::string::npos);
  EXPECT_NE(r.out.find("DepthwiseConv2D"), std::string::npos);
}

TEST_F(Cli, LoadCacheAndHelp) {
  const CommandResult l =
      stoker("load --data " + (dir / "data").string() + " --epochs 2 --cache decoded --image-size 64");
  ASSERT_EQ(l.exit_code, 0) << l.out;
  EXPECT_NE(l.out.find("epoch 1:"), std::string::npos);
  EXPECT_NE(l.out.find("cache 20 hits 0 misses"), std::string::npos) << l.out;
  const std::string file = (dir / "c.cache").string();
  ASSERT_EQ(stoker("cache build --data " + (dir / "data").string() + " --image-size 64 --cache-file " + file).exit_code,
            0);
  const CommandResult info = stoker("cache info " + file);
  EXPECT_EQ(info.exit_code, 0) << info.out;
  EXPECT_NE(info.out.find("20 entries"), std::string::npos) << info.out;
  for (const char* sub : {"", "train", "load", "bench", "cache", "predict", "evaluate", "inspect", "verify"}) {
    const CommandResult h = stoker(std::string(sub) + " --help");
    EXPECT_EQ(h.exit_code, 0) << sub;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << sub;
  }
}

}  // namespace

namespace {

// The "first batch" lines of `stoker load` without the sample's path: class, label, mean pixel.
std::vector<std::string> batch_summary(const std::string& out) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while ((pos = out.find("\n  sample ", pos)) != std::string::npos) {
    const std::size_t end = out.find('\n', pos + 1);
    const std::string line = out.substr(pos + 1, end - pos - 1);
    lines.push_back(line.substr(0, line.rfind("  ")));
    pos = end;
  }
  return lines;
}

// Tar shards written in the folder's order train, with augmentation and the same split, to the head
// the folder itself trains to: the same samples in the same batches, read from the archive.
TEST_F(Cli, TrainOnShardsEqualsTrainingOnTheFolder) {
  const CommandResult w = stoker("shard --data " + (dir / "data").string() + " --out " +
                                 (dir / "shards" / "train-%06d.tar").string() + " --max-size 40KiB");
  ASSERT_EQ(w.exit_code, 0) << w.out;
  {
    std::ofstream list(dir / "shards.txt");  // a shard list, one path per line
    for (int i = 0; fs::exists(dir / "shards" / ("train-00000" + std::to_string(i) + ".tar")); ++i)
      list << (dir / "shards" / ("train-00000" + std::to_string(i) + ".tar")).string() << "\n";
  }
  const std::string common = " --model " + kModel +
                             " --cut-at sequential_9 --image-size 96 --epochs 2 --batch-size 4 --threads 2 --device cpu"
                             " --validation-split 0.3 --horizontal-flip --rotation-range 10 --out ";
  const CommandResult folder = stoker("train --data " + (dir / "data").string() + common + (dir / "folder").string());
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  const CommandResult tar = stoker("train --data " + (dir / "shards.txt").string() + common + (dir / "tar").string());
  ASSERT_EQ(tar.exit_code, 0) << tar.out;
  EXPECT_NE(tar.out.find("shards: "), std::string::npos) << tar.out;
  EXPECT_EQ(tar.out.find("shards: 1 indexed"), std::string::npos) << "samples cross shard boundaries: " << tar.out;
  EXPECT_NE(tar.out.find("train: 14 images, validation: 6 images, classes: cat dog"), std::string::npos) << tar.out;
  EXPECT_EQ(stoker::trainer::Head::load(dir / "tar" / "head.stkh").serialize(),
            stoker::trainer::Head::load(dir / "folder" / "head.stkh").serialize());
}

// bench --autotune: the loader's curve and the threads train would choose (a slow consumer: one;
// one too fast for any count: all of them).
TEST_F(Cli, BenchAutotuneShowsTheCurveAndTheChoice) {
  const std::string common = "bench --data " + (dir / "data").string() + " --image-size 32 --batch-size 4";
  const CommandResult slow = stoker(common + " --autotune 1 --threads-list 2");
  ASSERT_EQ(slow.exit_code, 0) << slow.out;
  EXPECT_NE(slow.out.find("choice: 1 thread load"), std::string::npos) << slow.out;
  const CommandResult fast = stoker(common + " --autotune 1e12 --threads-list 2");
  ASSERT_EQ(fast.exit_code, 0) << fast.out;
  EXPECT_NE(fast.out.find("choice: all 2 threads"), std::string::npos) << fast.out;
}

TEST_F(Cli, ShardAFolderThenLoadTheShards) {
  const std::string pattern = (dir / "shards" / "train-%06d.tar").string();
  const CommandResult w =
      stoker("shard --data " + (dir / "data").string() + " --out " + pattern + " --max-size 40KiB --shuffle --seed 4");
  ASSERT_EQ(w.exit_code, 0) << w.out;
  EXPECT_NE(w.out.find("20 samples in 2 classes"), std::string::npos) << w.out;
  std::vector<std::string> shards;
  for (int i = 0; fs::exists(dir / "shards" / ("train-00000" + std::to_string(i) + ".tar")); ++i) {
    shards.push_back((dir / "shards" / ("train-00000" + std::to_string(i) + ".tar")).string());
  }
  ASSERT_GE(shards.size(), 2u) << w.out;
  ASSERT_LT(shards.size(), 10u);
  EXPECT_TRUE(fs::exists(dir / "shards" / "classes.txt"));

  // Readable by tar itself.
  if (std::system("tar --version > /dev/null 2>&1") == 0) {
    const std::string listing = (dir / "listing.txt").string();
    ASSERT_EQ(std::system(("tar tf " + shards[0] + " > " + listing).c_str()), 0);
    std::ifstream in(listing);
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);
    EXPECT_TRUE(first.ends_with(".jpg")) << first;
    EXPECT_EQ(second, first.substr(0, first.size() - 4) + ".cls");
  }

  const std::string common = " --epochs 1 --image-size 32 --threads 2 --seed 9";
  const CommandResult folder = stoker("load --data " + (dir / "data").string() + common);
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  const std::string braces =
      (dir / "shards" / ("train-{000000..00000" + std::to_string(shards.size() - 1) + "}.tar")).string();
  const CommandResult tar = stoker("load --data '" + braces + "'" + common);
  ASSERT_EQ(tar.exit_code, 0) << tar.out;
  EXPECT_NE(tar.out.find("shards: " + std::to_string(shards.size()) + " indexed"), std::string::npos) << tar.out;
  EXPECT_NE(tar.out.find("dataset: 20 images in 2 classes (cat, dog)"), std::string::npos) << tar.out;
  EXPECT_NE(tar.out.find(".tar:"), std::string::npos) << tar.out;  // samples named shard:member
  // Shuffled into the shards, so other sample ids: the same pixels come out, in another order.
  EXPECT_EQ(batch_summary(tar.out).size(), 4u) << tar.out;

  // A .txt shard list, and an unshuffled set loads exactly like the folder.
  const CommandResult plain =
      stoker("shard --data " + (dir / "data").string() + " --out " + (dir / "plain" / "p-%d.tar").string());
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  {
    std::ofstream list(dir / "plain" / "list.txt");
    list << "p-0.tar\n";
  }
  const CommandResult listed = stoker("load --data " + (dir / "plain" / "list.txt").string() + common);
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  EXPECT_EQ(batch_summary(listed.out), batch_summary(folder.out)) << listed.out << folder.out;

  const CommandResult missing = stoker("load --data " + (dir / "nowhere-{0..1}.tar").string() + common);
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("nowhere-0.tar"), std::string::npos) << missing.out;
}

std::string file_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> training_files(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Training again into a folder that holds a finished run is refused with the choices, and nothing
// in it changes; --overwrite removes that run's files (listed) and keeps the user's; a folder of
// other files is refused too; the run's inputs may not lie in its folder, nor the folder in its data.
TEST_F(Cli, TrainIntoAnEarlierRunIsRefusedUntilResumeOrOverwrite) {
  const fs::path out = dir / "out";
  const std::string base = "train --data " + (dir / "data").string() + " --model " + kModel +
                           " --cut-at sequential_9 --image-size 96 --batch-size 8 --threads 2 --device cpu ";
  const CommandResult first = stoker(base + "--epochs 2 --out " + out.string());
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const std::string history = file_text(out / "history.json"), head = file_text(out / "head.stkh");

  const CommandResult again = stoker(base + "--epochs 1 --out " + out.string());
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_NE(again.out.find("holds an earlier run ("), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--resume " + out.string()), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--overwrite"), std::string::npos) << again.out;
  EXPECT_EQ(file_text(out / "history.json"), history) << "the refused run changed the finished one";
  EXPECT_EQ(file_text(out / "head.stkh"), head);

  std::ofstream(out / "notes.txt") << "my notes\n";
  const CommandResult replaced = stoker(base + "--epochs 1 --overwrite --out " + out.string());
  ASSERT_EQ(replaced.exit_code, 0) << replaced.out;
  EXPECT_NE(replaced.out.find("--overwrite: removing the earlier run in " + out.string()), std::string::npos)
      << replaced.out;
  EXPECT_NE(replaced.out.find("kept: notes.txt"), std::string::npos) << replaced.out;
  EXPECT_EQ(file_text(out / "notes.txt"), "my notes\n");
  EXPECT_EQ(nlohmann::json::parse(file_text(out / "history.json"))["epochs"].size(), 1u);
  // The disk fills while the run is continued: an error naming the file, the previous files intact.
  const std::string checkpoint = file_text(out / "checkpoint.stkc"), one_epoch = file_text(out / "history.json");
  const CommandResult full = stoker("train --resume " + out.string() + " --epochs 2", "trap '' XFSZ; ulimit -f 4;");
  EXPECT_EQ(full.exit_code, 2) << full.out;
  EXPECT_NE(full.out.find("cannot write"), std::string::npos) << full.out;
  EXPECT_EQ(file_text(out / "checkpoint.stkc"), checkpoint);
  EXPECT_EQ(file_text(out / "history.json"), one_epoch);
  const CommandResult resumed_and_overwritten = stoker("train --resume " + out.string() + " --overwrite");
  EXPECT_EQ(resumed_and_overwritten.exit_code, 2) << resumed_and_overwritten.out;

  // Only the user's files: refused, then --overwrite writes the run beside them.
  const fs::path mine = dir / "mine";
  fs::create_directories(mine);
  std::ofstream(mine / "notes.txt") << "mine\n";
  const CommandResult not_empty = stoker(base + "--epochs 1 --out " + mine.string());
  EXPECT_EQ(not_empty.exit_code, 2) << not_empty.out;
  EXPECT_NE(not_empty.out.find("is not empty (notes.txt)"), std::string::npos) << not_empty.out;
  // --overwrite with a setting that fails (a layer that does not exist): the earlier run stays.
  const CommandResult typo = stoker(base + "--epochs 1 --overwrite --cut-at no_such_layer --out " + out.string());
  EXPECT_EQ(typo.exit_code, 2) << typo.out;
  EXPECT_EQ(file_text(out / "history.json"), one_epoch) << typo.out;
  EXPECT_TRUE(fs::exists(out / "checkpoint.stkc") && fs::exists(out / "train_settings.json"));
  // A run that fails before its first epoch ends leaves the folder as it found it.
  const CommandResult bad_cut = stoker(base + "--epochs 1 --overwrite --cut-at no_such_layer --out " + mine.string());
  EXPECT_EQ(bad_cut.exit_code, 2) << bad_cut.out;
  EXPECT_EQ(training_files(mine), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(stoker(base + "--epochs 1 --cut-at no_such_layer --out " + (dir / "new").string()).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "new"));
  // A file named as the run's own but not of its kind stops even --overwrite.
  std::ofstream(mine / "model.h5") << "my own model, not HDF5\n";
  const CommandResult impostor = stoker(base + "--epochs 1 --overwrite --out " + mine.string());
  EXPECT_EQ(impostor.exit_code, 2) << impostor.out;
  EXPECT_NE(impostor.out.find("model.h5, named as stoker's run files but not written by stoker"), std::string::npos)
      << impostor.out;
  EXPECT_EQ(file_text(mine / "model.h5"), "my own model, not HDF5\n");

  // Inputs inside --out, --out inside the data.
  fs::copy_file(kModel, out / "backbone-copy.h5");
  const CommandResult model_inside =
      stoker(base + "--epochs 1 --overwrite --model " + (out / "backbone-copy.h5").string() + " --out " + out.string());
  EXPECT_EQ(model_inside.exit_code, 2) << model_inside.out;
  EXPECT_NE(model_inside.out.find("--model " + (out / "backbone-copy.h5").string() + " lies inside --out"),
            std::string::npos)
      << model_inside.out;
  const CommandResult out_in_data = stoker(base + "--epochs 1 --out " + (dir / "data" / "run").string());
  EXPECT_EQ(out_in_data.exit_code, 2) << out_in_data.out;
  EXPECT_NE(out_in_data.out.find("lies inside --data"), std::string::npos) << out_in_data.out;
  EXPECT_FALSE(fs::exists(dir / "data" / "run"));

  // A folder whose class names and head disagree: a one-line reason, exit 2, no prediction.
  auto info = nlohmann::json::parse(file_text(out / "stoker_model.json"));
  info["class_names"] = {"cat", "dog", "fox"};
  std::ofstream(out / "stoker_model.json") << info.dump();
  const CommandResult mixed =
      stoker("predict --model-dir " + out.string() + " " + (dir / "data" / "dog" / "img1.jpg").string());
  EXPECT_EQ(mixed.exit_code, 2) << mixed.out;
  EXPECT_NE(mixed.out.find("mixes files of two runs"), std::string::npos) << mixed.out;
}

// `stoker shard` into a pattern that already has shards: refused; --overwrite removes every one of
// them first, so the folder then holds the new set alone. A write that fails (a file-size limit)
// names the shard and leaves nothing under its name; --shard-index and --list-samples never
// replace a file of another kind.
TEST_F(Cli, ShardRefusesAnEarlierSetAndOverwriteReplacesItWhole) {
  const fs::path shards = dir / "sh";
  const std::string shard = "shard --data " + (dir / "data").string() + " --out " + (shards / "s-%06d.tar").string();
  const CommandResult small = stoker(shard + " --max-size 40KiB");
  ASSERT_EQ(small.exit_code, 0) << small.out;
  ASSERT_TRUE(fs::exists(shards / "s-000001.tar")) << small.out;
  const std::string second = file_text(shards / "s-000001.tar");

  const CommandResult again = stoker(shard + " --max-size 1GiB");
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_NE(again.out.find("already holds"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--overwrite"), std::string::npos) << again.out;
  EXPECT_EQ(file_text(shards / "s-000001.tar"), second);

  const CommandResult replaced = stoker(shard + " --max-size 1GiB --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.out;
  EXPECT_NE(replaced.out.find("removed"), std::string::npos) << replaced.out;
  EXPECT_FALSE(fs::exists(shards / "s-000001.tar")) << "a shard of the earlier set left beside the new one";
  const std::string common = " --epochs 1 --image-size 32 --threads 2";
  const CommandResult loaded = stoker("load --data '" + (shards / "s-{000000..000000}.tar").string() + "'" + common);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.out;
  EXPECT_NE(loaded.out.find("dataset: 20 images in 2 classes"), std::string::npos) << loaded.out;

  // The user's notes given as --shard-index or --list-samples: refused, untouched.
  std::ofstream(shards / "notes.txt") << "my notes\n";
  const std::string data = " --data '" + (shards / "s-{000000..000000}.tar").string() + "'" + common;
  const CommandResult index = stoker("load" + data + " --shard-index " + (shards / "notes.txt").string());
  EXPECT_EQ(index.exit_code, 2) << index.out;
  EXPECT_NE(index.out.find("notes.txt: exists and is not a shard index stoker wrote; left as it is"), std::string::npos)
      << index.out;
  const CommandResult list = stoker("load" + data + " --list-samples " + (shards / "notes.txt").string());
  EXPECT_EQ(list.exit_code, 2) << list.out;
  EXPECT_EQ(file_text(shards / "notes.txt"), "my notes\n");
  const CommandResult own_list = stoker("load" + data + " --list-samples " + (dir / "list.txt").string());
  ASSERT_EQ(own_list.exit_code, 0) << own_list.out;
  EXPECT_EQ(stoker("load" + data + " --list-samples " + (dir / "list.txt").string()).exit_code, 0)
      << "its own list is replaced";

  // A full disk: the shard's name in the error, no file under it.
  const CommandResult full =
      stoker("shard --data " + (dir / "data").string() + " --out " + (dir / "full" / "f-%d.tar").string(),
             "trap '' XFSZ; ulimit -f 4;");
  EXPECT_EQ(full.exit_code, 2) << full.out;
  EXPECT_NE(full.out.find((dir / "full" / "f-0.tar").string()), std::string::npos) << full.out;
  EXPECT_FALSE(fs::exists(dir / "full" / "f-0.tar"));
  EXPECT_TRUE(fs::is_empty(dir / "full")) << "no temporary left";
}

// A --batch-size above the dataset sizes the buffers by what a batch holds (the 20 images); buffers
// that cannot be had are a one-line error naming the settings and the bytes, exit 2, before any
// allocation (1e9 ended in "internal error: std::bad_alloc").
TEST_F(Cli, LoadSizesItsBuffersByWhatABatchHolds) {
  const std::string data = "load --data " + (dir / "data").string() + " --epochs 1 --image-size 32 --threads 2";
  const CommandResult huge = stoker(data + " --batch-size 1000000000 --prefetch 2");
  ASSERT_EQ(huge.exit_code, 0) << huge.out;
  EXPECT_NE(huge.out.find("batch 1000000000, prefetch 2, 0.2 MiB of batch buffers"), std::string::npos) << huge.out;
  EXPECT_NE(huge.out.find("first batch: 20 samples"), std::string::npos) << huge.out;

  const CommandResult beyond = stoker(data + " --batch-size 1000 --prefetch 1000000 --image-size 16384");
  EXPECT_EQ(beyond.exit_code, 2) << beyond.out;
  EXPECT_NE(beyond.out.find("stoker: error: the batch buffers for 1000001 batches (prefetch 1000000 + 1) of 20 "
                            "samples (batch_size 1000, this rank's 20 samples per epoch) x 16384x16384x3 uint8 "
                            "would take "),
            std::string::npos)
      << beyond.out;
  EXPECT_EQ(beyond.out.find("internal error"), std::string::npos) << beyond.out;
}

// --rank and --world-size: a wrong value is named as given (--rank -1 read "received only
// world_size", --world-size 0 was taken as unset).
TEST_F(Cli, AWrongRankOrWorldSizeIsNamed) {
  const std::string data = "load --data " + (dir / "data").string() + " --epochs 1 --image-size 32";
  const CommandResult rank = stoker(data + " --rank -1 --world-size 2");
  EXPECT_EQ(rank.exit_code, 2) << rank.out;
  EXPECT_NE(rank.out.find("stoker: error: rank must be >= 0, received '-1'"), std::string::npos) << rank.out;
  const CommandResult world = stoker(data + " --world-size 0");
  EXPECT_EQ(world.exit_code, 2) << world.out;
  EXPECT_NE(world.out.find("stoker: error: world_size must be >= 1, received '0'"), std::string::npos) << world.out;
  const CommandResult both = stoker(data + " --rank 1 --world-size 2");
  ASSERT_EQ(both.exit_code, 0) << both.out;
  EXPECT_NE(both.out.find("rank 1 of 2"), std::string::npos) << both.out;
}

// A CSV list as Excel writes it (a byte order mark, CRLF) with a quote inside a file name, read as
// pandas reads it; an empty class is refused naming the line.
TEST_F(Cli, LoadACsvAsPandasReadsIt) {
  fs::copy_file(dir / "data" / "cat" / "img0.jpg", dir / "data" / "cat" / "a\"b.jpg");
  std::ofstream(dir / "list.csv", std::ios::binary) << "\xEF\xBB\xBF"
                                                    << "filename,class\r\ncat/a\"b.jpg,cat\r\n"
                                                    << "dog/img1.jpg,dog\r\n";
  const std::string load = "load --epochs 1 --image-size 32 --directory " + (dir / "data").string() + " --data-csv ";
  const CommandResult ok = stoker(load + (dir / "list.csv").string());
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("dataset: 2 images in 2 classes (cat, dog)"), std::string::npos) << ok.out;
  std::ofstream(dir / "empty.csv") << "filename,class\ncat/img0.jpg,cat\ndog/img1.jpg,\n";
  const CommandResult empty = stoker(load + (dir / "empty.csv").string());
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.out.find("empty.csv:3: empty 'class' for dog/img1.jpg"), std::string::npos) << empty.out;
}

// evaluate on a folder with a class the model does not have: refused naming the folder and the
// model's classes (its images were left out of the figures without a word).
TEST_F(Cli, EvaluateRefusesAClassFolderTheModelDoesNotHave) {
  const CommandResult t = stoker("train --data " + (dir / "data").string() + " --model " + kModel +
                                 " --cut-at sequential_9 --image-size 96 --epochs 1 --batch-size 8 --threads 2 "
                                 "--device cpu --out " +
                                 (dir / "out").string());
  ASSERT_EQ(t.exit_code, 0) << t.out;
  fs::create_directories(dir / "data" / "fox");
  fs::copy_file(dir / "data" / "cat" / "img0.jpg", dir / "data" / "fox" / "img0.jpg");
  const CommandResult e =
      stoker("evaluate --device cpu --model-dir " + (dir / "out").string() + " --data " + (dir / "data").string());
  EXPECT_EQ(e.exit_code, 2) << e.out;
  EXPECT_NE(e.out.find("stoker: error: " + (dir / "data" / "fox").string() +
                       ": a class folder the model does not have (its classes: cat, dog)"),
            std::string::npos)
      << e.out;
  fs::remove_all(dir / "data" / "fox");
  const CommandResult fine =
      stoker("evaluate --device cpu --model-dir " + (dir / "out").string() + " --data " + (dir / "data").string());
  EXPECT_EQ(fine.exit_code, 0) << fine.out;
}

}  // namespace
