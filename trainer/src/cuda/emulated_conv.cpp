// The emulated device's stand-in for cuDNN (STOKER_CUDA_EMULATION, docs/gpu.md): conv.hpp's
// handle and convolutions as host loops (conv_reference.hpp) queued on the handle's stream, reading
// and writing the device buffers in the storage type as cuDNN does (float32 accumulation, one
// rounding of each result; the fused call's bias, z and ReLU before it). With it the real cuDNN
// backend and GPU trainer run on the emulated device: their buffers, offsets, workspace sizes,
// explicit-padding scratch, conversions and gradient copies. It says nothing of cuDNN's
// algorithms or their speed: those exist only on a GPU (conv.cpp).
#include <cstdint>
#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include <stoker/core/detail/cuda_emulation.hpp>
#include <stoker/core/error.hpp>
#include <stoker/core/half.hpp>

#include "conv.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

std::vector<float> read_storage(const void* p, std::size_t n, DType storage) {
  std::vector<float> v(n);
  const auto* bits = static_cast<const std::uint16_t*>(p);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = storage == DType::BF16 ? convert::bf16_value(bits[i]) : convert::f16_value(bits[i]);
  return v;
}

void write_storage(const std::vector<float>& v, void* p, DType storage) {
  for (std::size_t i = 0; i < v.size(); ++i) convert::store(storage, p, i, v[i]);
}

std::size_t input_values(const ConvGeometry& g, std::size_t images) {
  return images * static_cast<std::size_t>(g.h) * g.w * g.c;
}
std::size_t output_values(const ConvGeometry& g, std::size_t images) {
  return images * static_cast<std::size_t>(g.oh) * g.ow * g.oc;
}
std::size_t weight_values(const ConvGeometry& g) {
  return static_cast<std::size_t>(g.oc) * g.kh * g.kw * (g.c / g.groups);
}

void check_storage_type(DType storage) {
  if (storage != DType::F16 && storage != DType::BF16)
    throw InvalidArgument(std::string("cudnn backend: storage must be F16 or BF16, received ") + to_string(storage));
}

// STOKER_EMULATED_CUDNN_REFUSE (tests): "unaligned-channels" makes the stand-in offer no
// algorithm, as cuDNN may for NHWC fp16/bf16, when C or K is not a multiple of 8 — at the
// construction, or with "unaligned-channels-backward" for the backward calls only (prepare_backward).
void refuse_if_asked(const ConvGeometry& g, const std::string& name, const char* what, bool backward) {
  const char* env = std::getenv("STOKER_EMULATED_CUDNN_REFUSE");
  if (!env || (g.c % 8 == 0 && g.oc % 8 == 0)) return;
  const std::string asked = env;
  if (asked == (backward ? "unaligned-channels-backward" : "unaligned-channels"))
    throw ConvNotSupported("cudnn (emulated): layer '" + name + "': no " + what + " algorithm for C " +
                           std::to_string(g.c) + ", K " + std::to_string(g.oc) +
                           " (STOKER_EMULATED_CUDNN_REFUSE=" + asked + ")");
}

void check_images(int images, int max_images, const std::string& name) {
  if (images < 1 || images > max_images)
    throw InvalidArgument("cudnn backend: layer '" + name + "': " + std::to_string(images) +
                          " images, the convolution was made for 1.." + std::to_string(max_images));
}

}  // namespace

struct CudnnConv::Impl {
  std::set<int> batches;  // the batch sizes run, for describe()
};

CudnnHandle::CudnnHandle() = default;
CudnnHandle::~CudnnHandle() = default;
void CudnnHandle::set_stream(StreamHandle stream) { stream_ = stream; }

std::string cudnn_version_string() { return "emulated"; }

std::string cudnn_environment() { return "cuDNN emulated on the host (no cuDNN library; the emulated CUDA device)"; }

std::vector<std::string> probe_small_channel_convolutions(CudnnHandle&, DType storage) {
  check_storage_type(storage);
  return {"the emulated device runs every convolution (host loops): no cuDNN to probe"};
}

