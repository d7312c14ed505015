// The CPU's executor of a training lowering (plan/train_executor.hpp): the CPU backend's forward
// kernels (forward.hpp) keeping every slot's value, then its backward kernels (backward.hpp) in
// reverse order, float32 throughout. Buffers are held for the largest batch seen.
#include <algorithm>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "backward.hpp"
#include "forward.hpp"
#include "plan/train_executor.hpp"

namespace stoker::trainer::cpu {
namespace {

using detail::OpKind;
using detail::TrainLowering;
using detail::TrainStep;

// f(first_row, rows) over `rows` rows of `width` values, in parallel blocks of whole rows (the
// softmax's rows stay whole).
template <typename F>
void in_row_blocks(std::size_t rows, int width, const F& f) {
  const std::size_t block = std::max<std::size_t>(1, 16384 / static_cast<std::size_t>(std::max(width, 1)));
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, block),
                    [&](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.size()); });
}

class CpuTrainExecutor final : public detail::TrainExecutor {
 public:
  explicit CpuTrainExecutor(const TrainLowering& lowering) : l_(lowering) {
    // Every slot's value is kept, except the input's (the caller's) and the value before an
    // Activation layer's activation, which is that layer's input.
    has_value_.assign(l_.slot_size.size(), true);
    has_value_[static_cast<std::size_t>(l_.input_slot)] = false;
    for (const TrainStep& s : l_.steps)
      if (s.activation_op && s.pre_slot >= 0) has_value_[static_cast<std::size_t>(s.pre_slot)] = false;
    values_.resize(l_.slot_size.size());
    grads_.resize(l_.slot_size.size());
    set_weights(lowering);
  }

  std::string name() const override { return "cpu"; }

  std::size_t memory_bytes(int batch) const override {
    std::size_t values = 0;
    for (std::size_t i = 0; i < l_.slot_size.size(); ++i)
      values += l_.slot_size[i] * ((has_value_[i] ? 1 : 0) + (l_.needs_gradient[i] ? 1 : 0));
    return values * static_cast<std::size_t>(std::max(batch, 0)) * sizeof(float);
  }

  void set_weights(const TrainLowering& lowering) override {
    l_.steps = lowering.steps;
    ops_.clear();
    for (const TrainStep& s : l_.steps) {
      detail::LoweredOp op = *s.op;
      if (s.activation_op) op.act = s.act;  // an Activation layer is its activation
      ops_.push_back(prepare_op(std::move(op), l_.slot_size[static_cast<std::size_t>(s.op->out)]));
    }
  }

  const float* forward(const float* x, int batch, const std::vector<const float*>& masks) override;
  void backward(const float* doutput, std::vector<detail::OpGradients>& gradients) override;

 private:
  void reserve(int nb) {
    if (nb <= capacity_) return;
    for (std::size_t s = 0; s < l_.slot_size.size(); ++s) {
      if (l_.slot_size[s] == 0) continue;
      if (has_value_[s]) values_[s].assign(l_.slot_size[s] * static_cast<std::size_t>(nb), 0.0f);
      if (l_.needs_gradient[s]) grads_[s].assign(l_.slot_size[s] * static_cast<std::size_t>(nb), 0.0f);
    }
    capacity_ = nb;
  }
  std::size_t values_of(int slot) const { return l_.slot_size[static_cast<std::size_t>(slot)] * batch_; }
  const float* value(int slot) const {
    return slot == l_.input_slot ? input_ : values_[static_cast<std::size_t>(slot)].data();
  }
  void backward_activation(const TrainStep& s, const float*& dout, const float*& value);
  void zero_gradients();

  TrainLowering l_;
  std::vector<Op> ops_;  // per step: its forward, prepared
  std::vector<bool> has_value_;
  std::vector<std::vector<float>> values_, grads_;
  std::vector<const float*> masks_;  // of the last forward
  const float* input_ = nullptr;     // the last forward's x: the steps reading it need it in backward
  std::size_t batch_ = 0;
  int capacity_ = 0;
};

