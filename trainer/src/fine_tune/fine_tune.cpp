// The trainable top of a backbone: its own sub-graph (an Input for the boundary value, then the
// layers from from_layer up), lowered without folding or fusing so that every op is one layer and
// its gradients map onto that layer's Keras weights (plan/train_executor.hpp's TrainLowering). An
// executor runs it (the CPU's, the GPU's or its host twin: one seam); the top keeps the master
// weights, draws the Dropout masks, maps each op's gradients onto its layer's weights and runs the
// optimizer.
#include <stoker/trainer/fine_tune.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <stoker/core/error.hpp>
#include <stoker/core/splitmix.hpp>
#include <stoker/trainer/backend.hpp>

#include "fine_tune_twin.hpp"
#include "graph/lowering.hpp"
#include "ops/adam.hpp"
#include "plan/train_executor.hpp"

namespace stoker::trainer {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adam") return OptimizerKind::Adam;
  if (name == "sgd") return OptimizerKind::Sgd;
  throw InvalidArgument("unknown optimizer '" + name + "': expected adam or sgd");
}

const char* to_string(OptimizerKind kind) { return kind == OptimizerKind::Adam ? "adam" : "sgd"; }

Optimizer::Optimizer(OptimizerConfig config) : config_(config) {
  set_learning_rate(config.learning_rate);
  if (config.kind == OptimizerKind::Adam && (!(config.beta_1 >= 0 && config.beta_1 < 1) ||
                                             !(config.beta_2 >= 0 && config.beta_2 < 1) || !(config.epsilon >= 0)))
    throw InvalidArgument("invalid Adam settings (beta_1 " + std::to_string(config.beta_1) + ", beta_2 " +
                          std::to_string(config.beta_2) + ", epsilon " + std::to_string(config.epsilon) + ")");
  if (config.kind == OptimizerKind::Sgd && !(config.momentum >= 0 && config.momentum < 1))
    throw InvalidArgument("SGD momentum must be in [0, 1), received " + std::to_string(config.momentum));
}

int Optimizer::add(std::size_t size) {
  m_.emplace_back(size, 0.0f);
  v_.emplace_back(config_.kind == OptimizerKind::Adam ? size : 0, 0.0f);
  return static_cast<int>(m_.size()) - 1;
}

void Optimizer::begin_step() { ++step_; }

OptimizerState Optimizer::state() const { return {step_, config_.learning_rate, m_, v_}; }

void Optimizer::restore(const OptimizerState& state) {
  auto sizes = [](const std::vector<std::vector<float>>& arrays) {
    std::vector<std::size_t> out;
    for (const auto& a : arrays) out.push_back(a.size());
    return out;
  };
  if (sizes(state.m) != sizes(m_) || sizes(state.v) != sizes(v_) || state.steps < 0)
    throw InvalidArgument("the saved optimizer state has " + std::to_string(state.m.size()) +
                          " weight arrays of other sizes than this optimizer's " + std::to_string(m_.size()));
  set_learning_rate(state.learning_rate);
  step_ = state.steps;
  m_ = state.m;
  v_ = state.v;
}

void Optimizer::set_learning_rate(float learning_rate) {
  if (!(learning_rate >= 0 && std::isfinite(learning_rate)))
    throw InvalidArgument("the learning rate must be >= 0, received " + std::to_string(learning_rate));
  config_.learning_rate = learning_rate;
}

