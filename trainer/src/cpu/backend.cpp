// The CPU backend: float32 NHWC, oneTBB. Compiling a graph is the shared lowering (lowering.hpp:
// frozen BatchNormalization folded into the convolution/dense before it, a following activation
// fused into its epilogue, Dropout/Flatten as aliases) and packing the weights; the kernels are in
// cpu/forward.cpp. forward() runs chunks of samples in parallel; each op also parallelises over rows,
// so small batches use every core too.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <stoker/trainer/backend.hpp>

#include "forward.hpp"
#include "graph/lowering.hpp"

namespace stoker::trainer {
namespace {

using cpu::Op;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Graph& g, const CpuBackendOptions& opt) : options_(opt) { compile(g); }

  std::string name() const override { return "cpu"; }

  std::vector<Tensor> forward(const float* input, int batch) const override {
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      std::vector<int> shape = output_shapes_[i];
      shape.insert(shape.begin(), batch);
      outs.emplace_back(shape);
    }
    if (batch == 0) return outs;
    auto run = [&] {
      const int threads = tbb::this_task_arena::max_concurrency();
      // Whole samples per task when there are enough of them (better locality); otherwise one
      // chunk and the ops' own row parallelism.
      const int chunk = batch >= 2 * threads ? std::max(1, std::min(4, batch / (4 * threads))) : batch;
      const int chunks = (batch + chunk - 1) / chunk;
      tbb::parallel_for(0, chunks, [&](int ci) {
        const int b0 = ci * chunk;
        run_chunk(input + static_cast<std::size_t>(b0) * input_size_, b0, std::min(chunk, batch - b0), outs);
      });
    };
    if (arena_) arena_->execute(run);
    else run();
    return outs;
  }

 private:
  CpuBackendOptions options_;
  std::vector<Op> ops_;
  int input_slot_ = -1;
  std::size_t input_size_ = 0;
  std::vector<int> outputs_;  // value slots
  std::vector<std::vector<int>> output_shapes_;
  std::vector<std::size_t> slot_size_;  // values per sample
  std::vector<int> slot_uses_;          // ops reading each slot (+1 per graph output)
  std::unique_ptr<tbb::task_arena> arena_;

  void compile(const Graph& g) {
    if (options_.max_threads > 0) arena_ = std::make_unique<tbb::task_arena>(options_.max_threads);
    detail::LoweringOptions lo;
    lo.backend = "cpu backend";
    lo.fold_batch_norm = options_.fold_batch_norm;
    lo.fuse_activations = options_.fuse_activations;
    detail::LoweredGraph lowered = detail::lower(g, lo);
    for (auto& op : lowered.ops) {
      const std::size_t out_size = lowered.slot_size[static_cast<std::size_t>(op.out)];
      ops_.push_back(cpu::prepare_op(std::move(op), out_size));
    }
    input_slot_ = lowered.input_slot;
    input_size_ = lowered.slot_size[static_cast<std::size_t>(input_slot_)];
    outputs_ = std::move(lowered.outputs);
    output_shapes_ = std::move(lowered.output_shapes);
    slot_size_ = std::move(lowered.slot_size);
    slot_uses_.assign(slot_size_.size(), 0);
    for (const auto& op : ops_)
      for (int s : op.in) ++slot_uses_[static_cast<std::size_t>(s)];
    for (int s : outputs_) ++slot_uses_[static_cast<std::size_t>(s)];
  }

  // Activation buffers come from a per-thread free list, so steady-state forward passes do not
  // allocate (or page-fault fresh memory) per op.
  struct BufferPool {
    std::vector<std::pair<std::size_t, std::unique_ptr<float[]>>> free;  // (capacity, buffer)
    std::pair<std::size_t, std::unique_ptr<float[]>> take(std::size_t n) {
      std::size_t best = free.size();
      for (std::size_t i = 0; i < free.size(); ++i)
        if (free[i].first >= n && (best == free.size() || free[i].first < free[best].first)) best = i;
      if (best == free.size()) return {n, std::unique_ptr<float[]>(new float[n])};
      auto b = std::move(free[best]);
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
      return b;
    }
    void give(std::pair<std::size_t, std::unique_ptr<float[]>> b) {
      if (!b.second) return;
      free.push_back(std::move(b));
      if (free.size() > 64) free.erase(free.begin());  // bound what an idle thread keeps
    }
  };

  void run_chunk(const float* input, int b0, int nb, std::vector<Tensor>& outs) const {
    thread_local BufferPool pool;
    std::vector<std::pair<std::size_t, std::unique_ptr<float[]>>> buffers(slot_size_.size());
    std::vector<const float*> values(slot_size_.size(), nullptr);
    std::vector<int> uses = slot_uses_;
    values[static_cast<std::size_t>(input_slot_)] = input;
    std::vector<const float*> ins;
    for (const Op& op : ops_) {
      auto& buf = buffers[static_cast<std::size_t>(op.out)];
      buf = pool.take(op.out_size * static_cast<std::size_t>(nb));
      ins.clear();
      for (int s : op.in) ins.push_back(values[static_cast<std::size_t>(s)]);
      cpu::run_op(op, ins, buf.second.get(), nb);
      values[static_cast<std::size_t>(op.out)] = buf.second.get();
      for (int s : op.in)
        if (--uses[static_cast<std::size_t>(s)] == 0) pool.give(std::move(buffers[static_cast<std::size_t>(s)]));
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      const float* src = values[static_cast<std::size_t>(outputs_[i])];
      const std::size_t per = slot_size_[static_cast<std::size_t>(outputs_[i])];
      std::memcpy(outs[i].data.data() + static_cast<std::size_t>(b0) * per, src,
                  per * static_cast<std::size_t>(nb) * sizeof(float));
    }
    for (auto& b : buffers) pool.give(std::move(b));
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Graph& graph, const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(graph, options);
}

}  // namespace stoker::trainer
