// Conv (conv.hpp): a CudnnConv, or one on channels padded to multiples of 8 when cuDNN offers no
// algorithm for the convolution's own channel counts. The same file runs on a GPU and on the
// emulated device, where the cuDNN stand-in can be told to refuse such convolutions (tests).
#include <memory>
#include <string>

#include "conv.hpp"
#include "kernels.hpp"

namespace stoker::trainer::cudnn::gpu {
namespace {

int round_up8(int n) { return (n + 7) / 8 * 8; }

std::size_t pixels(std::size_t images, int h, int w) { return images * static_cast<std::size_t>(h) * w; }

}  // namespace

// The padded convolution's geometry and its own buffers, for the largest batch: x holds the input
// (or the input gradient), y the output (or the output gradient), w and dw the weights and their
// gradient (rows beyond K stay zero).
struct Conv::Padded {
  ConvGeometry g;
  std::string reason;  // what cuDNN refused
  DeviceBuffer x, y, w, dw;
};

Conv::Conv(CudnnHandle& handle, std::string name, const ConvGeometry& g, int max_images, bool fused_relu,
           std::size_t workspace_limit)
    : name_(std::move(name)), g_(g), max_images_(max_images), workspace_limit_(workspace_limit) {
  try {
    conv_ = std::make_unique<CudnnConv>(handle, name_, g, max_images, fused_relu, workspace_limit);
  } catch (const ConvNotSupported& why) {
    pad_channels(handle, why);
  }
}

Conv::~Conv() = default;

std::size_t Conv::device_bytes() const noexcept {
  return padded_ ? padded_->x.bytes() + padded_->y.bytes() + padded_->w.bytes() + padded_->dw.bytes() : 0;
}

void Conv::pad_channels(CudnnHandle& handle, const ConvNotSupported& why) {
  // Grouped convolutions keep their channel counts: padding would move channels between groups.
  if (padded_ || g_.groups != 1 || (g_.c % 8 == 0 && g_.oc % 8 == 0)) throw why;
  auto p = std::make_unique<Padded>();
  p->g = g_;
  p->g.c = round_up8(g_.c);
  p->g.oc = round_up8(g_.oc);
  p->reason = why.what();
  try {
    conv_ = std::make_unique<CudnnConv>(handle, name_, p->g, max_images_, false, workspace_limit_);
  } catch (const ConvNotSupported& again) {
    throw ConvNotSupported(std::string(why.what()) + "; nor with channels padded to " + std::to_string(p->g.c) +
                           " -> " + std::to_string(p->g.oc) + ": " + again.what());
  }
  const auto n = static_cast<std::size_t>(max_images_);
  const std::size_t weights = static_cast<std::size_t>(p->g.oc) * g_.kh * g_.kw * p->g.c;
  p->x = DeviceBuffer(pixels(n, g_.h, g_.w) * p->g.c * 2, "channel-padded convolution input");
  p->y = DeviceBuffer(pixels(n, g_.oh, g_.ow) * p->g.oc * 2, "channel-padded convolution output");
  p->w = DeviceBuffer(weights * 2, "channel-padded convolution weights");
  p->dw = DeviceBuffer(weights * 2, "channel-padded convolution weight gradient");
  memset_device_async(p->w.get(), 0, p->w.bytes(), handle.stream());  // the rows beyond K stay zero
  padded_ = std::move(p);
}

void Conv::widen_input(CudnnHandle& handle, int images, const void* x) {
  copy_channels(g_.storage, x, g_.c, padded_->x.get(), padded_->g.c,
                pixels(static_cast<std::size_t>(images), g_.h, g_.w), handle.stream());
}

void Conv::widen_weights(CudnnHandle& handle, const void* w) {
  // [K][kh][kw][C] -> the first K rows of [K8][kh][kw][C8].
  copy_channels(g_.storage, w, g_.c, padded_->w.get(), padded_->g.c, pixels(g_.oc, g_.kh, g_.kw), handle.stream());
}

void Conv::find(CudnnHandle& handle, const void* x, const void* w, void* y, void* workspace,
                std::size_t workspace_size) {
  if (!padded_) return conv_->find(handle, x, w, y, workspace, workspace_size);
  // Measured on the padded buffers (their values do not matter to the search).
  conv_->find(handle, padded_->x.get(), padded_->w.get(), padded_->y.get(), workspace, workspace_size);
}

std::string Conv::describe() const {
  std::string s = conv_->describe();
  if (padded_)
    s += "; channels padded " + std::to_string(g_.c) + " -> " + std::to_string(padded_->g.c) + ", " +
         std::to_string(g_.oc) + " -> " + std::to_string(padded_->g.oc) + " (" + padded_->reason + ")";
  return s;
}

void Conv::run(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* z, float z_scale,
               const void* bias, void* workspace, std::size_t workspace_size) {
  if (!padded_) return conv_->run(handle, images, x, w, y, z, z_scale, bias, workspace, workspace_size);
  widen_input(handle, images, x);
  widen_weights(handle, w);
  conv_->run(handle, images, padded_->x.get(), padded_->w.get(), padded_->y.get(), nullptr, 0.0f, nullptr, workspace,
             workspace_size);
  copy_channels(g_.storage, padded_->y.get(), padded_->g.oc, y, g_.oc,
                pixels(static_cast<std::size_t>(images), g_.oh, g_.ow), handle.stream());
}

std::size_t Conv::prepare_backward(CudnnHandle& handle, std::size_t workspace_limit) {
  try {
    return conv_->prepare_backward(handle, workspace_limit);
  } catch (const ConvNotSupported& why) {
    pad_channels(handle, why);  // the forward ran unpadded; now both directions run padded
    return conv_->prepare_backward(handle, workspace_limit);
  }
}

void Conv::backward_data(CudnnHandle& handle, int images, const void* dy, const void* w, void* dx, void* workspace,
                         std::size_t workspace_size) {
  if (!padded_) return conv_->backward_data(handle, images, dy, w, dx, workspace, workspace_size);
  const std::size_t out_pixels = pixels(static_cast<std::size_t>(images), g_.oh, g_.ow);
  copy_channels(g_.storage, dy, g_.oc, padded_->y.get(), padded_->g.oc, out_pixels, handle.stream());
  widen_weights(handle, w);
  conv_->backward_data(handle, images, padded_->y.get(), padded_->w.get(), padded_->x.get(), workspace, workspace_size);
  copy_channels(g_.storage, padded_->x.get(), padded_->g.c, dx, g_.c,
                pixels(static_cast<std::size_t>(images), g_.h, g_.w), handle.stream());
}

void Conv::backward_filter(CudnnHandle& handle, int images, const void* x, const void* dy, void* dw, void* workspace,
                           std::size_t workspace_size) {
  if (!padded_) return conv_->backward_filter(handle, images, x, dy, dw, workspace, workspace_size);
  widen_input(handle, images, x);
  copy_channels(g_.storage, dy, g_.oc, padded_->y.get(), padded_->g.oc,
                pixels(static_cast<std::size_t>(images), g_.oh, g_.ow), handle.stream());
  conv_->backward_filter(handle, images, padded_->x.get(), padded_->y.get(), padded_->dw.get(), workspace,
                         workspace_size);
  // The first K rows of [K8][kh][kw][C8] -> [K][kh][kw][C].
  copy_channels(g_.storage, padded_->dw.get(), padded_->g.c, dw, g_.c, pixels(g_.oc, g_.kh, g_.kw), handle.stream());
}

bool Conv::try_fused(CudnnHandle& handle, int images, const void* x, const void* w, void* y, const void* bias,
                     void* workspace, std::size_t workspace_size) {
  if (padded_) return false;
  return conv_->try_fused(handle, images, x, w, y, bias, workspace, workspace_size);
}

}  // namespace stoker::trainer::cudnn::gpu
