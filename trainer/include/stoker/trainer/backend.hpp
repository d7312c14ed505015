// The seam between a layer graph and the code that runs it. A backend compiles a Graph once
// (folds BatchNormalization into the preceding convolution, packs weights, fuses activations) and
// then runs batches through it. The CPU backend is the reference; a cuDNN backend implements the
// same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <stoker/trainer/graph.hpp>
#include <stoker/trainer/tensor.hpp>

namespace stoker::trainer {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Runs `batch` samples laid out NHWC (float32, the graph's input shape) and returns one tensor per
  // graph output, each {batch, ...out_shape}. Thread-safe: a compiled backend holds no per-call state.
  virtual std::vector<Tensor> forward(const float* input, int batch) const = 0;
};

struct CpuBackendOptions {
  bool fold_batch_norm = true;   // fold inference-mode BatchNormalization into the conv/dense before it
  bool fuse_activations = true;  // apply a following ReLU/LeakyReLU/Activation in the conv epilogue
  int max_threads = 0;           // 0: oneTBB's default (all cores)
};

// float32 NHWC, multi-threaded with oneTBB. Throws InvalidArgument for a graph it cannot run.
std::unique_ptr<Backend> make_cpu_backend(const Graph& graph, const CpuBackendOptions& options = {});

// max |got - ref| / max |ref| (finite values; at least 1e-6 below): an error relative to the
// reference's scale. Infinite when the sizes differ or a value is finite on one side only.
double relative_error(std::span<const float> got, std::span<const float> ref);

// How far `candidate` is from the CPU reference: both run `samples` deterministic test inputs
// (smooth patterns plus noise in [-1, 1], from `seed`) and the result is, over all outputs,
// max |candidate - reference| / max |reference|. A NaN or infinity on one side only, or a shape
// that differs, is an infinite error. A cheap check that a backend which has never run on this
// machine computes the graph (layout or indexing bugs are off by O(1); half precision ~1e-3).
double relative_error_to_cpu(const Graph& graph, const Backend& candidate, int samples = 2, std::uint64_t seed = 1);

}  // namespace stoker::trainer
