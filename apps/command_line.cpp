// What every command shares on its command line: the settings file (--config), Keras' spelling of
// the flags, and a user's mistake said in one line.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "commands.hpp"

namespace stoker::app {

void add_config_file(CLI::App& app) {
  // A flag given twice (say in a script and again by hand) takes the last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Settings can come from a TOML file: a [train] table holds train's flags by their long names
  // (rotation-range = 30); flags on the command line win. CLI11 2.1 reads config files only at the
  // top level, hence the table per subcommand.
  app.set_config("--config", "", "read settings from a TOML file ([train] table; command-line flags win)");
  // A misspelled key or table in that file is an error, as a misspelled flag is: ignored, the run
  // would train with the default instead.
  app.allow_config_extras(CLI::config_extras_mode::error);
}

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

namespace {

// Levenshtein distance: how many letters to change, add or drop to make `a` into `b`.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The command the arguments chose (a subcommand of a subcommand too), or the app itself.
const CLI::App& chosen_command(const CLI::App& app) {
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  return *cmd;
}

// Whether `name` (without its dashes) is a long flag of `cmd` or of a command above it.
bool known_flag(const CLI::App& cmd, const std::string& name) {
  for (const CLI::App* c = &cmd; c != nullptr; c = c->get_parent()) {
    for (const CLI::Option* o : c->get_options()) {
      const auto& names = o->get_lnames();
      if (std::find(names.begin(), names.end(), name) != names.end()) return true;
    }
  }
  return false;
}

// The flag of `cmd` nearest to the unknown `name`: within two edits (one for short names), or the
// one flag that starts with it; empty when none is near enough to suggest.
std::string nearest_flag(const CLI::App& cmd, const std::string& name) {
  std::string best, only_prefixed;
  std::size_t best_distance = name.size() <= 4 ? 2 : 3, prefixed = 0;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& candidate : o->get_lnames()) {
      const std::size_t d = edit_distance(name, candidate);
      if (d < best_distance) best_distance = d, best = candidate;
      if (candidate.starts_with(name)) ++prefixed, only_prefixed = candidate;
    }
  }
  if (best.empty() && prefixed == 1) best = only_prefixed;
  return best.empty() ? best : "--" + best;
}

}  // namespace

std::vector<std::string> keras_spelling_accepted(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;  // what follows is not a flag
    if (!a.starts_with("--")) continue;
    std::replace(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.find('='), a.size())), '_', '-');
  }
  return args;
}

std::string parse_error(const CLI::ParseError& e, const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App& cmd = chosen_command(app);
  std::string command;  // "stoker cache build"
  for (const CLI::App* c = &cmd; c->get_parent() != nullptr; c = c->get_parent())
    command = " " + c->get_name() + command;
  command = "stoker" + command;
  // The type, not get_name(): CLI11 names some errors after the command that raised them.
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (!a.starts_with("--") || a == "--") continue;
      const std::string name = a.substr(2, a.find('=') - 2);
      if (known_flag(cmd, name)) continue;
      const std::string near = nearest_flag(cmd, name);
      return "unknown flag --" + name + " for " + command + (near.empty() ? "" : "; did you mean " + near + "?") +
             " (" + command + " --help lists the flags)";
    }
    const std::vector<std::string> extra = app.remaining(true);
    if (!extra.empty())
      return "unexpected argument '" + extra.front() + "' for " + command + " (" + command + " --help lists the flags)";
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr || dynamic_cast<const CLI::RequiresError*>(&e) != nullptr)
    return std::string(e.what()) + " (" + command + " --help)";
  return e.what();
}

}  // namespace stoker::app