CudnnConv::CudnnConv(CudnnHandle&, std::string name, const ConvGeometry& g, int max_images, bool fused_relu,
                     std::size_t)
    : impl_(std::make_unique<Impl>()), name_(std::move(name)), g_(g), fused_(fused_relu), max_images_(max_images) {
  check_storage_type(g.storage);
  refuse_if_asked(g, name_, "forward", false);
  // The output size cuDNN computes, checked against the plan's as conv.cpp does.
  const int oh = (g.h + 2 * g.pad_h - (g.kh - 1) * g.dh - 1) / g.sh + 1;
  const int ow = (g.w + 2 * g.pad_w - (g.kw - 1) * g.dw - 1) / g.sw + 1;
  if (oh != g.oh || ow != g.ow)
    throw Error("cudnn backend: layer '" + name_ + "': cuDNN computes an output of " + std::to_string(oh) + "x" +
                std::to_string(ow) + "x" + std::to_string(g.oc) + ", the plan expects " + std::to_string(g.oh) + "x" +
                std::to_string(g.ow) + "x" + std::to_string(g.oc));
}

CudnnConv::~CudnnConv() = default;

void CudnnConv::find(CudnnHandle&, const void*, const void*, void*, void*, std::size_t) {}

std::string CudnnConv::describe() const {
  std::ostringstream s;
  s << "cudnn emulated (host loops), batches";
  for (int n : impl_->batches) s << " " << n;
  if (fused_) s << ", fused bias+relu";
  return s.str();
}

void CudnnConv::run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z,
                    float z_scale, const void* bias, void*, std::size_t) {
  check_images(images, max_images_, name_);
  impl_->batches.insert(images);
  const ConvGeometry g = g_;
  const bool fused = fused_;
  emulation::launch(handle.stream(), [g, images, x, w, y, z, z_scale, bias, fused] {
    const auto n = static_cast<std::size_t>(images);
    const std::vector<float> xs = read_storage(x, input_values(g, n), g.storage);
    const std::vector<float> ws = read_storage(w, weight_values(g), g.storage);
    std::vector<float> ys(output_values(g, n));
    conv_forward_sums(g, n, xs.data(), ws.data(), ys.data());
    if (fused) {  // y = relu(conv + z_scale · z + bias), bias and z in the storage type
      const std::vector<float> b = read_storage(bias, static_cast<std::size_t>(g.oc), g.storage);
      const std::vector<float> zs = z ? read_storage(z, ys.size(), g.storage) : std::vector<float>();
      for (std::size_t e = 0; e < ys.size(); ++e) {
        const float v = ys[e] + (z ? z_scale * zs[e] : 0.0f) + b[e % static_cast<std::size_t>(g.oc)];
        ys[e] = v > 0.0f ? v : 0.0f;
      }
    }
    write_storage(ys, y, g.storage);
  });
  STOKER_CUDA_CHECK_LAUNCH("emulated cudnnConvolutionForward");
}

std::size_t CudnnConv::prepare_backward(CudnnHandle&, std::size_t) {
  refuse_if_asked(g_, name_, "backward", true);
  return max_workspace_;
}

void CudnnConv::backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void*,
                              std::size_t) {
  check_images(images, max_images_, name_);
  const ConvGeometry g = g_;
  emulation::launch(handle.stream(), [g, images, dy, w, dx] {
    const auto n = static_cast<std::size_t>(images);
    const std::vector<float> dys = read_storage(dy, output_values(g, n), g.storage);
    const std::vector<float> ws = read_storage(w, weight_values(g), g.storage);
    std::vector<float> dxs(input_values(g, n));
    conv_backward_sums(g, n, nullptr, ws.data(), dys.data(), dxs.data(), nullptr);
    write_storage(dxs, dx, g.storage);
  });
  STOKER_CUDA_CHECK_LAUNCH("emulated cudnnConvolutionBackwardData");
}

void CudnnConv::backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw, void*,
                                std::size_t) {
  check_images(images, max_images_, name_);
  const ConvGeometry g = g_;
  emulation::launch(handle.stream(), [g, images, x, dy, dw] {
    const auto n = static_cast<std::size_t>(images);
    const std::vector<float> xs = read_storage(x, input_values(g, n), g.storage);
    const std::vector<float> dys = read_storage(dy, output_values(g, n), g.storage);
    std::vector<float> dws(weight_values(g));
    conv_backward_sums(g, n, xs.data(), nullptr, dys.data(), nullptr, dws.data());
    write_storage(dws, dw, g.storage);  // the filter's type, as cuDNN writes it
  });
  STOKER_CUDA_CHECK_LAUNCH("emulated cudnnConvolutionBackwardFilter");
}

bool CudnnConv::backward_deterministic() const { return true; }

bool CudnnConv::try_fused(CudnnHandle&, int, const void*, const void*, void*, const void*, void*, std::size_t) {
  return fused_;
}

}  // namespace stoker::trainer::cudnn::gpu
