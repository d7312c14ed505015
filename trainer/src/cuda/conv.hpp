// Internal: the cuDNN convolution calls of the cuDNN backend, behind a small interface so that the
// deprecated legacy API stays in one translation unit (conv.cpp) and no cuDNN type leaks out.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <stoker/core/cuda.hpp>
#include <stoker/core/image.hpp>

#include "plan/plan.hpp"
#include "twin/conv_reference.hpp"

namespace stoker::trainer::cudnn::gpu {

// A cuDNN handle (cudnnCreate / cudnnDestroy), move-only.
class CudnnHandle {
 public:
  CudnnHandle();
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  void set_stream(StreamHandle stream);
  StreamHandle stream() const noexcept { return stream_; }
  void* get() const noexcept { return h_; }

 private:
  void* h_ = nullptr;
  StreamHandle stream_ = nullptr;
};

// cuDNN offers no algorithm for a convolution's configuration (within the workspace): the one
// failure Conv answers by padding channels; every other cuDNN failure is a CudaError as it is.
class ConvNotSupported : public CudaError {
 public:
  static constexpr int kStatus = 3000;  // CUDNN_STATUS_NOT_SUPPORTED
  explicit ConvNotSupported(const std::string& what) : CudaError(what, kStatus) {}
};

// cudnnGetVersion() as "9.19.0".
std::string cudnn_version_string();

// The cuDNN library this process loaded, for reports: "cuDNN 9.19.0 (compiled against 9.19.0), for
// CUDA runtime 13.0".
std::string cudnn_environment();

// Which small-channel convolutions cuDNN runs on the current GPU with NHWC values of `storage`
// (F16 or BF16; float32 accumulation, as the backend asks): C, K in {1, 2, 3, 4, 5, 8, 16}, plain,
// and grouped with groups = C = K (depthwise); 8 images of 8x8, a 3x3 kernel, padding 1. One line
// per configuration with the status of forward, backward-data and backward-filter: "ok" with the
// algorithm that ran, or cuDNN's status name. Throws CudaError when a status says cuDNN itself
// cannot work on this machine (a sub-library missing, an incompatible driver or runtime, an
// architecture it was not built for).
std::vector<std::string> probe_small_channel_convolutions(CudnnHandle& handle, DType storage);

// One convolution as cuDNN runs it (conv.cpp; emulated_conv.cpp on the emulated device).
class CudnnConv {
 public:
  // Creates the descriptors, checks cuDNN's output size against the plan's (a mismatch throws
  // Error naming `name`) and picks the fastest algorithm by cuDNN's heuristics for max_images
  // within workspace_limit bytes (ConvNotSupported when there is none). fused_relu: run through
  // cudnnConvolutionBiasActivationForward with a ReLU (the bias in the storage type).
  CudnnConv(CudnnHandle& handle, std::string name, const ConvGeometry& g, int max_images, bool fused_relu,
            std::size_t workspace_limit);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // Measures every algorithm on real buffers at max_images (cudnnFindConvolutionForwardAlgorithmEx)
  // and keeps the fastest that fits workspace_size; keeps the heuristic choice when cuDNN cannot.
  // x, y: buffers for max_images; their contents are overwritten / irrelevant.
  void find(CudnnHandle& handle, const void* x, const void* w, void* y, void* workspace, std::size_t workspace_size);

  std::size_t workspace_bytes() const noexcept { return max_workspace_; }  // for max_images
  bool fused() const noexcept { return fused_; }
  std::string describe() const;

