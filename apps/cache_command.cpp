// `stoker cache build`: fill a cache file ahead of training (one pass over the dataset).
// `stoker cache info`: what a cache file holds, and whether every entry is intact.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "loader_flags.hpp"
#include "stoker/cache/cache_file.hpp"
#include "stoker/core/error.hpp"
#include "stop_signals.hpp"

namespace stoker::app {
namespace {

void run_build(const LoaderFlags& flags) {
  LoaderOptions o = flags.options();
  if (o.cache.kind == CacheKind::None) throw InvalidArgument("stoker cache build needs --cache encoded|decoded");
  if (o.cache.file.empty()) throw InvalidArgument("stoker cache build needs --cache-file");
  o.shuffle = false;
  Loader loader(flags.dataset(), o);
  std::printf("%s\n", loader.cache_status().c_str());
  // Ctrl-C or SIGTERM: stop after the batch; the file is written only after a whole pass.
  const StopSignals signals;
  loader.begin_epoch(0);
  std::size_t n = 0;
  while (auto b = loader.next()) {
    n += static_cast<std::size_t>(b->size());
    if (StopSignals::received() == 0) continue;
    std::printf("stopped after %zu samples: %s not written (run cache build again)\n", n, o.cache.file.c_str());
    std::fflush(stdout);
    throw CLI::RuntimeError(StopSignals::exit_status());
  }
  const CacheStats cs = *loader.cache_stats();
  std::printf("%zu samples: %llu newly cached, %llu already in the file, %llu over the budget; %.1f MiB in RAM\n", n,
              static_cast<unsigned long long>(cs.admitted), static_cast<unsigned long long>(cs.file_entries),
              static_cast<unsigned long long>(cs.rejected_over_budget), static_cast<double>(cs.bytes_held) / (1 << 20));
  const auto file = CacheFile::inspect(o.cache.file);
  std::printf("wrote %s: %zu entries, %.1f MiB\n", o.cache.file.c_str(), file->entries().size(),
              static_cast<double>(file->file_bytes()) / (1 << 20));
}

void run_info(const std::string& path) {
  const auto file = CacheFile::inspect(path);
  switch (file->state()) {
    case CacheFileState::Missing: throw IoError(path + ": no such file");
    case CacheFileState::Foreign:
    case CacheFileState::Stale: throw IoError(path + ": " + file->problem());
    case CacheFileState::Valid: break;
  }
  const CacheKey& k = file->key();
  std::uint64_t payload = 0, corrupt = 0, changed = 0;
  for (const auto& e : file->entries()) {
    payload += e.data_size;
    const auto bytes = file->data(e);
    if (checksum64(bytes.data(), bytes.size()) != e.checksum) ++corrupt;
    const auto now = stamp_of(source_file(e.path));
    if (!now || !(*now == e.stamp)) ++changed;
  }
  std::printf("%s: stoker cache file version %u, %s entries", path.c_str(), kCacheFileVersion, to_string(k.kind));
  if (k.kind == CacheKind::Decoded) std::printf(" (decoded at >= %dx%d)", k.min_height, k.min_width);
  std::printf("\n%zu entries, %.1f MiB of data, %.1f MiB file\n", file->entries().size(),
              static_cast<double>(payload) / (1 << 20), static_cast<double>(file->file_bytes()) / (1 << 20));
  std::printf("checksums: %llu corrupt; sources changed or missing since caching: %llu\n",
              static_cast<unsigned long long>(corrupt), static_cast<unsigned long long>(changed));
  if (corrupt) throw IoError(path + ": " + std::to_string(corrupt) + " corrupt entries");
}

}  // namespace

void add_cache_command(CLI::App& app) {
  CLI::App* cache = app.add_subcommand("cache", "build or inspect a cache file");
  cache->require_subcommand(1);

  auto flags = std::make_shared<LoaderFlags>();
  flags->use_defaults_of(kWhereCacheBuild);  // the table's: --cache decoded
  CLI::App* build = cache->add_subcommand("build", "decode a dataset once into a cache file");
  flags->add_to(*build);
  build->callback([flags] { run_build(*flags); });

  auto path = std::make_shared<std::string>();
  CLI::App* info = cache->add_subcommand("info", "report what a cache file holds and verify it");
  info->add_option("file", *path, "cache file")->required();
  info->callback([path] { run_info(*path); });
}

}  // namespace stoker::app
