// Each subcommand of the stoker tool registers itself on the CLI11 app and runs from a callback.
#pragma once

#include <CLI/CLI.hpp>

namespace stoker::app {

void add_load_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_model_commands(CLI::App& app);  // evaluate, predict, inspect
void add_shard_command(CLI::App& app);

}  // namespace stoker::app
