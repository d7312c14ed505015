// Transfer-learning head: Dense + sigmoid/softmax, cross-entropy, Adam; the head file format.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include <stoker/core/atomic_file.hpp>
#include <stoker/core/checksum.hpp>
#include <stoker/core/error.hpp>
#include <stoker/core/splitmix.hpp>
#include <stoker/trainer/head.hpp>

#include "ops/adam.hpp"

namespace stoker::trainer {
namespace {

static_assert(std::endian::native == std::endian::little, "the head file stores little-endian float32");

constexpr char kMagic[8] = {'S', 'T', 'K', 'H', 'E', 'A', 'D', '1'};

double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); }

}  // namespace

Head::Head(int input_dim, int units, HeadActivation activation, AdamConfig adam, std::uint64_t seed)
    : input_dim_(input_dim), units_(units), activation_(activation), adam_(adam) {
  if (input_dim <= 0) throw InvalidArgument("Head: input_dim must be > 0, received " + std::to_string(input_dim));
  if (activation == HeadActivation::Sigmoid && units != 1)
    throw InvalidArgument("Head: a sigmoid head has 1 unit, received " + std::to_string(units));
  if (activation == HeadActivation::Softmax && units < 2)
    throw InvalidArgument("Head: a softmax head needs >= 2 classes, received " + std::to_string(units));
  if (!(adam.learning_rate > 0) || !(adam.beta_1 >= 0 && adam.beta_1 < 1) || !(adam.beta_2 >= 0 && adam.beta_2 < 1) ||
      !(adam.epsilon >= 0))
    throw InvalidArgument("Head: invalid Adam settings (learning_rate " + std::to_string(adam.learning_rate) +
                          ", beta_1 " + std::to_string(adam.beta_1) + ", beta_2 " + std::to_string(adam.beta_2) + ")");
  const std::size_t nk = static_cast<std::size_t>(input_dim) * units;
  kernel_.resize(nk);
  SplitMix64 rng{seed};
  const double limit = std::sqrt(6.0 / (input_dim + units));  // glorot_uniform
  for (auto& w : kernel_) w = static_cast<float>((rng.uniform() * 2.0 - 1.0) * limit);
  bias_.assign(static_cast<std::size_t>(units), 0.0f);
  m_kernel_.assign(nk, 0.0f);
  v_kernel_.assign(nk, 0.0f);
  m_bias_.assign(static_cast<std::size_t>(units), 0.0f);
  v_bias_.assign(static_cast<std::size_t>(units), 0.0f);
}

Head Head::sigmoid(int input_dim, AdamConfig adam, std::uint64_t seed) {
  return Head(input_dim, 1, HeadActivation::Sigmoid, adam, seed);
}
Head Head::softmax(int input_dim, int classes, AdamConfig adam, std::uint64_t seed) {
  return Head(input_dim, classes, HeadActivation::Softmax, adam, seed);
}

void Head::logits(const float* x, int n, float* out) const {
  for (int b = 0; b < n; ++b) {
    float* z = out + static_cast<std::size_t>(b) * units_;
    for (int j = 0; j < units_; ++j) z[j] = bias_[static_cast<std::size_t>(j)];
    const float* xb = x + static_cast<std::size_t>(b) * input_dim_;
    for (int i = 0; i < input_dim_; ++i) {
      const float xi = xb[i];
      const float* w = kernel_.data() + static_cast<std::size_t>(i) * units_;
      for (int j = 0; j < units_; ++j) z[j] += xi * w[j];
    }
  }
}

void Head::check_labels(const int* labels, int n) const {
  for (int b = 0; b < n; ++b)
    if (labels[b] < 0 || labels[b] >= classes())
      throw InvalidArgument("Head: label " + std::to_string(labels[b]) + " of sample " + std::to_string(b) +
                            " is outside [0, " + std::to_string(classes()) + ")");
}

