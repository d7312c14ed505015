#include "stoker/training/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/checksum.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/run_folder.hpp"

namespace stoker::training {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints store little-endian values");

constexpr char kCheckpointMagic[8] = {'S', 'T', 'K', 'C', 'K', 'P', 'T', '1'};
constexpr char kFeaturesMagic[8] = {'S', 'T', 'K', 'F', 'E', 'A', 'T', '1'};
using nlohmann::json;

json to_json(const trainer::EpochStats& s) {
  return {{"loss", s.loss}, {"accuracy", s.accuracy}, {"samples", s.samples}};
}
trainer::EpochStats stats_from(const json& j) {
  return {j.at("loss").get<double>(), j.at("accuracy").get<double>(), j.at("samples").get<int>()};
}

json to_json(const std::vector<SkippedSample>& skipped) {
  json j = json::array();
  for (const SkippedSample& s : skipped) j.push_back({{"id", s.sample_id}, {"path", s.path}, {"reason", s.reason}});
  return j;
}
// Absent in checkpoints written before skipped samples were recorded: none.
std::vector<SkippedSample> skipped_from(const json& parent) {
  std::vector<SkippedSample> out;
  if (!parent.contains("skipped")) return out;
  for (const json& s : parent.at("skipped"))
    out.push_back({s.at("id").get<std::int64_t>(), s.at("path").get<std::string>(), s.at("reason").get<std::string>()});
  return out;
}

// JSON has no infinity (a callback's best before its first epoch): null stands for it.
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double infinity_if_null(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
}

json to_json(const EpochReport& e) {
  json times = {{"data_wait_seconds", e.times.data_wait_seconds}, {"compute_seconds", e.times.compute_seconds}};
  times["gpu_seconds"] = e.times.gpu_seconds ? json(*e.times.gpu_seconds) : json(nullptr);
  times["read_seconds"] = e.times.read_seconds;
  times["decode_seconds"] = e.times.decode_seconds;
  times["transform_seconds"] = e.times.transform_seconds;
  times["loader_threads"] = e.times.loader_threads;
  times["transfer_wait_seconds"] = e.times.transfer_wait_seconds ? json(*e.times.transfer_wait_seconds) : json(nullptr);
  return {{"epoch", e.epoch},
          {"features_cached", e.features_cached},
          {"train", to_json(e.train)},
          {"validation", to_json(e.validation)},
          {"skipped", to_json(e.skipped)},
          {"learning_rate", e.learning_rate},
          {"stopped_early", e.stopped_early},
          {"improved", e.improved},
          {"seconds", e.seconds},
          {"images_per_second", e.images_per_second},
          {"times", times}};
}
EpochReport report_from(const json& j) {
  EpochReport e;
  e.epoch = j.at("epoch").get<int>();
  e.features_cached = j.at("features_cached").get<bool>();
  e.train = stats_from(j.at("train"));
  e.validation = stats_from(j.at("validation"));
  e.skipped = skipped_from(j);
  e.learning_rate = j.value("learning_rate", 0.0);
  e.stopped_early = j.value("stopped_early", false);
  e.improved = j.at("improved").get<bool>();
  e.seconds = j.at("seconds").get<double>();
  e.images_per_second = j.at("images_per_second").get<double>();
  const json& t = j.at("times");
  e.times.data_wait_seconds = t.at("data_wait_seconds").get<double>();
  e.times.compute_seconds = t.at("compute_seconds").get<double>();
  if (!t.at("gpu_seconds").is_null()) e.times.gpu_seconds = t.at("gpu_seconds").get<double>();
  e.times.read_seconds = t.value("read_seconds", 0.0);
  e.times.decode_seconds = t.value("decode_seconds", 0.0);
  e.times.transform_seconds = t.value("transform_seconds", 0.0);
  e.times.loader_threads = t.value("loader_threads", 0);
  if (t.contains("transfer_wait_seconds") && !t["transfer_wait_seconds"].is_null())
    e.times.transfer_wait_seconds = t["transfer_wait_seconds"].get<double>();
  return e;
}

// "<magic><u64 header length><header>" then the payload; the header says what the payload holds.
std::string framed(const char (&magic)[8], const std::string& header) {
  std::string bytes(magic, 8);
  const std::uint64_t len = header.size();
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  return bytes + header;
}

// The header and the payload after it; IoError naming the file unless the frame is whole.
std::pair<json, std::string_view> unframe(const char (&magic)[8], std::string_view bytes, const std::string& where,
                                          const char* what) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), magic, 8) != 0)
    throw IoError(where + ": not a stoker " + what + " file (bad magic)");
  std::uint64_t len = 0;
  std::memcpy(&len, bytes.data() + 8, 8);
  if (len > bytes.size() - 16) throw IoError(where + ": truncated " + what + " header");
  try {
    return {json::parse(bytes.substr(16, len)), bytes.substr(16 + len)};
  } catch (const json::exception& e) {
    throw IoError(where + ": malformed " + what + " header: " + e.what());
  }
}

