// `stoker bench`: the benchmark users quote. Runs the suites in bench_suites.hpp on one dataset,
// prints a table with the machine description, and writes JSON and a PNG chart.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_suites.hpp"
#include "commands.hpp"
#include "json_text.hpp"
#include "plot.hpp"
#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/autotune.hpp"

namespace stoker::app {
namespace {

struct BenchArgs {
  BenchSettings settings;
  double autotune = 0;  // a consumer's img/s: show tune_loader's curve and choice for it instead
  std::vector<std::string> suites = {"loader", "cache", "augment", "gpu", "peers"};
  std::string json;
  std::string chart;
};

// bench/loader_peers.py next to the source tree this binary was built from, or in the current folder.
std::string find_peers_script() {
  for (const std::string& candidate :
       {std::string(STOKER_SOURCE_DIR) + "/bench/loader_peers.py", std::string("bench/loader_peers.py")}) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return candidate;
  }
  return "bench/loader_peers.py";
}

// What `train` does for a GPU backbone, for a consumer of the given rate: the measured curve.
void run_autotune(const BenchArgs& args, const Dataset& ds) {
  const BenchSettings& s = args.settings;
  const int most = s.threads.empty() ? 0 : *std::max_element(s.threads.begin(), s.threads.end());
  TuneOptions tune;
  tune.max_threads = most;
  const LoaderTuning t = tune_loader(ds, s.loader.options(), args.autotune, tune);
  std::printf("%-10s %10s\n", "threads", "img/s");
  for (const auto& [threads, rate] : t.curve) std::printf("%-10d %10.0f\n", threads, rate);
  std::printf("choice: %s\n", t.reason.c_str());
}

// The report and the chart replace only an earlier report and a PNG: checked before the bench
// runs, so that a mistyped path costs nothing.
void refuse_foreign_outputs(const BenchArgs& args) {
  std::error_code ec;
  const auto size = args.json.empty() ? 0 : std::filesystem::file_size(args.json, ec);
  if (!ec && size > 0) {
    std::ifstream in(args.json);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("machine") || !j.contains("rows"))
      throw IoError(args.json +
                    ": exists and is not a stoker bench report; left as it is (remove it or choose "
                    "another --json)");
  }
  if (!args.chart.empty()) refuse_foreign_file(args.chart, std::string_view("\x89PNG\r\n\x1a\n", 8), "PNG chart");
}

void run_bench(BenchArgs& args) {
  refuse_foreign_outputs(args);
  BenchSettings& s = args.settings;
  const Dataset ds = s.loader.dataset();
  if (args.autotune > 0) return run_autotune(args, ds);
  if (s.threads.empty()) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    for (int t = 1; t < hw; t *= 2) s.threads.push_back(t);
    s.threads.push_back(hw);
  }
  if (s.repeat < 1) throw InvalidArgument("--repeat must be >= 1");
  if (!(s.min_seconds >= 0)) throw InvalidArgument("--min-time must be >= 0 seconds");
  s.peers_script = find_peers_script();
  const std::string machine = machine_description();
  std::printf("machine: %s\n", machine.c_str());
  std::printf(
      "dataset: %s, %zu images; %dx%d %s, batch %d, prefetch %s; each figure the median of %d runs after a "
      "warm-up, a run being whole epochs for at least %.2g s (the cold epoch: one)\n",
      s.loader.data.c_str(), ds.size(), s.loader.image_size, s.loader.image_size, s.loader.interpolation.c_str(),
      s.loader.batch_size, s.loader.prefetch > 0 ? std::to_string(s.loader.prefetch).c_str() : "two batches per thread",
      s.repeat, s.min_seconds);

  std::vector<BenchRow> rows;
  for (const auto& suite : args.suites) {
    std::vector<BenchRow> r;
    if (suite == "loader") r = loader_suite(ds, s);
    else if (suite == "cache") r = cache_suite(ds, s);
    else if (suite == "augment") r = augment_suite(ds, s);
    else if (suite == "gpu") r = gpu_suite(ds, s);
    else if (suite == "peers") r = peers_suite(s);
    else throw InvalidArgument("--suite must be loader, cache, augment, gpu or peers, received '" + suite + "'");
    std::printf("\n%-66s %7s %10s  %s\n", suite.c_str(), "threads", "img/s", "ratio");
    for (const auto& row : r) {
      std::printf("%-66s %7d %10.0f  ", row.config.c_str(), row.threads, row.img_per_s);
      if (!row.reference.empty()) std::printf("%.2fx %s", row.ratio, row.reference.c_str());
      if (!row.note.empty()) std::printf("%s%s", row.reference.empty() ? "" : "; ", row.note.c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
    rows.insert(rows.end(), r.begin(), r.end());
  }

  nlohmann::json report;
  report["machine"] = machine;
  report["dataset"] = {{"path", s.loader.data}, {"images", ds.size()}};
  report["image_size"] = s.loader.image_size;
  report["batch_size"] = s.loader.batch_size;
  report["repeat"] = s.repeat;
  report["min_seconds"] = s.min_seconds;
  for (const auto& r : rows) {
    report["rows"].push_back({{"suite", r.suite},
                              {"config", r.config},
                              {"threads", r.threads},
                              {"img_per_s", r.img_per_s},
                              {"reference", r.reference},
                              {"ratio", r.ratio},
                              {"note", r.note}});
  }
  if (!args.json.empty()) {
    write_file_atomically(args.json, json_text(report, 2) + "\n");
    std::printf("\nwrote %s\n", args.json.c_str());
  }
  if (!args.chart.empty()) {
    std::vector<std::pair<std::string, double>> bars;
    for (const auto& r : rows) {
      if (r.img_per_s > 0) bars.emplace_back(r.config + " (" + std::to_string(r.threads) + "t)", r.img_per_s);
    }
    write_bar_chart(args.chart, "stoker bench, img/s: " + machine, bars);
    std::printf("wrote %s\n", args.chart.c_str());
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "measure the loader, caches, augmentation and peers on this machine");
  args->settings.loader.add_to(*cmd);
  cmd->add_option("--threads-list", args->settings.threads, "thread counts to measure (default 1, 2, 4, … all)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--repeat", args->settings.repeat, "timed runs per figure (median reported)")->capture_default_str();
  cmd->add_option("--min-time", args->settings.min_seconds, "seconds a timed run lasts at least (whole epochs)")
      ->capture_default_str();
  cmd->add_option("--suite", args->suites, "loader cache augment gpu peers (default: all)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--json", args->json, "write the results as JSON to this file");
  cmd->add_option("--chart", args->chart, "write a PNG bar chart of the results to this file");
  cmd->add_option("--torch-python", args->settings.torch_python, "Python with torch + torchvision (DataLoader peer)")
      ->default_val("python3");
  cmd->add_option("--keras-python", args->settings.keras_python, "Python with tf_keras (ImageDataGenerator peer)")
      ->default_val("python3");
  cmd->add_option("--autotune", args->autotune,
                  "IMG_PER_S: the loader's measured rate at 1, 2, 4... threads (at most the largest of "
                  "--threads-list) and the threads train would choose for a consumer of this rate")
      ->check(CLI::PositiveNumber);
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace stoker::app
