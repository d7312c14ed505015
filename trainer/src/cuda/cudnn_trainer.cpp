// The GPU trainer (train_plan.hpp) on cuDNN: every slot's value in bf16 and its gradient in
// float32 on the device, allocated once for max_batch; convolutions through cuDNN (forward,
// backward-data, backward-filter, deterministic algorithms first), the rest through the backend's
// kernels (kernels.cu) and the backward kernels (backward_kernels.cu). One stream; forward() and
// backward() return when their results are on the host. Without CUDA or cuDNN
// make_gpu_train_executor() throws CudaError. On the emulated device this same executor runs, with
// the kernels compiled for the host and emulated_conv.cpp in cuDNN's place; the cuDNN calls
// themselves (conv.cpp) run only on a GPU (scripts/gpu_check.sh).
#include "plan/train_plan.hpp"

#include <stoker/core/cuda.hpp>
#include <stoker/core/error.hpp>

#if defined(STOKER_HAVE_CUDNN)
#include <algorithm>

#include <stoker/core/half.hpp>

#include "backward_kernels.hpp"
#include "conv.hpp"
#include "kernels.hpp"
#endif

namespace stoker::trainer::cudnn {

#if defined(STOKER_HAVE_CUDNN)
namespace {

constexpr DType kStorage = DType::BF16;

std::size_t blocks_of(std::size_t rows) { return (rows + kSumRows - 1) / kSumRows; }

class CudnnTrainExecutor final : public detail::TrainExecutor {
 public:
  CudnnTrainExecutor(const TrainLowering& lowering, const GpuTrainOptions& opt)
      : t_(plan_training(lowering)), opt_(opt), device_(pick_device(opt.device)) {
    handle_ = std::make_unique<gpu::CudnnHandle>();
    handle_->set_stream(stream_.get());
    allocate();
    upload_weights();
  }
  ~CudnnTrainExecutor() override {
    // Every call waits for its work, but one that threw midway may have left kernels queued that
    // read the buffers freed below.
    try {
      const DeviceGuard on(device_);
      stream_.synchronize();
    } catch (...) {  // never throw from a destructor
    }
  }

  std::string name() const override {
    std::string n = "cudnn " + gpu::cudnn_version_string() + " trainer (bf16)";
    std::size_t varying = 0;  // convolutions whose gradients may differ between runs
    for (const GpuOp& g : gops_) varying += g.conv && !g.conv->backward_deterministic();
    if (varying > 0) n += "; " + std::to_string(varying) + " convolutions with a non-deterministic backward";
    return n;
  }
  std::size_t memory_bytes(int /*batch*/) const override { return bytes_; }

  void set_weights(const TrainLowering& lowering) override {
    refresh_weights(t_, lowering.steps);
    upload_weights();
  }

  const float* forward(const float* x, int batch, const std::vector<const float*>& masks) override {
    if (batch < 1 || batch > opt_.max_batch)
      throw InvalidArgument("gpu fine-tuning: batch " + std::to_string(batch) + " is outside 1.." +
                            std::to_string(opt_.max_batch) + " (GpuTrainOptions::max_batch)");
    const DeviceGuard on(device_);
    nb_ = static_cast<std::size_t>(batch);
    const StreamHandle s = stream_.get();
    handle_->set_stream(s);
    upload(t_.plan.input_slot, x);
    for (std::size_t k = 0; k < t_.mask_slot.size(); ++k)
      if (t_.mask_slot[k] >= 0) upload(t_.mask_slot[k], masks.at(k));
    for (const GpuOp& g : gops_) {
      forward_op(g, s);
      const Op& op = *g.op;
      if (op.act.kind == ActKind::Softmax)
        gpu::softmax_rows(kStorage, value(op.out), total(op.out) / static_cast<std::size_t>(op.oc), op.oc, s);
    }
    const std::size_t n = total(t_.output_slot);
    gpu::to_float(value(t_.output_slot), kStorage, staging_.as<float>(), n, s);
    output_.resize(n);
    copy_to_host_async(output_.data(), staging_.get(), n * sizeof(float), s);
    stream_.synchronize();
    return output_.data();
  }