void Optimizer::update(int array, float* w, const float* g) {
  auto& m = m_.at(static_cast<std::size_t>(array));
  float* v = v_[static_cast<std::size_t>(array)].data();
  const float alpha = config_.kind == OptimizerKind::Adam
                          ? detail::adam_alpha(config_.learning_rate, config_.beta_1, config_.beta_2, step_)
                          : 0.0f;
  const float lr = config_.learning_rate, mu = config_.momentum;
  // Element-wise, so in parallel blocks with the same result: a GPU step's time is short enough
  // for this host loop to count (docs/trainer.md).
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m.size(), 16384), [&](const tbb::blocked_range<std::size_t>& r) {
    const std::size_t at = r.begin(), n = r.size();
    if (config_.kind == OptimizerKind::Adam) {
      detail::adam_update(w + at, m.data() + at, v + at, g + at, n, alpha, config_.beta_1, config_.beta_2,
                          config_.epsilon);
    } else if (mu == 0.0f) {
      for (std::size_t i = at; i < at + n; ++i) w[i] -= lr * g[i];
    } else {
      for (std::size_t i = at; i < at + n; ++i) {
        m[i] = mu * m[i] - lr * g[i];
        w[i] += config_.nesterov ? mu * m[i] - lr * g[i] : m[i];
      }
    }
  });
}

namespace {

using detail::LoweredOp;
using detail::OpKind;

bool is_trainable_weight(const std::string& key) {
  static const std::set<std::string> keys = {"kernel", "bias", "depthwise_kernel", "pointwise_kernel", "gamma", "beta"};
  return keys.count(key) > 0;
}

// One trainable weight array: the layer's master copy and its last gradient.
struct TrainableWeight {
  int node = -1;  // in the sub-graph
  std::string layer, key;
  std::shared_ptr<std::vector<float>> values;
  std::vector<float> gradient;
  int optimizer_slot = -1;
};

// An op of the training lowering (a TrainStep's op) with its Dropout mask.
struct TrainOp {
  LoweredOp op;        // act Linear: the activation runs apart
  ActivationSpec act;  // the op's own activation (Conv2D(activation=...)), applied after the op
  // The gradient before `act` (-1: act is linear); the value before it is kept there too, except
  // for an Activation op, whose input is that value.
  int pre_slot = -1;
  bool activation_op = false;
  // A Dropout layer (lowered as an identity Affine op): in training y = x * mask, the mask 0 or
  // 1 / (1 - rate), drawn anew each step (Keras' Dropout with training=True).
  const LayerNode* dropout = nullptr;
  std::vector<float> mask;
};

// The mask of `node` for nb samples of its value (out_shape per sample): one draw per sample and
// position of the axes its noise_shape does not broadcast.
void draw_dropout_mask(const LayerNode& node, int nb, std::uint64_t seed, std::vector<float>& mask) {
  const std::vector<int>& dims = node.out_shape;
  std::vector<int> noise = node.noise_shape;
  if (noise.empty()) noise.assign(dims.size(), -1);
  if (noise.size() != dims.size())
    throw InvalidArgument("fine-tuning: Dropout '" + node.name + "' has a noise_shape of " +
                          std::to_string(noise.size() + 1) + " axes for a value of " + std::to_string(dims.size() + 1));
  std::vector<std::size_t> stride(dims.size(), 0);  // of each axis into one sample's draws; 0: broadcast
  std::size_t draws = 1;
  for (std::size_t a = dims.size(); a-- > 0;) {
    if (noise[a] == 1 && dims[a] != 1) continue;
    if (noise[a] != -1 && noise[a] != dims[a] && noise[a] != 1)
      throw InvalidArgument("fine-tuning: Dropout '" + node.name + "': noise_shape axis " + std::to_string(a + 1) +
                            " is " + std::to_string(noise[a]) + " for a value of size " + std::to_string(dims[a]));
    stride[a] = draws;
    draws *= static_cast<std::size_t>(dims[a]);
  }
  const std::size_t per_sample = Tensor::element_count(dims);
  mask.resize(per_sample * static_cast<std::size_t>(nb));
  const double keep = 1.0 - node.rate;
  const float kept = static_cast<float>(1.0 / keep);
  std::vector<float> drawn(draws);
  std::vector<int> at(dims.size());
  SplitMix64 rng{seed};
  for (int b = 0; b < nb; ++b) {
    for (float& d : drawn) d = rng.uniform() < keep ? kept : 0.0f;
    std::fill(at.begin(), at.end(), 0);
    float* m = mask.data() + static_cast<std::size_t>(b) * per_sample;
    for (std::size_t i = 0; i < per_sample; ++i) {
      std::size_t k = 0;
      for (std::size_t a = 0; a < dims.size(); ++a) k += static_cast<std::size_t>(at[a]) * stride[a];
      m[i] = drawn[k];
      for (std::size_t a = dims.size(); a-- > 0;) {  // the next position, last axis fastest
        if (++at[a] < dims[a]) break;
        at[a] = 0;
      }
    }
  }
}

// ||got - want|| / ||want|| (0 for two zero vectors), NaN anywhere: infinity.
double relative_l2_error(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  if (!std::isfinite(num) || !std::isfinite(den)) return std::numeric_limits<double>::infinity();
  return num == 0 ? 0 : std::sqrt(num / std::max(den, 1e-300));
}

// `sub` with each Dropout an identity op of its own, x * 1 + 0, which the unfolded lowering keeps
// (a linear Activation would be an alias): forward_train masks there.
Graph training_graph(const Graph& sub, const std::string& from_layer) {
  Graph g = sub;
  for (LayerNode& node : g.nodes) {
    if (node.kind != LayerKind::Dropout) continue;
    if (node.keras_class == "GaussianDropout" || node.keras_class == "GaussianNoise")
      throw InvalidArgument("fine-tuning: the " + node.keras_class + " layer '" + node.name + "' is above '" +
                            from_layer + "', and its training-time noise is not implemented");
    if (!(node.rate >= 0 && node.rate < 1))
      throw InvalidArgument("fine-tuning: Dropout '" + node.name + "' has rate " + std::to_string(node.rate) +
                            ", outside [0, 1)");
    node.kind = LayerKind::Rescaling;
    node.multiplier = 1.0f;
    node.offset = 0.0f;
  }
  return g;
}

}  // namespace

