// Internal: the cuDNN backend's execution plan, built on the host without CUDA so that it can be
// tested anywhere. lower_graph() maps the shared lowering (../lowering.hpp: BatchNormalization
// folded into the conv/dense before it, an activation fused into the op that produces its only
// input, Dropout/Flatten as aliases, and here also a two-input Add fused into the epilogue of the
// conv producing one input, y = act(conv + bias + z), and a ZeroPadding2D whose only reader is a
// convolution folded into its padding) onto GPU ops, plus what the GPU needs:
//   - convolution weights in cuDNN's NHWC filter layout KRSC ([out][kh][kw][in/groups]),
//     depthwise convolutions as grouped convolutions (groups = input channels), Dense as a 1×1
//     convolution over the rows of its input;
//   - cuDNN pads symmetrically, so a convolution whose padding is asymmetric (TensorFlow's 'same'
//     with stride 2 on even sizes, Keras' ZeroPadding2D((0,1),(0,1)) before a 'valid' stride-2
//     conv) first copies its input into a zero-padded scratch tensor and then runs unpadded
//     (explicit_pad);
//   - buffers: every value gets one of a few reusable activation buffers (sizes per sample), so
//     memory is allocated once for a maximum batch.
// run_plan_host() executes a plan with plain loops, optionally rounding every stored value and
// weight to the storage precision (fp16/bf16), to test the lowering and the precision on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <stoker/core/cuda.hpp>
#include <stoker/core/image.hpp>
#include <stoker/trainer/cudnn_backend.hpp>
#include <stoker/trainer/graph.hpp>

#include "graph/lowering.hpp"

namespace stoker::trainer::cudnn {

enum class OpType {
  Conv,    // cuDNN convolution (Conv, DepthwiseConv as grouped, Dense as 1×1) + epilogue
  Pad,     // ZeroPad not folded into a convolution
  Affine,  // y = act(x * scale[c] + bias[c] + residual_scale * z): Affine, Activation, Add of 2
  Concat,  // last axis
  MaxPool,
  AvgPool,
  Gap,        // global average pooling (+ act)
  Gmp,        // global max pooling (+ act)
  Mul,        // y = act(in[0] * in[1]), in[1] per image and channel when channel_broadcast
  LayerNorm,  // over the last axis (+ act)
};
const char* to_string(OpType t);

// One GPU op: the lowered op it runs (its kind, geometry, folded weights, ...) and how. in[0] is
// the main input (Affine: in[1] = z; Concat: all of them); `out` may equal in[0] for an in-place
// Affine (an Add's inputs after the second). Dense runs as `rows` images of 1×1.
struct Op : detail::LoweredOp {
  OpType type = OpType::Affine;
  int groups = 1;
  bool explicit_pad = false;  // Conv: pad into scratch (pad_* sides), then convolve with padding 0
  // Conv from a DepthwiseConv2D run by the backend's own kernel (not cuDNN): float32 weights in
  // Keras order [kh][kw][oc], any padding read in place (never explicit_pad), bias/residual/
  // activation in the same pass. Folded BatchNormalization makes depthwise weights ill-conditioned
  // in fp16 (a large conv sum and bias cancel), so rounding them would cost about 1 % on
  // MobileNetV2's features. Every other Conv holds KRSC weights.
  bool depthwise_kernel = false;

  int padded_h() const { return h + pad_top + pad_bottom; }
  int padded_w() const { return w + pad_left + pad_right; }
  bool symmetric_pad() const { return pad_top == pad_bottom && pad_left == pad_right; }
};

struct PlanOptions {
  bool fold_batch_norm = true;
  bool fuse_activations = true;
  bool fuse_residual_add = true;  // a 2-input Add into the epilogue of the conv producing one input
  bool cudnn_depthwise = false;   // depthwise convs as cuDNN grouped convs (fp16 weights) instead
};

struct Plan {
  std::vector<Op> ops;
  int input_slot = -1;
  std::vector<int> input_shape;                 // per sample {H, W, C}
  std::vector<int> outputs;                     // slots of the graph outputs, in order
  std::vector<std::vector<int>> output_shapes;  // per sample
  std::vector<std::size_t> slot_size;           // values per sample of each slot (node-indexed)
  // Buffers: slot -> buffer index (-1: none; the input slot has its own buffer), buffer sizes in
  // values per sample (the largest slot it holds).
  std::vector<int> slot_buffer;
  std::vector<std::size_t> buffer_size;
  std::size_t scratch_size = 0;  // values per sample of the explicit-padding scratch

  std::size_t activation_values() const;  // sum of buffer_size (per sample)
  std::string describe() const;           // one line per op (tests, debugging)
};

// Throws InvalidArgument naming the layer for what cannot run (multi-input models, unknown kinds).
Plan lower_graph(const Graph& graph, const PlanOptions& options = {});

// The GPU ops running one lowered op (lower_graph's step; the training plan's too): appended to
// `ops`, more than one for an Add of more than two inputs.
void append_gpu_ops(std::vector<Op>& ops, detail::LoweredOp lowered, const PlanOptions& options);

// One op on the host, as run_plan_host runs it: `value(slot)` gives a slot's values (nb samples),
// y receives `total` values (a Softmax's rows are the caller's); `scratch` holds the explicit padding.
void run_op_on_host(const Op& op, const std::function<float*(int)>& value, float* y, std::size_t total, std::size_t nb,
                    DType round_to, std::vector<float>& scratch);

// The Softmax of an op's output on the host: each row of n values, then rounded to round_to.
void softmax_rows_on_host(float* y, std::size_t rows, int n, DType round_to);

// The plan's math on the host. `round_to`: F32 keeps float32 everywhere; F16/BF16 round weights,
// biases and every stored value to that precision (accumulation stays float32), like the GPU.
std::vector<std::vector<float>> run_plan_host(const Plan& plan, const float* input, int batch,
                                              DType round_to = DType::F32);

// What both backends behind CudnnBackend (cuDNN, and the emulated device's host executor) share:
// the argument checks (InvalidArgument with the reason), the host output tensors
// {batch, ...shape} of forward(), and the views of forward_device() into float32 output buffers.
void check_batch(int batch, int max_batch, const void* input);
void check_device_dtype(DType dtype);
std::vector<Tensor> host_outputs(const Plan& plan, int batch);
std::vector<DeviceTensor> output_views(const Plan& plan, const std::vector<DeviceBuffer>& buffers, int batch);

// Rounds v to the precision of dtype (F32: unchanged).
float round_to_storage(float v, DType dtype);
// The float a stored F16 or BF16 value (its 16 bits) stands for.
float storage_to_float(std::uint16_t bits, DType dtype);

}  // namespace stoker::trainer::cudnn
