// The stoker command: one subcommand per use (see commands.hpp).
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "stoker/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"stoker: keeps a GPU fed while it trains image classifiers"};
  app.require_subcommand(1);
  stoker::app::add_load_command(app);
  stoker::app::add_bench_command(app);
  stoker::app::add_cache_command(app);
  stoker::app::add_train_command(app);
  stoker::app::add_model_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