struct TrainableTop::State {
  std::string from_layer, boundary;
  bool boundary_is_input = false;
  Graph original;                    // the backbone as given
  Graph sub;                         // Input (boundary) + the trainable layers, weights shared with `weights`
  Graph train_graph;                 // `sub` with each Dropout an identity op, which training masks
  bool dropout = false;              // set_dropout()
  std::vector<int> sub_to_original;  // node index in `original` of each sub-graph node (Input: the boundary)
  std::vector<TrainableWeight> weights;
  std::map<std::pair<std::string, std::string>, std::size_t> weight_index;
  Optimizer optimizer;

  // The training lowering (rebuilt after each step, when the weights changed) and what runs it.
  bool lowered_current = false;
  std::vector<TrainOp> ops;
  detail::TrainLowering lowering;  // steps: ops' in order
  std::unique_ptr<detail::TrainExecutor> executor;
  int executor_max_batch = 0;       // a GPU executor's (or its twin's) largest batch; 0: the CPU's, any
  int batch = 0;                    // of the last forward_train
  std::vector<const float*> masks;  // per step: its Dropout mask for the last forward_train
  std::vector<float> ones;          // the mask of a Dropout that does not drop

  // The inference backend, rebuilt after each step.
  mutable std::mutex backend_mutex;
  mutable std::shared_ptr<const Backend> backend;

  explicit State(OptimizerConfig config) : optimizer(config) {}

