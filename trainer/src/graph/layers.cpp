// The per-layer table (layers.hpp): for every layer kind its Keras form (keras_layers.cpp), its
// shape inference, its weights and its lowering rule. The fusion rules are the layers' own: BatchNormalization folds
// into the conv/dense before it, an activation into the op before it, a 2-input Add into the conv/dense producing one
// input, a ZeroPadding2D into the convolution reading it (the last two where the backend says it can, LoweringOptions).
#include "layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string_view>

#include <stoker/trainer/tensor.hpp>

#include "graph_build.hpp"
#include "lowering.hpp"

namespace stoker::trainer::detail {
namespace {

// ---- shape inference ------------------------------------------------------------------------------

void need_rank(const LayerNode& n, const std::vector<int>& in, std::size_t rank) {
  if (in.size() != rank)
    fail(n, "expects an input of rank " + std::to_string(rank + 1) + " (with batch), received " + shape_to_string(in) +
                " per sample");
}

void need_at_least(const LayerNode& n, const char* what, std::int64_t value, std::int64_t minimum) {
  if (value < minimum)
    fail(n, std::string(what) + " must be >= " + std::to_string(minimum) + ", received " + std::to_string(value));
}

int checked_int(const LayerNode& n, std::int64_t v, const std::string& what) {
  if (v < 1 || v > kMaxElements) fail(n, what + " " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

void need_last_axis(const LayerNode& n, int axis, std::size_t rank) {
  // Keras axes count the batch dimension; the last axis is -1 or rank.
  if (axis != -1 && axis != static_cast<int>(rank))
    fail(n, "axis " + std::to_string(axis) + " is not supported (only the last axis, -1)");
}

const std::vector<int>& one_input(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  if (in.size() != 1) fail(n, "expects 1 input, received " + std::to_string(in.size()));
  if (in[0].empty()) fail(n, "received an input without dimensions");
  return in[0];
}

std::vector<int> infer_input(const LayerNode& n, const std::vector<std::vector<int>>&) {
  if (n.out_shape.empty()) fail(n, "the input has no shape");
  return n.out_shape;
}

// Conv2D, DepthwiseConv2D, MaxPooling2D, AveragePooling2D.
std::vector<int> infer_window(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  need_rank(n, s, 3);
  const bool separable = n.kind == LayerKind::SeparableConv2D;
  const bool conv = n.kind == LayerKind::Conv2D || n.kind == LayerKind::DepthwiseConv2D || separable;
  const int dh = conv ? n.dilation_h : 1;
  const int dw = conv ? n.dilation_w : 1;
  need_at_least(n, conv ? "kernel_size" : "pool_size", std::min(n.kernel_h, n.kernel_w), 1);
  need_at_least(n, "strides", std::min(n.stride_h, n.stride_w), 1);
  need_at_least(n, "dilation_rate", std::min(dh, dw), 1);
  if (n.kind == LayerKind::Conv2D) need_at_least(n, "filters", n.filters, 1);
  if (n.kind == LayerKind::DepthwiseConv2D || separable) need_at_least(n, "depth_multiplier", n.depth_multiplier, 1);
  if (separable) need_at_least(n, "filters", n.filters, 1);
  if ((static_cast<std::int64_t>(n.kernel_h) - 1) * dh + 1 > kMaxElements ||
      (static_cast<std::int64_t>(n.kernel_w) - 1) * dw + 1 > kMaxElements)
    fail(n, "kernel " + std::to_string(n.kernel_h) + "x" + std::to_string(n.kernel_w) + " with dilation " +
                std::to_string(dh) + "x" + std::to_string(dw) + " is too large");
  auto ph = tf_padding(s[0], n.kernel_h, n.stride_h, dh, n.padding);
  auto pw = tf_padding(s[1], n.kernel_w, n.stride_w, dw, n.padding);
  if (ph.out <= 0 || pw.out <= 0)
    fail(n, "window " + std::to_string(n.kernel_h) + "x" + std::to_string(n.kernel_w) + " does not fit input " +
                shape_to_string(s));
  int c = s[2];
  if (n.kind == LayerKind::Conv2D) c = n.filters;
  if (n.kind == LayerKind::DepthwiseConv2D || separable)
    c = checked_int(n, static_cast<std::int64_t>(s[2]) * n.depth_multiplier, "output channels");
  if (separable) c = n.filters;
  return {ph.out, pw.out, c};
}

std::vector<int> infer_batch_norm(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  need_last_axis(n, n.axis, s.size());
  return s;
}

// Activation, Dropout.
std::vector<int> infer_same(const LayerNode& n, const std::vector<std::vector<int>>& in) { return one_input(n, in); }

std::vector<int> infer_zero_padding(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  need_rank(n, s, 3);
  need_at_least(n, "padding", std::min({n.pad_top, n.pad_bottom, n.pad_left, n.pad_right}), 0);
  return {checked_int(n, static_cast<std::int64_t>(s[0]) + n.pad_top + n.pad_bottom, "padded height"),
          checked_int(n, static_cast<std::int64_t>(s[1]) + n.pad_left + n.pad_right, "padded width"), s[2]};
}

std::vector<int> infer_cropping(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  need_rank(n, s, 3);
  need_at_least(n, "cropping", std::min({n.crop_top, n.crop_bottom, n.crop_left, n.crop_right}), 0);
  const std::int64_t h = static_cast<std::int64_t>(s[0]) - n.crop_top - n.crop_bottom;
  const std::int64_t w = static_cast<std::int64_t>(s[1]) - n.crop_left - n.crop_right;
  if (h < 1 || w < 1)
    fail(n,
         "cropping leaves " + std::to_string(h) + "x" + std::to_string(w) + " of the " + shape_to_string(s) + " input");
  return {static_cast<int>(h), static_cast<int>(w), s[2]};
}

std::vector<int> infer_add(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  if (in.size() < 2) fail(n, "expects at least 2 inputs, received " + std::to_string(in.size()));
  for (const auto& s : in)
    if (s != in[0]) fail(n, "input shapes differ: " + shape_to_string(in[0]) + " and " + shape_to_string(s));
  return in[0];
}

std::vector<int> infer_scaled_add(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  if (in.size() != 2) fail(n, "expects 2 inputs, received " + std::to_string(in.size()));
  return infer_add(n, in);
}

std::vector<int> infer_concatenate(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  if (in.empty()) fail(n, "expects inputs");
  if (in[0].empty()) fail(n, "received an input without dimensions");
  need_last_axis(n, n.axis, in[0].size());
  auto out = in[0];
  std::int64_t channels = 0;
  for (const auto& s : in) {
    if (s.size() != out.size() || !std::equal(s.begin(), s.end() - 1, out.begin()))
      fail(n, "inputs " + shape_to_string(in[0]) + " and " + shape_to_string(s) + " differ outside the last axis");
    channels += s.back();
    if (channels > kMaxElements) fail(n, "the concatenated axis is too large");
  }
  out.back() = static_cast<int>(channels);
  return out;
}

std::vector<int> infer_global_average(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  need_rank(n, s, 3);
  if (n.keepdims) return {1, 1, s[2]};
  return {s[2]};
}

// Keras' Reshape is numpy's row-major reshape of each sample, which is how stoker stores values
// (NHWC, contiguous): every valid target shape relabels the same memory.
std::vector<int> infer_reshape(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  const std::int64_t count = static_cast<std::int64_t>(Tensor::element_count(s));
  auto mismatch = [&] {
    fail(n, "cannot reshape " + shape_to_string(s) + " (" + std::to_string(count) + " values) to target_shape " +
                shape_to_string(n.target_shape));
  };
  if (n.target_shape.empty()) mismatch();
  std::int64_t known = 1;
  int unknown = -1;
  for (std::size_t i = 0; i < n.target_shape.size(); ++i) {
    const int d = n.target_shape[i];
    if (d == -1 && unknown < 0) {
      unknown = static_cast<int>(i);
    } else {
      if (d < 1) fail(n, "target_shape " + shape_to_string(n.target_shape) + " is not a valid shape");
      known *= d;
      if (known > kMaxElements) mismatch();
    }
  }
  std::vector<int> out = n.target_shape;
  if (unknown >= 0) {
    if (count % known != 0) mismatch();
    out[static_cast<std::size_t>(unknown)] = static_cast<int>(count / known);
  } else if (known != count) {
    mismatch();
  }
  return out;
}

// Equal shapes, or [H, W, C] and [1, 1, C] in either order (squeeze-and-excitation's scaling).
bool channel_vector_of(const std::vector<int>& big, const std::vector<int>& small) {
  return big.size() == 3 && small.size() == 3 && small[0] == 1 && small[1] == 1 && small[2] == big[2];
}

std::vector<int> infer_multiply(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  if (in.size() != 2) fail(n, "expects 2 inputs, received " + std::to_string(in.size()));
  if (in[0] == in[1] || channel_vector_of(in[0], in[1])) return in[0];
  if (channel_vector_of(in[1], in[0])) return in[1];
  fail(n, "inputs " + shape_to_string(in[0]) + " and " + shape_to_string(in[1]) +
              " are not supported (only equal shapes, or [H, W, C] and [1, 1, C])");
}

std::vector<int> infer_rescaling(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  const std::size_t c = static_cast<std::size_t>(s.back());
  if (!n.channel_multipliers.empty() && (n.channel_multipliers.size() != c || n.channel_offsets.size() != c))
    fail(n, "has " + std::to_string(n.channel_multipliers.size()) + " per-channel values for an input of " +
                std::to_string(c) + " channels");
  return s;
}

std::vector<int> infer_flatten(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  const auto& s = one_input(n, in);
  std::int64_t count = 1;
  for (int d : s) count *= d;  // the input passed infer_shape's checks: no overflow, fits int
  return {static_cast<int>(count)};
}

std::vector<int> infer_dense(const LayerNode& n, const std::vector<std::vector<int>>& in) {
  need_at_least(n, "units", n.filters, 1);
  auto s = one_input(n, in);
  s.back() = n.filters;
  return s;
}

// ---- weights --------------------------------------------------------------------------------------

WeightShapes no_weights(const LayerNode&, int) { return {}; }

WeightShapes conv_weights(const LayerNode& n, int cin) {
  if (n.use_bias) return {{"kernel", {n.kernel_h, n.kernel_w, cin, n.filters}}, {"bias", {n.filters}}};
  return {{"kernel", {n.kernel_h, n.kernel_w, cin, n.filters}}};
}

WeightShapes depthwise_weights(const LayerNode& n, int cin) {
  if (n.use_bias)
    return {{"depthwise_kernel", {n.kernel_h, n.kernel_w, cin, n.depth_multiplier}},
            {"bias", {cin * n.depth_multiplier}}};
  return {{"depthwise_kernel", {n.kernel_h, n.kernel_w, cin, n.depth_multiplier}}};
}

WeightShapes separable_weights(const LayerNode& n, int cin) {
  const int mid =
      static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(cin) * n.depth_multiplier, kMaxElements));
  WeightShapes w = {{"depthwise_kernel", {n.kernel_h, n.kernel_w, cin, n.depth_multiplier}},
                    {"pointwise_kernel", {1, 1, mid, n.filters}}};
  if (n.use_bias) w.push_back({"bias", {n.filters}});
  return w;
}

// Keras' adapted statistics (count: how many samples adapt() saw, kept for export).
WeightShapes normalization_weights(const LayerNode&, int cin) {
  return {{"mean", {cin}}, {"variance", {cin}}, {"count", {}}};
}

WeightShapes layer_norm_weights(const LayerNode& n, int cin) {
  WeightShapes w;
  if (n.scale) w.push_back({"gamma", {cin}});
  if (n.use_bias) w.push_back({"beta", {cin}});
  return w;
}

WeightShapes batch_norm_weights(const LayerNode& n, int cin) {
  WeightShapes w;
  if (n.scale) w.push_back({"gamma", {cin}});
  if (n.use_bias) w.push_back({"beta", {cin}});
  w.push_back({"moving_mean", {cin}});
  w.push_back({"moving_variance", {cin}});
  return w;
}

WeightShapes layer_scale_weights(const LayerNode&, int cin) { return {{"gamma", {cin}}}; }

WeightShapes dense_weights(const LayerNode& n, int cin) {
  if (n.use_bias) return {{"kernel", {cin, n.filters}}, {"bias", {n.filters}}};
  return {{"kernel", {cin, n.filters}}};
}

// ---- lowering -------------------------------------------------------------------------------------

// Rows of the last axis per sample.
int rows_of(const std::vector<int>& shape) {
  return static_cast<int>(Tensor::element_count(shape) / static_cast<std::size_t>(shape.back()));
}

// A convolution's or pooling's window, with TensorFlow's padding resolved per side on input `in`.
void set_window(LoweredOp& op, const LayerNode& n, const std::vector<int>& in, int dilation_h, int dilation_w) {
  op.kh = n.kernel_h, op.kw = n.kernel_w, op.sh = n.stride_h, op.sw = n.stride_w;
  op.dh = dilation_h, op.dw = dilation_w;
  const PadInfo ph = tf_padding(in[0], op.kh, op.sh, op.dh, n.padding);
  const PadInfo pw = tf_padding(in[1], op.kw, op.sw, op.dw, n.padding);
  op.pad_top = ph.pad_before, op.pad_bottom = ph.pad_after;
  op.pad_left = pw.pad_before, op.pad_right = pw.pad_after;
}

// The weights and bias a conv/dense layer holds, and its fused activation.
void take_weights(LoweredOp& op, const LayerNode& n, const char* kernel) {
  op.weights = *n.weight(kernel)->data;
  if (n.use_bias) op.bias = *n.weight("bias")->data;
  op.act = n.activation;
}

void lower_input(Lowering& lw, int id) { lw.set_input(id); }

// Dropout (identity at inference), Flatten and Reshape (the same memory in NHWC).
void lower_alias(Lowering& lw, int id) { lw.alias(id, lw.input_slot(id, 0)); }

void lower_convolution(Lowering& lw, int id, OpKind kind, const char* kernel) {
  const LayerNode& node = lw.node(id);
  LoweredOp& op = lw.emit(kind, id);
  set_window(op, node, lw.input_shape(id), node.dilation_h, node.dilation_w);
  const int src = node.inputs[0];
  if (lw.padding_folded(src)) {  // the conv reads the unpadded value and pads both ways at once
    const LayerNode& zp = lw.node(src);
    const std::vector<int>& unpadded = lw.input_shape(src);
    op.h = unpadded[0], op.w = unpadded[1];
    op.pad_top += zp.pad_top, op.pad_bottom += zp.pad_bottom;
    op.pad_left += zp.pad_left, op.pad_right += zp.pad_right;
  }
  if (kind == OpKind::DepthwiseConv) op.depth_multiplier = node.depth_multiplier;
  take_weights(op, node, kernel);
}

// A depthwise convolution into a slot of its own, then the 1×1 convolution writing the node's
// value, which takes the bias, a folded BatchNormalization, the activation and a residual.
void lower_separable(Lowering& lw, int id) {
  const LayerNode& node = lw.node(id);
  const std::vector<int>& in = lw.input_shape(id);
  const std::vector<int> mid = {node.out_shape[0], node.out_shape[1], in[2] * node.depth_multiplier};
  LoweredOp& dw = lw.emit_inner(OpKind::DepthwiseConv, id, mid);
  set_window(dw, node, in, node.dilation_h, node.dilation_w);
  dw.depth_multiplier = node.depth_multiplier;
  dw.weights = *node.weight("depthwise_kernel")->data;
  const int mid_slot = dw.out;
  LoweredOp& pw = lw.emit(OpKind::Conv, id);
  pw.in = {mid_slot};
  pw.h = mid[0], pw.w = mid[1], pw.c = mid[2];
  take_weights(pw, node, "pointwise_kernel");
}

void lower_conv2d(Lowering& lw, int id) { lower_convolution(lw, id, OpKind::Conv, "kernel"); }
void lower_depthwise(Lowering& lw, int id) { lower_convolution(lw, id, OpKind::DepthwiseConv, "depthwise_kernel"); }

void lower_dense(Lowering& lw, int id) {
  LoweredOp& op = lw.emit(OpKind::Dense, id);
  op.h = op.w = op.oh = op.ow = 1;  // over the rows of the last axis, whatever the rank
  op.rows = rows_of(lw.input_shape(id));
  take_weights(op, lw.node(id), "kernel");
}

// Keras' inference BatchNormalization, (x - mean) / sqrt(var + eps) * gamma + beta, as
// x * scale + shift per channel.
struct BatchNormAffine {
  std::vector<double> scale, shift;
};

BatchNormAffine batch_norm_affine(const LayerNode& node, std::size_t channels) {
  BatchNormAffine bn{std::vector<double>(channels), std::vector<double>(channels)};
  const Weight* gamma = node.weight("gamma");
  const Weight* beta = node.weight("beta");
  const float* mean = node.weight("moving_mean")->ptr();
  const float* var = node.weight("moving_variance")->ptr();
  for (std::size_t i = 0; i < channels; ++i) {
    bn.scale[i] = (gamma ? double(gamma->ptr()[i]) : 1.0) / std::sqrt(double(var[i]) + double(node.epsilon));
    bn.shift[i] = (beta ? double(beta->ptr()[i]) : 0.0) - double(mean[i]) * bn.scale[i];
  }
  return bn;
}

// Folds `bn` into a conv/dense producing its input: weights in Keras order (rows × channels, the
// output channel fastest) and bias (created when the layer had none).
void fold_into(const BatchNormAffine& bn, std::vector<float>& weights, std::vector<float>& bias) {
  const std::size_t c = bn.scale.size();
  if (bias.empty()) bias.assign(c, 0.0f);
  for (std::size_t r = 0; r < weights.size() / c; ++r)
    for (std::size_t j = 0; j < c; ++j) weights[r * c + j] = static_cast<float>(weights[r * c + j] * bn.scale[j]);
  for (std::size_t j = 0; j < c; ++j) bias[j] = static_cast<float>(bias[j] * bn.scale[j] + bn.shift[j]);
}

// x * scale + shift per channel: folded into the conv/dense that produces x when it can be.
void lower_channel_affine(Lowering& lw, int id, const BatchNormAffine& bn) {
  const int in = lw.input_slot(id, 0);
  LoweredOp* p = lw.options().fold_batch_norm ? lw.fusable_producer(in) : nullptr;
  if (p && fusions(p->kind).batch_norm && p->residual < 0) {
    fold_into(bn, p->weights, p->bias);
    lw.alias(id, in);
    return;
  }
  LoweredOp& op = lw.emit(OpKind::Affine, id);
  op.scale.assign(bn.scale.begin(), bn.scale.end());
  op.bias.assign(bn.shift.begin(), bn.shift.end());
}

void lower_batch_norm(Lowering& lw, int id) {
  lower_channel_affine(lw, id, batch_norm_affine(lw.node(id), static_cast<std::size_t>(lw.input_shape(id).back())));
}

// (x - mean) / max(sqrt(variance), epsilon) with tf_keras' backend epsilon 1e-7, as x * scale + shift.
void lower_normalization(Lowering& lw, int id) {
  const LayerNode& n = lw.node(id);
  const auto channels = static_cast<std::size_t>(lw.input_shape(id).back());
  const float* mean = n.weight("mean")->ptr();
  const float* var = n.weight("variance")->ptr();
  BatchNormAffine a{std::vector<double>(channels), std::vector<double>(channels)};
  for (std::size_t i = 0; i < channels; ++i) {
    a.scale[i] = 1.0 / std::max(std::sqrt(double(var[i])), 1e-7);
    a.shift[i] = -double(mean[i]) * a.scale[i];
  }
  lower_channel_affine(lw, id, a);
}

void lower_layer_norm(Lowering& lw, int id) {
  const LayerNode& n = lw.node(id);
  LoweredOp& op = lw.emit(OpKind::LayerNorm, id);
  op.rows = rows_of(lw.input_shape(id));
  op.epsilon = n.epsilon;
  if (const Weight* g = n.weight("gamma")) op.scale = *g->data;
  if (const Weight* b = n.weight("beta")) op.bias = *b->data;
}

void lower_rescaling(Lowering& lw, int id) {
  const auto channels = static_cast<std::size_t>(lw.input_shape(id).back());
  const LayerNode& n = lw.node(id);
  if (n.channel_multipliers.empty()) {
    lower_channel_affine(lw, id,
                         {std::vector<double>(channels, n.multiplier), std::vector<double>(channels, n.offset)});
    return;
  }
  lower_channel_affine(lw, id,
                       {std::vector<double>(n.channel_multipliers.begin(), n.channel_multipliers.end()),
                        std::vector<double>(n.channel_offsets.begin(), n.channel_offsets.end())});
}

void lower_layer_scale(Lowering& lw, int id) {
  const float* gamma = lw.node(id).weight("gamma")->ptr();
  const auto channels = static_cast<std::size_t>(lw.input_shape(id).back());
  lower_channel_affine(lw, id, {std::vector<double>(gamma, gamma + channels), std::vector<double>(channels, 0.0)});
}

void lower_activation(Lowering& lw, int id) {
  const int in = lw.input_slot(id, 0);
  LoweredOp* p = lw.options().fuse_activations ? lw.fusable_producer(in) : nullptr;
  if (p && fusions(p->kind).activation) {
    p->act = lw.node(id).activation;
    lw.alias(id, in);
    return;
  }
  lw.emit(OpKind::Activation, id).act = lw.node(id).activation;
}

void lower_zero_padding(Lowering& lw, int id) {
  const int reader = lw.only_reader(id);
  const bool into_conv =
      reader >= 0 && (lw.node(reader).kind == LayerKind::Conv2D || lw.node(reader).kind == LayerKind::DepthwiseConv2D);
  if (lw.options().fold_zero_padding && into_conv) {  // zeros are what convolution padding means
    lw.fold_padding(id);
    return;
  }
  const LayerNode& node = lw.node(id);
  LoweredOp& op = lw.emit(OpKind::ZeroPad, id);
  op.pad_top = node.pad_top, op.pad_bottom = node.pad_bottom;
  op.pad_left = node.pad_left, op.pad_right = node.pad_right;
}

// A crop is the ZeroPad op with negative sides: the output is a window of the input.
void lower_cropping(Lowering& lw, int id) {
  const LayerNode& node = lw.node(id);
  LoweredOp& op = lw.emit(OpKind::ZeroPad, id);
  op.pad_top = -node.crop_top, op.pad_bottom = -node.crop_bottom;
  op.pad_left = -node.crop_left, op.pad_right = -node.crop_right;
}

// Adds the input that is computed first to the op producing the other one, when that op can add a
// residual and the Add is its only reader.
bool fuse_residual(Lowering& lw, int id) {
  for (std::size_t k = 0; k < 2; ++k) {
    const int s = lw.input_slot(id, k), z = lw.input_slot(id, 1 - k);
    if (s == z) return false;
    LoweredOp* p = lw.fusable_producer(s);
    // z must be complete before p runs: in ResNet, Add([shortcut, x]) has the shortcut conv first
    // in the graph, and x is computed after it.
    if (p && lw.producer(z) < lw.producer(s) && fusions(p->kind).residual && p->residual < 0) {
      p->residual = z;
      p->residual_scale = 1.0f;
      lw.alias(id, s);
      return true;
    }
  }
  return false;
}

void lower_add(Lowering& lw, int id) {
  if (lw.node(id).inputs.size() == 2 && lw.options().fuse_residual_add && fuse_residual(lw, id)) return;
  lw.emit(OpKind::Add, id);
}

void lower_scaled_add(Lowering& lw, int id) { lw.emit(OpKind::Add, id).residual_scale = lw.node(id).residual_scale; }

void lower_concatenate(Lowering& lw, int id) {
  LoweredOp& op = lw.emit(OpKind::Concat, id);
  op.rows = rows_of(lw.input_shape(id));
  for (std::size_t k = 0; k < op.in.size(); ++k) op.in_channels.push_back(lw.input_shape(id, k).back());
}

void lower_pool(Lowering& lw, int id, OpKind kind) {
  LoweredOp& op = lw.emit(kind, id);
  set_window(op, lw.node(id), lw.input_shape(id), 1, 1);
}

void lower_max_pool(Lowering& lw, int id) { lower_pool(lw, id, OpKind::MaxPool); }
void lower_average_pool(Lowering& lw, int id) { lower_pool(lw, id, OpKind::AvgPool); }
void lower_global_average(Lowering& lw, int id) { lw.emit(OpKind::GlobalAvgPool, id); }
void lower_global_max(Lowering& lw, int id) { lw.emit(OpKind::GlobalMaxPool, id); }

// The full-size input first: the op's geometry is its.
void lower_multiply(Lowering& lw, int id) {
  const std::vector<int>& a = lw.input_shape(id, 0);
  const std::vector<int>& b = lw.input_shape(id, 1);
  LoweredOp& op = lw.emit(OpKind::Mul, id);
  if (a == b) return;
  op.channel_broadcast = true;
  if (channel_vector_of(b, a)) {  // [1, 1, C] × [H, W, C]
    std::swap(op.in[0], op.in[1]);
    op.h = b[0], op.w = b[1], op.c = b[2];
  }
}

// ---- the table ------------------------------------------------------------------------------------

constexpr LayerRule kRules[] = {
    {LayerKind::Input, "Input", &keras::input, infer_input, no_weights, lower_input},
    {LayerKind::Conv2D, "Conv2D", &keras::conv2d, infer_window, conv_weights, lower_conv2d},
    {LayerKind::DepthwiseConv2D, "DepthwiseConv2D", &keras::depthwise_conv2d, infer_window, depthwise_weights,
     lower_depthwise},
    {LayerKind::BatchNormalization, "BatchNormalization", &keras::batch_normalization, infer_batch_norm,
     batch_norm_weights, lower_batch_norm},
    {LayerKind::Activation, "Activation", &keras::activation, infer_same, no_weights, lower_activation},
    {LayerKind::ZeroPadding2D, "ZeroPadding2D", &keras::zero_padding2d, infer_zero_padding, no_weights,
     lower_zero_padding},
    {LayerKind::Add, "Add", &keras::add, infer_add, no_weights, lower_add},
    {LayerKind::ScaledAdd, "ScaledAdd", &keras::scaled_add, infer_scaled_add, no_weights, lower_scaled_add},
    {LayerKind::Concatenate, "Concatenate", &keras::concatenate, infer_concatenate, no_weights, lower_concatenate},
    {LayerKind::MaxPooling2D, "MaxPooling2D", &keras::max_pooling2d, infer_window, no_weights, lower_max_pool},
    {LayerKind::AveragePooling2D, "AveragePooling2D", &keras::average_pooling2d, infer_window, no_weights,
     lower_average_pool},
    {LayerKind::GlobalAveragePooling2D, "GlobalAveragePooling2D", &keras::global_average_pooling2d,
     infer_global_average, no_weights, lower_global_average},
    {LayerKind::Flatten, "Flatten", &keras::flatten, infer_flatten, no_weights, lower_alias},
    {LayerKind::Dense, "Dense", &keras::dense, infer_dense, dense_weights, lower_dense},
    {LayerKind::Dropout, "Dropout", &keras::dropout, infer_same, no_weights, lower_alias},
    {LayerKind::Rescaling, "Rescaling", &keras::rescaling, infer_rescaling, no_weights, lower_rescaling},
    {LayerKind::GlobalMaxPooling2D, "GlobalMaxPooling2D", &keras::global_max_pooling2d, infer_global_average,
     no_weights, lower_global_max},
    {LayerKind::Reshape, "Reshape", &keras::reshape, infer_reshape, no_weights, lower_alias},
    {LayerKind::Multiply, "Multiply", &keras::multiply, infer_multiply, no_weights, lower_multiply},
    {LayerKind::SeparableConv2D, "SeparableConv2D", &keras::separable_conv2d, infer_window, separable_weights,
     lower_separable},
    {LayerKind::Normalization, "Normalization", &keras::normalization, infer_batch_norm, normalization_weights,
     lower_normalization},
    {LayerKind::LayerNormalization, "LayerNormalization", &keras::layer_normalization, infer_batch_norm,
     layer_norm_weights, lower_layer_norm},
    {LayerKind::LayerScale, "LayerScale", &keras::layer_scale, infer_same, layer_scale_weights, lower_layer_scale},
    {LayerKind::Cropping2D, "Cropping2D", &keras::cropping2d, infer_cropping, no_weights, lower_cropping},
};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < std::size(kRules); ++i)
    if (static_cast<std::size_t>(kRules[i].kind) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kRules: one rule per LayerKind, in the enum's order (layer_rule() indexes it)");

// Calls f with each class of a space-separated list until it returns true.
template <typename F>
bool any_class(std::string_view classes, F&& f) {
  while (!classes.empty()) {
    const std::size_t end = std::min(classes.find(' '), classes.size());
    if (f(classes.substr(0, end))) return true;
    classes.remove_prefix(std::min(end + 1, classes.size()));
  }
  return false;
}

}  // namespace

const LayerRule* layer_rule(LayerKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kRules) ? &kRules[i] : nullptr;
}

const LayerRule* keras_rule(std::string_view keras_class) {
  for (const LayerRule& rule : kRules)
    if (rule.keras->read && any_class(rule.keras->classes, [&](std::string_view c) { return c == keras_class; }))
      return &rule;
  return nullptr;
}

std::string keras_classes_read() {
  std::string list = "InputLayer";
  for (const LayerRule& rule : kRules) {
    if (!rule.keras->read) continue;
    any_class(rule.keras->classes, [&](std::string_view c) {
      list += ", " + std::string(c);
      return false;
    });
  }
  return list;
}

}  // namespace stoker::trainer::detail
