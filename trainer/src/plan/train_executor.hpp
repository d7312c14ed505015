// Internal: the one seam between fine-tuning and what runs its steps. The trainable top
// (fine_tune/fine_tune.cpp) lowers its layers for training (every op one layer, nothing folded or
// fused: each op's gradients map onto its layer's Keras weights) into a TrainLowering; an executor
// runs its forward, keeping every value, and its backward, giving each op's parameter gradients:
//   - the CPU's (cpu/train_executor.cpp): the CPU backend's kernels and backward kernels, float32;
//   - the GPU's (cuda/cudnn_trainer.cpp): cuDNN and the CUDA kernels, bf16 values, through the
//     plan of GPU ops of plan/train_plan.hpp;
//   - the GPU's host twin (twin/train_host.cpp): that plan with the kernels' per-element math on
//     the host, float32 or rounding as the GPU does; the GPU trainer of the emulated device.
// The top draws the Dropout masks, keeps the master weights and runs the optimizer, whichever
// executor runs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/image.hpp>
#include <stoker/trainer/fine_tune.hpp>
#include <stoker/trainer/graph.hpp>

#include "graph/lowering.hpp"

namespace stoker::trainer::detail {

// One op of the training lowering.
struct TrainStep {
  const LoweredOp* op = nullptr;  // its activation is linear: `act` follows
  ActivationSpec act;             // the layer's own activation, into op->out
  int pre_slot = -1;              // where the op writes when `act` is not linear
  bool activation_op = false;     // an Activation layer: `act` of op->in[0]
  bool dropout = false;           // y = x · mask, the mask fed by forward()
  // Which parameter gradients the caller takes (sized as OpGradients wants them).
  bool weights_gradient = false, bias_gradient = false, scale_gradient = false;
  bool wants_gradients() const { return weights_gradient || bias_gradient || scale_gradient; }
};

struct TrainLowering {
  std::vector<TrainStep> steps;  // in forward order; their ops live as long as the lowering
  int input_slot = -1, output_slot = -1;
  std::vector<std::size_t> slot_size;  // values per sample, the steps' pre_slots appended
  std::vector<bool> needs_gradient;    // per slot: whether backward computes its gradient
};

class TrainExecutor {
 public:
  virtual ~TrainExecutor() = default;
  virtual std::string name() const = 0;
  // What its values and gradients take for `batch` samples (a GPU's: what it allocated).
  virtual std::size_t memory_bytes(int batch) const = 0;
  // The lowering was made again with new weights (after an optimizer step); its structure, the
  // one the executor was made for, is the same.
  virtual void set_weights(const TrainLowering& lowering) = 0;
  // Forward keeping every value: x is batch × the input slot's values (host float32, kept by the
  // caller until backward), masks[k] the mask of step k (batch × its slot's values) when step k
  // is a Dropout, else null. Returns the output (host float32), valid until the next call.
  virtual const float* forward(const float* x, int batch, const std::vector<const float*>& masks) = 0;
  // From dL/doutput (host float32, the last forward's batch): each step's parameter gradients
  // into gradients[k], which the caller sizes as the step asks and zeroes; Keras' layouts.
  virtual void backward(const float* doutput, std::vector<OpGradients>& gradients) = 0;
};

}  // namespace stoker::trainer::detail

namespace stoker::trainer::cpu {
std::unique_ptr<detail::TrainExecutor> make_train_executor(const detail::TrainLowering& lowering);
}  // namespace stoker::trainer::cpu

namespace stoker::trainer::cudnn {
// The host twin; `storage` F32 computes in float32 throughout, BF16 rounds as the GPU.
std::unique_ptr<detail::TrainExecutor> make_host_train_executor(const detail::TrainLowering& lowering, int max_batch,
                                                                DType storage);
// The cuDNN executor: CudaError without CUDA/cuDNN or a device; on the emulated device the host
// twin in bf16.
std::unique_ptr<detail::TrainExecutor> make_gpu_train_executor(const detail::TrainLowering& lowering,
                                                               const GpuTrainOptions& options);
}  // namespace stoker::trainer::cudnn