  void lower_for_training() {
    if (lowered_current) return;
    detail::LoweringOptions lo;
    lo.backend = "fine-tuning";
    lo.fold_batch_norm = false;
    lo.fuse_activations = false;
    detail::LoweredGraph lg = detail::lower(train_graph, lo);
    ops.clear();
    std::vector<std::size_t> slot_size = lg.slot_size;
    for (LoweredOp& op : lg.ops) {
      TrainOp t;
      t.act = op.act;
      t.activation_op = op.kind == OpKind::Activation;
      const int node = train_graph.find(op.name);
      if (node >= 0 && sub.nodes[static_cast<std::size_t>(node)].kind == LayerKind::Dropout &&
          sub.nodes[static_cast<std::size_t>(node)].rate > 0)
        t.dropout = &sub.nodes[static_cast<std::size_t>(node)];
      op.act = ActivationSpec{};
      // The element-wise backward kernels take h·w·c values per sample; a value of rank 2 ([T, c])
      // lowers with h = w = 1.
      const std::size_t size = slot_size[static_cast<std::size_t>(op.out)];
      const bool elementwise = op.kind == OpKind::Affine || op.kind == OpKind::Activation || op.kind == OpKind::Add ||
                               op.kind == OpKind::Mul;
      if (elementwise && op.c > 0 && static_cast<std::size_t>(op.h) * op.w * op.c != size) {
        op.h = static_cast<int>(size / static_cast<std::size_t>(op.c));
        op.w = 1;
      }
      if (!t.act.is_linear()) {
        t.pre_slot = static_cast<int>(slot_size.size());
        slot_size.push_back(slot_size[static_cast<std::size_t>(op.out)]);
      }
      t.op = std::move(op);
      ops.push_back(std::move(t));
    }
    lowering.input_slot = lg.input_slot;
    lowering.output_slot = lg.outputs.at(0);
    // A slot needs its gradient when an op with trainable weights, or one reading such a slot, is
    // below it: everything above the boundary does, the boundary itself does not.
    lowering.needs_gradient.assign(slot_size.size(), false);
    for (const TrainOp& t : ops) {
      lowering.needs_gradient[static_cast<std::size_t>(t.op.out)] = true;
      if (t.pre_slot >= 0) lowering.needs_gradient[static_cast<std::size_t>(t.pre_slot)] = true;
    }
    lowering.needs_gradient[static_cast<std::size_t>(lowering.input_slot)] = false;
    lowering.slot_size = std::move(slot_size);
    lowering.steps = train_steps();
    lowered_current = true;
    // The weights change at each step, the structure does not: the executor stays.
    if (executor) executor->set_weights(lowering);
    else executor = cpu::make_train_executor(lowering);
  }

  // The steps of the lowering, with the parameter gradients backward() accumulates.
  std::vector<detail::TrainStep> train_steps() const {
    std::vector<detail::TrainStep> steps;
    for (const TrainOp& t : ops) {
      detail::TrainStep s;
      s.op = &t.op;
      s.act = t.act;
      s.pre_slot = t.pre_slot;
      s.activation_op = t.activation_op;
      s.dropout = t.dropout != nullptr;
      const Mapping m = mapping(t.op);
      s.weights_gradient = m.kernel >= 0;
      s.bias_gradient = m.bias >= 0 || m.beta >= 0 || (t.op.kind == OpKind::Affine && m.gamma >= 0);
      s.scale_gradient = m.gamma >= 0;
      steps.push_back(s);
    }
    return steps;
  }

