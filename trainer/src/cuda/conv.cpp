// The cuDNN calls of the cuDNN backend, all in this one file.
//
// Why the legacy API: cuDNN 9 deprecates the legacy convolution functions used here
// (cudnnConvolutionForward, cudnnConvolutionBiasActivationForward, cudnnGetConvolutionForward-
// Algorithm_v7, the convolution/filter descriptors) in favour of the graph API, which NVIDIA wraps
// in the header-only cudnn-frontend. The frontend is not installed by the project's dependency
// script, adds several minutes of template-heavy compilation per file on the 2-core CI machine,
// and this backend was written without a GPU to run it on; the legacy calls are simple, stable
// across cuDNN 8 and 9 and still present in cuDNN 9.19. They stay isolated here, behind conv.hpp
// (no cuDNN type outside this file), so moving to the graph API changes only this file.
// (cudnn_graph.h marks them deprecated only when CUDNN_WARN_DEPRECATED is defined; we do not.)
#include "conv.hpp"

#include <cudnn.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include <stoker/core/error.hpp>

// Written against cuDNN 9's status codes and legacy-API semantics (refused() below); another major
// version must be read against its documentation first.
static_assert(CUDNN_MAJOR == 9, "stoker's cuDNN backend is written for cuDNN 9");
static_assert(stoker::trainer::cudnn::gpu::ConvNotSupported::kStatus == CUDNN_STATUS_NOT_SUPPORTED);

namespace stoker::trainer::cudnn::gpu {
namespace {

std::string status_message(cudnnStatus_t s, const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudnnGetErrorString(s) + " (" +
         std::to_string(static_cast<int>(s)) + ")";
}

void cudnn_check(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw CudaError(status_message(s, call, file, line), static_cast<int>(s));
}
#define STOKER_CUDNN_CHECK(call) cudnn_check((call), #call, __FILE__, __LINE__)

// The statuses that mean "not for this configuration": another algorithm, or the plain call instead
// of the fused one, may run. Everything else is a failure to report as it is: a missing
// sub-library, a driver or runtime cuDNN cannot use, an architecture it was not built for, a null
// or misaligned pointer or a workspace too small (our bug), an internal or execution failure.
bool refused(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_BAD_PARAM:  // the legacy API's answer to an unsupported combination
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED:
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN:
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE:
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT:
    case CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT:
    case CUDNN_STATUS_NOT_SUPPORTED_PADDING:
    case CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM: return true;
    default: return static_cast<int>(s) == 2001;  // CUDNN_STATUS_INVALID_VALUE, deprecated spelling
  }
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F32: return CUDNN_DATA_FLOAT;
    default: throw InvalidArgument(std::string("cudnn backend: unsupported storage type ") + to_string(t));
  }
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    default: return "?";
  }
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return " (default math)";
    case CUDNN_TENSOR_OP_MATH: return " (tensor ops)";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return " (tensor ops, converting)";
    case CUDNN_FMA_MATH: return " (FMA math)";
    default: return " (math ?)";
  }
}

cudnnHandle_t H(CudnnHandle& h) { return static_cast<cudnnHandle_t>(h.get()); }

template <typename Algo>
struct BackwardAlgo {
  Algo algo;
  cudnnMathType_t math;  // the math type cuDNN timed or ranked it with: set before running it
  bool deterministic;
};

// The convolution descriptor carries one math type; each call runs with its algorithm's own (the
// kernel cuDNN ranked or timed is then the kernel that runs).
void use_math(cudnnConvolutionDescriptor_t conv, cudnnMathType_t math) {
  STOKER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
}

// cuDNN's heuristics for a backward call, as the algorithms to try in order: the deterministic
// ones first (the same gradients on every run), each within the workspace (`bytes_of(algo,
// bytes)` asks cuDNN; false when it refuses). `max_bytes` grows to the largest's workspace, so
// that a fallback fits too.
template <typename Perf, typename BytesOf>
auto backward_candidates(const Perf* perf, int returned, std::size_t workspace_size, BytesOf bytes_of,
                         std::size_t& max_bytes) {
  std::vector<BackwardAlgo<decltype(perf->algo)>> out;
  for (const bool deterministic : {true, false})
    for (int i = 0; i < returned; ++i) {
      std::size_t bytes = 0;
      if (perf[i].status != CUDNN_STATUS_SUCCESS || (perf[i].determinism == CUDNN_DETERMINISTIC) != deterministic ||
          !bytes_of(perf[i].algo, bytes) || bytes > workspace_size)
        continue;
      out.push_back({perf[i].algo, perf[i].mathType, deterministic});
      max_bytes = std::max(max_bytes, bytes);
    }
  return out;
}

