// The cuDNN backend: executes a lowered plan (plan.cpp) on the GPU. Convolutions (also depthwise as
// grouped, Dense as 1×1) go through cuDNN (conv.cpp, the only file with cuDNN calls), everything else
// through the small kernels in kernels.cu. Memory is allocated once, in the constructor, for
// max_batch samples: weights, one arena holding the plan's activation buffers, the explicit-padding
// scratch, the cuDNN workspace, an input buffer and float32 output buffers. Without CUDA (or
// without cuDNN) make_cudnn_backend() throws CudaError. On the emulated device (a build with
// STOKER_CUDA_EMULATION) this same class runs, with the kernels compiled for the host and
// emulated_conv.cpp in cuDNN's place.
#include <stoker/trainer/cudnn_backend.hpp>

#include <stoker/core/error.hpp>

#include "plan/plan.hpp"

#if defined(STOKER_HAVE_CUDNN)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>

#include <stoker/core/half.hpp>

#include "conv.hpp"
#include "kernels.hpp"
#include "ops/forward_math.hpp"
#endif

namespace stoker::trainer {

#if defined(STOKER_HAVE_CUDNN)
namespace {

using cudnn::Op;
using cudnn::OpType;

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool plain_relu(const ActivationSpec& a) {
  return a.kind == ActKind::ReLU && a.threshold == 0.0f && a.negative_slope == 0.0f && std::isinf(a.max_value) &&
         a.max_value > 0;
}

std::vector<std::uint16_t> to_storage_bits(const std::vector<float>& v, DType storage) {
  std::vector<std::uint16_t> bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    bits[i] = storage == DType::BF16 ? convert::bf16_bits(v[i]) : convert::f16_bits(v[i]);
  return bits;
}

class CudnnBackendImpl final : public CudnnBackend {
 public:
  // The device is chosen (device_) before the stream and the event are created on it.
  CudnnBackendImpl(cudnn::Plan plan, const CudnnBackendOptions& opt)
      : plan_(std::move(plan)), opt_(opt), device_(select_device(opt.device)) {
    const auto t0 = Clock::now();
    handle_ = std::make_unique<cudnn::gpu::CudnnHandle>();
    cold_start_.handle_ms = ms_since(t0);
    handle_->set_stream(stream_.get());
    allocate_and_upload();
    cold_start_.construction_ms = ms_since(t0);
  }

  ~CudnnBackendImpl() override {
    // The last call's work (maybe on a caller's stream) may still read the buffers and weights
    // freed below: wait for it. And leave the handle on our own stream, not a caller's that may
    // be destroyed before cudnnDestroy runs.
    try {
      DeviceGuard guard(device_);
      done_.synchronize();
      if (handle_) handle_->set_stream(stream_.get());
    } catch (...) {  // never throw from a destructor
    }
  }

  std::string name() const override {
    return std::string("cudnn ") + cudnn::gpu::cudnn_version_string() + " (" + to_string(opt_.storage) + ")";
  }
  int max_batch() const override { return opt_.max_batch; }
  std::size_t device_bytes() const override { return bytes_; }

  std::string describe() const override {
    std::lock_guard<std::mutex> lock(mu_);  // forward calls add per-batch cuDNN descriptors
    std::ostringstream s;
    s << name() << ", max batch " << opt_.max_batch << ", " << bytes_ << " device bytes; cold start: cudnnCreate "
      << cold_start_.handle_ms << " ms, algorithm choice " << cold_start_.choice_ms << " ms, construction "
      << cold_start_.construction_ms << " ms\n";
    std::istringstream lines(plan_.describe());
    std::string line;
    for (std::size_t i = 0; i < gops_.size() && std::getline(lines, line); ++i) {
      s << line;
      if (gops_[i].conv) s << "  " << gops_[i].conv->describe();
      s << "\n";
    }
    return s.str();
  }