  // The Dropout masks of a forward_train of nb samples: drawn when training with dropout, ones
  // when not.
  void draw_masks(int nb) {
    masks.assign(ops.size(), nullptr);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      TrainOp& t = ops[k];
      if (!t.dropout) continue;
      if (dropout) {  // one stream per step and layer, so a resumed or repeated run draws the same masks
        draw_dropout_mask(*t.dropout, nb, optimizer.steps() * 0x100000001B3ull + t.op.out, t.mask);
        masks[k] = t.mask.data();
      } else {
        const std::size_t n = lowering.slot_size[static_cast<std::size_t>(t.op.out)] * static_cast<std::size_t>(nb);
        if (ones.size() < n) ones.assign(n, 1.0f);
        masks[k] = ones.data();
      }
    }
  }

  // The gradients an op's parameters map to, sized as the op wants them, and where they go.
  struct Mapping {
    int kernel = -1, bias = -1;  // indices into `weights` for op.weights / op.bias
    int gamma = -1, beta = -1;   // BatchNormalization (Affine) / LayerNormalization
  };
  int find_weight(const std::string& layer, const std::string& key) const {
    auto it = weight_index.find({layer, key});
    return it == weight_index.end() ? -1 : static_cast<int>(it->second);
  }
  Mapping mapping(const LoweredOp& op) const {
    Mapping m;
    const int id = sub.find(op.name);
    if (id < 0) return m;
    const LayerNode& node = sub.nodes[static_cast<std::size_t>(id)];
    switch (op.kind) {
      case OpKind::Conv:
        m.kernel = find_weight(node.name, node.kind == LayerKind::SeparableConv2D ? "pointwise_kernel" : "kernel");
        m.bias = find_weight(node.name, "bias");
        break;
      case OpKind::DepthwiseConv:
        m.kernel = find_weight(node.name, "depthwise_kernel");
        // A separable convolution's bias belongs to its pointwise op.
        if (node.kind == LayerKind::DepthwiseConv2D) m.bias = find_weight(node.name, "bias");
        break;
      case OpKind::Dense:
        m.kernel = find_weight(node.name, "kernel");
        m.bias = find_weight(node.name, "bias");
        break;
      case OpKind::Affine:
      case OpKind::LayerNorm:
        if (node.kind == LayerKind::BatchNormalization || node.kind == LayerKind::LayerNormalization ||
            node.kind == LayerKind::LayerScale) {
          m.gamma = find_weight(node.name, "gamma");
          m.beta = find_weight(node.name, "beta");
        }
        break;
      default: break;
    }
    return m;
  }

  // Adds an op's parameter gradients to its layer's weights' gradients.
  void accumulate(const LoweredOp& op, const Mapping& m, const detail::OpGradients& g) {
    auto add = [&](int w, const std::vector<float>& src) {
      if (w < 0 || src.empty()) return;
      std::vector<float>& dst = weights[static_cast<std::size_t>(w)].gradient;
      for (std::size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
    };
    add(m.kernel, g.weights);
    add(m.bias, g.bias);
    if (op.kind == OpKind::LayerNorm) {
      add(m.gamma, g.scale);
      add(m.beta, g.bias);
      return;
    }
    if (op.kind != OpKind::Affine || (m.gamma < 0 && m.beta < 0)) return;
    const LayerNode& node = sub.nodes[static_cast<std::size_t>(sub.find(op.name))];
    if (node.kind == LayerKind::LayerScale) {  // x * gamma: the scale is the weight
      add(m.gamma, g.scale);
      return;
    }
    // BatchNormalization as x * scale + shift with scale = gamma / sqrt(var + eps) and
    // shift = beta - mean * scale: dgamma = (dscale - mean * dshift) / sqrt(var + eps), dbeta = dshift.
    const float* mean = node.weight("moving_mean")->ptr();
    const float* var = node.weight("moving_variance")->ptr();
    if (m.gamma >= 0) {
      std::vector<float>& dst = weights[static_cast<std::size_t>(m.gamma)].gradient;
      for (std::size_t c = 0; c < dst.size(); ++c)
        dst[c] += static_cast<float>((double(g.scale[c]) - double(mean[c]) * g.bias[c]) /
                                     std::sqrt(double(var[c]) + double(node.epsilon)));
    }
    add(m.beta, g.bias);
  }
};

