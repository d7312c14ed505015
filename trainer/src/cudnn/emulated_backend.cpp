// The cuDNN backend on the emulated device (STOKER_CUDA_EMULATION, docs/gpu.md): the same lowered
// plan, run by its host executor with every stored value rounded to the storage type
// (run_plan_host), queued on the caller's stream like the GPU's work. It lets the command's GPU
// path (GpuFeed -> backbone -> features) and its checks run in tests without a GPU. It is not
// cuDNN: it says nothing about cuDNN's algorithms, and measures nothing.
#include "emulated_backend.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>

#include <stoker/core/detail/cuda_emulation.hpp>
#include <stoker/core/error.hpp>

namespace stoker::trainer::cudnn {
namespace {

class EmulatedCudnnBackend final : public CudnnBackend {
 public:
  EmulatedCudnnBackend(Plan plan, const CudnnBackendOptions& options) : plan_(std::move(plan)), opt_(options) {
    for (const auto& shape : plan_.output_shapes) {
      const std::size_t bytes = values(shape) * static_cast<std::size_t>(opt_.max_batch) * sizeof(float);
      outputs_.emplace_back(bytes, "the backbone's outputs");
      bytes_ += bytes;
    }
  }
  ~EmulatedCudnnBackend() override {
    try {
      done_.synchronize();  // the last call's work still writes the outputs
    } catch (...) {}
  }

  std::string name() const override {
    return std::string("cudnn emulated on the host (") + to_string(opt_.storage) + ")";
  }
  int max_batch() const override { return opt_.max_batch; }
  std::size_t device_bytes() const override { return bytes_; }
  std::string describe() const override {
    std::ostringstream s;
    s << name() << ", max batch " << opt_.max_batch << ": the plan's host executor, not cuDNN\n" << plan_.describe();
    return s.str();
  }

  std::vector<Tensor> forward(const float* input, int batch) const override {
    if (batch < 0) cudnn::check_batch(batch, opt_.max_batch, input);
    if (batch > 0 && !input) throw InvalidArgument("cudnn backend: input is null");
    std::vector<Tensor> outs = cudnn::host_outputs(plan_, batch);
    const std::size_t in_per = values(plan_.input_shape);
    for (int b0 = 0; b0 < batch; b0 += opt_.max_batch) {
      const int nb = std::min(opt_.max_batch, batch - b0);
      const auto part = run_plan_host(plan_, input + static_cast<std::size_t>(b0) * in_per, nb, opt_.storage);
      for (std::size_t k = 0; k < outs.size(); ++k) {
        std::copy(part[k].begin(), part[k].end(),
                  outs[k].data.begin() +
                      static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b0) * values(plan_.output_shapes[k])));
      }
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
    const DeviceGuard on(is_default_stream(stream) ? device_ : -1);  // a default stream is the backend's device's
    stream_wait(stream, done_.get());  // the previous call's work owns the outputs until then
    emulation::launch(stream, [this, device_input, dtype, batch] { run(device_input, dtype, batch); });
    done_.record(stream);
    return views;
  }

 private:
  static std::size_t values(const std::vector<int>& shape) { return Tensor::element_count(shape); }

  // The "kernels": on the stream's worker thread, reading the device input in place.
  void run(const void* device_input, DType dtype, int batch) const {
    const std::size_t n = values(plan_.input_shape) * static_cast<std::size_t>(batch);
    std::vector<float> x(n);
    if (dtype == DType::F32) {
      std::memcpy(x.data(), device_input, n * sizeof(float));
    } else {
      const auto* bits = static_cast<const std::uint16_t*>(device_input);
      for (std::size_t i = 0; i < n; ++i) x[i] = storage_to_float(bits[i], dtype);
    }
    const auto out = run_plan_host(plan_, x.data(), batch, opt_.storage);
    for (std::size_t k = 0; k < out.size(); ++k)
      std::memcpy(outputs_[k].get(), out[k].data(), out[k].size() * sizeof(float));
  }

  Plan plan_;
  CudnnBackendOptions opt_;
  int device_ = current_device();      // made under make_cudnn_backend's DeviceGuard: the backend's device
  std::vector<DeviceBuffer> outputs_;  // float32, max_batch samples each
  std::size_t bytes_ = 0;
  mutable std::mutex mu_;
  Event done_;  // recorded after each call's work
};

}  // namespace

std::shared_ptr<CudnnBackend> make_emulated_backend(Plan plan, const CudnnBackendOptions& options) {
  return std::make_shared<EmulatedCudnnBackend>(std::move(plan), options);
}

}  // namespace stoker::trainer::cudnn