  std::vector<Tensor> forward(const float* input, int batch) const override {
    if (batch < 0) cudnn::check_batch(batch, opt_.max_batch, input);
    if (batch > 0 && !input) throw InvalidArgument("cudnn backend: input is null");
    std::vector<Tensor> outs = cudnn::host_outputs(plan_, batch);
    // Host batches larger than max_batch run in chunks of max_batch.
    for (int b0 = 0; b0 < batch; b0 += opt_.max_batch) {
      const int nb = std::min(opt_.max_batch, batch - b0);
      std::lock_guard<std::mutex> lock(mu_);
      DeviceGuard guard(device_);
      const StreamHandle s = stream_.get();
      stream_wait(s, done_.get());
      copy_to_device_async(host_input_.get(), input + static_cast<std::size_t>(b0) * input_values(1),
                           input_values(nb) * sizeof(float), s);
      enqueue(host_input_.get(), DType::F32, nb, s);
      for (std::size_t k = 0; k < outs.size(); ++k) {
        const std::size_t per = plan_.slot_size[static_cast<std::size_t>(plan_.outputs[k])];
        copy_to_host_async(outs[k].data.data() + static_cast<std::size_t>(b0) * per, outputs_[k].get(),
                           per * static_cast<std::size_t>(nb) * sizeof(float), s);
      }
      done_.record(s);
      stream_.synchronize();
    }
    return outs;
  }

  std::vector<DeviceTensor> forward_device(const void* device_input, DType dtype, int batch,
                                           StreamHandle stream) const override {
    cudnn::check_batch(batch, opt_.max_batch, device_input);
    cudnn::check_device_dtype(dtype);
    std::vector<DeviceTensor> views = cudnn::output_views(plan_, outputs_, batch);
    if (batch == 0) return views;
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    stream_wait(stream, done_.get());  // the previous call's work (any stream) owns the buffers until then
    enqueue(device_input, dtype, batch, stream);
    done_.record(stream);
    return views;
  }

 private:
  struct GpuOp {
    const Op* op = nullptr;
    std::unique_ptr<cudnn::gpu::Conv> conv;
    DeviceBuffer weights;  // storage type, KRSC
    DeviceBuffer bias;     // float32 (own epilogue)
    DeviceBuffer bias_st;  // storage type (cuDNN's fused call)
    DeviceBuffer scale;    // float32 (Affine)
    cudnn::ActParams act;
  };

  cudnn::Plan plan_;
  CudnnBackendOptions opt_;
  int device_ = 0;
  mutable std::mutex mu_;
  Stream stream_;  // host forward() calls and construction (uploads)
  Event done_;     // recorded after each call's work: the next call's stream waits on it
  std::unique_ptr<cudnn::gpu::CudnnHandle> handle_;
  std::vector<GpuOp> gops_;
  DeviceBuffer arena_, input_, host_input_, scratch_, workspace_;
  std::vector<std::size_t> buffer_offset_;
  std::vector<DeviceBuffer> outputs_;
  std::size_t bytes_ = 0;
  // What a first use costs (describe()): a GPU's first cuDNN handle loads its kernels.
  using Clock = std::chrono::steady_clock;
  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  struct {
    double handle_ms = 0, choice_ms = 0, construction_ms = 0;
  } cold_start_;

  // Made under make_cudnn_backend's DeviceGuard: the current device is the backend's.
  static int select_device(int) { return current_device(); }

  std::size_t input_values(int batch) const {
    return plan_.slot_size[static_cast<std::size_t>(plan_.input_slot)] * static_cast<std::size_t>(batch);
  }
  std::size_t storage_bytes(std::size_t values) const { return values * dtype_size(opt_.storage); }

  DeviceBuffer upload(const void* host, std::size_t bytes, const char* what) {
    DeviceBuffer b(bytes, what);
    bytes_ += bytes;
    copy_to_device_async(b.get(), host, bytes, stream_.get());
    stream_.synchronize();  // the host vector dies after this call (construction only)
    return b;
  }

  void allocate_and_upload() {
    allocate_buffers();
    for (const Op& op : plan_.ops) gops_.push_back(upload_op(op));
    choose_algorithms();
    stream_.synchronize();
    done_.record(stream_);
  }

