// `stoker shard`: writes a class folder as WebDataset tar shards (ustar), KEY.<ext> + KEY.cls per
// sample and classes.txt next to the shards; `--data` of the loader commands reads them back.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "stoker/cache/sample_cache.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/webdataset.hpp"
#include "stop_signals.hpp"

namespace stoker::app {
namespace {

struct ShardArgs {
  std::string data;
  std::string out;
  std::string max_size = "1GiB";
  bool shuffle = false;
  std::uint64_t seed = 0;
  bool overwrite = false;
  std::string on_bad_sample = "fail";
  std::uint64_t max_image_pixels = DecodeLimits{}.max_pixels;
};

void run_shard(const ShardArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const Dataset ds = dataset_from_directory(args.data);
  ShardWriteOptions o;
  o.pattern = args.out;
  o.max_bytes = parse_byte_size(args.max_size);
  o.shuffle = args.shuffle;
  o.seed = args.seed;
  o.overwrite = args.overwrite;
  o.on_bad_sample = parse_bad_sample_policy(args.on_bad_sample);
  o.limits.max_pixels = static_cast<std::int64_t>(args.max_image_pixels);
  // Ctrl-C or SIGTERM: the writer stops before its next sample and removes what it wrote.
  const StopSignals signals;
  o.should_stop = [] { return StopSignals::received() != 0; };
  const ShardWriteResult r = write_webdataset_shards(ds, o);
  if (r.replaced > 0) std::printf("removed %zu earlier shards of the pattern (--overwrite)\n", r.replaced);
  if (r.stopped) {
    std::printf("stopped: no shard written (those completed and the one being written are removed)\n");
    std::fflush(stdout);
    throw CLI::RuntimeError(StopSignals::exit_status());
  }
  for (const SkippedSample& k : r.skipped)
    std::fprintf(stderr, "stoker: skipped %s: %s\n", k.path.c_str(), k.reason.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& shard : r.shards) std::printf("%s\n", shard.c_str());
  std::printf("%zu samples in %zu classes -> %zu shards, %.1f MiB, in %.2f s%s%s", r.samples, ds.class_names.size(),
              r.shards.size(), static_cast<double>(r.bytes) / (1 << 20), s,
              r.classes_file.empty() ? "" : "; class names in ", r.classes_file.c_str());
  if (!r.skipped.empty()) std::printf("; %zu unreadable files skipped (named above)", r.skipped.size());
  std::printf("\n");
}

}  // namespace

void add_shard_command(CLI::App& app) {
  auto args = std::make_shared<ShardArgs>();
  CLI::App* cmd = app.add_subcommand("shard", "write a class folder as WebDataset tar shards");
  cmd->add_option("--data", args->data, "folder with one sub-folder per class")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", args->out, "shard path pattern with one integer conversion, e.g. 'shards/train-%06d.tar'")
      ->required();
  cmd->add_option("--max-size", args->max_size, "bytes per shard at most, e.g. 1GiB")->capture_default_str();
  cmd->add_flag("--shuffle", args->shuffle, "mix the samples across shards (the plan's permutation of --seed)");
  cmd->add_option("--seed", args->seed, "shuffle seed")->capture_default_str();
  cmd->add_flag("--overwrite", args->overwrite,
                "replace earlier shards of the pattern: every one of them (any number) is removed first and "
                "classes.txt rewritten (without it, a folder holding them is refused)");
  cmd->add_option("--on-bad-sample", args->on_bad_sample,
                  "a file the loader would refuse (not an image, a format it does not read, too many pixels): fail "
                  "(the error names it; no shard is left) or skip (left out, each named)")
      ->capture_default_str();
  cmd->add_option("--max-image-pixels", args->max_image_pixels,
                  "a header announcing more pixels is refused (Pillow's MAX_IMAGE_PIXELS by default)")
      ->capture_default_str();
  cmd->callback([args] { run_shard(*args); });
}

}  // namespace stoker::app
