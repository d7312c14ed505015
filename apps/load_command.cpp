// `stoker load`: runs the loader over a dataset for some epochs and reports throughput, where the
// time went, and a summary of the first batch. The default job of the quick start.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "commands.hpp"
#include "loader_flags.hpp"
#include "stoker/core/atomic_file.hpp"

namespace stoker::app {
namespace {

struct LoadArgs {
  LoaderFlags loader;
  int epochs = 2;
  std::string list_samples;  // file: "epoch sample_id padding" per sample delivered
};

void print_first_batch(const Batch& b, const Dataset& ds) {
  const SampleShape s = b.sample_shape();
  std::printf("first batch: %d samples, %dx%dx%d %s %s, %zu bytes of pixels\n", b.size(), s.height, s.width, s.channels,
              to_string(s.dtype), to_string(s.layout), s.bytes() * static_cast<std::size_t>(b.size()));
  const int shown = std::min(b.size(), 4);
  for (int i = 0; i < shown; ++i) {
    const auto* px = reinterpret_cast<const std::uint8_t*>(b.pixels()) + s.bytes() * static_cast<std::size_t>(i);
    double sum = 0;
    for (std::size_t k = 0; k < s.bytes(); ++k) sum += px[k];
    const auto& sample = ds.samples[static_cast<std::size_t>(b.sample_ids()[static_cast<std::size_t>(i)])];
    std::printf("  sample %-6lld class %-8s label", static_cast<long long>(b.sample_ids()[static_cast<std::size_t>(i)]),
                sample.label >= 0 ? ds.class_names[static_cast<std::size_t>(sample.label)].c_str() : "-");
    for (int k = 0; k < b.label_width(); ++k)
      std::printf(" %.0f", b.labels()[static_cast<std::size_t>(i * b.label_width() + k)]);
    std::printf("  mean pixel %.1f  %s\n", sum / static_cast<double>(s.bytes()), sample_name(sample).c_str());
  }
}

// A file --list-samples may replace: absent, empty, or lines of three integers (an earlier list).
void refuse_foreign_sample_list(const std::string& file) {
  if (is_stream_target(file)) return;  // a device or a pipe holds no earlier list
  std::ifstream in(file);
  if (!in) return;
  std::string line;
  if (!std::getline(in, line)) return;
  long long epoch = 0, id = 0;
  int padding = 0;
  char rest = 0;
  if (std::sscanf(line.c_str(), "%lld %lld %d %c", &epoch, &id, &padding, &rest) != 3)
    throw IoError(file +
                  ": exists and is not a sample list stoker wrote; left as it is (remove it or choose another "
                  "--list-samples)");
}

void run_load(const LoadArgs& args) {
  const auto open_start = std::chrono::steady_clock::now();
  WebDatasetReport report;
  const Dataset ds = args.loader.dataset(&report);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - open_start).count();
  if (args.loader.shards()) print_shard_report(report, ms);
  else std::printf("folder: %zu files listed in %.1f ms\n", ds.size(), ms);
  Loader loader(ds, args.loader.options());
  std::printf("dataset: %zu images in %zu classes (", ds.size(), ds.class_names.size());
  for (std::size_t c = 0; c < ds.class_names.size(); ++c) std::printf("%s%s", c ? ", " : "", ds.class_names[c].c_str());
  std::printf("), %d threads, batch %d, prefetch %d, %.1f MiB of batch buffers\n", loader.threads(),
              args.loader.batch_size, args.loader.prefetch, static_cast<double>(loader.buffer_bytes()) / (1 << 20));

  if (!loader.cache_status().empty()) std::printf("%s\n", loader.cache_status().c_str());
  const Sharding& sharding = loader.sharding();
  if (sharding.world_size > 1) {
    std::printf("rank %d of %d (%s, remainder %s): %zu samples per epoch\n", sharding.rank, sharding.world_size,
                sharding.mode == ShardMode::Fixed ? "fixed parts" : "interleaved",
                sharding.drop_remainder ? "dropped" : "padded", loader.samples_per_epoch());
  }
  // Written under a temporary name and renamed when the epochs are done; it replaces only an
  // earlier sample list.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> list(nullptr, &std::fclose);
  std::filesystem::path list_tmp;
  struct RemoveUnlessCommitted {
    std::filesystem::path* tmp;
    ~RemoveUnlessCommitted() {
      std::error_code ec;
      if (!tmp->empty()) std::filesystem::remove(*tmp, ec);
    }
  } remove_tmp{&list_tmp};
  if (!args.list_samples.empty()) {
    refuse_foreign_sample_list(args.list_samples);
    // A device or a pipe is written in place; a file through a temporary renamed at the end.
    const bool in_place = is_stream_target(args.list_samples);
    if (!in_place) list_tmp = temporary_path(args.list_samples);
    list.reset(std::fopen(in_place ? args.list_samples.c_str() : list_tmp.c_str(), "w"));
    if (!list) throw IoError(args.list_samples + ": cannot write the sample list: " + std::strerror(errno));
  }
  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    loader.reset_stats();
    const auto t0 = std::chrono::steady_clock::now();
    loader.begin_epoch(static_cast<std::uint64_t>(epoch));
    std::size_t samples = 0;
    while (auto batch = loader.next()) {
      if (epoch == 0 && batch->index() == 0) print_first_batch(*batch, ds);
      samples += static_cast<std::size_t>(batch->size());
      if (list) {
        for (int i = 0; i < batch->size(); ++i) {
          const auto k = static_cast<std::size_t>(i);
          std::fprintf(list.get(), "%d %lld %d\n", epoch, static_cast<long long>(batch->sample_ids()[k]),
                       static_cast<int>(batch->padding()[k]));
        }
      }
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const LoaderStats st = loader.stats();
    std::printf(
        "epoch %d: %zu images in %.2f s = %.0f img/s | read %.1f MB (%.2f s) decode %.2f s resize %.2f s "
        "(thread-seconds) | consumer waited %.2f s | skipped %llu",
        epoch, samples, wall, static_cast<double>(samples) / wall, static_cast<double>(st.bytes_read) / 1e6,
        st.read_seconds, st.decode_seconds, st.transform_seconds, st.consumer_wait_seconds,
        static_cast<unsigned long long>(st.samples_skipped));
    if (loader.cache_stats()) {
      std::printf(" | cache %llu hits %llu misses, %.1f MiB held", static_cast<unsigned long long>(st.cache_hits),
                  static_cast<unsigned long long>(st.cache_misses),
                  static_cast<double>(st.cache_bytes_held) / (1 << 20));
    }
    std::printf("\n");
  }
  if (list) {
    const bool flushed = std::fflush(list.get()) == 0;
    const int err = errno;
    if (std::fclose(list.release()) != 0 || !flushed)
      throw IoError(args.list_samples + ": cannot write the sample list: " + std::strerror(flushed ? errno : err));
    if (!list_tmp.empty()) commit_file(list_tmp, args.list_samples);
    list_tmp.clear();
  }
}

}  // namespace

void add_load_command(CLI::App& app) {
  auto args = std::make_shared<LoadArgs>();
  CLI::App* cmd = app.add_subcommand("load", "load a dataset and report throughput and a batch summary");
  args->loader.add_to(*cmd);
  cmd->add_option("--epochs", args->epochs, "epochs to run")->capture_default_str();
  cmd->add_option("--list-samples", args->list_samples, "write 'epoch sample_id padding' per delivered sample");
  cmd->callback([args] { run_load(*args); });
}

}  // namespace stoker::app
