// The stoker command: one subcommand per use (see commands.hpp).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.hpp"
#include "stoker/core/error.hpp"

namespace {

// The command's exit status (docs/cli.md#exit-codes).
int run(int argc, char** argv) {
  CLI::App app{"stoker: keeps a GPU fed while it trains image classifiers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker " STOKER_VERSION);
  stoker::app::add_config_file(app);
  stoker::app::add_load_command(app);
  stoker::app::add_bench_command(app);
  stoker::app::add_cache_command(app);
  stoker::app::add_train_command(app);
  stoker::app::add_model_commands(app);
  stoker::app::add_shard_command(app);
  stoker::app::add_verify_command(app);
  stoker::app::add_env_command(app);

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
  std::vector<std::string> args = stoker::app::keras_spelling_accepted(argc, argv);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::ConfigError& e) {
    std::fprintf(stderr, "stoker: error: %s\n", stoker::app::config_error(e, app).c_str());
    return 2;
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit status (its output said why)
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // a mistake in the flags: one line, as every error
    std::fprintf(stderr, "stoker: error: %s\n", stoker::app::parse_error(e, app, args).c_str());
    return 2;
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
