// Fine-tuning the top of a backbone, as Keras' transfer-learning guide does it: the layers from
// one layer upward train, the layers below stay frozen. BatchNormalization stays in inference
// mode (its moving statistics are frozen, as for a backbone called with training=False) while its
// gamma and beta train. The trainable part runs on the CPU backend's kernels with their backward
// passes (float32), or, after run_on_gpu(), on the GPU trainer (cuDNN and own kernels, bf16 values,
// float32 master weights; the optimizer stays on the host); the frozen part is an ordinary Model
// cut at boundary(), so its output can be computed once and reused when there is no augmentation.
//
//   TrainableTop top(backbone.graph(), "block_13_expand", {.learning_rate = 1e-5f});
//   Model below = backbone.cut_at(top.boundary());         // the frozen part
//   TopAndHead model(top, head, top.optimizer().config());
//   Tensor x = below.forward(images, n);                   // top's input
//   StepResult r = model.train_step(x.data.data(), labels, n);  // Adam on every trainable weight
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/image.hpp>
#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/head.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer {

enum class OptimizerKind { Adam, Sgd };
OptimizerKind parse_optimizer(const std::string& name);  // "adam" | "sgd"; InvalidArgument otherwise
const char* to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;
  float learning_rate = 1e-5f;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;  // Adam (Keras' defaults)
  float momentum = 0.0f;                                  // SGD
  bool nesterov = false;                                  // SGD
};

// Keras' update rules (tf_keras 2.x) over arrays of weights registered once:
//   Adam: alpha = lr sqrt(1 - b2^t) / (1 - b1^t); m += (g - m)(1 - b1); v += (g² - v)(1 - b2);
//         w -= alpha m / (sqrt(v) + eps)
//   SGD:  u = momentum u - lr g; w += u (nesterov: w += momentum u - lr g); momentum 0: w -= lr g
// What an optimizer has accumulated, to continue it in another process (a checkpoint).
struct OptimizerState {
  std::int64_t steps = 0;
  float learning_rate = 0;
  std::vector<std::vector<float>> m, v;  // per weight array: Adam's moments (SGD: its velocity in m)
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config = {});
  int add(std::size_t size);  // a weight array of `size` values; returns its index
  void begin_step();          // once per step, before the updates (counts Adam's t)
  void update(int array, float* weights, const float* gradient);
  void set_learning_rate(float learning_rate);  // >= 0
  const OptimizerConfig& config() const { return config_; }
  std::int64_t steps() const { return step_; }
  OptimizerState state() const;
  // InvalidArgument unless `state` holds this optimizer's arrays (their count and sizes).
  void restore(const OptimizerState& state);

 private:
  OptimizerConfig config_;
  std::int64_t step_ = 0;
  std::vector<std::vector<float>> m_, v_;  // Adam's moments, or SGD's velocity in m_
};

// Fine-tuning on a GPU (TrainableTop::run_on_gpu): the top's forward_train() and backward() run on
// the device — cuDNN's convolutions (forward, backward-data, backward-filter), the backend's own
// kernels for the rest — with bf16 values, float32 gradients and float32 master weights (bf16 has
// float32's range, so no loss scaling is needed). The optimizer stays on the host and the new
// weights are uploaded after each step (docs/trainer.md, "Fine-tuning on the GPU").
struct GpuTrainOptions {
  int max_batch = 256;                                   // the largest batch forward_train() takes
  std::size_t workspace_limit = std::size_t{256} << 20;  // cuDNN workspace bytes at most
  int device = -1;                                       // -1: the calling thread's current device
};

namespace detail {
struct TrainableTopAccess;  // the trainer's internals (its GPU executor's host twins)
}

class TrainableTop {
 public:
  // `backbone`: a single-output feature model (Model::cut_at's graph). Layers from `from_layer`
  // (in graph order, as Keras' model.layers[i:]) up to the output train. InvalidArgument naming
  // the layer when it is not in the backbone, is its input, or when more than one value crosses
  // from the frozen part into the trainable one (choose the first layer of a block instead).
  TrainableTop(const Graph& backbone, const std::string& from_layer, OptimizerConfig optimizer = {});
  ~TrainableTop();
  TrainableTop(TrainableTop&&) noexcept;
  TrainableTop& operator=(TrainableTop&&) noexcept;

  const std::string& from_layer() const;
  // The frozen layer whose output is the trainable part's input (the backbone's input layer when
  // from_layer is the first layer).
  const std::string& boundary() const;
  bool boundary_is_input() const;
  const std::vector<int>& input_shape() const;  // per sample
  int features() const;                         // output values per sample
  std::size_t trainable_parameters() const;
  // Bytes kept between forward_train() and backward() for `batch` samples: every activation, the
  // pre-activations of layers with their own activation, and their gradients. On the GPU: the
  // device memory the trainer holds (for GpuTrainOptions::max_batch).
  std::size_t activation_bytes(int batch) const;