void LossOptions::check(int classes) const {
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    throw InvalidArgument("label smoothing must be in [0, 1), received " + std::to_string(label_smoothing));
  if (!class_weight.empty() && class_weight.size() != static_cast<std::size_t>(classes))
    throw InvalidArgument("class weights: " + std::to_string(class_weight.size()) + " given for " +
                          std::to_string(classes) + " classes");
  for (double w : class_weight)
    if (!(w >= 0 && std::isfinite(w)))
      throw InvalidArgument("class weights must be finite and >= 0, received " + std::to_string(w));
}

double Head::target(const LossOptions& loss, int label, int j) const {
  const double s = loss.label_smoothing;
  return (label == j ? 1.0 : 0.0) * (1 - s) + s / (units_ == 1 ? 2.0 : static_cast<double>(units_));
}

void Head::set_learning_rate(float learning_rate) {
  if (!(learning_rate >= 0 && std::isfinite(learning_rate)))  // 0: a schedule's end, where Adam stands still
    throw InvalidArgument("Head: the learning rate must be >= 0, received " + std::to_string(learning_rate));
  adam_.learning_rate = learning_rate;
}

StepResult Head::backward(const float* x, const int* labels, int batch, const LossOptions& options,
                          HeadGradients& g) const {
  if (batch <= 0) throw InvalidArgument("Head: batch must be > 0, received " + std::to_string(batch));
  check_labels(labels, batch);
  options.check(classes());
  const int u = units_;
  std::vector<float> z(static_cast<std::size_t>(batch) * u);
  logits(x, batch, z.data());
  StepResult r;
  r.samples = batch;
  // dL/dz = w (p - t) / batch for both heads (cross-entropy on sigmoid/softmax, computed from
  // logits), t the (smoothed) target and w the sample's class weight.
  std::vector<float> dz(z.size());
  double loss = 0;
  for (int b = 0; b < batch; ++b) {
    const float* zb = z.data() + static_cast<std::size_t>(b) * u;
    float* db = dz.data() + static_cast<std::size_t>(b) * u;
    const double w = options.class_weight.empty() ? 1.0 : options.class_weight[static_cast<std::size_t>(labels[b])];
    if (activation_ == HeadActivation::Sigmoid) {
      const double t = target(options, labels[b], 1);
      loss += w * (softplus(zb[0]) - zb[0] * t);
      const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(zb[0])));
      r.correct += (p > 0.5) == (labels[b] == 1);
      db[0] = static_cast<float>(w * (p - t) / batch);
    } else {
      const double m = *std::max_element(zb, zb + u);
      double sum = 0;
      for (int j = 0; j < u; ++j) sum += std::exp(zb[j] - m);
      const double lse = m + std::log(sum);
      double sample_loss = 0;
      for (int j = 0; j < u; ++j) sample_loss += target(options, labels[b], j) * (lse - zb[j]);
      loss += w * sample_loss;
      r.correct += static_cast<int>(std::max_element(zb, zb + u) - zb) == labels[b];
      for (int j = 0; j < u; ++j)
        db[j] = static_cast<float>(w * (std::exp(zb[j] - lse) - target(options, labels[b], j)) / batch);
    }
  }
  r.loss = loss / batch;

  g.kernel.assign(kernel_.size(), 0.0f);
  g.bias.assign(bias_.size(), 0.0f);
  g.features.assign(static_cast<std::size_t>(batch) * input_dim_, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<std::size_t>(b) * input_dim_;
    const float* db = dz.data() + static_cast<std::size_t>(b) * u;
    float* dx = g.features.data() + static_cast<std::size_t>(b) * input_dim_;
    for (int i = 0; i < input_dim_; ++i) {
      float* gk = g.kernel.data() + static_cast<std::size_t>(i) * u;
      const float* w = kernel_.data() + static_cast<std::size_t>(i) * u;
      float sum = 0;
      for (int j = 0; j < u; ++j) {
        gk[j] += xb[i] * db[j];
        sum += w[j] * db[j];
      }
      dx[i] = sum;
    }
    for (int j = 0; j < u; ++j) g.bias[static_cast<std::size_t>(j)] += db[j];
  }
  return r;
}

