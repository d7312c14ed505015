// `stoker verify`: decodes every file of a dataset once and lists the ones that cannot be read,
// so that a training run with --on-bad-sample fail does not stop on them hours in.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "json_text.hpp"
#include "loader_flags.hpp"
#include "progress.hpp"

namespace stoker::app {
namespace {

struct VerifyArgs {
  LoaderFlags loader;
  bool json = false;
};

// Returns the number of unreadable files.
std::size_t run_verify(VerifyArgs args) {
  args.loader.on_bad_sample = "skip";  // every file is decoded, whatever the others hold
  args.loader.label_mode = "none";     // shards need no labels to be checked
  const auto t0 = std::chrono::steady_clock::now();
  WebDatasetReport report;
  const Dataset ds = args.loader.dataset(&report);
  std::vector<SkippedSample> unreadable;
  for (const auto& s : report.skipped)  // members of tar shards that never became samples
    unreadable.push_back({-1, s.key.empty() ? s.shard : s.shard + ":" + s.key, s.reason});

  LoaderOptions o;
  o.image_height = o.image_width = 8;  // the decode is what is checked; the resize only has to run
  o.dct_scaling = false;               // every JPEG decoded at full size, as PIL decodes it
  o.batch_size = 64;
  o.threads = args.loader.threads;
  o.shuffle = false;
  o.label_mode = LabelMode::None;
  o.on_bad_sample = BadSamplePolicy::Skip;
  o.sharding = Sharding{0, 1};  // one process checks everything, whatever the launcher says
  std::size_t readable = 0;
  if (!ds.empty()) {
    Loader loader(ds, o);
    std::optional<Progress> progress;
    if (!args.json) progress.emplace("verify", loader.batches_per_epoch());
    loader.begin_epoch(0);
    std::size_t batches = 0;
    while (auto b = loader.next()) {
      readable += static_cast<std::size_t>(b->size());
      if (progress) progress->update(++batches, readable);
    }
    if (progress) progress->finish();
    for (auto& s : loader.skipped()) unreadable.push_back(std::move(s));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.json) {
    nlohmann::json bad = nlohmann::json::array();
    for (const auto& s : unreadable) bad.push_back({{"path", s.path}, {"reason", s.reason}});
    std::printf("%s\n", json_text(nlohmann::json({{"data", args.loader.data},
                                                  {"files", ds.size() + report.skipped.size()},
                                                  {"readable", readable},
                                                  {"unreadable", bad},
                                                  {"seconds", seconds}}),
                                  2)
                            .c_str());
  } else {
    std::printf("%s: %zu files, %zu readable, %zu unreadable (%.1f s)\n", args.loader.data.c_str(),
                ds.size() + report.skipped.size(), readable, unreadable.size(), seconds);
    for (const auto& s : unreadable) std::printf("  %s: %s\n", s.path.c_str(), s.reason.c_str());
  }
  return unreadable.size();
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "decode every file of a dataset once and list the unreadable ones");
  cmd->add_option("--data", args->loader.data,
                  "folder with one sub-folder per class, or WebDataset tar shards (a brace pattern or a .txt list)")
      ->required()
      ->check(LoaderFlags::check_data);
  cmd->add_option("--threads", args->loader.threads, "decode threads (0 = all cores)")->capture_default_str();
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args] {
    if (run_verify(*args) > 0) throw CLI::RuntimeError(kExitUnreadableFiles);  // listed above
  });
}

}  // namespace stoker::app
