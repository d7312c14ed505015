#include "stoker/pipeline/loader_settings.hpp"

#include <oneapi/tbb/info.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "stoker/core/error.hpp"

namespace stoker {

namespace {

using T = SettingType;

std::vector<LoaderSetting> make_settings() {
  const std::string_view bilinear_why_torch = "torchvision's Resize resizes bilinearly; PyTorch users expect it";
  return {
      {.name = "image_size",
       .type = T::ImageSize,
       .default_value = "224",
       .help = "the size the default transform resizes to: N (square) or H,W",
       .min = 1},
      {.name = "batch_size", .type = T::Integer, .default_value = "32", .help = "samples per batch", .min = 1},
      {.name = "interpolation",
       .type = T::Choice,
       .default_value = "nearest",
       .help = "the resize filter: Pillow's (as Keras' load_img), area (OpenCV's), centre_nearest / opencv_linear "
               "(the augmentation's own resize)",
       .choices = {"nearest", "bilinear", "bicubic", "lanczos", "box", "hamming", "area", "centre_nearest",
                   "opencv_linear"},
       .differences = {{kWhereTrain, "opencv_linear",
                        "training and prediction resize with the augmentation's warp: opencv_linear (bilinear as "
                        "image_dataset_from_directory's tf.image.resize) or centre_nearest"},
                       {kWhereTorch, "bilinear", bilinear_why_torch},
                       {kWhereJax, "bilinear",
                        "jax.image.resize and tf.image.resize have no nearest default; "
                        "bilinear is what JAX pipelines use"}}},
      {.name = "keep_aspect_ratio",
       .type = T::Boolean,
       .default_value = "false",
       .help = "centre-crop to the target aspect ratio before resizing (Keras' keep_aspect_ratio)"},
      {.name = "dct_scaling",
       .type = T::Boolean,
       .default_value = "true",
       .help = "decode JPEGs shrunk in the DCT domain (fast); false decodes them at full size as Pillow does "
               "(pixel parity with Keras)"},
      {.name = "label_mode",
       .type = T::Choice,
       .default_value = "sparse",
       .help = "labels per sample: the class index (sparse), one float 0/1 (binary, two classes), one-hot "
               "(categorical) or none",
       .choices = {"sparse", "categorical", "binary", "none"}},
      {.name = "shuffle",
       .type = T::Boolean,
       .default_value = "true",
       .help = "a new order each epoch",
       .differences = {{kWhereTorch, "false",
                        "PyTorch's DataLoader keeps the dataset's order unless asked (a validation loader "
                        "must not shuffle)"}}},
      {.name = "seed",
       .type = T::Integer,
       .default_value = "0",
       .help = "keys the order and the augmentation: (seed, epoch, sample)",
       .min = 0},
      {.name = "drop_last",
       .type = T::Boolean,
       .default_value = "false",
       .help = "drop each epoch's last, partial batch"},
      {.name = "threads",
       .type = T::Integer,
       .default_value = "0",
       .help = "decode threads; 0: the cores this process may use",
       .min = 0},
      {.name = "prefetch",
       .type = T::Integer,
       .default_value = "4",
       .help = "batches decoded ahead of the consumer; 0: two per decode thread",
       .min = 0,
       .differences = {{kWhereCommand, "0",
                        "a command sizes it to its decode threads (train: calibrated with them unless given)"}}},
      {.name = "on_bad_sample",
       .type = T::Choice,
       .default_value = "fail",
       .help = "a file that cannot be read or decoded: fail (the error names it) or skip (left out, counted)",
       .choices = {"fail", "skip"}},
      {.name = "max_image_pixels",
       .type = T::Integer,
       .default_value = "178956970",
       .help = "an image whose header announces more pixels is a bad sample, refused before it is decoded "
               "(Pillow's MAX_IMAGE_PIXELS, whose default this is)",
       .min = 1},
      {.name = "cache",
       .type = T::Choice,
       .default_value = "none",
       .help = "keep samples across epochs: none, encoded (the files' bytes) or decoded (pixels)",
       .choices = {"none", "encoded", "decoded"},
       .differences = {{kWhereCacheBuild, "decoded",
                        "it builds a cache file: with none there would be nothing to build"}}},
      {.name = "cache_budget",
       .type = T::ByteSize,
       .default_value = "4GiB",
       .help = "RAM for the cache, bookkeeping included (e.g. 512MiB, 8GiB)"},
      {.name = "cache_file",
       .type = T::Text,
       .default_value = "",
       .help = "a cache file to start warm from and to write after an epoch (needs cache encoded or decoded)"},
      {.name = "rank",
       .type = T::Integer,
       .default_value = "",
       .help = "this process's rank in a job of several (with world_size); unset: RANK or SLURM_PROCID, else 0",
       .min = 0},
      {.name = "world_size",
       .type = T::Integer,
       .default_value = "",
       .help = "processes in the job (with rank); unset: WORLD_SIZE or SLURM_NTASKS, else 1",
       .min = 1},
      {.name = "shard_mode",
       .type = T::Choice,
       .default_value = "interleaved",
       .help = "how ranks share an epoch: interleaved (PyTorch's DistributedSampler) or fixed (one part per rank "
               "across epochs)",
       .choices = {"interleaved", "fixed"}},
      {.name = "drop_remainder",
       .type = T::Boolean,
       .default_value = "false",
       .help = "even out the ranks by dropping the remainder instead of padding with repeats (marked)"},
  };
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

[[noreturn]] void refuse(const LoaderSetting& s, std::string_view expected, std::string_view received) {
  throw InvalidArgument(std::string(s.name) + " must be " + std::string(expected) + ", received '" +
                        std::string(received) + "'");
}

}  // namespace

std::string_view setting_type_name(SettingType type) {
  switch (type) {
    case T::Integer: return "integer";
    case T::Boolean: return "boolean";
    case T::Choice: return "choice";
    case T::Text: return "text";
    case T::ByteSize: return "byte size";
    case T::ImageSize: return "image size";
  }
  return "text";
}

std::string LoaderSetting::flag() const {
  std::string out = "--" + std::string(name);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

std::string_view LoaderSetting::default_for(std::string_view where) const {
  for (const auto& d : differences)
    if (d.where == where) return d.value;
  if (where == kWhereTrain || where == kWhereCacheBuild) return default_for(kWhereCommand);
  return default_value;
}

std::span<const LoaderSetting> loader_settings() {
  static const std::vector<LoaderSetting> settings = make_settings();
  return settings;
}

const LoaderSetting& loader_setting(std::string_view name) {
  for (const auto& s : loader_settings())
    if (s.name == name) return s;
  throw InvalidArgument("unknown loader setting '" + std::string(name) + "'");
}

bool parse_setting_bool(const LoaderSetting& s, std::string_view text) {
  const std::string t = lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  refuse(s, "true or false", text);
}

std::int64_t parse_setting_integer(const LoaderSetting& s, std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) refuse(s, "a whole number", text);
  if (v < s.min || v > s.max) {
    std::string range = ">= " + std::to_string(s.min);
    if (s.max != std::numeric_limits<std::int64_t>::max())
      range = "in [" + std::to_string(s.min) + ", " + std::to_string(s.max) + "]";
    refuse(s, range, text);
  }
  return v;
}

std::string setting_value(const LoaderSettingValues& given, std::string_view name, std::string_view where) {
  const LoaderSetting& s = loader_setting(name);
  const auto it = given.find(name);
  const std::string text = it != given.end() ? it->second : std::string(s.default_for(where));
  if (text.empty() && it != given.end() && s.type != T::Text && !s.may_be_unset()) refuse(s, "given", text);
  if (text.empty()) return text;
  switch (s.type) {
    case T::Integer: parse_setting_integer(s, text); break;
    case T::Boolean: parse_setting_bool(s, text); break;
    case T::Choice:
      if (std::find(s.choices.begin(), s.choices.end(), lower(text)) == s.choices.end()) {
        std::string names;
        for (const auto c : s.choices) names += (names.empty() ? "" : ", ") + std::string(c);
        refuse(s, "one of " + names, text);
      }
      return lower(text);
    case T::ByteSize: parse_byte_size(text); break;
    case T::ImageSize: {
      const auto comma = text.find(',');
      parse_setting_integer(s, text.substr(0, comma));
      if (comma != std::string::npos) parse_setting_integer(s, text.substr(comma + 1));
      break;
    }
    case T::Text: break;
  }
  return text;
}

LoaderOptions loader_options_from(const LoaderSettingValues& given, std::string_view where) {
  for (const auto& [name, value] : given) loader_setting(name);  // an unknown name is refused
  auto text = [&](std::string_view name) { return setting_value(given, name, where); };
  auto integer = [&](std::string_view name) { return parse_setting_integer(loader_setting(name), text(name)); };
  auto boolean = [&](std::string_view name) { return parse_setting_bool(loader_setting(name), text(name)); };
  auto optional_int = [&](std::string_view name) -> std::optional<int> {
    const std::string t = text(name);
    if (t.empty()) return std::nullopt;
    return static_cast<int>(parse_setting_integer(loader_setting(name), t));
  };

  LoaderOptions o;
  const std::string size = text("image_size");
  const auto comma = size.find(',');
  o.image_height = static_cast<int>(parse_setting_integer(loader_setting("image_size"), size.substr(0, comma)));
  o.image_width = comma == std::string::npos
                      ? o.image_height
                      : static_cast<int>(parse_setting_integer(loader_setting("image_size"), size.substr(comma + 1)));
  o.batch_size = static_cast<int>(integer("batch_size"));
  o.interpolation = parse_interpolation(text("interpolation"));
  o.keep_aspect_ratio = boolean("keep_aspect_ratio");
  o.dct_scaling = boolean("dct_scaling");
  o.label_mode = parse_label_mode(text("label_mode"));
  o.shuffle = boolean("shuffle");
  o.seed = static_cast<std::uint64_t>(integer("seed"));
  o.drop_last = boolean("drop_last");
  o.threads = static_cast<int>(integer("threads"));
  o.prefetch = static_cast<int>(integer("prefetch"));
  if (o.prefetch == 0) o.prefetch = 2 * std::max(1, o.threads > 0 ? o.threads : tbb::info::default_concurrency());
  o.on_bad_sample = parse_bad_sample_policy(text("on_bad_sample"));
  o.limits.max_pixels = integer("max_image_pixels");
  o.cache.kind = parse_cache_kind(text("cache"));
  o.cache.budget_bytes = parse_byte_size(text("cache_budget"));
  o.cache.file = text("cache_file");
  if (!o.cache.file.empty() && o.cache.kind == CacheKind::None) {
    throw InvalidArgument("cache_file needs cache encoded or decoded");
  }
  o.sharding = resolve_sharding(optional_int("rank"), optional_int("world_size"), parse_shard_mode(text("shard_mode")),
                                boolean("drop_remainder"));
  return o;
}

Sharding resolve_sharding(std::optional<int> rank, std::optional<int> world_size, ShardMode mode, bool drop_remainder) {
  if (rank.has_value() != world_size.has_value()) {
    throw InvalidArgument(std::string("give rank and world_size together (received only ") +
                          (rank ? "rank" : "world_size") + ")");
  }
  Sharding s = rank ? Sharding{*rank, *world_size} : sharding_from_environment();
  if (rank && *world_size < 1)
    throw InvalidArgument("world_size must be >= 1, received " + std::to_string(*world_size));
  if (rank && (*rank < 0 || *rank >= *world_size)) {
    throw InvalidArgument("rank must be in [0, world_size = " + std::to_string(*world_size) + "), received " +
                          std::to_string(*rank));
  }
  s.mode = mode;
  s.drop_remainder = drop_remainder;
  return s;
}

}  // namespace stoker