  void allocate_buffers() {
    const std::size_t nb = static_cast<std::size_t>(opt_.max_batch);
    // Activation buffers: one arena, each buffer aligned.
    std::size_t arena = 0;
    for (std::size_t sz : plan_.buffer_size) {
      buffer_offset_.push_back(arena);
      arena += align_up(storage_bytes(sz * nb));
    }
    arena_ = DeviceBuffer(arena, "cudnn backend activations");
    input_ = DeviceBuffer(storage_bytes(input_values(opt_.max_batch)), "cudnn backend input");
    host_input_ = DeviceBuffer(input_values(opt_.max_batch) * sizeof(float), "cudnn backend host-input staging");
    scratch_ = DeviceBuffer(storage_bytes(plan_.scratch_size * nb), "cudnn backend padding scratch");
    bytes_ += arena + input_.bytes() + host_input_.bytes() + scratch_.bytes();
    for (int s : plan_.outputs) {
      outputs_.emplace_back(plan_.slot_size[static_cast<std::size_t>(s)] * nb * sizeof(float), "cudnn backend output");
      bytes_ += outputs_.back().bytes();
    }
  }

  // The op's constants on the device and, for a cuDNN convolution, its descriptors.
  GpuOp upload_op(const Op& op) {
    GpuOp g;
    g.op = &op;
    g.act = cudnn::act_params(op.act);
    if (!op.bias.empty()) g.bias = upload(op.bias.data(), op.bias.size() * sizeof(float), "bias");
    if (!op.scale.empty()) g.scale = upload(op.scale.data(), op.scale.size() * sizeof(float), "scale");
    if (op.type != OpType::Conv) return g;
    if (op.depthwise_kernel) {  // float32 weights [kh][kw][oc], as the plan holds them
      g.weights = upload(op.weights.data(), op.weights.size() * sizeof(float), "depthwise weights");
      return g;
    }
    const auto bits = to_storage_bits(op.weights, opt_.storage);
    g.weights = upload(bits.data(), bits.size() * 2, "conv weights");
    const bool fused = opt_.cudnn_fused_relu && plain_relu(op.act);
    if (fused) {
      std::vector<float> b = op.bias;
      b.resize(static_cast<std::size_t>(op.oc), 0.0f);
      const auto bb = to_storage_bits(b, opt_.storage);
      g.bias_st = upload(bb.data(), bb.size() * 2, "conv bias (storage type)");
    }
    g.conv = std::make_unique<cudnn::gpu::Conv>(*handle_, op.name, cudnn::conv_geometry(op, opt_.storage),
                                                opt_.max_batch * op.rows, fused, opt_.workspace_limit);
    bytes_ += g.conv->device_bytes();
    return g;
  }

  void choose_algorithms() {
    const auto t0 = Clock::now();
    // Measure the algorithms on the real buffers with a temporary workspace of the limit (or a
    // quarter of the free memory), then keep only what the chosen ones need.
    std::size_t workspace = 0;
    {
      const std::size_t find_bytes = std::min(opt_.workspace_limit, device_memory_info().free / 4);
      DeviceBuffer find_ws(find_bytes, "cudnn algorithm search workspace");
      for (auto& g : gops_) {
        if (!g.conv) continue;
        const Op& op = *g.op;
        const void* x = op.explicit_pad ? scratch_.get() : value(op.in[0], input_.get());
        g.conv->find(*handle_, x, g.weights.get(), value(op.out, nullptr), find_ws.get(), find_ws.bytes());
        workspace = std::max(workspace, g.conv->workspace_bytes());
      }
      stream_.synchronize();
    }
    workspace_ = DeviceBuffer(workspace, "cudnn workspace");
    bytes_ += workspace;

    // Probe cuDNN's fused conv + bias + ReLU once per conv that would use it, at the largest batch
    // on the real buffers (values do not matter); where cuDNN refuses, the conv uses the plain call
    // and the own epilogue.
    for (auto& g : gops_) {
      if (!g.conv || !g.conv->fused()) continue;
      const Op& op = *g.op;
      const void* x = op.explicit_pad ? scratch_.get() : value(op.in[0], input_.get());
      g.conv->try_fused(*handle_, opt_.max_batch * op.rows, x, g.weights.get(), value(op.out, nullptr), g.bias_st.get(),
                        workspace_.get(), workspace_.bytes());
    }
    stream_.synchronize();
    cold_start_.choice_ms = ms_since(t0);
  }