StepResult Head::train_step(const float* x, const int* labels, int batch, const LossOptions& options) {
  HeadGradients g;
  const StepResult r = backward(x, labels, batch, options, g);
  apply_gradients(g);
  return r;
}

void Head::apply_gradients(const HeadGradients& g) {
  if (g.kernel.size() != kernel_.size() || g.bias.size() != bias_.size())
    throw InvalidArgument("Head::apply_gradients: gradients of " + std::to_string(g.kernel.size()) + " + " +
                          std::to_string(g.bias.size()) + " values for a head of " + std::to_string(kernel_.size()) +
                          " + " + std::to_string(bias_.size()));
  ++step_;
  const float alpha = detail::adam_alpha(adam_.learning_rate, adam_.beta_1, adam_.beta_2, step_);
  detail::adam_update(kernel_.data(), m_kernel_.data(), v_kernel_.data(), g.kernel.data(), kernel_.size(), alpha,
                      adam_.beta_1, adam_.beta_2, adam_.epsilon);
  detail::adam_update(bias_.data(), m_bias_.data(), v_bias_.data(), g.bias.data(), bias_.size(), alpha, adam_.beta_1,
                      adam_.beta_2, adam_.epsilon);
}

std::vector<int> epoch_rows(int n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<int> order(static_cast<std::size_t>(std::max(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng{seed * 0x100000001B3ull + epoch + 1};
  for (int i = n - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)], order[rng.next() % static_cast<std::uint64_t>(i + 1)]);
  return order;
}

EpochStats Head::train_epoch(const float* x, const int* labels, int n, int batch_size, std::uint64_t epoch,
                             std::uint64_t seed, const LossOptions& loss,
                             const std::function<void(Head&)>& before_step) {
  if (n <= 0 || batch_size <= 0)
    throw InvalidArgument("Head::train_epoch: n and batch_size must be > 0, received " + std::to_string(n) + " and " +
                          std::to_string(batch_size));
  const std::vector<int> order = epoch_rows(n, seed, epoch);
  std::vector<float> bx(static_cast<std::size_t>(batch_size) * input_dim_);
  std::vector<int> by(static_cast<std::size_t>(batch_size));
  EpochStats s;
  double loss_sum = 0;
  int correct = 0;
  for (int start = 0; start < n; start += batch_size) {
    const int nb = std::min(batch_size, n - start);
    for (int b = 0; b < nb; ++b) {
      const int idx = order[static_cast<std::size_t>(start + b)];
      std::memcpy(bx.data() + static_cast<std::size_t>(b) * input_dim_, x + static_cast<std::size_t>(idx) * input_dim_,
                  sizeof(float) * static_cast<std::size_t>(input_dim_));
      by[static_cast<std::size_t>(b)] = labels[idx];
    }
    if (before_step) before_step(*this);
    auto r = train_step(bx.data(), by.data(), nb, loss);
    loss_sum += r.loss * nb;
    correct += r.correct;
  }
  s.samples = n;
  s.loss = loss_sum / n;
  s.accuracy = static_cast<double>(correct) / n;
  return s;
}

EpochStats Head::evaluate(const float* x, const int* labels, int n, const LossOptions& options) const {
  EpochStats s;
  if (n <= 0) return s;
  check_labels(labels, n);
  options.check(classes());
  std::vector<float> z(static_cast<std::size_t>(n) * units_);
  logits(x, n, z.data());
  double loss = 0;
  int correct = 0;
  for (int b = 0; b < n; ++b) {
    const float* zb = z.data() + static_cast<std::size_t>(b) * units_;
    if (activation_ == HeadActivation::Sigmoid) {
      loss += softplus(zb[0]) - zb[0] * target(options, labels[b], 1);
      correct += (zb[0] > 0.0f) == (labels[b] == 1);
    } else {
      const double m = *std::max_element(zb, zb + units_);
      double sum = 0;
      for (int j = 0; j < units_; ++j) sum += std::exp(zb[j] - m);
      const double lse = m + std::log(sum);
      for (int j = 0; j < units_; ++j) loss += target(options, labels[b], j) * (lse - zb[j]);
      correct += static_cast<int>(std::max_element(zb, zb + units_) - zb) == labels[b];
    }
  }
  s.samples = n;
  s.loss = loss / n;
  s.accuracy = static_cast<double>(correct) / n;
  return s;
}

Tensor Head::predict(const float* x, int n) const {
  Tensor t({n, units_});
  logits(x, n, t.data.data());
  for (int b = 0; b < n; ++b) {
    float* z = t.sample(b);
    if (activation_ == HeadActivation::Sigmoid) {
      z[0] = 1.0f / (1.0f + std::exp(-z[0]));
    } else {
      const float m = *std::max_element(z, z + units_);
      float sum = 0;
      for (int j = 0; j < units_; ++j) sum += (z[j] = std::exp(z[j] - m));
      for (int j = 0; j < units_; ++j) z[j] /= sum;
    }
  }
  return t;
}

std::vector<int> Head::predict_classes(const float* x, int n) const {
  Tensor p = predict(x, n);
  std::vector<int> c(static_cast<std::size_t>(n));
  for (int b = 0; b < n; ++b) {
    const float* pb = p.sample(b);
    c[static_cast<std::size_t>(b)] = activation_ == HeadActivation::Sigmoid
                                         ? (pb[0] > 0.5f ? 1 : 0)
                                         : static_cast<int>(std::max_element(pb, pb + units_) - pb);
  }
  return c;
}

std::string Head::serialize(const BackboneRef& backbone) const {
  nlohmann::json h;
  h["format"] = "stoker-head";
  h["version"] = 1;
  h["activation"] = activation_ == HeadActivation::Sigmoid ? "sigmoid" : "softmax";
  h["loss"] = activation_ == HeadActivation::Sigmoid ? "binary_crossentropy" : "categorical_crossentropy";
  h["input_dim"] = input_dim_;
  h["units"] = units_;
  h["optimizer"] = {{"name", "adam"},           {"learning_rate", adam_.learning_rate},
                    {"beta_1", adam_.beta_1},   {"beta_2", adam_.beta_2},
                    {"epsilon", adam_.epsilon}, {"iterations", step_}};
  h["backbone"] = {{"model", backbone.model}, {"cut_at", backbone.cut_at}, {"preprocess", backbone.preprocess}};
  const std::vector<std::pair<const char*, const std::vector<float>*>> tensors = {
      {"kernel", &kernel_},          {"bias", &bias_},          {"adam_m_kernel", &m_kernel_},
      {"adam_v_kernel", &v_kernel_}, {"adam_m_bias", &m_bias_}, {"adam_v_bias", &v_bias_}};
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const bool is_kernel = t->size() == kernel_.size() && std::string(name).find("kernel") != std::string::npos;
    h["tensors"].push_back({{"name", name},
                            {"shape", is_kernel ? std::vector<int>{input_dim_, units_} : std::vector<int>{units_}},
                            {"offset", offset}});
    offset += t->size();
  }
  const std::string header = h.dump(1);
  std::string bytes;
  const std::uint64_t len = header.size();
  bytes.append(kMagic, 8);
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  bytes += header;
  for (const auto& [name, t] : tensors)
    bytes.append(reinterpret_cast<const char*>(t->data()), t->size() * sizeof(float));
  return bytes;
}