// Runs `call(algo)` with the first of `algos` cuDNN does not refuse at run time (a heuristic's
// SUCCESS does not promise that), dropping the refused ones for later calls; each refusal is noted
// in `refusals` with its status.
template <typename Algo, typename Call>
void run_backward(std::vector<BackwardAlgo<Algo>>& algos, cudnnConvolutionDescriptor_t conv, const char* what,
                  const std::string& layer, std::vector<std::string>& refusals, Call call) {
  for (;;) {
    use_math(conv, algos.front().math);
    const cudnnStatus_t s = call(algos.front().algo);
    if (s == CUDNN_STATUS_SUCCESS) return;
    if (!refused(s) || algos.size() == 1)
      throw CudaError(status_message(s, what, __FILE__, __LINE__) + " for layer '" + layer +
                          "' (no other algorithm within the workspace runs)",
                      static_cast<int>(s));
    refusals.push_back(std::string(what) + " algorithm " + std::to_string(static_cast<int>(algos.front().algo)) + ": " +
                       cudnnGetErrorString(s));
    algos.erase(algos.begin());
  }
}

}  // namespace

CudnnHandle::CudnnHandle() {
  cudnnHandle_t h = nullptr;
  STOKER_CUDNN_CHECK(cudnnCreate(&h));
  h_ = h;
}
CudnnHandle::~CudnnHandle() {
  if (h_) cudnnDestroy(static_cast<cudnnHandle_t>(h_));
}
void CudnnHandle::set_stream(StreamHandle stream) {
  STOKER_CUDNN_CHECK(cudnnSetStream(static_cast<cudnnHandle_t>(h_), stream));
  stream_ = stream;
}

std::string cudnn_version_string() {
  const std::size_t v = cudnnGetVersion();  // 9.19.0 -> 91900
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string cudnn_environment() {
  const auto version = [](std::size_t v) {  // 91900 -> "9.19.0"
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  };
  const std::size_t rt = cudnnGetCudartVersion();  // 13000 -> 13.0
  return "cuDNN " + version(cudnnGetVersion()) + " (compiled against " + version(CUDNN_VERSION) +
         "), for CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
}

namespace {

// A status that says cuDNN cannot work on this machine at all, whatever the configuration.
bool environment_failure(cudnnStatus_t s) {
  const int code = static_cast<int>(s);
  return code / 1000 == 1 ||  // not initialised, sub-library version mismatch or loading failure
         s == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER ||
         s == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART || s == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH ||
         s == CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING ||
         s == CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE;
}

// Tries each algorithm cuDNN's heuristics list (perf, returned) until one runs: "ok (algorithm N)"
// or the last status.
template <typename Perf, typename BytesOf, typename Run>
std::string first_that_runs(const char* what, const Perf* perf, int returned, std::size_t workspace_size,
                            cudnnConvolutionDescriptor_t conv, BytesOf bytes_of, Run run) {
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < returned; ++i) {
    std::size_t bytes = 0;
    if (perf[i].status != CUDNN_STATUS_SUCCESS) {
      last = perf[i].status;
      continue;
    }
    if (bytes_of(perf[i].algo, bytes) != CUDNN_STATUS_SUCCESS || bytes > workspace_size) continue;
    use_math(conv, perf[i].mathType);
    last = run(perf[i].algo);
    if (last == CUDNN_STATUS_SUCCESS)
      return std::string(what) + " ok (algorithm " + std::to_string(static_cast<int>(perf[i].algo)) + ")";
    if (environment_failure(last)) cudnn_check(last, what, __FILE__, __LINE__);
  }
  return std::string(what) + " " + cudnnGetErrorString(last);
}

}  // namespace

