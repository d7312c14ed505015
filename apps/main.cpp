// The stoker command: one subcommand per use (see commands.hpp).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "commands.hpp"
#include "stoker/core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"stoker: keeps a GPU fed while it trains image classifiers"};
  app.require_subcommand(1);
  // A flag given twice (say in a script and again by hand) takes the last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Settings can come from a TOML file: a [train] table holds train's flags by their long names
  // (rotation-range = 30); flags on the command line win. CLI11 2.1 reads config files only at the
  // top level, hence the table per subcommand.
  app.set_config("--config", "", "read settings from a TOML file ([train] table; command-line flags win)");
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
