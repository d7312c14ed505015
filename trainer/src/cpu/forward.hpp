// Internal: the CPU backend's ops. An Op is one op of the lowering (lowering.hpp: folded
// BatchNormalization and fused activation included) with what its kernel prepares once (packed
// weights); run_op() runs it on a chunk of samples, parallel over rows.
#pragma once

#include <cstddef>
#include <vector>

#include <stoker/trainer/graph.hpp>

#include "gemm.hpp"
#include "graph/lowering.hpp"

namespace stoker::trainer::cpu {

struct Op : detail::LoweredOp {
  std::size_t out_size = 0;  // values per sample
  bool direct = false;       // Conv 1×1, stride 1, no padding: the input is already the GEMM's A
  PackedB packed;            // Conv/Dense: the weights packed for the GEMM (then `weights` is empty)
};

// The CPU op for `lowered`, which writes out_size values per sample.
Op prepare_op(detail::LoweredOp lowered, std::size_t out_size);

// Output row `row` (sample-major, then oy, ox) of a convolution's im2col matrix: the input
// values its window reads, [ky][kx][c] (the weights' order), zeros where it reaches the padding.
void im2col_row(const detail::LoweredOp& op, const float* x, std::size_t row, float* dst);

// Applies `a` to rows × n values (softmax: over each row of n).
void apply_act(float* x, std::size_t rows, int n, const ActivationSpec& a);

// in: the op's inputs (nb samples each), out: nb × op.out_size values.
void run_op(const Op& op, const std::vector<const float*>& in, float* out, int nb);

}  // namespace stoker::trainer::cpu