std::vector<std::string> probe_small_channel_convolutions(CudnnHandle& handle, DType storage) {
  constexpr int kImages = 8, kSide = 8, kMaxChannels = 16;
  constexpr std::size_t kWorkspace = std::size_t{64} << 20;
  const cudnnDataType_t dt = data_type(storage);
  const std::size_t values = std::size_t{kImages} * kSide * kSide * kMaxChannels;
  DeviceBuffer x(values * 2, "probe input"), y(values * 2, "probe output"), dx(values * 2, "probe input gradient");
  DeviceBuffer w(std::size_t{kMaxChannels} * kMaxChannels * 9 * 2, "probe weights");
  DeviceBuffer dw(w.bytes(), "probe weight gradient"), ws(kWorkspace, "probe workspace");
  for (const DeviceBuffer* b : {&x, &y, &dx, &w, &dw}) memset_device_async(b->get(), 0, b->bytes(), nullptr);
  stream_synchronize(nullptr);

  struct Descriptors {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    ~Descriptors() {
      if (x) cudnnDestroyTensorDescriptor(x);
      if (y) cudnnDestroyTensorDescriptor(y);
      if (w) cudnnDestroyFilterDescriptor(w);
      if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
  };
  std::vector<std::string> lines;
  const int channels[] = {1, 2, 3, 4, 5, 8, 16};
  auto probe = [&](int c, int k, int groups) {
    Descriptors d;
    STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
    STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
    STOKER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
    STOKER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
    STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, dt, kImages, c, kSide, kSide));
    STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, dt, kImages, k, kSide, kSide));
    STOKER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, dt, CUDNN_TENSOR_NHWC, k, c / groups, 3, 3));
    STOKER_CUDNN_CHECK(
        cudnnSetConvolution2dDescriptor(d.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    STOKER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, groups));
    STOKER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, CUDNN_TENSOR_OP_MATH));
    const float one = 1.0f, zero = 0.0f;
    std::string line = "C " + std::to_string(c) + ", K " + std::to_string(k) + (groups > 1 ? ", depthwise:" : ":");
    int returned = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    STOKER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(H(handle), d.x, d.w, d.conv, d.y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, fwd));
    line += " " + first_that_runs(
                      "forward", fwd, returned, ws.bytes(), d.conv,
                      [&](cudnnConvolutionFwdAlgo_t a, std::size_t& b) {
                        return cudnnGetConvolutionForwardWorkspaceSize(H(handle), d.x, d.w, d.conv, d.y, a, &b);
                      },
                      [&](cudnnConvolutionFwdAlgo_t a) {
                        return cudnnConvolutionForward(H(handle), &one, d.x, x.get(), d.w, w.get(), d.conv, a, ws.get(),
                                                       ws.bytes(), &zero, d.y, y.get());
                      });
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        H(handle), d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, bwd_data));
    line += ", " + first_that_runs(
                       "backward-data", bwd_data, returned, ws.bytes(), d.conv,
                       [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t& b) {
                         return cudnnGetConvolutionBackwardDataWorkspaceSize(H(handle), d.w, d.y, d.conv, d.x, a, &b);
                       },
                       [&](cudnnConvolutionBwdDataAlgo_t a) {
                         return cudnnConvolutionBackwardData(H(handle), &one, d.w, w.get(), d.y, y.get(), d.conv, a,
                                                             ws.get(), ws.bytes(), &zero, d.x, dx.get());
                       });
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        H(handle), d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, bwd_filter));
    line += ", " + first_that_runs(
                       "backward-filter", bwd_filter, returned, ws.bytes(), d.conv,
                       [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t& b) {
                         return cudnnGetConvolutionBackwardFilterWorkspaceSize(H(handle), d.x, d.y, d.conv, d.w, a, &b);
                       },
                       [&](cudnnConvolutionBwdFilterAlgo_t a) {
                         return cudnnConvolutionBackwardFilter(H(handle), &one, d.x, x.get(), d.y, y.get(), d.conv, a,
                                                               ws.get(), ws.bytes(), &zero, d.w, dw.get());
                       });
    stream_synchronize(nullptr);  // an execution failure surfaces here, naming this configuration
    lines.push_back(std::move(line));
  };
  for (const int c : channels)
    for (const int k : channels) probe(c, k, 1);
  for (const int c : channels)
    if (c > 1) probe(c, c, c);
  return lines;
}