  void backward(const float* doutput, std::vector<detail::OpGradients>& gradients) override {
    const DeviceGuard on(device_);
    const StreamHandle s = stream_.get();
    for (std::size_t slot = 0; slot < grads_.size(); ++slot)
      if (grads_[slot].get()) memset_device_async(grads_[slot].get(), 0, total(static_cast<int>(slot)) * 4, s);
    copy_to_device_async(grad(t_.output_slot), doutput, total(t_.output_slot) * sizeof(float), s);
    for (std::size_t k = gops_.size(); k-- > 0;) {
      detail::OpGradients* g = t_.main_op[k] ? &gradients.at(static_cast<std::size_t>(t_.step_of[k])) : nullptr;
      backward_op(gops_[k], g, s);
    }
    // The parameter gradients to the host (KRSC back to Keras order for cuDNN's convolutions).
    std::vector<std::pair<std::size_t, std::vector<float>>> krsc;
    krsc.reserve(gops_.size());
    for (std::size_t k = 0; k < gops_.size(); ++k) {
      if (!t_.main_op[k]) continue;
      detail::OpGradients& g = gradients.at(static_cast<std::size_t>(t_.step_of[k]));
      const GpuOp& op = gops_[k];
      if (!g.weights.empty()) {
        if (op.conv) {
          krsc.emplace_back(k, std::vector<float>(g.weights.size()));
          copy_to_host_async(krsc.back().second.data(), op.dweights.get(), g.weights.size() * 4, s);
        } else {
          copy_to_host_async(g.weights.data(), op.dweights.get(), g.weights.size() * 4, s);
        }
      }
      if (!g.bias.empty()) copy_to_host_async(g.bias.data(), op.dbias.get(), g.bias.size() * 4, s);
      if (!g.scale.empty()) copy_to_host_async(g.scale.data(), op.dscale.get(), g.scale.size() * 4, s);
    }
    stream_.synchronize();
    for (auto& [k, v] : krsc)
      gradients.at(static_cast<std::size_t>(t_.step_of[k])).weights = from_krsc(v, t_.plan.ops[k].oc);
  }

 private:
  // The plan's weights (refresh_weights) to the device.
  void upload_weights() {
    const DeviceGuard on(device_);
    const StreamHandle s = stream_.get();
    for (std::size_t k = 0; k < gops_.size(); ++k) {
      GpuOp& g = gops_[k];
      const Op& src = t_.plan.ops[k];
      if (!src.weights.empty()) {
        if (g.conv) {
          staged_bits_[k] = to_bits(src.weights);
          copy_to_device_async(g.weights.get(), staged_bits_[k].data(), staged_bits_[k].size() * 2, s);
        } else {
          copy_to_device_async(g.weights.get(), src.weights.data(), src.weights.size() * sizeof(float), s);
        }
      }
      if (!src.bias.empty()) copy_to_device_async(g.bias.get(), src.bias.data(), src.bias.size() * sizeof(float), s);
      if (!src.scale.empty())
        copy_to_device_async(g.scale.get(), src.scale.data(), src.scale.size() * sizeof(float), s);
    }
    stream_.synchronize();  // the host vectors may change after this call
  }

  struct GpuOp {
    const Op* op = nullptr;
    std::unique_ptr<gpu::Conv> conv;       // cuDNN's convolutions (not the own depthwise kernel)
    DeviceBuffer weights;                  // bf16 KRSC (cuDNN) or float32 [kh][kw][oc] (depthwise)
    DeviceBuffer bias, scale;              // float32
    DeviceBuffer dweights_bf16;            // cuDNN's backward-filter result
    DeviceBuffer dweights, dbias, dscale;  // float32 parameter gradients
  };

  // The device is chosen (and made current, as make_cudnn_backend does) before the stream is made.
  // Made under make_gpu_train_executor's DeviceGuard: the current device is the trainer's.
  static int pick_device(int) { return current_device(); }