void Head::save(const std::filesystem::path& file, const BackboneRef& backbone) const {
  std::string bytes = serialize(backbone);
  append_checksum(bytes);  // the file's own; a checkpoint embeds the head and checks itself whole
  write_file_atomically(file, bytes);
}

namespace {

// A JSON integer in [lo, hi] (get<int>() would wrap a larger one, and converting an out-of-range
// float is undefined behaviour).
std::int64_t header_int(const nlohmann::json& v, const std::string& where, const std::string& what, std::int64_t lo,
                        std::int64_t hi) {
  if (!v.is_number_integer())
    throw IoError(where + ": " + what + " must be an integer, received " + v.dump().substr(0, 100));
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
                             : v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
    throw IoError(where + ": " + what + " " + v.dump() + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  return v.get<std::int64_t>();
}

// The optimizer's settings a head file records.
AdamConfig adam_config(const nlohmann::json& o) {
  AdamConfig adam;
  adam.learning_rate = o.at("learning_rate").get<float>();
  adam.beta_1 = o.at("beta_1").get<float>();
  adam.beta_2 = o.at("beta_2").get<float>();
  adam.epsilon = o.at("epsilon").get<float>();
  return adam;
}

// A tensor's recorded shape must be the one the header's input_dim and units give it.
void check_shape(const nlohmann::json& shape, const std::string& name, const std::vector<std::int64_t>& expected,
                 const std::string& where) {
  bool same = shape.is_array() && shape.size() == expected.size();
  for (std::size_t i = 0; same && i < expected.size(); ++i) same = shape[i] == expected[i];
  if (!same)
    throw IoError(where + ": tensor '" + name + "' has shape " + shape.dump().substr(0, 100) +
                  ", the header's input_dim and units need " + nlohmann::json(expected).dump());
}

}  // namespace

Head Head::load(const std::filesystem::path& file, BackboneRef* backbone) {
  const std::string bytes = read_whole_file(file);
  return deserialize(checked_content(bytes, file.string()), file.string(), backbone);
}

Head Head::deserialize(std::string_view bytes, const std::string& where, BackboneRef* backbone) {
  std::uint64_t len = 0;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw IoError(where + ": not a stoker head file (bad magic)");
  std::memcpy(&len, bytes.data() + 8, 8);
  if (len > (1u << 24)) throw IoError(where + ": header length " + std::to_string(len) + " is implausible");
  if (len > bytes.size() - 16) throw IoError(where + ": truncated header");
  const std::string header(bytes.substr(16, len));
  // The tensors: everything after the header, as float32.
  const std::string_view rest = bytes.substr(16 + len);
  std::vector<float> data(rest.size() / sizeof(float));
  if (!data.empty()) std::memcpy(data.data(), rest.data(), data.size() * sizeof(float));
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
    if (h.at("format") != "stoker-head" || h.at("version") != 1)
      throw IoError(where + ": unsupported head format " + h.at("format").dump().substr(0, 100) + " version " +
                    h.at("version").dump().substr(0, 100));
    const auto& o = h.at("optimizer");
    const AdamConfig adam = adam_config(o);
    const std::string act = h.at("activation").get<std::string>();
    if (act != "sigmoid" && act != "softmax") throw IoError(where + ": unknown activation '" + act + "'");
    const auto input_dim = header_int(h.at("input_dim"), where, "input_dim", 1, kIntMax);
    const auto units = header_int(h.at("units"), where, "units", 1, kIntMax);
    // The kernel must be in the file: a bogus input_dim × units cannot make us allocate more.
    if (static_cast<std::uint64_t>(input_dim) * static_cast<std::uint64_t>(units) > data.size())
      throw IoError(where + ": input_dim " + std::to_string(input_dim) + " x units " + std::to_string(units) +
                    " needs more weights than the file's " + std::to_string(data.size()) + " values");
    Head head(static_cast<int>(input_dim), static_cast<int>(units),
              act == "sigmoid" ? HeadActivation::Sigmoid : HeadActivation::Softmax, adam);
    head.step_ =
        header_int(o.at("iterations"), where, "optimizer iterations", 0, std::numeric_limits<std::int64_t>::max());
    bool have_kernel = false, have_bias = false;
    for (const auto& t : h.at("tensors")) {
      const std::string name = t.at("name").get<std::string>();
      std::vector<float>* dst = name == "kernel"          ? &head.kernel_
                                : name == "bias"          ? &head.bias_
                                : name == "adam_m_kernel" ? &head.m_kernel_
                                : name == "adam_v_kernel" ? &head.v_kernel_
                                : name == "adam_m_bias"   ? &head.m_bias_
                                : name == "adam_v_bias"   ? &head.v_bias_
                                                          : nullptr;
      if (!dst) continue;  // unknown tensors from a newer writer are ignored
      if (t.contains("shape"))
        check_shape(t.at("shape"), name,
                    name.find("kernel") != std::string::npos ? std::vector<std::int64_t>{input_dim, units}
                                                             : std::vector<std::int64_t>{units},
                    where);
      const auto off = static_cast<std::uint64_t>(header_int(t.at("offset"), where, "offset of tensor '" + name + "'",
                                                             0, std::numeric_limits<std::int64_t>::max()));
      if (off > data.size() || dst->size() > data.size() - off)
        throw IoError(where + ": tensor '" + name + "' lies past the end of the file");
      std::memcpy(dst->data(), data.data() + off, dst->size() * sizeof(float));
      have_kernel = have_kernel || name == "kernel";
      have_bias = have_bias || name == "bias";
    }
    if (!have_kernel || !have_bias)
      throw IoError(where + ": the head file has no '" + std::string(have_kernel ? "bias" : "kernel") + "' tensor");
    if (backbone) {
      const auto& b = h.at("backbone");
      backbone->model = b.value("model", std::string());
      backbone->cut_at = b.value("cut_at", std::string());
      backbone->preprocess = b.value("preprocess", std::string());
    }
    return head;
  } catch (const nlohmann::json::exception& e) {
    throw IoError(where + ": malformed header: " + e.what());
  } catch (const InvalidArgument& e) {  // Head's own checks (Adam settings, sigmoid with 2 units, ...)
    throw IoError(where + ": " + e.what());
  }
}