// An optimizer's arrays as raw floats after the heads; the header keeps their sizes.
json to_json(const trainer::OptimizerState& o, std::string& payload) {
  auto sizes = [&payload](const std::vector<std::vector<float>>& arrays) {
    json j = json::array();
    for (const auto& a : arrays) {
      j.push_back(a.size());
      payload.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(float));
    }
    return j;
  };
  json j = {{"steps", o.steps}, {"learning_rate", o.learning_rate}};
  j["m"] = sizes(o.m);
  j["v"] = sizes(o.v);
  return j;
}

trainer::OptimizerState optimizer_from(const json& j, std::string_view& payload, const std::string& where) {
  trainer::OptimizerState o;
  o.steps = j.at("steps").get<std::int64_t>();
  o.learning_rate = j.at("learning_rate").get<float>();
  auto arrays = [&](const json& sizes, std::vector<std::vector<float>>& out) {
    for (const json& n : sizes) {
      const auto count = n.get<std::uint64_t>();
      if (count > payload.size() / sizeof(float))
        throw IoError(where + ": truncated: an optimizer array of " + std::to_string(count) +
                      " values lies past the end");
      std::vector<float> a(static_cast<std::size_t>(count));
      std::memcpy(a.data(), payload.data(), a.size() * sizeof(float));
      payload.remove_prefix(a.size() * sizeof(float));
      out.push_back(std::move(a));
    }
  };
  arrays(j.at("m"), o.m);
  arrays(j.at("v"), o.v);
  return o;
}

json to_json(const EarlyStopping& e) {
  return {{"best", finite_or_null(e.best)}, {"wait", e.wait}, {"stopped", e.stopped}};
}
void restore(EarlyStopping& e, const json& j) {
  e.best = infinity_if_null(j.at("best"));
  e.wait = j.at("wait").get<int>();
  e.stopped = j.at("stopped").get<bool>();
}

}  // namespace

void save_checkpoint(const std::filesystem::path& file, const Checkpoint& c) {
  if (!c.head) throw InvalidArgument("save_checkpoint: the checkpoint has no head");
  const std::string head = c.head->serialize();
  const std::string best = c.best_head ? c.best_head->serialize() : std::string();
  json h = {{"format", "stoker-checkpoint"},
            {"version", 1},
            {"settings", c.settings},
            {"epoch", c.epoch},
            {"loader_state", c.loader.to_string()},
            {"progress",
             {{"batches", c.progress.batches},
              {"images", c.progress.images},
              {"loss_sum", c.progress.loss_sum},  // JSON numbers round-trip doubles exactly
              {"correct", c.progress.correct},
              {"skipped", to_json(c.progress.skipped)}}},
            {"best_epoch", c.best_epoch},
            {"best_value", c.best_value},
            {"has_features", c.has_features},
            {"early_stopping", to_json(c.early_stopping)},
            {"reduce_lr_on_plateau",
             {{"best", finite_or_null(c.reduce_lr_on_plateau.best)},
              {"wait", c.reduce_lr_on_plateau.wait},
              {"cooldown_counter", c.reduce_lr_on_plateau.cooldown_counter}}},
            {"head_bytes", head.size()},
            {"best_head_bytes", best.size()}};
  h["history"] = json::array();
  for (const EpochReport& e : c.history) h["history"].push_back(to_json(e));
  std::string optimizers;  // after the heads
  if (c.fine_tune) {
    const FineTuneProgress& f = *c.fine_tune;
    h["fine_tune"] = {{"epochs_done", f.epochs_done},
                      {"backbone_file", f.backbone_file},
                      {"early_stopping", to_json(f.early_stopping)}};
    h["fine_tune"]["top_optimizer"] = to_json(f.top, optimizers);
    h["fine_tune"]["head_optimizer"] = to_json(f.head, optimizers);
  }
  h["optimizer_bytes"] = optimizers.size();
  std::string bytes = framed(kCheckpointMagic, h.dump(1)) + head + best + optimizers;
  append_checksum(bytes);
  write_file_atomically(file, bytes);
}

