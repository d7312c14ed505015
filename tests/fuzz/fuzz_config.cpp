// Fuzzes `stoker --config FILE train`: CLI11's TOML reader, train's flags and their checks, and
// the run's settings as --resume keeps them. A file is refused with a CLI11 or stoker error (its
// message said as config_error says it), or taken; a taken file gives TrainOptions or a stoker
// error, and its settings written (save_run_settings) and read back (load_run_settings) write
// back to the same text. Any other exception is the "internal error" a user must never see.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "fuzz_util.hpp"
#include "stoker/core/error.hpp"
#include "train_config.hpp"

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const fs::path file = stoker_fuzz::scratch_dir() / "settings.toml";
  stoker_fuzz::write_file(file, std::string_view(reinterpret_cast<const char*>(data), size));
  CLI::App app{"stoker"};
  app.require_subcommand(1);
  stoker::app::add_config_file(app);
  stoker::app::TrainConfig config;
  config.add_to(*app.add_subcommand("train"));
  const std::string path = file.string();
  const char* argv[] = {"stoker", "--config", path.c_str(), "train"};
  try {
    app.parse(4, const_cast<char**>(argv));
  } catch (const CLI::ConfigError& e) {
    if (stoker::app::config_error(e, app).find(path) == std::string::npos) std::abort();  // names the file
    return 0;
  } catch (const CLI::ParseError&) {
    return 0;
  } catch (const stoker::Error&) {
    return 0;
  }
  try {
    (void)config.options();
  } catch (const stoker::Error&) {
    return 0;
  }
  // What --resume reads back is what the run was given.
  const fs::path first = stoker_fuzz::scratch_dir() / "first", second = stoker_fuzz::scratch_dir() / "second";
  fs::create_directories(first);
  fs::create_directories(second);
  config.out = first.string();
  try {
    stoker::app::save_run_settings(config);
  } catch (const stoker::Error&) {
    return 0;  // a path that cannot be made absolute
  } catch (const fs::filesystem_error&) {
    return 0;
  }
  stoker::app::TrainConfig back = stoker::app::load_run_settings(first.string());
  back.out = second.string();
  stoker::app::save_run_settings(back);
  const nlohmann::json a = nlohmann::json::parse(read_text(first / stoker::app::kRunSettingsFile));
  nlohmann::json b = nlohmann::json::parse(read_text(second / stoker::app::kRunSettingsFile));
  b["settings"]["out"] = a["settings"]["out"];
  if (a != b) std::abort();
  return 0;
}