  // Inference with the current weights: {batch, features}. Thread-safe with other forward() calls.
  Tensor forward(const float* x, int batch) const;
  // Forward keeping every activation for backward(): the features (batch × features floats) stay
  // valid until the next call, and `x` must stay valid until backward(). Buffers grow to the
  // largest batch seen and are then reused.
  const float* forward_train(const float* x, int batch);
  // From dL/dfeatures of the last forward_train() batch: the gradient of every trainable weight
  // (replacing the previous backward's).
  void backward(const float* dfeatures);
  // The last backward's gradient of a weight by layer and Keras name ("kernel", "bias",
  // "depthwise_kernel", "pointwise_kernel", "gamma", "beta"); InvalidArgument when not trainable.
  const std::vector<float>& gradient(const std::string& layer, const std::string& weight) const;
  // f(gradient) for each trainable weight's last gradient, in trainable_weights() order; f may
  // change it (data-parallel training sums the ranks' before step()).
  void for_each_gradient(const std::function<void(std::vector<float>&)>& f);
  // The trainable weights as (layer, Keras name) pairs, in graph order.
  std::vector<std::pair<std::string, std::string>> trainable_weights() const;
  // Dropout layers in the trainable part: off by default, as inside a Keras backbone called with
  // training=False (the recipe that keeps BatchNormalization in inference mode); on, they drop in
  // forward_train() as Keras' Dropout does with training=True (noise_shape and SpatialDropout2D
  // included), a new mask each step. forward() never drops.
  void set_dropout(bool in_training);
  // From now on forward_train() and backward() run on the GPU (GpuTrainOptions); forward() stays
  // the CPU backend's. CudaError when there is no usable GPU or cuDNN, InvalidArgument naming a
  // layer the GPU trainer cannot run (a Softmax inside the top); the top stays on the CPU then.
  void run_on_gpu(const GpuTrainOptions& options = {});
  // Back to the CPU backend's kernels (the GPU trainer and its memory are released).
  void run_on_cpu();
  // "cpu", or what runs the training steps on the GPU (cuDNN's version, the storage type).
  std::string executor() const;
  // How close the GPU trainer comes to the exact gradients (GpuGradientCheck), after one
  // forward_train() and backward() of `samples` generated inputs (at most max_batch, Dropout off)
  // on the GPU, on the CPU backend in float32 and on the kernels' host twin in bf16. The last
  // backward's gradients are replaced. Zeros on the CPU.
  struct GpuGradientCheck {
    // The largest relative L2 error ||a − cpu|| / ||cpu|| over the features and every trainable
    // weight's gradient: of the GPU, and of the bf16 twin, which rounds where the GPU does.
    double gpu = 0, rounding = 0;
    // A correct GPU differs from the twin only in the order of its sums, but in bf16 that moves
    // some roundings, and the ReLU kinks above compound them as they compound the twin's own
    // (docs/trainer.md): so the GPU is held to twice the twin's distance from the exact values,
    // at least `floor`. A wrong index, layout or missed op is off by O(1).
    double limit(double floor) const { return std::max(floor, 2 * rounding); }
  };
  GpuGradientCheck check_gpu_gradients(int samples = 4, std::uint64_t seed = 1);
  // One optimizer update of every trainable weight from the last backward's gradients.
  void step();
  void set_learning_rate(float learning_rate);
  const Optimizer& optimizer() const;
  Optimizer& optimizer();

  // The whole backbone with the current weights of the trainable layers (a copy; the frozen
  // layers' weights are shared with the graph given to the constructor).
  Graph graph() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
  friend struct detail::TrainableTopAccess;
};

// A head on a trainable top, trained as one model (Keras' model after its recompile): each step
// runs the top forward, the head's loss, the backward of both and one update of every weight, the
// head's with an optimizer of its own with `config` (a new one: its moments start at zero).
class TopAndHead {
 public:
  TopAndHead(TrainableTop& top, Head& head, OptimizerConfig config);
  // x: n of the top's inputs; labels as Head::train_step. Returns the loss before the update.
  // compute_gradients() then apply_gradients().
  StepResult train_step(const float* x, const int* labels, int n, const LossOptions& loss = {});
  // The two halves of a step, for data-parallel training, which sums the ranks' gradients between
  // them: the forward and backward of the top and the head on x (the mean gradients over the n
  // samples), then the head's and the top's optimizer steps on the gradients as they are then.
  StepResult compute_gradients(const float* x, const int* labels, int n, const LossOptions& loss = {});
  void apply_gradients();
  // f(gradient) for each gradient compute_gradients() left: the top's trainable weights' in
  // trainable_weights() order, then the head's kernel and bias. They may be changed in place.
  void for_each_gradient(const std::function<void(std::vector<float>&)>& f);
  Optimizer& head_optimizer() { return head_optimizer_; }

 private:
  TrainableTop& top_;
  Head& head_;
  Optimizer head_optimizer_;
  int kernel_slot_, bias_slot_;
  HeadGradients gradients_;
};

}  // namespace stoker::trainer
