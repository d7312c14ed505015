// Each subcommand of the stoker tool registers itself on the CLI11 app and runs from a callback.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace stoker::app {

// Exit codes of the stoker command: 0 done; kExitUnreadableFiles when it ran but some files could
// not be read (predict with --on-bad-sample skip, verify), each named on its own line; 2 an error
// (`stoker: error: <reason>`; a bad flag too); 3 an internal error; 128 +
// the signal (130, 143) for a command stopped by SIGINT or SIGTERM (stop_signals.hpp).
inline constexpr int kExitUnreadableFiles = 1;

// What every command shares: a flag given twice takes the last value, and --config FILE reads a
// TOML file of [command] tables holding long flag names (a misspelled key or table is an error).
void add_config_file(CLI::App& app);
// CLI11's ConfigError on that file said as what is wrong in it (the file, the table, the key).
std::string config_error(const CLI::ConfigError& e, const CLI::App& app);
// The arguments with Keras' spelling of a flag taken as its dashed name (--rotation_range is
// --rotation-range): only a flag's name changes, never a value.
std::vector<std::string> keras_spelling_accepted(int argc, char** argv);
// A user's mistake on the command line (a CLI11 ParseError but help and version) in one line: an
// unknown flag named with the nearest one of its command, a missing or malformed value as CLI11
// says it. `args` are the arguments parsed.
std::string parse_error(const CLI::ParseError& e, const CLI::App& app, const std::vector<std::string>& args);

void add_load_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_model_commands(CLI::App& app);  // evaluate, predict, inspect
void add_shard_command(CLI::App& app);
void add_verify_command(CLI::App& app);  // lists a dataset's unreadable files
void add_env_command(CLI::App& app);     // the build, GPUs, cuDNN, NVML and the CPU

}  // namespace stoker::app