const float* CpuTrainExecutor::forward(const float* x, int batch, const std::vector<const float*>& masks) {
  reserve(batch);
  batch_ = static_cast<std::size_t>(batch);
  input_ = x;
  masks_ = masks;
  std::vector<const float*> slot(l_.slot_size.size(), nullptr);
  slot[static_cast<std::size_t>(l_.input_slot)] = x;
  std::vector<const float*> ins;
  for (std::size_t k = 0; k < l_.steps.size(); ++k) {
    const TrainStep& s = l_.steps[k];
    ins.clear();
    for (int i : s.op->in) ins.push_back(slot[static_cast<std::size_t>(i)]);
    float* out = values_[static_cast<std::size_t>(s.op->out)].data();
    const std::size_t n = values_of(s.op->out);
    if (s.dropout) {
      const float* in = ins[0];
      const float* mask = masks.at(k);
      in_row_blocks(n, 1, [&](std::size_t at, std::size_t count) {
        for (std::size_t i = at; i < at + count; ++i) out[i] = in[i] * mask[i];
      });
    } else if (s.pre_slot >= 0 && !s.activation_op) {  // keep the value before the op's own activation
      float* pre = values_[static_cast<std::size_t>(s.pre_slot)].data();
      run_op(ops_[k], ins, pre, batch);
      const int width = s.op->oc > 0 ? s.op->oc : 1;
      in_row_blocks(n / static_cast<std::size_t>(width), width, [&](std::size_t row, std::size_t rows) {
        const std::size_t at = row * static_cast<std::size_t>(width);
        std::memcpy(out + at, pre + at, rows * static_cast<std::size_t>(width) * sizeof(float));
        apply_act(out + at, rows, width, s.act);
      });
    } else {
      run_op(ops_[k], ins, out, batch);
    }
    slot[static_cast<std::size_t>(s.op->out)] = out;
  }
  return slot[static_cast<std::size_t>(l_.output_slot)];
}

void CpuTrainExecutor::zero_gradients() {
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    if (!l_.needs_gradient[i]) continue;
    float* g = grads_[i].data();
    in_row_blocks(l_.slot_size[i] * batch_, 1, [g](std::size_t at, std::size_t n) { std::fill_n(g + at, n, 0.0f); });
  }
}

// Through step s's own activation: dout becomes the gradient before it, value the value before it.
void CpuTrainExecutor::backward_activation(const TrainStep& s, const float*& dout, const float*& value) {
  const auto pre = static_cast<std::size_t>(s.pre_slot);
  const float* before = s.activation_op ? this->value(s.op->in.at(0)) : values_[pre].data();
  const int width = s.op->oc > 0 ? s.op->oc : 1;
  float* dpre = grads_[pre].data();
  const float* dy = dout;
  const float* y = value;
  in_row_blocks(values_of(s.op->out) / static_cast<std::size_t>(width), width, [&](std::size_t row, std::size_t rows) {
    const std::size_t at = row * static_cast<std::size_t>(width);
    activation_backward(s.act, before + at, y + at, dy + at, dpre + at, rows, width);
  });
  dout = dpre;
  value = before;
}

void CpuTrainExecutor::backward(const float* doutput, std::vector<detail::OpGradients>& gradients) {
  zero_gradients();
  std::memcpy(grads_[static_cast<std::size_t>(l_.output_slot)].data(), doutput,
              values_of(l_.output_slot) * sizeof(float));
  std::vector<const float*> ins;
  std::vector<float*> dins;
  for (std::size_t k = l_.steps.size(); k-- > 0;) {
    const TrainStep& s = l_.steps[k];
    const float* dout = grads_[static_cast<std::size_t>(s.op->out)].data();
    const float* value = values_[static_cast<std::size_t>(s.op->out)].data();
    if (s.pre_slot >= 0) backward_activation(s, dout, value);
    if (s.dropout) {
      const auto in0 = static_cast<std::size_t>(s.op->in.at(0));
      if (!l_.needs_gradient[in0]) continue;
      float* din = grads_[in0].data();
      const float* mask = masks_.at(k);
      in_row_blocks(values_of(s.op->out), 1, [&](std::size_t at, std::size_t count) {
        for (std::size_t i = at; i < at + count; ++i) din[i] += dout[i] * mask[i];
      });
      continue;
    }
    ins.clear();
    dins.clear();
    for (int i : s.op->in) {
      const auto slot = static_cast<std::size_t>(i);
      ins.push_back(this->value(i));
      dins.push_back(l_.needs_gradient[slot] ? grads_[slot].data() : nullptr);
    }
    backward_op(*s.op, ins, value, dout, dins, s.wants_gradients() ? &gradients.at(k) : nullptr,
                static_cast<int>(batch_));
  }
}

}  // namespace

std::unique_ptr<detail::TrainExecutor> make_train_executor(const detail::TrainLowering& lowering) {
  return std::make_unique<CpuTrainExecutor>(lowering);
}

}  // namespace stoker::trainer::cpu