Monitor parse_monitor(const std::string& name) {
  if (name == "val_loss") return Monitor::ValLoss;
  if (name == "val_accuracy") return Monitor::ValAccuracy;
  throw InvalidArgument("monitor must be val_loss or val_accuracy, received '" + name + "'");
}

BestEpoch::BestEpoch(Monitor monitor, std::filesystem::path checkpoint, BackboneRef backbone)
    : monitor_(monitor), checkpoint_(std::move(checkpoint)), backbone_(std::move(backbone)) {}

bool BestEpoch::offer(int epoch, const EpochStats& validation, const Head& head) {
  const double value = monitor_ == Monitor::ValLoss ? validation.loss : -validation.accuracy;
  // NaN compares false with everything: without this test it would beat every finite epoch.
  if (!std::isfinite(validation.loss) || !std::isfinite(value)) return false;
  if (best_ && value >= best_value_) return false;
  best_value_ = value;
  best_ = head;
  epoch_ = epoch;
  if (!checkpoint_.empty()) head.save(checkpoint_, backbone_);
  return true;
}

void BestEpoch::restore(int epoch, double value, Head head) {
  best_ = std::move(head);
  best_value_ = value;
  epoch_ = epoch;
}

FitResult fit(Head& head, const float* x, const int* y, int n, const float* xv, const int* yv, int nv,
              const FitOptions& options) {
  if (options.epochs <= 0) throw InvalidArgument("fit: epochs must be > 0, received " + std::to_string(options.epochs));
  FitResult result;
  BestEpoch best(options.monitor, options.checkpoint, options.backbone);
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    EpochRecord rec;
    rec.epoch = epoch;
    rec.train = head.train_epoch(x, y, n, options.batch_size, static_cast<std::uint64_t>(epoch), options.seed);
    rec.validation = nv > 0 ? head.evaluate(xv, yv, nv) : rec.train;
    rec.improved = best.offer(epoch, rec.validation, head);
    result.history.push_back(rec);
    if (options.on_epoch) options.on_epoch(rec);
  }
  result.best_epoch = best.epoch();
  if (options.restore_best && best.head()) head = *best.head();
  return result;
}

}  // namespace stoker::trainer