TrainableTop::TrainableTop(const Graph& backbone, const std::string& from_layer, OptimizerConfig optimizer)
    : s_(std::make_unique<State>(optimizer)) {
  State& s = *s_;
  s.original = backbone;
  s.from_layer = from_layer;
  const Graph& g = s.original;
  if (g.outputs.size() != 1 || g.inputs.size() != 1)
    throw InvalidArgument("fine-tuning needs a backbone with one input and one output; '" + g.name + "' has " +
                          std::to_string(g.inputs.size()) + " and " + std::to_string(g.outputs.size()));
  const int from = g.find(from_layer);
  if (from < 0) throw InvalidArgument("fine-tuning: the backbone '" + g.name + "' has no layer '" + from_layer + "'");
  const LayerNode& first = g.nodes[static_cast<std::size_t>(from)];
  if (first.kind == LayerKind::Input)
    throw InvalidArgument("fine-tuning: '" + from_layer + "' is the input layer; name the first layer to train");
  const int output = g.outputs[0];
  if (output < from)
    throw InvalidArgument("fine-tuning: '" + from_layer + "' comes after the backbone's output '" +
                          g.nodes[static_cast<std::size_t>(output)].name + "'");
  // The frozen values the trainable layers read.
  std::set<int> crossing;
  for (std::size_t i = static_cast<std::size_t>(from); i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in < from) crossing.insert(in);
  if (crossing.size() != 1) {
    std::string names;
    for (int c : crossing) names += (names.empty() ? "'" : ", '") + g.nodes[static_cast<std::size_t>(c)].name + "'";
    throw InvalidArgument("fine-tuning from '" + from_layer + "': the layers from there read " +
                          std::to_string(crossing.size()) + " values of the frozen part (" + names +
                          "); start at a layer above which only one value crosses, such as the first layer of a "
                          "block");
  }
  const int boundary = *crossing.begin();
  const LayerNode& b = g.nodes[static_cast<std::size_t>(boundary)];
  s.boundary = b.name;
  s.boundary_is_input = b.kind == LayerKind::Input;

  std::vector<int> remap(g.nodes.size(), -1);
  LayerNode input;
  input.name = b.name;
  input.keras_class = "InputLayer";
  input.kind = LayerKind::Input;
  input.out_shape = b.out_shape;
  s.sub.nodes.push_back(input);
  s.sub.inputs = {0};
  s.sub.name = g.name + "_from_" + from_layer;
  s.sub_to_original.push_back(boundary);
  remap[static_cast<std::size_t>(boundary)] = 0;
  for (std::size_t i = static_cast<std::size_t>(from); i < g.nodes.size(); ++i) {
    LayerNode node = g.nodes[i];
    for (int& in : node.inputs) in = remap[static_cast<std::size_t>(in)];
    remap[i] = static_cast<int>(s.sub.nodes.size());
    s.sub_to_original.push_back(static_cast<int>(i));
    // The trainable arrays become master copies the optimizer updates in place.
    for (auto& [key, w] : node.weights) {
      if (!is_trainable_weight(key) || !w.data) continue;
      TrainableWeight t;
      t.node = remap[i];
      t.layer = node.name;
      t.key = key;
      t.values = std::make_shared<std::vector<float>>(*w.data);
      t.gradient.assign(t.values->size(), 0.0f);
      t.optimizer_slot = s.optimizer.add(t.values->size());
      w.data = t.values;
      s.weight_index[{t.layer, t.key}] = s.weights.size();
      s.weights.push_back(std::move(t));
    }
    s.sub.nodes.push_back(std::move(node));
  }
  s.sub.outputs = {remap[static_cast<std::size_t>(output)]};
  s.train_graph = training_graph(s.sub, from_layer);
}

TrainableTop::~TrainableTop() = default;
TrainableTop::TrainableTop(TrainableTop&&) noexcept = default;
TrainableTop& TrainableTop::operator=(TrainableTop&&) noexcept = default;

const std::string& TrainableTop::from_layer() const { return s_->from_layer; }
const std::string& TrainableTop::boundary() const { return s_->boundary; }
bool TrainableTop::boundary_is_input() const { return s_->boundary_is_input; }
const std::vector<int>& TrainableTop::input_shape() const { return s_->sub.nodes[0].out_shape; }
int TrainableTop::features() const {
  return static_cast<int>(Tensor::element_count(s_->sub.nodes[static_cast<std::size_t>(s_->sub.outputs[0])].out_shape));
}

std::size_t TrainableTop::trainable_parameters() const {
  std::size_t n = 0;
  for (const TrainableWeight& w : s_->weights) n += w.values->size();
  return n;
}

std::size_t TrainableTop::activation_bytes(int batch) const {
  s_->lower_for_training();
  return s_->executor->memory_bytes(batch);
}

Tensor TrainableTop::forward(const float* x, int batch) const {
  std::shared_ptr<const Backend> backend;
  {
    std::lock_guard lock(s_->backend_mutex);
    if (!s_->backend) s_->backend = make_cpu_backend(s_->sub);
    backend = s_->backend;
  }
  return std::move(backend->forward(x, batch).at(0));
}

