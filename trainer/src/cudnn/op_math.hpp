// Internal: per-element math shared by the cuDNN backend's CUDA kernels and its host executor of
// the plan (run_plan_host), so both apply activations alike. Plain values, passed by value.
#pragma once

#include <cmath>

#include <stoker/pipeline/convert.hpp>  // STOKER_HOST_DEVICE
#include <stoker/trainer/graph.hpp>

namespace stoker::trainer::cudnn {

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

// Element-wise activations (Softmax is a row operation and is applied separately: identity here).
// Same formulas as the CPU backend's apply_act (cpu_ops.cpp).
STOKER_HOST_DEVICE inline float apply_act(float x, const ActParams& a) {
  switch (static_cast<ActKind>(a.kind)) {
    case ActKind::ReLU:
      if (a.plain_relu) return fminf(fmaxf(x, 0.0f), a.max_value);
      return x > a.threshold ? fminf(x, a.max_value) : a.negative_slope * (x - a.threshold);
    case ActKind::Sigmoid: return 1.0f / (1.0f + expf(-x));
    case ActKind::Swish: return x / (1.0f + expf(-x));
    case ActKind::Tanh: return tanhf(x);
    case ActKind::Linear:
    case ActKind::Softmax: return x;
  }
  return x;
}

}  // namespace stoker::trainer::cudnn