struct CudnnConv::Impl {
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnTensorDescriptor_t bias = nullptr;
  struct PerBatch {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;  // the chosen algorithm's, set before each call
    std::size_t workspace = 0;
    // Training (prepare_backward): the backward algorithms to try, listed on the batch size's
    // first backward call; the first runs until cuDNN refuses it at run time.
    bool backward_chosen = false;
    std::vector<BackwardAlgo<cudnnConvolutionBwdDataAlgo_t>> data_algos;
    std::vector<BackwardAlgo<cudnnConvolutionBwdFilterAlgo_t>> filter_algos;
  };
  std::map<int, PerBatch> per_batch;

  ~Impl() {
    for (auto& [n, p] : per_batch) {
      if (p.x) cudnnDestroyTensorDescriptor(p.x);
      if (p.y) cudnnDestroyTensorDescriptor(p.y);
    }
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (act) cudnnDestroyActivationDescriptor(act);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
  }
};

CudnnConv::CudnnConv(CudnnHandle& handle, std::string name, const ConvGeometry& g, int max_images, bool fused_relu,
                     std::size_t workspace_limit)
    : impl_(std::make_unique<Impl>()), name_(std::move(name)), g_(g), fused_(fused_relu) {
  const cudnnDataType_t dt = data_type(g.storage);
  STOKER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&impl_->w));
  STOKER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(impl_->w, dt, CUDNN_TENSOR_NHWC, g.oc, g.c / g.groups, g.kh, g.kw));
  STOKER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&impl_->conv));
  // float32 accumulation whatever the storage type (cuDNN's "pseudo half" configuration).
  STOKER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(impl_->conv, g.pad_h, g.pad_w, g.sh, g.sw, g.dh, g.dw,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  STOKER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(impl_->conv, g.groups));
  STOKER_CUDNN_CHECK(cudnnSetConvolutionMathType(impl_->conv, CUDNN_TENSOR_OP_MATH));
  STOKER_CUDNN_CHECK(cudnnCreateActivationDescriptor(&impl_->act));
  // CUDNN_NOT_PROPAGATE_NAN: what cudnnConvolutionBiasActivationForward takes (TensorFlow and ONNX
  // Runtime set it for the fused call; with PROPAGATE_NAN cuDNN may refuse the fused path).
  STOKER_CUDNN_CHECK(cudnnSetActivationDescriptor(impl_->act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&impl_->bias));
  STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(impl_->bias, CUDNN_TENSOR_NCHW, dt, 1, g.oc, 1, 1));

  // Descriptors for the largest batch; the output size must be the plan's (TensorFlow's).
  cudnnTensorDescriptor_t x = nullptr;
  STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
  impl_->per_batch[max_images].x = x;
  STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, dt, max_images, g.c, g.h, g.w));
  int n = 0, c = 0, h = 0, w = 0;
  STOKER_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(impl_->conv, x, impl_->w, &n, &c, &h, &w));
  if (n != max_images || c != g.oc || h != g.oh || w != g.ow)
    throw Error("cudnn backend: layer '" + name_ + "': cuDNN computes an output of " + std::to_string(h) + "x" +
                std::to_string(w) + "x" + std::to_string(c) + ", the plan expects " + std::to_string(g.oh) + "x" +
                std::to_string(g.ow) + "x" + std::to_string(g.oc));
  // Choose for the largest batch within the limit; the workspace buffer is sized from this.
  auto& pb = impl_->per_batch[max_images];
  STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&pb.y));
  STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pb.y, CUDNN_TENSOR_NHWC, dt, max_images, g.oc, g.oh, g.ow));
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  STOKER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(H(handle), pb.x, impl_->w, impl_->conv, pb.y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  bool found = false;
  for (int i = 0; i < returned && !found; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(H(handle), pb.x, impl_->w, impl_->conv, pb.y, perf[i].algo, &bytes) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    if (bytes > workspace_limit) continue;
    pb.algo = perf[i].algo;
    pb.math = perf[i].mathType;
    pb.workspace = bytes;
    found = true;
  }
  if (!found)
    throw ConvNotSupported("cudnn backend: layer '" + name_ + "': cuDNN offers no forward algorithm for " +
                           std::to_string(g.h) + "x" + std::to_string(g.w) + "x" + std::to_string(g.c) + " -> " +
                           std::to_string(g.oh) + "x" + std::to_string(g.ow) + "x" + std::to_string(g.oc) +
                           " (groups " + std::to_string(g.groups) + ") within a workspace of " +
                           std::to_string(workspace_limit) + " bytes");
  max_workspace_ = pb.workspace;
  max_images_ = max_images;
}

