// Internal: the CPU backend's ops. An Op is one compiled layer (folded BatchNormalization and
// fused activation included); run_op() runs it on a chunk of samples, parallel over rows.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <stoker/trainer/graph.hpp>

#include "cpu_gemm.hpp"

namespace stoker::trainer::cpu {

enum class OpType { Conv, Depthwise, Dense, Scale, Act, ZeroPad, Add, Concat, MaxPool, AvgPool, Gap };

struct Op {
  OpType type = OpType::Act;
  std::string name;     // the layer (for messages)
  std::vector<int> in;  // value slots read
  int out = -1;         // value slot written
  std::size_t out_size = 0;  // values per sample
  // geometry (NHWC, per sample)
  int h = 0, w = 0, c = 0, oh = 0, ow = 0, oc = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, mult = 1;
  bool direct = false;  // 1×1, stride 1, no padding: the input is already the GEMM's A
  ActivationSpec act;
  std::vector<float> weights;  // conv/dense: [K, N] before packing; depthwise: [kh*kw, C*mult]
  std::vector<float> bias;     // per output channel (may be empty)
  std::vector<float> scale;    // Scale op (unfolded BatchNormalization): y = x * scale + bias; Add: a factor per input
  PackedB packed;
  std::vector<std::size_t> in_sizes;  // Concat: last-axis width of each input
};

// Ops whose kernels end with apply_act (so an activation can be fused into them).
bool applies_activation(OpType t);

// Applies `a` to rows × n values (softmax: over each row of n).
void apply_act(float* x, std::size_t rows, int n, const ActivationSpec& a);

// in: the op's inputs (nb samples each), out: nb × op.out_size values.
void run_op(const Op& op, const std::vector<const float*>& in, float* out, int nb);

}  // namespace stoker::trainer::cpu