  void* value(int slot, const void* input) const {
    if (slot == plan_.input_slot) return const_cast<void*>(input);
    const int b = plan_.slot_buffer[static_cast<std::size_t>(slot)];
    return static_cast<char*>(arena_.get()) + buffer_offset_[static_cast<std::size_t>(b)];
  }

  // A Conv op: the own depthwise kernel, or cuDNN (after the explicit padding) and the epilogue
  // unless cuDNN's fused call took it.
  void enqueue_conv(const GpuOp& g, const void* input, void* y, std::size_t nb, std::size_t total,
                    StreamHandle s) const {
    const Op& op = *g.op;
    const DType st = opt_.storage;
    const float* bias = g.bias.as<const float>();
    const void* x = value(op.in[0], input);
    const void* z = op.residual >= 0 ? value(op.residual, input) : nullptr;
    if (op.depthwise_kernel) {
      const cudnn::DepthwiseGeometry dg{op.h,  op.w,  op.c,  op.oh, op.ow,      op.oc,       op.kh,       op.kw,
                                        op.sh, op.sw, op.dh, op.dw, op.pad_top, op.pad_left, op.oc / op.c};
      cudnn::gpu::depthwise(st, x, g.weights.as<const float>(), bias, z, op.residual_scale, y, nb, dg, g.act, s);
      return;
    }
    const std::size_t images = nb * static_cast<std::size_t>(op.rows);
    if (op.explicit_pad) {
      cudnn::gpu::pad(st, x, scratch_.get(), images, op.h, op.w, op.c, op.padded_h(), op.padded_w(), op.pad_top,
                      op.pad_left, s);
      x = scratch_.get();
    }
    g.conv->run(*handle_, static_cast<int>(images), x, g.weights.get(), y, g.conv->fused() ? z : nullptr,
                op.residual_scale, g.bias_st.get(), workspace_.get(), workspace_.bytes());
    const bool epilogue = !g.conv->fused() && (bias || z || (!op.act.is_linear() && op.act.kind != ActKind::Softmax));
    if (epilogue) cudnn::gpu::affine(st, y, z, y, total, op.oc, nullptr, bias, op.residual_scale, g.act, s);
  }

