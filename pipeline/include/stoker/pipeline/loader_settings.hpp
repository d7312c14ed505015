// The loader's settings, described once: name, type, default, help and valid values. The command's
// flags (apps/loader_flags.hpp), the Python keyword arguments (stoker.Loader, stoker.torch,
// stoker.jax, through stoker._stoker.loader_settings()) and docs/loader-settings.md all come from
// this table, and loader_options_from() is the one conversion of given values into LoaderOptions:
//
//   LoaderOptions o = stoker::loader_options_from({{"batch_size", "64"}, {"interpolation", "bilinear"}});
//
// A setting whose default differs on purpose somewhere (PyTorch's bilinear resize) lists where and
// why in `differences`; every other interface takes `default_value`.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/plan.hpp"

namespace stoker {

enum class SettingType : std::uint8_t {
  Integer,    // a whole number in [min, max]
  Boolean,    // true|false (also 1|0, yes|no, on|off)
  Choice,     // one of `choices`
  Text,       // any text (a path)
  ByteSize,   // bytes with an optional unit: 512MiB, 4GiB, 1e9
  ImageSize,  // N (square) or H,W
};

std::string_view setting_type_name(SettingType type);  // "integer", "boolean", ...

// Where a setting is taken, for the defaults that differ on purpose.
inline constexpr std::string_view kWhereCommand = "command";         // every `stoker` subcommand that loads
inline constexpr std::string_view kWhereTrain = "train";             // `stoker train`
inline constexpr std::string_view kWhereCacheBuild = "cache build";  // `stoker cache build`
inline constexpr std::string_view kWherePython = "python";           // stoker.Loader
inline constexpr std::string_view kWhereTorch = "torch";             // stoker.torch.DataLoader
inline constexpr std::string_view kWhereJax = "jax";                 // stoker.jax.Loader

struct SettingDifference {
  std::string_view where;  // one of the kWhere* names
  std::string_view value;  // the default there
  std::string_view why;
};

struct LoaderSetting {
  std::string_view name;  // Python's keyword argument; the command's flag is flag()
  SettingType type = SettingType::Text;
  std::string_view default_value;  // as text; empty for a setting that may be left unset
  std::string_view help;
  std::vector<std::string_view> choices;                        // SettingType::Choice
  std::int64_t min = std::numeric_limits<std::int64_t>::min();  // SettingType::Integer, ImageSize
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
  std::vector<SettingDifference> differences;  // intentional per-interface defaults

  std::string flag() const;  // "--batch-size" for batch_size
  // The default `where` (a kWhere* name) takes: its listed difference, else default_value; a
  // subcommand (train, cache build) falls back to the command's.
  std::string_view default_for(std::string_view where) const;
  bool may_be_unset() const noexcept { return default_value.empty() && type != SettingType::Text; }
};

// Every setting, in the order the documentation lists them.
std::span<const LoaderSetting> loader_settings();
// The setting of that name; InvalidArgument naming an unknown one.
const LoaderSetting& loader_setting(std::string_view name);

// Settings as text, by name, as the command line spells values. A name that is not a setting is an
// InvalidArgument naming it; a value is checked against its setting's type, choices and range (the
// error names the setting and says what was received).
using LoaderSettingValues = std::map<std::string, std::string, std::less<>>;

// The value of one setting, checked; `where` picks the default when the setting is not given.
std::string setting_value(const LoaderSettingValues& given, std::string_view name,
                          std::string_view where = kWherePython);
bool parse_setting_bool(const LoaderSetting& setting, std::string_view text);
std::int64_t parse_setting_integer(const LoaderSetting& setting, std::string_view text);

// LoaderOptions from the given settings, the others at their defaults for `where`. prefetch 0 is two
// batches per decode thread; rank and world_size go through resolve_sharding().
LoaderOptions loader_options_from(const LoaderSettingValues& given, std::string_view where = kWherePython);

// This process's share: rank and world_size both given, or neither (then the launcher's
// environment, sharding_from_environment()). One given without the other is an InvalidArgument.
Sharding resolve_sharding(std::optional<int> rank, std::optional<int> world_size,
                          ShardMode mode = ShardMode::Interleaved, bool drop_remainder = false);

}  // namespace stoker