void CudnnConv::find(CudnnHandle& handle, const void* x, const void* w, void* y, void* workspace,
                     std::size_t workspace_size) {
  // Runs and times every algorithm on the real buffers at the largest batch; the fastest that
  // succeeds within the workspace wins. When cuDNN cannot measure, the heuristic choice stays.
  auto& pb = impl_->per_batch.at(max_images_);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  const cudnnStatus_t s = cudnnFindConvolutionForwardAlgorithmEx(H(handle), pb.x, x, impl_->w, w, impl_->conv, pb.y, y,
                                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf,
                                                                 workspace, workspace_size);
  if (s != CUDNN_STATUS_SUCCESS) {
    if (!refused(s)) cudnn_check(s, "cudnnFindConvolutionForwardAlgorithmEx", __FILE__, __LINE__);
    refusals_.push_back(std::string("algorithm search: ") + cudnnGetErrorString(s) + " (the heuristics' choice kept)");
    return;
  }
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(H(handle), pb.x, impl_->w, impl_->conv, pb.y, perf[i].algo, &bytes) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    bytes = std::max(bytes, perf[i].memory);
    if (bytes > workspace_size) continue;
    pb.algo = perf[i].algo;
    pb.math = perf[i].mathType;
    pb.workspace = bytes;
    max_workspace_ = bytes;
    measured_ms_ = perf[i].time;
    return;
  }
}

CudnnConv::~CudnnConv() = default;

std::string CudnnConv::describe() const {
  std::ostringstream s;
  s << "cudnn";
  for (const auto& [n, p] : impl_->per_batch) {
    s << " [" << n << " images: " << algo_name(p.algo) << math_name(p.math) << ", workspace " << p.workspace << " B";
    if (n == max_images_ && measured_ms_ >= 0) s << ", " << measured_ms_ << " ms";
    if (p.backward_chosen) {
      s << "; backward-data algorithm " << static_cast<int>(p.data_algos.front().algo) << ", backward-filter "
        << static_cast<int>(p.filter_algos.front().algo);
      if (!p.data_algos.front().deterministic || !p.filter_algos.front().deterministic) s << " (not deterministic)";
    }
    s << "]";
  }
  if (fused_) s << " fused bias+relu";
  for (const std::string& r : refusals_) s << "; refused: " << r;
  return s.str();
}

