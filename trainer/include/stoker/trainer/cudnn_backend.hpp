// The cuDNN backend: runs a frozen layer graph on the GPU, NHWC, half precision storage (fp16 or
// bf16) with float32 accumulation, computing what the CPU backend computes.
//
//   CudnnBackendOptions opt;  opt.max_batch = 256;
//   auto gpu = make_cudnn_backend(backbone.graph(), opt);        // plans, uploads, allocates once
//   backbone.set_backend(gpu);                                   // host floats in, host Tensor out
//   auto out = gpu->forward_device(batch_on_device, DType::F16, n, stream);  // device input
//   // out[0].data: n × 1280 floats on the device, valid until the next call on this backend
//
// With the GPU feed (its stage must produce NHWC F32/F16/BF16 with the model's preprocessing):
//   b->wait_on(stream);  auto out = gpu->forward_device(b->data(), b->dtype(), b->size(), stream);
//
// Everything (weights, activation buffers, cuDNN workspace, output buffers) is allocated when the
// backend is made, for options.max_batch samples; forward calls allocate no device memory.
// Calls are serialised by the backend (one set of activation buffers): each call's GPU work is
// ordered after the previous call's, on the GPU (an event), without blocking the host.
//
// This header compiles without CUDA; make_cudnn_backend() then throws CudaError ("built without
// CUDA"). Without a usable GPU it throws CudaError saying why. Layers it cannot run throw
// InvalidArgument naming the layer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/cuda.hpp>   // StreamHandle (== cudaStream_t)
#include <stoker/core/image.hpp>  // DType
#include <stoker/trainer/backend.hpp>

namespace stoker::trainer {

struct CudnnBackendOptions {
  int max_batch = 256;            // largest batch forward calls may pass
  DType storage = DType::F16;     // F16 or BF16: activations and weights on the GPU
  bool fold_batch_norm = true;    // as in the CPU backend
  bool fuse_activations = true;   // activation in the producing op's epilogue
  bool fuse_residual_add = true;  // a 2-input Add in the epilogue of the conv producing an input
  bool cudnn_fused_relu = true;   // plain ReLU convs through cudnnConvolutionBiasActivationForward
                                  // (falls back to the own epilogue when cuDNN refuses)
  bool cudnn_depthwise = false;   // depthwise convs as cuDNN grouped convs with weights in the
                                  // storage type, instead of the own kernel (float32 weights;
                                  // ~4x smaller error on MobileNetV2, see docs/trainer.md)
  std::size_t workspace_limit = std::size_t{256} << 20;  // cuDNN workspace bytes at most
  int device = -1;                                       // -1: the calling thread's current device
};

// One graph output on the device: float32, row-major, {batch, ...per-sample shape}.
struct DeviceTensor {
  const float* data = nullptr;
  std::vector<int> shape;
};

class CudnnBackend : public Backend {
 public:
  // Host floats in (NHWC, the graph's input shape), host tensors out; synchronous (it waits for
  // its own stream). Batches larger than max_batch run in chunks of max_batch.
  std::vector<Tensor> forward(const float* input, int batch) const override = 0;

  // Device input already on the GPU: batch × H × W × C values of `dtype` (F32, F16 or BF16; when
  // it equals the storage type the input is read in place). Enqueued on `stream`, nothing waits on
  // the host; the input must stay valid until that work is done. The returned views point into the
  // backend's own output buffers, which the next call overwrites: that call is ordered after this
  // call's own work, not after what the caller enqueues later. So read the views on `stream`
  // before calling again on the same stream; before a call on another stream, make sure the reads
  // are done (an event recorded after them that the next call's stream waits on, or a sync).
  virtual std::vector<DeviceTensor> forward_device(const void* device_input, DType dtype, int batch,
                                                   StreamHandle stream) const = 0;

  virtual int max_batch() const = 0;
  // Device bytes held: weights, activation buffers, workspace, input/output buffers.
  virtual std::size_t device_bytes() const = 0;
  // The plan, one line per GPU op (after fusion/folding), with cuDNN's chosen algorithms.
  virtual std::string describe() const = 0;
};

// True when this build has the cuDNN backend (CUDA and cuDNN found at configure time, or its host
// stand-in on the emulated device of a STOKER_CUDA_EMULATION build); without it
// make_cudnn_backend() always throws CudaError. Says nothing about a device being present.
bool built_with_cudnn() noexcept;
// The cuDNN library this process loads and the CUDA runtime it is for, or why there is none.
std::string cudnn_description();

// Compiles `graph` for the GPU: lowers it (folding, fusion, padding), uploads the weights in the
// storage type, chooses cuDNN algorithms for max_batch and allocates every buffer once.
std::shared_ptr<CudnnBackend> make_cudnn_backend(const Graph& graph, const CudnnBackendOptions& options = {});

}  // namespace stoker::trainer
