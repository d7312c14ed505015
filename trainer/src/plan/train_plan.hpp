// Internal: fine-tuning on the GPU. The trainable top's training lowering (train_executor.hpp:
// every op one layer, nothing folded or fused) becomes a plan of GPU ops, each with its backward:
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
// Two of the executors of train_executor.hpp run a TrainPlan: the cuDNN one (cuda/cudnn_trainer.cpp,
// CUDA builds) and its host twin (twin/train_host.cpp: the same per-element functions, the same
// roundings to the storage type), which is the GPU trainer on the emulated device and which tests
// compare with the CPU backward anywhere.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/image.hpp>
#include <stoker/trainer/fine_tune.hpp>

#include "plan.hpp"
#include "train_executor.hpp"

namespace stoker::trainer::cudnn {

using detail::TrainLowering;
using detail::TrainStep;

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

TrainPlan plan_training(const TrainLowering& lowering);

// Weights in the layouts the executors upload: a convolution's KRSC as lower_graph makes them.
// Re-made after each optimizer step (the ops' weights change, the plan's structure does not).
void refresh_weights(TrainPlan& plan, const std::vector<TrainStep>& steps);

// The conv weight gradient from KRSC (oc major) back to Keras order (rows × oc).
std::vector<float> from_krsc(const std::vector<float>& krsc, int out_channels);

}  // namespace stoker::trainer::cudnn
