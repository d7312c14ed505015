// The emulated device's stand-in for cuDNN (STOKER_CUDA_EMULATION, docs/gpu.md): conv.hpp's
// handle and convolutions as host loops (conv_reference.hpp) queued on the handle's stream, reading
// and writing the device buffers in the storage type as cuDNN does (float32 accumulation, one
// rounding of each result; the fused call's bias, z and ReLU before it). With it the real cuDNN
// backend and GPU trainer run on the emulated device: their buffers, offsets, workspace sizes,
// explicit-padding scratch, conversions and gradient copies. It says nothing of cuDNN's
// algorithms or their speed: those exist only on a GPU (conv.cpp).
#include <cstdint>
#include <set>
#include <sstream>
#include <vector>

#include <stoker/core/detail/cuda_emulation.hpp>
#include <stoker/core/error.hpp>
#include <stoker/core/half.hpp>

#include "conv.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

struct EmulatedHandle {
  StreamHandle stream = nullptr;
};

StreamHandle stream_of(CudnnHandle& handle) { return static_cast<EmulatedHandle*>(handle.get())->stream; }

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

void check_images(int images, int max_images, const std::string& name) {
  if (images < 1 || images > max_images)
    throw InvalidArgument("cudnn backend: layer '" + name + "': " + std::to_string(images) +
                          " images, the convolution was made for 1.." + std::to_string(max_images));
}

}  // namespace

struct Conv::Impl {
  std::set<int> batches;  // the batch sizes run, for describe()
};

CudnnHandle::CudnnHandle() : h_(new EmulatedHandle) {}
CudnnHandle::~CudnnHandle() { delete static_cast<EmulatedHandle*>(h_); }
void CudnnHandle::set_stream(StreamHandle stream) { static_cast<EmulatedHandle*>(h_)->stream = stream; }

std::string cudnn_version_string() { return "emulated"; }

std::string cudnn_environment() { return "cuDNN emulated on the host (no cuDNN library; the emulated CUDA device)"; }

std::vector<std::string> probe_small_channel_convolutions(CudnnHandle&, DType storage) {
  check_storage_type(storage);
  return {"the emulated device runs every convolution (host loops): no cuDNN to probe"};
}

Conv::Conv(CudnnHandle&, std::string name, const ConvGeometry& g, int max_images, bool fused_relu, std::size_t)
    : impl_(std::make_unique<Impl>()), name_(std::move(name)), g_(g), fused_(fused_relu), max_images_(max_images) {
  check_storage_type(g.storage);
  // The output size cuDNN computes, checked against the plan's as conv.cpp does.
  const int oh = (g.h + 2 * g.pad_h - (g.kh - 1) * g.dh - 1) / g.sh + 1;
  const int ow = (g.w + 2 * g.pad_w - (g.kw - 1) * g.dw - 1) / g.sw + 1;
  if (oh != g.oh || ow != g.ow)
    throw Error("cudnn backend: layer '" + name_ + "': cuDNN computes an output of " + std::to_string(oh) + "x" +
                std::to_string(ow) + "x" + std::to_string(g.oc) + ", the plan expects " + std::to_string(g.oh) + "x" +
                std::to_string(g.ow) + "x" + std::to_string(g.oc));
}

Conv::~Conv() = default;

void Conv::find(CudnnHandle&, const void*, const void*, void*, void*, std::size_t) {}

std::string Conv::describe() const {
  std::ostringstream s;
  s << "cudnn emulated (host loops), batches";
  for (int n : impl_->batches) s << " " << n;
  if (fused_) s << ", fused bias+relu";
  return s.str();
}

void Conv::run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z, float z_scale,
               const void* bias, void*, std::size_t) {
  check_images(images, max_images_, name_);
  impl_->batches.insert(images);
  const ConvGeometry g = g_;
  const bool fused = fused_;
  emulation::launch(stream_of(handle), [g, images, x, w, y, z, z_scale, bias, fused] {
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

std::size_t Conv::prepare_backward(CudnnHandle&, std::size_t) { return max_workspace_; }

void Conv::backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void*, std::size_t) {
  check_images(images, max_images_, name_);
  const ConvGeometry g = g_;
  emulation::launch(stream_of(handle), [g, images, dy, w, dx] {
    const auto n = static_cast<std::size_t>(images);
    const std::vector<float> dys = read_storage(dy, output_values(g, n), g.storage);
    const std::vector<float> ws = read_storage(w, weight_values(g), g.storage);
    std::vector<float> dxs(input_values(g, n));
    conv_backward_sums(g, n, nullptr, ws.data(), dys.data(), dxs.data(), nullptr);
    write_storage(dxs, dx, g.storage);
  });
  STOKER_CUDA_CHECK_LAUNCH("emulated cudnnConvolutionBackwardData");
}

void Conv::backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw, void*,
                           std::size_t) {
  check_images(images, max_images_, name_);
  const ConvGeometry g = g_;
  emulation::launch(stream_of(handle), [g, images, x, dy, dw] {
    const auto n = static_cast<std::size_t>(images);
    const std::vector<float> xs = read_storage(x, input_values(g, n), g.storage);
    const std::vector<float> dys = read_storage(dy, output_values(g, n), g.storage);
    std::vector<float> dws(weight_values(g));
    conv_backward_sums(g, n, xs.data(), nullptr, dys.data(), nullptr, dws.data());
    write_storage(dws, dw, g.storage);  // the filter's type, as cuDNN writes it
  });
  STOKER_CUDA_CHECK_LAUNCH("emulated cudnnConvolutionBackwardFilter");
}

bool Conv::backward_deterministic() const { return true; }

bool Conv::try_fused(CudnnHandle&, int, const void*, const void*, void*, const void*, void*, std::size_t) {
  return fused_;
}

}  // namespace stoker::trainer::cudnn::gpu