Checkpoint load_checkpoint(const std::filesystem::path& file) {
  const std::string where = file.string();
  const std::string bytes = read_whole_file(file);
  const auto [h, payload] = unframe(kCheckpointMagic, checked_content(bytes, where), where, "checkpoint");
  Checkpoint c;
  try {
    if (h.at("format") != "stoker-checkpoint" || h.at("version") != 1)
      throw IoError(where + ": unsupported checkpoint format " + h.at("format").dump().substr(0, 100) + " version " +
                    h.at("version").dump().substr(0, 100));
    c.settings = h.at("settings").get<std::string>();
    c.epoch = h.at("epoch").get<int>();
    c.loader = LoaderState::parse(h.at("loader_state").get<std::string>());
    const json& p = h.at("progress");
    c.progress = {p.at("batches").get<std::size_t>(), p.at("images").get<std::size_t>(), p.at("loss_sum").get<double>(),
                  p.at("correct").get<int>(), skipped_from(p)};
    c.best_epoch = h.at("best_epoch").get<int>();
    c.best_value = h.at("best_value").get<double>();
    c.has_features = h.at("has_features").get<bool>();
    if (h.contains("early_stopping")) {
      restore(c.early_stopping, h.at("early_stopping"));
      const json& r = h.at("reduce_lr_on_plateau");
      c.reduce_lr_on_plateau.best = infinity_if_null(r.at("best"));
      c.reduce_lr_on_plateau.wait = r.at("wait").get<int>();
      c.reduce_lr_on_plateau.cooldown_counter = r.at("cooldown_counter").get<int>();
    }
    for (const json& e : h.at("history")) c.history.push_back(report_from(e));
    const auto head_bytes = h.at("head_bytes").get<std::uint64_t>();
    const auto best_bytes = h.at("best_head_bytes").get<std::uint64_t>();
    const auto optimizer_bytes = h.value("optimizer_bytes", std::uint64_t{0});  // absent before fine-tuning's
    if (head_bytes > payload.size() || best_bytes > payload.size() - head_bytes ||
        optimizer_bytes != payload.size() - head_bytes - best_bytes)
      throw IoError(where + ": truncated: the header announces " +
                    std::to_string(head_bytes + best_bytes + optimizer_bytes) +
                    " bytes of heads and optimizers, the file holds " + std::to_string(payload.size()));
    c.head = trainer::Head::deserialize(payload.substr(0, head_bytes), where + " (head)");
    if (best_bytes > 0)
      c.best_head = trainer::Head::deserialize(payload.substr(head_bytes, best_bytes), where + " (best head)");
    if (h.contains("fine_tune")) {
      const json& f = h.at("fine_tune");
      std::string_view optimizers = payload.substr(head_bytes + best_bytes);
      FineTuneProgress ft;
      ft.epochs_done = f.at("epochs_done").get<int>();
      ft.backbone_file = f.at("backbone_file").get<std::string>();
      // A run resumes from files of its own folder only: a name with a folder, absolute or `..`,
      // is refused rather than read (or later removed) outside it.
      if (!is_plain_file_name(ft.backbone_file))
        throw IoError(where + ": names the backbone file '" + ft.backbone_file +
                      "', which is not a file of the run's folder; refusing to resume from it");
      restore(ft.early_stopping, f.at("early_stopping"));
      ft.top = optimizer_from(f.at("top_optimizer"), optimizers, where);
      ft.head = optimizer_from(f.at("head_optimizer"), optimizers, where);
      c.fine_tune = std::move(ft);
    }
  } catch (const json::exception& e) {
    throw IoError(where + ": malformed checkpoint header: " + e.what());
  } catch (const InvalidArgument& e) {  // LoaderState::parse
    throw IoError(where + ": " + e.what());
  }
  if (c.epoch < 0 || c.history.size() != static_cast<std::size_t>(c.epoch))
    throw IoError(where + ": the checkpoint is at epoch " + std::to_string(c.epoch) + " but holds " +
                  std::to_string(c.history.size()) + " epochs of history");
  return c;
}

void save_features(const std::filesystem::path& file, const Features& f) {
  const json h = {
      {"format", "stoker-features"}, {"version", 1}, {"n", f.n}, {"dim", f.dim}, {"skipped", to_json(f.skipped)}};
  if (f.y.size() != static_cast<std::size_t>(f.n) || f.x.size() != static_cast<std::size_t>(f.n) * f.dim)
    throw InvalidArgument("save_features: " + std::to_string(f.n) + " samples of " + std::to_string(f.dim) +
                          " values do not match the arrays' sizes");
  std::string bytes = framed(kFeaturesMagic, h.dump());
  bytes.append(reinterpret_cast<const char*>(f.y.data()), f.y.size() * sizeof(int));
  bytes.append(reinterpret_cast<const char*>(f.x.data()), f.x.size() * sizeof(float));
  append_checksum(bytes);
  write_file_atomically(file, bytes);
}

Features load_features(const std::filesystem::path& file) {
  const std::string where = file.string();
  const std::string bytes = read_whole_file(file);
  const auto [h, payload] = unframe(kFeaturesMagic, checked_content(bytes, where), where, "features");
  Features f;
  try {
    f.n = h.at("n").get<int>();
    f.dim = h.at("dim").get<int>();
    f.skipped = skipped_from(h);
  } catch (const json::exception& e) {
    throw IoError(where + ": malformed features header: " + e.what());
  }
  const std::uint64_t n = static_cast<std::uint64_t>(std::max(f.n, 0));
  const std::uint64_t values = n * static_cast<std::uint64_t>(std::max(f.dim, 0));
  const std::uint64_t need = n * sizeof(int) + values * sizeof(float);
  if (f.n < 0 || f.dim <= 0 || payload.size() != need)
    throw IoError(where + ": " + std::to_string(f.n) + " samples of " + std::to_string(f.dim) + " features need " +
                  std::to_string(need) + " bytes, the file holds " + std::to_string(payload.size()));
  f.y.resize(static_cast<std::size_t>(f.n));
  f.x.resize(values);
  std::memcpy(f.y.data(), payload.data(), f.y.size() * sizeof(int));
  std::memcpy(f.x.data(), payload.data() + f.y.size() * sizeof(int), f.x.size() * sizeof(float));
  return f;
}

}  // namespace stoker::training