  // Enqueues the whole plan on `s`; the caller holds mu_.
  void enqueue(const void* in, DType dtype, int batch, StreamHandle s) const {
    const DType st = opt_.storage;
    const std::size_t nb = static_cast<std::size_t>(batch);
    handle_->set_stream(s);
    const void* input = in;
    if (dtype != st) {
      cudnn::gpu::convert_input(in, dtype, input_.get(), st, input_values(batch), s);
      input = input_.get();
    }
    for (const GpuOp& g : gops_) {
      const Op& op = *g.op;
      void* y = value(op.out, input);
      const std::size_t total = plan_.slot_size[static_cast<std::size_t>(op.out)] * nb;
      const float* bias = g.bias.as<const float>();
      const float* scale = g.scale.as<const float>();
      switch (op.type) {
        case OpType::Conv: enqueue_conv(g, input, y, nb, total, s); break;
        case OpType::Pad:
          cudnn::gpu::pad(st, value(op.in[0], input), y, nb, op.h, op.w, op.c, op.oh, op.ow, op.pad_top, op.pad_left,
                          s);
          break;
        case OpType::Affine:
          cudnn::gpu::affine(st, value(op.in[0], input), op.in.size() > 1 ? value(op.in[1], input) : nullptr, y, total,
                             op.c, scale, bias, op.residual_scale, g.act, s);
          break;
        case OpType::Concat: {
          int offset = 0;
          for (std::size_t k = 0; k < op.in.size(); ++k) {
            cudnn::gpu::concat_part(st, value(op.in[k], input), y, nb * static_cast<std::size_t>(op.rows),
                                    op.in_channels[k], op.oc, offset, s);
            offset += op.in_channels[k];
          }
          break;
        }
        case OpType::MaxPool:
        case OpType::AvgPool: {
          const cudnn::PoolGeometry pg{op.h,  op.w,  op.c,  op.oh,      op.ow,      op.kh,
                                       op.kw, op.sh, op.sw, op.pad_top, op.pad_left};
          cudnn::gpu::pool(st, op.type == OpType::MaxPool, value(op.in[0], input), y, nb, pg, s);
          break;
        }
        case OpType::Gap:
          cudnn::gpu::global_average(st, value(op.in[0], input), y, nb, op.h * op.w, op.c, g.act, s);
          break;
        case OpType::Gmp: cudnn::gpu::global_max(st, value(op.in[0], input), y, nb, op.h * op.w, op.c, g.act, s); break;
        case OpType::LayerNorm:
          cudnn::gpu::layer_norm(st, value(op.in[0], input), y, total / static_cast<std::size_t>(op.c), op.c,
                                 op.epsilon, scale, bias, g.act, s);
          break;
        case OpType::Mul:
          cudnn::gpu::multiply(st, value(op.in[0], input), value(op.in[1], input), y, total,
                               static_cast<std::size_t>(op.h) * op.w * op.c, op.c, op.channel_broadcast, g.act, s);
          break;
      }
      if (op.act.kind == ActKind::Softmax)
        cudnn::gpu::softmax_rows(st, y, total / static_cast<std::size_t>(op.oc), op.oc, s);
    }
    for (std::size_t k = 0; k < plan_.outputs.size(); ++k) {
      const int slot = plan_.outputs[k];
      cudnn::gpu::to_float(value(slot, input), st, outputs_[k].as<float>(),
                           plan_.slot_size[static_cast<std::size_t>(slot)] * nb, s);
    }
  }
};

}  // namespace
#endif

bool built_with_cudnn() noexcept {
#if defined(STOKER_HAVE_CUDNN)
  return true;
#else
  return false;
#endif
}

std::string cudnn_description() {
#if defined(STOKER_HAVE_CUDNN)
  return cudnn::gpu::cudnn_environment();
#else
  return "not in this build (configure with STOKER_CUDNN=ON)";
#endif
}

std::shared_ptr<CudnnBackend> make_cudnn_backend(const Graph& graph, const CudnnBackendOptions& options) {
  if (options.max_batch < 1)
    throw InvalidArgument("cudnn backend: max_batch must be at least 1, received " + std::to_string(options.max_batch));
  if (options.storage != DType::F16 && options.storage != DType::BF16)
    throw InvalidArgument(std::string("cudnn backend: storage must be F16 or BF16, received ") +
                          to_string(options.storage));
  cudnn::PlanOptions po;
  po.fold_batch_norm = options.fold_batch_norm;
  po.fuse_activations = options.fuse_activations;
  po.fuse_residual_add = options.fuse_residual_add;
  po.cudnn_depthwise = options.cudnn_depthwise;
  cudnn::Plan plan = cudnn::lower_graph(graph, po);  // unsupported layers fail here, GPU or not
#if defined(STOKER_HAVE_CUDNN)
  require_cuda_device("cudnn backend");
  // Built on options.device; the caller's current device (which PyTorch shares) is given back.
  const DeviceGuard on(options.device);
  return std::make_shared<CudnnBackendImpl>(std::move(plan), options);
#elif defined(STOKER_HAVE_CUDA)
  (void)plan;
  throw CudaError(
      "cudnn backend: stoker was built without cuDNN (cudnn.h / libcudnn not found at configure time; "
      "see STOKER_CUDNN_ROOT); the CPU backend is still available",
      -1);
#else
  (void)plan;
  throw CudaError(
      "cudnn backend: stoker was built without CUDA (configure with a CUDA toolkit and cuDNN, "
      "STOKER_CUDA=ON); the CPU backend is still available",
      -1);
#endif
}

}  // namespace stoker::trainer