  static std::vector<std::uint16_t> to_bits(const std::vector<float>& v) {
    std::vector<std::uint16_t> bits(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = convert::bf16_bits(v[i]);
    return bits;
  }

  DeviceBuffer take(std::size_t bytes, const char* what) {
    bytes_ += bytes;
    return DeviceBuffer(std::max<std::size_t>(bytes, 4), what);
  }

  void allocate() {
    const std::size_t mb = static_cast<std::size_t>(opt_.max_batch);
    const Plan& p = t_.plan;
    for (std::size_t slot = 0; slot < p.slot_size.size(); ++slot) {
      const std::size_t n = p.slot_size[slot] * mb;
      values_.push_back(n ? take(n * 2, "gpu fine-tuning values") : DeviceBuffer());
      const bool needs = t_.needs_gradient[slot] || static_cast<int>(slot) == t_.output_slot;
      grads_.push_back(n && needs ? take(n * 4, "gpu fine-tuning gradients") : DeviceBuffer());
    }
    std::size_t partial = 0, workspace = 0;
    staged_bits_.resize(p.ops.size());
    for (const Op& op : p.ops) {
      GpuOp g;
      g.op = &op;
      const std::size_t out_values = p.slot_size[static_cast<std::size_t>(op.out)] * mb;
      if (!op.weights.empty()) {
        g.weights = take(op.weights.size() * (op.type == OpType::Conv && !op.depthwise_kernel ? 2 : 4), "weights");
        g.dweights = take(op.weights.size() * 4, "weight gradients");
      }
      if (!op.bias.empty()) {
        g.bias = take(op.bias.size() * 4, "bias");
        g.dbias = take(op.bias.size() * 4, "bias gradients");
        partial = std::max(partial, (blocks_of(out_values / static_cast<std::size_t>(op.oc)) + 1) * op.bias.size());
      }
      if (!op.scale.empty()) {
        g.scale = take(op.scale.size() * 4, "scale");
        g.dscale = take(op.scale.size() * 4, "scale gradients");
      }
      if (op.type == OpType::Affine || op.type == OpType::LayerNorm)
        partial = std::max(
            partial, (blocks_of(out_values / static_cast<std::size_t>(op.c)) + 1) * static_cast<std::size_t>(op.c));
      if (op.type == OpType::Conv && op.depthwise_kernel)
        partial = std::max(partial, (blocks_of(mb * op.oh * op.ow) + 1) * op.weights.size());
      if (op.type == OpType::Conv && !op.depthwise_kernel) {
        g.conv = std::make_unique<gpu::Conv>(*handle_, op.name, conv_geometry(op, kStorage), opt_.max_batch * op.rows,
                                             false, opt_.workspace_limit);
        workspace = std::max(workspace, g.conv->prepare_backward(*handle_, opt_.workspace_limit));
        bytes_ += g.conv->device_bytes();
        g.dweights_bf16 = take(op.weights.size() * 2, "weight gradients (bf16)");
      }
      gops_.push_back(std::move(g));
    }
    const std::size_t largest = t_.max_values * mb;
    staging_ = take(largest * 4, "gpu fine-tuning staging (float32)");
    fscratch_ = take(largest * 4, "gpu fine-tuning scratch (float32)");
    dy_bf16_ = take(largest * 2, "gpu fine-tuning gradient (bf16)");
    conv_scratch_ = take(t_.max_conv_input * mb * 2, "gpu fine-tuning padded input");
    dx_bf16_ = take(t_.max_conv_input * mb * 2, "gpu fine-tuning input gradient (bf16)");
    partial_ = take(partial * 4, "gpu fine-tuning partial sums");
    workspace_ = take(workspace, "cudnn workspace (training)");
  }

  std::size_t total(int slot) const { return t_.plan.slot_size[static_cast<std::size_t>(slot)] * nb_; }
  void* value(int slot) const { return values_[static_cast<std::size_t>(slot)].get(); }
  float* grad(int slot) const { return grads_[static_cast<std::size_t>(slot)].as<float>(); }

  void upload(int slot, const float* host) {
    const std::size_t n = total(slot);
    copy_to_device_async(staging_.get(), host, n * sizeof(float), stream_.get());
    gpu::convert_input(staging_.get(), DType::F32, value(slot), kStorage, n, stream_.get());
  }

  static DepthwiseGeometry depthwise_geometry(const Op& op) {
    return {op.h,  op.w,  op.c,  op.oh, op.ow,      op.oc,       op.kh,       op.kw,
            op.sh, op.sw, op.dh, op.dw, op.pad_top, op.pad_left, op.oc / op.c};
  }
  std::size_t images(const Op& op) const { return nb_ * static_cast<std::size_t>(op.rows); }
  // A cuDNN convolution's input: the slot, or its explicit padding in the scratch.
  const void* conv_input(const Op& op, StreamHandle s) const {
    if (!op.explicit_pad) return value(op.in[0]);
    gpu::pad(kStorage, value(op.in[0]), conv_scratch_.get(), images(op), op.h, op.w, op.c, op.padded_h(), op.padded_w(),
             op.pad_top, op.pad_left, s);
    return conv_scratch_.get();
  }

  void forward_op(const GpuOp& g, StreamHandle s) {
    const Op& op = *g.op;
    void* y = value(op.out);
    const std::size_t n = total(op.out);
    const ActParams act = act_params(op.act);
    const float* bias = g.bias.as<const float>();
    const float* scale = g.scale.as<const float>();
    switch (op.type) {
      case OpType::Conv:
        if (op.depthwise_kernel) {
          gpu::depthwise(kStorage, value(op.in[0]), g.weights.as<const float>(), bias, nullptr, 1.0f, y, nb_,
                         depthwise_geometry(op), act, s);
          return;
        }
        g.conv->run(*handle_, static_cast<int>(images(op)), conv_input(op, s), g.weights.get(), y, nullptr, 1.0f,
                    nullptr, workspace_.get(), workspace_.bytes());
        if (bias) gpu::affine(kStorage, y, nullptr, y, n, op.oc, nullptr, bias, 1.0f, act, s);
        return;
      case OpType::Pad:
        gpu::pad(kStorage, value(op.in[0]), y, nb_, op.h, op.w, op.c, op.oh, op.ow, op.pad_top, op.pad_left, s);
        return;
      case OpType::Affine:
        gpu::affine(kStorage, value(op.in[0]), op.in.size() > 1 ? value(op.in[1]) : nullptr, y, n, op.c, scale, bias,
                    op.residual_scale, act, s);
        return;
      case OpType::Concat: {
        int offset = 0;
        for (std::size_t k = 0; k < op.in.size(); ++k) {
          gpu::concat_part(kStorage, value(op.in[k]), y, images(op), op.in_channels[k], op.oc, offset, s);
          offset += op.in_channels[k];
        }
        return;
      }
      case OpType::MaxPool:
      case OpType::AvgPool:
        gpu::pool(kStorage, op.type == OpType::MaxPool, value(op.in[0]), y, nb_, pool_geometry(op), s);
        return;
      case OpType::Gap: gpu::global_average(kStorage, value(op.in[0]), y, nb_, op.h * op.w, op.c, act, s); return;
      case OpType::Gmp: gpu::global_max(kStorage, value(op.in[0]), y, nb_, op.h * op.w, op.c, act, s); return;
      case OpType::LayerNorm:
        gpu::layer_norm(kStorage, value(op.in[0]), y, n / static_cast<std::size_t>(op.c), op.c, op.epsilon, scale, bias,
                        act, s);
        return;
      case OpType::Mul:
        gpu::multiply(kStorage, value(op.in[0]), value(op.in[1]), y, n, static_cast<std::size_t>(op.h) * op.w * op.c,
                      op.c, op.channel_broadcast, act, s);
        return;
    }
  }

  static PoolGeometry pool_geometry(const Op& op) {
    return {op.h, op.w, op.c, op.oh, op.ow, op.kh, op.kw, op.sh, op.sw, op.pad_top, op.pad_left};
  }

  void column_sums(const float* a, const void* b, DType b_type, std::size_t n, int c, const DeviceBuffer& out,
                   StreamHandle s) {
    gpu::column_sums(a, b, b_type, n / static_cast<std::size_t>(c), c, partial_.as<float>(), out.as<float>(), s);
  }

  void backward_op(const GpuOp& g, detail::OpGradients* want, StreamHandle s) {
    const Op& op = *g.op;
    const float* dy = grad(op.out);
    if (!dy) return;
    const std::size_t n = total(op.out);
    float* dx = op.in.empty() ? nullptr : grad(op.in[0]);
    const bool weights = want && !want->weights.empty(), bias = want && !want->bias.empty();
    const bool scale = want && !want->scale.empty();
    switch (op.type) {
      case OpType::Conv: {
        if (op.depthwise_kernel) {
          const DepthwiseGeometry dg = depthwise_geometry(op);
          if (dx) gpu::depthwise_backward_input(dy, g.weights.as<const float>(), dx, nb_, dg, s);
          if (weights)
            gpu::depthwise_backward_weights(kStorage, value(op.in[0]), dy, nb_, dg, partial_.as<float>(),
                                            g.dweights.as<float>(), s);
          if (bias) column_sums(dy, nullptr, DType::F32, n, op.oc, g.dbias, s);
          return;
        }
        const int imgs = static_cast<int>(images(op));
        gpu::convert_input(dy, DType::F32, dy_bf16_.get(), kStorage, n, s);
        if (dx) {
          g.conv->backward_data(*handle_, imgs, dy_bf16_.get(), g.weights.get(), dx_bf16_.get(), workspace_.get(),
                                workspace_.bytes());
          if (op.explicit_pad)
            gpu::pad_backward(kStorage, dx_bf16_.get(), dx, images(op),
                              PadGeometry{op.h, op.w, op.c, op.padded_h(), op.padded_w(), op.pad_top, op.pad_left}, s);
          else gpu::add_storage(kStorage, dx_bf16_.get(), dx, total(op.in[0]), s);
        }
        if (weights) {
          g.conv->backward_filter(*handle_, imgs, conv_input(op, s), dy_bf16_.get(), g.dweights_bf16.get(),
                                  workspace_.get(), workspace_.bytes());
          gpu::to_float(g.dweights_bf16.get(), kStorage, g.dweights.as<float>(), op.weights.size(), s);
        }
        if (bias) column_sums(dy, nullptr, DType::F32, n, op.oc, g.dbias, s);
        return;
      }
      case OpType::Pad:
        if (dx)
          gpu::pad_backward(DType::F32, dy, dx, nb_,
                            PadGeometry{op.h, op.w, op.c, op.oh, op.ow, op.pad_top, op.pad_left}, s);
        return;
      case OpType::Affine: {
        if (op.act.kind == ActKind::Softmax) {  // a split-off Softmax: no parameters
          if (dx) gpu::softmax_backward(kStorage, value(op.out), dy, dx, n / static_cast<std::size_t>(op.oc), op.oc, s);
          return;
        }
        const bool has_z = op.in.size() > 1;
        float* dv = scale || bias ? fscratch_.as<float>() : nullptr;
        gpu::affine_backward(kStorage, value(op.in[0]), has_z ? value(op.in[1]) : nullptr, value(op.out), dy,
                             op.out == op.in[0] ? nullptr : dx, has_z ? grad(op.in[1]) : nullptr, dv, n, op.c,
                             g.scale.as<const float>(), g.bias.as<const float>(), op.residual_scale, act_params(op.act),
                             s);
        if (scale) column_sums(dv, value(op.in[0]), kStorage, n, op.c, g.dscale, s);
        if (bias) column_sums(dv, nullptr, DType::F32, n, op.c, g.dbias, s);
        return;
      }
      case OpType::Concat: {
        int offset = 0;
        for (std::size_t k = 0; k < op.in.size(); ++k) {
          if (float* dk = grad(op.in[k])) gpu::concat_backward(dy, dk, images(op), op.in_channels[k], op.oc, offset, s);
          offset += op.in_channels[k];
        }
        return;
      }
      case OpType::MaxPool:
      case OpType::AvgPool:
        if (dx)
          gpu::pool_backward(kStorage, op.type == OpType::MaxPool, value(op.in[0]), dy, dx, nb_, pool_geometry(op), s);
        return;
      case OpType::Gap:
      case OpType::Gmp:
        if (dx)
          gpu::global_pool_backward(kStorage, op.type == OpType::Gmp, value(op.in[0]), dy, dx, nb_, op.h * op.w, op.c,
                                    s);
        return;
      case OpType::Mul:
        gpu::mul_backward(kStorage, value(op.in[0]), value(op.in[1]), dy, dx, grad(op.in[1]), n,
                          static_cast<std::size_t>(op.h) * op.w * op.c, op.c, op.channel_broadcast, s);
        return;
      case OpType::LayerNorm:
        gpu::layer_norm_backward(kStorage, value(op.in[0]), dy, dx, fscratch_.as<float>(),
                                 n / static_cast<std::size_t>(op.c), op.c, op.epsilon, g.scale.as<const float>(), s);
        if (scale) column_sums(dy, fscratch_.get(), DType::F32, n, op.c, g.dscale, s);
        if (bias) column_sums(dy, nullptr, DType::F32, n, op.c, g.dbias, s);
        return;
    }
  }

  TrainPlan t_;
  GpuTrainOptions opt_;
  int device_;
  std::size_t nb_ = 0, bytes_ = 0;
  Stream stream_;
  std::unique_ptr<gpu::CudnnHandle> handle_;
  std::vector<GpuOp> gops_;
  std::vector<std::vector<std::uint16_t>> staged_bits_;  // bf16 weights while they are uploaded
  std::vector<DeviceBuffer> values_, grads_;
  DeviceBuffer staging_, fscratch_, dy_bf16_, conv_scratch_, dx_bf16_, partial_, workspace_;
  std::vector<float> output_;
};

}  // namespace
#endif

std::unique_ptr<detail::TrainExecutor> make_gpu_train_executor(const TrainLowering& lowering,
                                                               const GpuTrainOptions& options) {
  if (options.max_batch < 1)
    throw InvalidArgument("gpu fine-tuning: max_batch must be at least 1, received " +
                          std::to_string(options.max_batch));
#if defined(STOKER_HAVE_CUDNN)
  require_cuda_device("gpu fine-tuning");
  // Built on options.device; the caller's current device is given back.
  const DeviceGuard on(options.device);
  return std::make_unique<CudnnTrainExecutor>(lowering, options);
#else
  (void)lowering;
  throw CudaError("gpu fine-tuning: stoker was built without CUDA and cuDNN; the CPU trains instead", -1);
#endif
}

}  // namespace stoker::trainer::cudnn