  // y = conv(x) (alpha 1, beta 0), or with fused: y = relu(conv(x) + z_scale * z + bias), z may be
  // null. Throws CudaError. The algorithm for `images` is chosen on its first use within
  // workspace_size (the backend's buffer), cached after. When cuDNN refuses the fused call (bad
  // parameter / not supported), the conv switches to the plain path for good and computes y =
  // conv(x) only: callers check fused() after run() to know whether the epilogue is theirs.
  void run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z, float z_scale,
           const void* bias, void* workspace, std::size_t workspace_size);
  // Training (cudnn_trainer.cpp). prepare_backward() chooses the backward-data and backward-filter
  // algorithms for max_images (deterministic ones first) and returns the workspace bytes the
  // convolution needs in all (forward included); CudaError when cuDNN offers none within the limit.
  // dx = the gradient of the input from dy (beta 0), dw = the gradient of the weights summed over
  // the images (beta 0), in the storage type. Another batch size chooses on its first call.
  std::size_t prepare_backward(CudnnHandle& handle, std::size_t workspace_limit);
  void backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void* workspace,
                     std::size_t workspace_size);
  void backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw, void* workspace,
                       std::size_t workspace_size);
  // False when a backward algorithm in use (for any batch size) is not deterministic: cuDNN
  // offered no deterministic one within the workspace, or refused those it offered.
  bool backward_deterministic() const;

  // The fused path once; false (and the conv switches to the plain path) when cuDNN refuses it.
  bool try_fused(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* bias,
                 void* workspace, std::size_t workspace_size);

 private:
  // Descriptors and an algorithm for a batch size met for the first time (nothing kept on failure).
  void prepare_batch(CudnnHandle& handle, int images, std::size_t workspace_size);
  void choose_backward(CudnnHandle& handle, int images, std::size_t workspace_size);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  ConvGeometry g_;
  bool fused_ = false;
  std::size_t max_workspace_ = 0, max_backward_workspace_ = 0;
  std::vector<std::string> refusals_;  // what cuDNN refused and the fallback taken, for describe()
  int max_images_ = 0;
  float measured_ms_ = -1.0f;
};

// A convolution of the backend and the trainer (the interface of CudnnConv). When cuDNN offers no
// algorithm for its channel counts — fp16/bf16 NHWC convolutions may want C and K multiples of 8,
// which a first convolution (C 3), a squeeze-excitation 1x1 or a small head is not — it runs on
// channels padded with zeros to multiples of 8: each call widens its inputs (and the weights,
// which training changes) into its own buffers, runs cuDNN there and narrows the result. The
// padded form takes no fused epilogue (fused() false: the caller applies it).
class Conv {
 public:
  Conv(CudnnHandle& handle, std::string name, const ConvGeometry& g, int max_images, bool fused_relu,
       std::size_t workspace_limit);
  ~Conv();
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;

  void find(CudnnHandle& handle, const void* x, const void* w, void* y, void* workspace, std::size_t workspace_size);
  std::size_t workspace_bytes() const noexcept { return conv_->workspace_bytes(); }
  bool fused() const noexcept { return conv_->fused(); }
  bool channels_padded() const noexcept { return padded_ != nullptr; }
  // Device memory of its own: the padded form's buffers (0 when the channels are not padded).
  std::size_t device_bytes() const noexcept;
  std::string describe() const;
  void run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z, float z_scale,
           const void* bias, void* workspace, std::size_t workspace_size);
  std::size_t prepare_backward(CudnnHandle& handle, std::size_t workspace_limit);
  void backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void* workspace,
                     std::size_t workspace_size);
  void backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw, void* workspace,
                       std::size_t workspace_size);
  bool backward_deterministic() const { return conv_->backward_deterministic(); }
  bool try_fused(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* bias,
                 void* workspace, std::size_t workspace_size);

 private:
  struct Padded;
  // Replaces conv_ by one on padded channels, or rethrows `why` when padding cannot help.
  void pad_channels(CudnnHandle& handle, const ConvNotSupported& why);
  // x (images of the unpadded input) and w into the padded buffers.
  void widen_input(CudnnHandle& handle, int images, const void* x);
  void widen_weights(CudnnHandle& handle, const void* w);

  std::string name_;
  ConvGeometry g_;
  int max_images_;
  std::size_t workspace_limit_;
  std::unique_ptr<CudnnConv> conv_;
  std::unique_ptr<Padded> padded_;
};

}  // namespace stoker::trainer::cudnn::gpu
