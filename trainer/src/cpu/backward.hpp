// Internal: the CPU backend's backward kernels, one per lowered op kind (lowering.hpp), for
// fine-tuning (fine_tune.hpp). float32 NHWC like the forward kernels (cpu/forward.cpp), oneTBB-parallel,
// the convolutions as GEMMs (gemm.hpp). Parameter gradients are summed over the batch in a
// fixed order, so they do not depend on the thread count.
//
// The training executor lowers without folding or fusing (every op is one layer; BatchNormalization
// is an Affine op) and runs an op's own activation apart, so backward_op() sees ops whose `act` is
// Linear; activation_backward() is the activation's part.
#pragma once

#include <cstddef>
#include <vector>

#include <stoker/trainer/graph.hpp>

#include "graph/lowering.hpp"

namespace stoker::trainer::cpu {

// dpre = dL/dpre from dy = dL/dy for y = act(pre), over rows × n values (Softmax: over each row
// of n). pre and y are the forward values; dpre may alias dy.
void activation_backward(const ActivationSpec& act, const float* pre, const float* y, const float* dy, float* dpre,
                         std::size_t rows, int n);

using detail::OpGradients;

// The backward of one op over nb samples. `op` is the lowered op with its weights in Keras order
// (act Linear, no residual). in: its forward inputs; out: its forward output (the max poolings
// use it); dout: dL/dout. din[k]: dL/din[k] is ADDED there (null: input k needs none). grads: the
// parameter gradients are ADDED to its non-empty vectors (null: none wanted).
// (These kernels find the max poolings' maxima again from the input, so `out` may be null. The
// element-wise kinds, Affine, Activation, Add and Mul, take h·w·c values per sample, as the forward
// Mul does.)
void backward_op(const detail::LoweredOp& op, const std::vector<const float*>& in, const float* out, const float* dout,
                 const std::vector<float*>& din, OpGradients* grads, int nb);

}  // namespace stoker::trainer::cpu
