// Internal: fine-tuning on the GPU. The trainable top's training lowering (fine_tune.cpp: every
// op one layer, nothing folded or fused) becomes a plan of GPU ops, each with its backward:
//   - an op's own activation (Conv2D(activation=...)) runs as an Affine op of its own after it,
//     so the value before it is kept (a Softmax: over the rows of that op's output); a Dropout
//     multiplies by a mask the host feeds each step;
//   - every slot has its own buffer (values in the storage type, bf16), and every slot below
//     which something trains a float32 gradient buffer, allocated once for max_batch samples;
//   - convolutions go through cuDNN (forward, backward-data, backward-filter; bf16 data, float32
//     compute), everything else through the kernels of kernels.cu and backward_kernels.cu.
// bf16 has float32's range, so no loss scaling is needed; the master weights and the optimizer
// stay float32 on the host (TrainableTop), which uploads the new weights after each step.
//
// Two executors run a TrainPlan: the cuDNN one (cudnn_trainer.cpp, CUDA builds) and its host twin
// (train_host.cpp: the same per-element functions, the same roundings to the storage type), which
// is the GPU trainer on the emulated device and which tests compare with the CPU backward anywhere.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/image.hpp>
#include <stoker/trainer/fine_tune.hpp>

#include "../cpu_backward.hpp"
#include "plan.hpp"

namespace stoker::trainer::cudnn {

// One op of the training lowering, as fine_tune.cpp keeps it.
struct TrainStep {
  const detail::LoweredOp* op = nullptr;  // its activation is linear: `act` follows
  ActivationSpec act;                     // the layer's own activation, into op->out
  int pre_slot = -1;                      // where the op writes when `act` is not linear
  bool activation_op = false;             // an Activation layer: `act` of op->in[0]
  bool dropout = false;                   // y = x · mask, the mask fed by forward()
  // Which parameter gradients the caller takes (sized as cpu::OpGradients wants them).
  bool weights_gradient = false, bias_gradient = false, scale_gradient = false;
};

struct TrainPlan {
  Plan plan;                         // ops; plan.slot_size covers the mask slots appended
  std::vector<int> step_of;          // per plan op: the TrainStep it runs (an own activation's too)
  std::vector<bool> main_op;         // per plan op: the step's op itself (false: its activation op)
  std::vector<int> mask_slot;        // per TrainStep: the slot of its dropout mask, or -1
  std::vector<bool> needs_gradient;  // per slot
  int output_slot = -1;
  std::size_t max_values = 0;      // per sample: the largest slot (scratch sizes)
  std::size_t max_conv_input = 0;  // per sample: the largest (padded) convolution input
};

TrainPlan plan_training(const std::vector<TrainStep>& steps, int input_slot, int output_slot,
                        const std::vector<std::size_t>& slot_size, const std::vector<bool>& needs_gradient);

// Weights in the layouts the executors upload: a convolution's KRSC as lower_graph makes them.
// Re-made after each optimizer step (the ops' weights change, the plan's structure does not).
void refresh_weights(TrainPlan& plan, const std::vector<TrainStep>& steps);

class TrainExecutor {
 public:
  virtual ~TrainExecutor() = default;
  virtual std::string name() const = 0;
  virtual std::size_t device_bytes() const = 0;
  // The plan's weights changed (refresh_weights).
  virtual void set_weights(const TrainPlan& plan) = 0;
  // Forward keeping every value: x is batch × the input slot's values (host float32), masks[k]
  // the mask of step k (batch × its slot's values) or null. Returns the output (host float32),
  // valid until the next call.
  virtual const float* forward(const float* x, int batch, const std::vector<const float*>& masks) = 0;
  // From dL/doutput (host float32, the last forward's batch): each step's parameter gradients,
  // in cpu::OpGradients' layouts (Keras order), for the steps that want them.
  virtual void backward(const float* doutput, std::vector<cpu::OpGradients>& gradients) = 0;
};

// The host twin (any build); `storage` F32 computes in float32 throughout, BF16 rounds as the GPU.
std::unique_ptr<TrainExecutor> make_host_train_executor(const TrainPlan& plan, int max_batch, DType storage);
// The cuDNN executor: CudaError without CUDA/cuDNN or a device; on the emulated device the host
// twin in bf16.
std::unique_ptr<TrainExecutor> make_gpu_train_executor(const TrainPlan& plan, const GpuTrainOptions& options);

// The conv weight gradient from KRSC (oc major) back to Keras order (rows × oc).
std::vector<float> from_krsc(const std::vector<float>& krsc, int out_channels);

}  // namespace stoker::trainer::cudnn
