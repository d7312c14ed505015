// Each subcommand of the stoker tool registers itself on the CLI11 app and runs from a callback.
#pragma once

#include <CLI/CLI.hpp>

namespace stoker::app {

// Exit codes of the stoker command: 0 done; kExitUnreadableFiles when it ran but some files could
// not be read (predict with --on-bad-sample skip, verify), each named on its own line; 2 an error
// (`stoker: error: <reason>`); 3 an internal error; CLI11's own codes (100+) for bad flags; 128 +
// the signal (130, 143) for a command stopped by SIGINT or SIGTERM (stop_signals.hpp).
inline constexpr int kExitUnreadableFiles = 1;

void add_load_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_model_commands(CLI::App& app);  // evaluate, predict, inspect
void add_shard_command(CLI::App& app);
void add_verify_command(CLI::App& app);  // lists a dataset's unreadable files

}  // namespace stoker::app