void CudnnConv::run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z,
                    float z_scale, const void* bias, void* workspace, std::size_t workspace_size) {
  auto it = impl_->per_batch.find(images);
  if (it == impl_->per_batch.end()) {
    prepare_batch(handle, images, workspace_size);
    it = impl_->per_batch.find(images);
  }
  auto& p = it->second;
  const float one = 1.0f, zero = 0.0f;
  use_math(impl_->conv, p.math);
  if (fused_) {
    // Without z: alpha2 = 0 and z = y (cuDNN wants a z tensor; ONNX Runtime and PyTorch do the same).
    const float alpha2 = z ? z_scale : 0.0f;
    const cudnnStatus_t s = cudnnConvolutionBiasActivationForward(H(handle), &one, p.x, x, impl_->w, w, impl_->conv,
                                                                  p.algo, workspace, workspace_size, &alpha2, p.y,
                                                                  z ? z : y, impl_->bias, bias, impl_->act, p.y, y);
    if (s == CUDNN_STATUS_SUCCESS) return;
    if (!refused(s)) cudnn_check(s, "cudnnConvolutionBiasActivationForward", __FILE__, __LINE__);
    // Refused for this configuration (this batch size's algorithm may not take the fused path even
    // when the largest batch's did): the plain call from now on; the caller sees fused() false and
    // applies bias, z and the ReLU itself.
    fused_ = false;
    refusals_.push_back(std::string("fused bias+relu at ") + std::to_string(images) +
                        " images: " + cudnnGetErrorString(s));
  }
  const cudnnStatus_t s = cudnnConvolutionForward(H(handle), &one, p.x, x, impl_->w, w, impl_->conv, p.algo, workspace,
                                                  workspace_size, &zero, p.y, y);
  if (s == CUDNN_STATUS_SUCCESS) return;
  if (!refused(s)) cudnn_check(s, "cudnnConvolutionForward", __FILE__, __LINE__);
  refusals_.push_back(std::string("forward ") + algo_name(p.algo) + " at " + std::to_string(images) +
                      " images: " + cudnnGetErrorString(s));
  // The algorithm chosen for this batch size (the heuristics', or the largest batch's measured one
  // reused) is refused at this size: the next of cuDNN's heuristics that fits and runs is kept.
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  if (cudnnGetConvolutionForwardAlgorithm_v7(H(handle), p.x, impl_->w, impl_->conv, p.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                             perf) == CUDNN_STATUS_SUCCESS) {
    for (int i = 0; i < returned; ++i) {
      std::size_t bytes = 0;
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].algo == p.algo ||
          cudnnGetConvolutionForwardWorkspaceSize(H(handle), p.x, impl_->w, impl_->conv, p.y, perf[i].algo, &bytes) !=
              CUDNN_STATUS_SUCCESS ||
          bytes > workspace_size)
        continue;
      use_math(impl_->conv, perf[i].mathType);
      const cudnnStatus_t s2 = cudnnConvolutionForward(H(handle), &one, p.x, x, impl_->w, w, impl_->conv, perf[i].algo,
                                                       workspace, workspace_size, &zero, p.y, y);
      if (s2 == CUDNN_STATUS_SUCCESS) {
        p.algo = perf[i].algo;
        p.math = perf[i].mathType;
        p.workspace = bytes;
        if (images == max_images_) measured_ms_ = -1.0f;
        return;
      }
      if (!refused(s2)) cudnn_check(s2, "cudnnConvolutionForward", __FILE__, __LINE__);
      refusals_.push_back(std::string("forward ") + algo_name(perf[i].algo) + " at " + std::to_string(images) +
                          " images: " + cudnnGetErrorString(s2));
    }
  }
  throw CudaError(status_message(s, "cudnnConvolutionForward", __FILE__, __LINE__) + " for layer '" + name_ + "' (" +
                      std::to_string(images) + " images, " + algo_name(p.algo) +
                      ", and no other algorithm within the workspace runs)",
                  static_cast<int>(s));
}

void CudnnConv::prepare_batch(CudnnHandle& handle, int images, std::size_t workspace_size) {
  // A batch size met for the first time: descriptors and an algorithm that fits the workspace.
  const cudnnDataType_t dt = data_type(g_.storage);
  Impl::PerBatch fresh;
  auto it = impl_->per_batch.emplace(images, fresh).first;
  auto& p = it->second;
  try {
    STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
    STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
    STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, dt, images, g_.c, g_.h, g_.w));
    STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, dt, images, g_.oc, g_.oh, g_.ow));
    // The largest batch's algorithm (measured by find()) when its workspace for this size fits,
    // else cuDNN's heuristics.
    const auto& big = impl_->per_batch.at(max_images_);
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(H(handle), p.x, impl_->w, impl_->conv, p.y, big.algo, &bytes) ==
            CUDNN_STATUS_SUCCESS &&
        bytes <= workspace_size) {
      p.algo = big.algo;
      p.math = big.math;
      p.workspace = bytes;
      return;
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    STOKER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(H(handle), p.x, impl_->w, impl_->conv, p.y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    for (int i = 0; i < returned; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS ||
          cudnnGetConvolutionForwardWorkspaceSize(H(handle), p.x, impl_->w, impl_->conv, p.y, perf[i].algo, &bytes) !=
              CUDNN_STATUS_SUCCESS ||
          bytes > workspace_size)
        continue;
      p.algo = perf[i].algo;
      p.math = perf[i].mathType;
      p.workspace = bytes;
      return;
    }
    throw CudaError("cudnn backend: layer '" + name_ + "': no cuDNN algorithm for a batch of " +
                        std::to_string(images) + " fits the workspace of " + std::to_string(workspace_size) + " bytes",
                    static_cast<int>(CUDNN_STATUS_NOT_SUPPORTED));
  } catch (...) {
    if (p.x) cudnnDestroyTensorDescriptor(p.x);
    if (p.y) cudnnDestroyTensorDescriptor(p.y);
    impl_->per_batch.erase(it);
    throw;
  }
}