const float* TrainableTop::forward_train(const float* x, int batch) {
  if (batch <= 0) throw InvalidArgument("TrainableTop: batch must be > 0, received " + std::to_string(batch));
  State& s = *s_;
  s.lower_for_training();
  s.batch = batch;
  // An output that aliases the input (nothing but Flatten/Dropout above the boundary) is the input.
  if (s.lowering.output_slot == s.lowering.input_slot) return x;
  s.draw_masks(batch);
  return s.executor->forward(x, batch, s.masks);
}

// A GPU executor of a top, from `make(lowering)`: the GPU's, or its host twin (fine_tune_twin.hpp).
struct detail::TrainableTopAccess {
  template <typename Make>
  static void run_on(TrainableTop& top, int max_batch, Make make) {
    TrainableTop::State& s = *top.s_;
    s.lower_for_training();
    s.executor = make(s.lowering);
    s.executor_max_batch = max_batch;
  }
};

void TrainableTop::run_on_gpu(const GpuTrainOptions& options) {
  detail::TrainableTopAccess::run_on(*this, options.max_batch, [&](const detail::TrainLowering& lowering) {
    return cudnn::make_gpu_train_executor(lowering, options);
  });
}

void detail::run_on_host_twin(TrainableTop& top, int max_batch, DType storage) {
  TrainableTopAccess::run_on(top, max_batch, [&](const detail::TrainLowering& lowering) {
    return cudnn::make_host_train_executor(lowering, max_batch, storage);
  });
}

void TrainableTop::run_on_cpu() {
  s_->lower_for_training();
  s_->executor = cpu::make_train_executor(s_->lowering);
  s_->executor_max_batch = 0;
}

std::string TrainableTop::executor() const {
  s_->lower_for_training();
  return s_->executor->name();
}

TrainableTop::GpuGradientCheck TrainableTop::check_gpu_gradients(int samples, std::uint64_t seed) {
  State& s = *s_;
  if (s.executor_max_batch == 0) return {};  // on the CPU
  samples = std::clamp(samples, 1, s.executor_max_batch);
  TrainableTop cpu(graph(), s.from_layer), twin(graph(), s.from_layer);
  detail::run_on_host_twin(twin, samples, DType::BF16);
  const bool dropout = s.dropout;
  s.dropout = false;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(Tensor::element_count(input_shape()) * static_cast<std::size_t>(samples));
  std::vector<float> upstream(static_cast<std::size_t>(features()) * static_cast<std::size_t>(samples));
  for (float& v : x) v = u(rng);
  for (float& v : upstream) v = u(rng);
  const float* exact = cpu.forward_train(x.data(), samples);
  const std::vector<float> want(exact, exact + upstream.size());
  GpuGradientCheck c;
  c.gpu = relative_l2_error(forward_train(x.data(), samples), want);
  c.rounding = relative_l2_error(twin.forward_train(x.data(), samples), want);
  cpu.backward(upstream.data());
  twin.backward(upstream.data());
  backward(upstream.data());
  for (const auto& [layer, weight] : trainable_weights()) {
    const std::vector<float>& g = cpu.gradient(layer, weight);
    c.gpu = std::max(c.gpu, relative_l2_error(gradient(layer, weight).data(), g));
    c.rounding = std::max(c.rounding, relative_l2_error(twin.gradient(layer, weight).data(), g));
  }
  s.dropout = dropout;
  return c;
}

void TrainableTop::backward(const float* dfeatures) {
  State& s = *s_;
  if (s.batch == 0 || !s.lowered_current) throw InvalidArgument("TrainableTop::backward: no forward_train() before it");
  for (TrainableWeight& w : s.weights) std::fill(w.gradient.begin(), w.gradient.end(), 0.0f);
  if (s.lowering.output_slot == s.lowering.input_slot) return;
  std::vector<detail::OpGradients> grads(s.ops.size());
  for (std::size_t k = 0; k < s.ops.size(); ++k) {
    const detail::TrainStep& step = s.lowering.steps[k];
    if (step.weights_gradient) grads[k].weights.assign(step.op->weights.size(), 0.0f);
    if (step.bias_gradient) grads[k].bias.assign(step.op->bias.size(), 0.0f);
    if (step.scale_gradient) grads[k].scale.assign(step.op->scale.size(), 0.0f);
  }
  s.executor->backward(dfeatures, grads);
  for (std::size_t k = 0; k < s.ops.size(); ++k)
    if (s.lowering.steps[k].wants_gradients()) s.accumulate(s.ops[k].op, s.mapping(s.ops[k].op), grads[k]);
}

