// The GPU trainer's plan (train_plan.hpp): the training lowering's ops as GPU ops, each slot in a
// buffer of its own. Host code, no CUDA.
#include "train_plan.hpp"

#include <algorithm>

#include <stoker/core/error.hpp>

namespace stoker::trainer::cudnn {

namespace {

PlanOptions training_options() {
  PlanOptions po;
  po.fold_batch_norm = false;
  po.fuse_activations = false;
  po.fuse_residual_add = false;
  po.cudnn_depthwise = false;  // the own depthwise kernel: float32 weights, its backward ours too
  return po;
}

// An element-wise op of `op`'s output geometry with no parameters.
Op elementwise(const detail::LoweredOp& op, OpType type) {
  Op e;
  e.type = type;
  e.name = op.name;
  e.kind = detail::OpKind::Activation;
  e.h = op.oh, e.w = op.ow, e.c = std::max(op.oc, 1), e.oh = op.oh, e.ow = op.ow, e.oc = e.c, e.rows = op.rows;
  return e;
}

}  // namespace

std::vector<float> from_krsc(const std::vector<float>& krsc, int out_channels) {
  const std::size_t oc = static_cast<std::size_t>(out_channels);
  const std::size_t k = krsc.size() / oc;
  std::vector<float> keras(krsc.size());
  for (std::size_t o = 0; o < oc; ++o)
    for (std::size_t r = 0; r < k; ++r) keras[r * oc + o] = krsc[o * k + r];
  return keras;
}

TrainPlan plan_training(const TrainLowering& lowering) {
  const std::vector<TrainStep>& steps = lowering.steps;
  const std::vector<std::size_t>& slot_size = lowering.slot_size;
  const int input_slot = lowering.input_slot, output_slot = lowering.output_slot;
  TrainPlan t;
  Plan& p = t.plan;
  p.slot_size = slot_size;
  p.input_slot = input_slot;
  p.input_shape = {static_cast<int>(slot_size.at(static_cast<std::size_t>(input_slot)))};
  p.outputs = {output_slot};
  p.output_shapes = {{static_cast<int>(slot_size.at(static_cast<std::size_t>(output_slot)))}};
  t.output_slot = output_slot;
  t.needs_gradient = lowering.needs_gradient;
  t.mask_slot.assign(steps.size(), -1);
  const PlanOptions po = training_options();
  auto added = [&](int step, bool main, std::size_t from) {
    for (std::size_t k = from; k < p.ops.size(); ++k) {
      t.step_of.push_back(step);
      t.main_op.push_back(main);
    }
  };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const TrainStep& s = steps[k];
    const detail::LoweredOp& op = *s.op;
    const int step = static_cast<int>(k);
    const std::size_t before = p.ops.size();
    if (s.activation_op) {
      Op a = elementwise(op, OpType::Affine);
      a.in = {op.in.at(0)};
      a.out = op.out;
      a.act = s.act;
      p.ops.push_back(std::move(a));
      added(step, true, before);
      continue;
    }
    if (s.dropout) {
      const int mask = static_cast<int>(p.slot_size.size());
      p.slot_size.push_back(slot_size.at(static_cast<std::size_t>(op.out)));
      t.needs_gradient.push_back(false);
      t.mask_slot[k] = mask;
      Op m = elementwise(op, OpType::Mul);
      m.in = {op.in.at(0), mask};
      m.out = op.out;
      p.ops.push_back(std::move(m));
      added(step, true, before);
      continue;
    }
    detail::LoweredOp main = op;
    if (!s.act.is_linear()) main.out = s.pre_slot;
    append_gpu_ops(p.ops, std::move(main), po);
    added(step, true, before);
    if (!s.act.is_linear()) {
      const std::size_t at = p.ops.size();
      Op a = elementwise(op, OpType::Affine);
      a.in = {s.pre_slot};
      a.out = op.out;
      a.act = s.act;
      p.ops.push_back(std::move(a));
      added(step, false, at);
    }
  }
  // Every slot its own buffer: backward reads every value.
  p.slot_buffer.resize(p.slot_size.size());
  p.buffer_size = p.slot_size;
  for (std::size_t s = 0; s < p.slot_size.size(); ++s) {
    p.slot_buffer[s] = static_cast<int>(s);
    t.max_values = std::max(t.max_values, p.slot_size[s]);
  }
  for (const Op& op : p.ops) {
    if (op.type != OpType::Conv || op.depthwise_kernel) continue;
    const std::size_t in = static_cast<std::size_t>(op.rows) * op.padded_h() * op.padded_w() * op.c;
    t.max_conv_input = std::max(t.max_conv_input, in);
    if (op.explicit_pad) p.scratch_size = std::max(p.scratch_size, in);
  }
  return t;
}

void refresh_weights(TrainPlan& plan, const std::vector<TrainStep>& steps) {
  const PlanOptions po = training_options();
  for (std::size_t k = 0; k < plan.plan.ops.size(); ++k) {
    Op& op = plan.plan.ops[k];
    if (!plan.main_op[k]) continue;
    const detail::LoweredOp& src = *steps.at(static_cast<std::size_t>(plan.step_of[k])).op;
    if (src.weights.empty() && src.bias.empty() && src.scale.empty()) continue;
    std::vector<Op> fresh;
    append_gpu_ops(fresh, src, po);  // the layouts lower_graph gives (KRSC)
    op.weights = std::move(fresh.at(0).weights);
    op.bias = std::move(fresh[0].bias);
    op.scale = std::move(fresh[0].scale);
  }
}

}  // namespace stoker::trainer::cudnn