// The backward algorithms of a batch size, in the order to try them (backward_candidates).
void CudnnConv::choose_backward(CudnnHandle& handle, int images, std::size_t workspace_size) {
  auto it = impl_->per_batch.find(images);
  if (it == impl_->per_batch.end()) {
    prepare_batch(handle, images, workspace_size);
    it = impl_->per_batch.find(images);
  }
  auto& p = it->second;
  if (p.backward_chosen) return;
  auto fail = [&](const char* what) {
    return ConvNotSupported("cudnn trainer: layer '" + name_ + "': cuDNN offers no " + what + " algorithm for " +
                            std::to_string(images) + " images of " + std::to_string(g_.h) + "x" + std::to_string(g_.w) +
                            "x" + std::to_string(g_.c) + " within a workspace of " + std::to_string(workspace_size) +
                            " bytes");
  };
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int returned = 0;
    STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        H(handle), impl_->w, p.y, impl_->conv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
    p.data_algos = backward_candidates(
        perf, returned, workspace_size,
        [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t& bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(H(handle), impl_->w, p.y, impl_->conv, p.x, algo,
                                                              &bytes) == CUDNN_STATUS_SUCCESS;
        },
        max_backward_workspace_);
    if (p.data_algos.empty()) throw fail("backward-data");
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int returned = 0;
    STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        H(handle), p.x, p.y, impl_->conv, impl_->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf));
    p.filter_algos = backward_candidates(
        perf, returned, workspace_size,
        [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t& bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(H(handle), p.x, p.y, impl_->conv, impl_->w, algo,
                                                                &bytes) == CUDNN_STATUS_SUCCESS;
        },
        max_backward_workspace_);
    if (p.filter_algos.empty()) throw fail("backward-filter");
  }
  p.backward_chosen = true;
}

std::size_t CudnnConv::prepare_backward(CudnnHandle& handle, std::size_t workspace_limit) {
  choose_backward(handle, max_images_, workspace_limit);
  return std::max(max_workspace_, max_backward_workspace_);
}

void CudnnConv::backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void* workspace,
                              std::size_t workspace_size) {
  choose_backward(handle, images, workspace_size);
  auto& p = impl_->per_batch.at(images);
  const float one = 1.0f, zero = 0.0f;
  run_backward(p.data_algos, impl_->conv, "cudnnConvolutionBackwardData", name_, refusals_,
               [&](cudnnConvolutionBwdDataAlgo_t algo) {
                 return cudnnConvolutionBackwardData(H(handle), &one, impl_->w, w, p.y, dy, impl_->conv, algo,
                                                     workspace, workspace_size, &zero, p.x, dx);
               });
}

void CudnnConv::backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw,
                                void* workspace, std::size_t workspace_size) {
  choose_backward(handle, images, workspace_size);
  auto& p = impl_->per_batch.at(images);
  const float one = 1.0f, zero = 0.0f;
  run_backward(p.filter_algos, impl_->conv, "cudnnConvolutionBackwardFilter", name_, refusals_,
               [&](cudnnConvolutionBwdFilterAlgo_t algo) {
                 return cudnnConvolutionBackwardFilter(H(handle), &one, p.x, x, p.y, dy, impl_->conv, algo, workspace,
                                                       workspace_size, &zero, impl_->w, dw);
               });
}

bool CudnnConv::backward_deterministic() const {
  for (const auto& [n, p] : impl_->per_batch)
    if (p.backward_chosen && (!p.data_algos.front().deterministic || !p.filter_algos.front().deterministic))
      return false;
  return true;
}

bool CudnnConv::try_fused(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* bias,
                          void* workspace, std::size_t workspace_size) {
  if (!fused_) return false;
  run(handle, images, x, w, y, nullptr, 0.0f, bias, workspace, workspace_size);  // clears fused_ when refused
  return fused_;
}

}  // namespace stoker::trainer::cudnn::gpu