const std::vector<float>& TrainableTop::gradient(const std::string& layer, const std::string& weight) const {
  const int w = s_->find_weight(layer, weight);
  if (w < 0) throw InvalidArgument("fine-tuning: '" + layer + "/" + weight + "' is not a trainable weight");
  return s_->weights[static_cast<std::size_t>(w)].gradient;
}

void TrainableTop::for_each_gradient(const std::function<void(std::vector<float>&)>& f) {
  for (TrainableWeight& w : s_->weights) f(w.gradient);
}

std::vector<std::pair<std::string, std::string>> TrainableTop::trainable_weights() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const TrainableWeight& w : s_->weights) out.emplace_back(w.layer, w.key);
  return out;
}

void TrainableTop::step() {
  State& s = *s_;
  s.optimizer.begin_step();
  for (TrainableWeight& w : s.weights) s.optimizer.update(w.optimizer_slot, w.values->data(), w.gradient.data());
  s.lowered_current = false;
  std::lock_guard lock(s.backend_mutex);
  s.backend.reset();
}

void TrainableTop::set_dropout(bool in_training) { s_->dropout = in_training; }

void TrainableTop::set_learning_rate(float learning_rate) { s_->optimizer.set_learning_rate(learning_rate); }
const Optimizer& TrainableTop::optimizer() const { return s_->optimizer; }
Optimizer& TrainableTop::optimizer() { return s_->optimizer; }

Graph TrainableTop::graph() const {
  Graph g = s_->original;
  for (const TrainableWeight& w : s_->weights) {
    LayerNode& node = g.nodes[static_cast<std::size_t>(s_->sub_to_original[static_cast<std::size_t>(w.node)])];
    node.weights[w.key].data = std::make_shared<const std::vector<float>>(*w.values);
  }
  return g;
}

TopAndHead::TopAndHead(TrainableTop& top, Head& head, OptimizerConfig config)
    : top_(top),
      head_(head),
      head_optimizer_(config),
      kernel_slot_(head_optimizer_.add(head.kernel().size())),
      bias_slot_(head_optimizer_.add(head.bias().size())) {
  if (head.input_dim() != top.features())
    throw InvalidArgument("a head of " + std::to_string(head.input_dim()) + " inputs on a top giving " +
                          std::to_string(top.features()) + " features");
}

StepResult TopAndHead::train_step(const float* x, const int* labels, int n, const LossOptions& loss) {
  const StepResult r = compute_gradients(x, labels, n, loss);
  apply_gradients();
  return r;
}

StepResult TopAndHead::compute_gradients(const float* x, const int* labels, int n, const LossOptions& loss) {
  const float* features = top_.forward_train(x, n);
  const StepResult r = head_.backward(features, labels, n, loss, gradients_);
  top_.backward(gradients_.features.data());
  return r;
}

void TopAndHead::apply_gradients() {
  head_optimizer_.begin_step();
  head_optimizer_.update(kernel_slot_, head_.kernel().data(), gradients_.kernel.data());
  head_optimizer_.update(bias_slot_, head_.bias().data(), gradients_.bias.data());
  top_.step();
}

void TopAndHead::for_each_gradient(const std::function<void(std::vector<float>&)>& f) {
  top_.for_each_gradient(f);
  gradients_.kernel.resize(head_.kernel().size());  // zero before the first compute_gradients()
  gradients_.bias.resize(head_.bias().size());
  f(gradients_.kernel);
  f(gradients_.bias);
}

}  // namespace stoker::trainer
