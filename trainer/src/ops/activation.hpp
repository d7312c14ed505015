// Internal: Keras' element-wise activations and their gradients, one formula each. The CPU
// backend's loops (cpu/forward.cpp, cpu/backward.cpp) call the per-kind functions inside loops of
// one kind, so that they vectorise; the CUDA kernels and their host twins call them through
// apply_act and act_backward, one element at a time. Definitions are Keras' (graph.hpp's
// ActKind), the gradients TensorFlow's at the kinks. Comparisons are written as std::min/std::max
// expand (a NaN propagates) so that the CPU's loops compile to vector min/max.
#pragma once

#include <cmath>

#include <stoker/core/host_device.hpp>
#include <stoker/trainer/graph.hpp>

namespace stoker::trainer::ops {

// An ActivationSpec as plain numbers, trivially copyable into kernels.
struct ActParams {
  int kind = 0;  // ActKind
  float max_value = 0.0f;
  float negative_slope = 0.0f;
  float threshold = 0.0f;
  bool plain_relu = false;  // threshold 0, slope 0: min(max(x, 0), max)
};

inline ActParams act_params(const ActivationSpec& a) {
  ActParams p;
  p.kind = static_cast<int>(a.kind);
  p.max_value = a.max_value;
  p.negative_slope = a.negative_slope;
  p.threshold = a.threshold;
  p.plain_relu = a.threshold == 0.0f && a.negative_slope == 0.0f;
  return p;
}

STOKER_HOST_DEVICE inline float max_of(float a, float b) { return a < b ? b : a; }  // std::max
STOKER_HOST_DEVICE inline float min_of(float a, float b) { return b < a ? b : a; }  // std::min

// ---- values -----------------------------------------------------------------------------------
// ReLU(max_value m) with threshold 0 and slope 0, and Keras' general ReLU(threshold t, slope a, m).
STOKER_HOST_DEVICE inline float relu_value(float x, float m) { return min_of(max_of(x, 0.0f), m); }
STOKER_HOST_DEVICE inline float relu_value(float x, float t, float a, float m) {
  return x > t ? min_of(x, m) : a * (x - t);
}
STOKER_HOST_DEVICE inline float sigmoid_value(float x) { return 1.0f / (1.0f + expf(-x)); }
STOKER_HOST_DEVICE inline float swish_value(float x) { return x / (1.0f + expf(-x)); }
STOKER_HOST_DEVICE inline float tanh_value(float x) { return tanhf(x); }
// expm1/log1p for accuracy near 0; softplus as max(x, 0) + log1p(exp(-|x|)) so that it neither
// overflows nor loses the small values.
STOKER_HOST_DEVICE inline float elu_value(float x) { return x > 0.0f ? x : expm1f(x); }
constexpr float kSeluAlpha = 1.67326324f, kSeluScale = 1.05070098f;
STOKER_HOST_DEVICE inline float selu_value(float x) {
  return x > 0.0f ? kSeluScale * x : kSeluScale * kSeluAlpha * expm1f(x);
}
STOKER_HOST_DEVICE inline float gelu_value(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
STOKER_HOST_DEVICE inline float softplus_value(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
STOKER_HOST_DEVICE inline float hard_sigmoid_value(float x) { return fminf(fmaxf(0.2f * x + 0.5f, 0.0f), 1.0f); }
STOKER_HOST_DEVICE inline float hard_swish_value(float x) {
  return x * (fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f));
}

// Element-wise activations (Softmax is a row operation and is applied separately: identity here).
STOKER_HOST_DEVICE inline float apply_act(float x, const ActParams& a) {
  switch (static_cast<ActKind>(a.kind)) {
    case ActKind::ReLU:
      return a.plain_relu ? relu_value(x, a.max_value) : relu_value(x, a.threshold, a.negative_slope, a.max_value);
    case ActKind::Sigmoid: return sigmoid_value(x);
    case ActKind::Swish: return swish_value(x);
    case ActKind::Tanh: return tanh_value(x);
    case ActKind::Elu: return elu_value(x);
    case ActKind::Selu: return selu_value(x);
    case ActKind::Gelu: return gelu_value(x);
    case ActKind::Softplus: return softplus_value(x);
    case ActKind::HardSigmoid: return hard_sigmoid_value(x);
    case ActKind::HardSwish: return hard_swish_value(x);
    case ActKind::Linear:
    case ActKind::Softmax: return x;
  }
  return x;
}

// ---- gradients: dL/dv from dy = dL/dy at the pre-activation v whose activation is y ---------------
// Keras' ReLU(threshold t, negative_slope a, max_value m) as tf_keras' backend.relu composes it,
// with TensorFlow's gradient of each part at the kinks:
//   - the positive part relu(x) / relu6(x) / x * (x > t), then clip_by_value(·, 0, m): 1 for
//     t < x < m; at x == m, relu6 (t = 0, m = 6) gives 0 (Relu6Grad: 0 < x < 6) while
//     clip_by_value gives 1 (minimum's gradient passes on ties);
//   - the negative part -a * relu(t - x): a for x < t; at x == t, 0, except for the plain leaky
//     ReLU (t = 0, m = inf), which is tf.nn.leaky_relu and gives a (LeakyReluGrad: x > 0 ? 1 : a).
struct ReluKinks {
  float t, a, m;
  bool clip_inclusive, leaky_at_t;
  // The plain ReLU (ReluGrad: x > 0), whose gradient needs none of the above.
  STOKER_HOST_DEVICE bool plain() const { return t == 0.0f && a == 0.0f && m == INFINITY; }
};
STOKER_HOST_DEVICE inline ReluKinks relu_kinks(float t, float a, float m) {
  return {t, a, m, !(t == 0.0f && m == 6.0f), a != 0.0f && t == 0.0f && m == INFINITY};
}
STOKER_HOST_DEVICE inline float relu_derivative(float v, const ReluKinks& k) {
  if (v > k.t) return v < k.m || (v == k.m && k.clip_inclusive) ? 1.0f : 0.0f;
  if (v < k.t || k.leaky_at_t) return k.a;
  return 0.0f;
}
STOKER_HOST_DEVICE inline float plain_relu_backward(float v, float dy) { return v > 0.0f ? dy : 0.0f; }
STOKER_HOST_DEVICE inline float relu_backward(float v, float dy, const ReluKinks& k) {
  return dy * relu_derivative(v, k);
}
STOKER_HOST_DEVICE inline float sigmoid_backward(float y, float dy) { return dy * y * (1.0f - y); }
STOKER_HOST_DEVICE inline float swish_backward(float v, float dy) {
  const float s = sigmoid_value(v);
  return dy * s * (1.0f + v * (1.0f - s));
}
STOKER_HOST_DEVICE inline float tanh_backward(float y, float dy) { return dy * (1.0f - y * y); }
STOKER_HOST_DEVICE inline float elu_backward(float v, float dy) { return v > 0.0f ? dy : dy * expf(v); }  // EluGrad
STOKER_HOST_DEVICE inline float selu_backward(float v, float dy) {
  return dy * (v > 0.0f ? kSeluScale : kSeluScale * kSeluAlpha * expf(v));
}
STOKER_HOST_DEVICE inline float gelu_backward(float v, float dy) {  // Φ(v) + v φ(v)
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  return dy * (0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v));
}
STOKER_HOST_DEVICE inline float softplus_backward(float v, float dy) { return dy * sigmoid_value(v); }
// clip_by_value(0.2 v + 0.5, 0, 1): passes on the bounds.
STOKER_HOST_DEVICE inline float hard_sigmoid_backward(float v, float dy) {
  const float u = 0.2f * v + 0.5f;
  return u >= 0.0f && u <= 1.0f ? 0.2f * dy : 0.0f;
}
// v · relu6(v + 3) / 6, relu6's gradient for 0 < v + 3 < 6.
STOKER_HOST_DEVICE inline float hard_swish_backward(float v, float dy) {
  const float u = v + 3.0f;
  const float r6 = min_of(max_of(u, 0.0f), 6.0f);
  return dy * (r6 + (u > 0.0f && u < 6.0f ? v : 0.0f)) * (1.0f / 6.0f);
}

// Softmax is not element-wise: its gradient is the row's (backward_math.hpp's softmax_row_dot).
STOKER_HOST_DEVICE inline float act_backward(float v, float y, float dy, const ActParams& a) {
  switch (static_cast<ActKind>(a.kind)) {
    case ActKind::ReLU: {
      const ReluKinks k = relu_kinks(a.threshold, a.negative_slope, a.max_value);
      return k.plain() ? plain_relu_backward(v, dy) : relu_backward(v, dy, k);
    }
    case ActKind::Sigmoid: return sigmoid_backward(y, dy);
    case ActKind::Swish: return swish_backward(v, dy);
    case ActKind::Tanh: return tanh_backward(y, dy);
    case ActKind::Elu: return elu_backward(v, dy);
    case ActKind::Selu: return selu_backward(v, dy);
    case ActKind::Gelu: return gelu_backward(v, dy);
    case ActKind::Softplus: return softplus_backward(v, dy);
    case ActKind::HardSigmoid: return hard_sigmoid_backward(v, dy);
    case ActKind::HardSwish: return hard_swish_backward(v, dy);
    case ActKind::Linear:
    case ActKind::Softmax: return dy;
  }
  return dy;
}

}  // namespace stoker::trainer::ops
