// The stoker command: one subcommand per use (see commands.hpp).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "commands.hpp"
#include "stoker/core/error.hpp"

namespace {

// CLI11's "INI was not able to parse train.epoch" said as what is wrong in the user's file.
std::string config_error(const CLI::ConfigError& e, const CLI::App& app) {
  const std::string file = app.get_option("--config")->as<std::string>();
  const std::string what = e.what(), marker = "not able to parse ";
  const std::size_t at = what.find(marker);
  if (at == std::string::npos) return file + ": " + what;
  const std::string item = what.substr(at + marker.size());
  const std::size_t dot = item.find('.');
  if (item.size() > 3 && item.compare(item.size() - 3, 3, ".++") == 0) {
    std::string tables;
    for (const CLI::App* sub : app.get_subcommands({})) tables += (tables.empty() ? "" : ", ") + sub->get_name();
    return file + ": [" + item.substr(0, item.size() - 3) + "] is not a command's table (" + tables + ")";
  }
  if (!item.empty() && item[0] == '[') return file + ": malformed table header '" + item + "'";
  if (dot == std::string::npos)
    return file + ": '" + item + "' lies outside a table: settings go under their command's table, as [train]";
  return file + ": '" + item.substr(dot + 1) + "' is not a setting of [" + item.substr(0, dot) +
         "] (the settings are the command's long flag names: stoker " + item.substr(0, dot) + " --help)";
}

// The command's exit status (docs/cli.md#exit-codes).
int run(int argc, char** argv) {
  CLI::App app{"stoker: keeps a GPU fed while it trains image classifiers"};
  app.require_subcommand(1);
  // A flag given twice (say in a script and again by hand) takes the last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Settings can come from a TOML file: a [train] table holds train's flags by their long names
  // (rotation-range = 30); flags on the command line win. CLI11 2.1 reads config files only at the
  // top level, hence the table per subcommand.
  app.set_config("--config", "", "read settings from a TOML file ([train] table; command-line flags win)");
  // A misspelled key or table in that file is an error, as a misspelled flag is: ignored, the run
  // would train with the default instead.
  app.allow_config_extras(CLI::config_extras_mode::error);
  stoker::app::add_load_command(app);
  stoker::app::add_bench_command(app);
  stoker::app::add_cache_command(app);
  stoker::app::add_train_command(app);
  stoker::app::add_model_commands(app);
  stoker::app::add_shard_command(app);
  stoker::app::add_verify_command(app);

  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == name;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "stoker: error: unknown command '%s' (commands: %s)\n", name.c_str(), names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    std::fprintf(stderr, "stoker: error: %s\n", config_error(e, app).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {  // a path of the user's, not a bug of stoker's
    const std::string path = e.path1().empty() ? std::string() : e.path1().string() + ": ";
    std::fprintf(stderr, "stoker: error: %s%s\n", path.c_str(), e.code().message().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
}  // namespace

// Output lost to a full disk behind a redirection (or /dev/full) is an error, never a silent
// success: stdout is flushed and checked before the exit status is given.
int main(int argc, char** argv) {
  int status = run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "stoker: error: cannot write the output (stdout): %s\n", std::strerror(errno));
    if (status == 0) status = 2;
  }
  return status;
}
