// The conversion's checks, parameters and host reference (convert.hpp); the kernel is in
// convert_kernel.cu.
#include "stoker/pipeline/convert.hpp"

#include "stoker/pipeline/device_stage.hpp"
#if defined(STOKER_CUDA_EMULATION)
#include "stoker/core/detail/cuda_emulation.hpp"
#endif

#include <string>

namespace stoker {

ConvertSpec ConvertSpec::normalize(DType dtype, Layout layout, std::array<float, 3> mean, std::array<float, 3> std) {
  ConvertSpec s;
  s.dtype = dtype;
  s.layout = layout;
  for (int c = 0; c < 3; ++c) {
    if (!(std[c] > 0.0f))
      throw InvalidArgument("ConvertSpec::normalize: std[" + std::to_string(c) + "] must be > 0, received " +
                            std::to_string(std[c]));
    s.scale[c] = 1.0f / std[c];
    s.offset[c] = -mean[c] / std[c];
  }
  return s;
}

ConvertSpec ConvertSpec::rescale(DType dtype, Layout layout, float factor) {
  ConvertSpec s;
  s.dtype = dtype;
  s.layout = layout;
  s.scale.fill(factor);
  return s;
}

void check_convert(const ConvertSpec& spec, const SampleShape& in) {
  if (in.dtype != DType::U8 || in.layout != Layout::NHWC) {
    throw InvalidArgument(std::string("conversion: the input must be u8 NHWC, received ") + to_string(in.dtype) + " " +
                          to_string(in.layout));
  }
  if (in.channels < 1 || in.channels > kMaxConvertChannels) {
    throw InvalidArgument("conversion: 1 to 4 channels are supported, received " + std::to_string(in.channels));
  }
  if (in.height < 1 || in.width < 1) {
    throw InvalidArgument("conversion: empty sample shape " + std::to_string(in.height) + "x" +
                          std::to_string(in.width));
  }
  if (spec.dtype == DType::U8) {
    for (int c = 0; c < in.channels; ++c) {
      if (spec.scale[c] != 1.0f || spec.offset[c] != 0.0f) {
        throw InvalidArgument("conversion: u8 output cannot hold scaled values; use f32, f16 or bf16");
      }
    }
  }
}

namespace convert {
ConvertParams make_params(const ConvertSpec& spec, const SampleShape& in) {
  check_convert(spec, in);
  ConvertParams p;
  p.height = in.height;
  p.width = in.width;
  p.channels = in.channels;
  p.dtype = spec.dtype;
  p.nchw = spec.layout == Layout::NCHW;
  for (int c = 0; c < kMaxConvertChannels; ++c) {
    p.scale[c] = spec.scale[c];
    p.offset[c] = spec.offset[c];
  }
  return p;
}
}  // namespace convert

void convert_batch_host(const ConvertSpec& spec, const SampleShape& in_shape, int batch, const std::uint8_t* in,
                        void* out) {
  const convert::ConvertParams p = convert::make_params(spec, in_shape);
  const std::size_t per = in_shape.elements();
  for (int n = 0; n < batch; ++n) {
    const std::uint8_t* src = in + per * static_cast<std::size_t>(n);
    for (std::size_t e = 0; e < per; ++e) {
      const int c = static_cast<int>(e % static_cast<std::size_t>(p.channels));
      convert::store(p.dtype, out, convert::output_offset(p, static_cast<std::size_t>(n), e),
                     convert::value(p, c, src[e]));
    }
  }
}

#if defined(STOKER_CUDA_EMULATION)
void convert_batch(const ConvertSpec& spec, const SampleShape& in_shape, int batch, const std::uint8_t* in_device,
                   void* out_device, StreamHandle stream) {
  convert::make_params(spec, in_shape);  // checks now, as the kernel's launch does
  if (batch <= 0) return;
  emulation::launch(stream, [=] { convert_batch_host(spec, in_shape, batch, in_device, out_device); });
  STOKER_CUDA_CHECK_LAUNCH("convert_kernel");
}
#elif !defined(STOKER_HAVE_CUDA)
void convert_batch(const ConvertSpec&, const SampleShape&, int, const std::uint8_t*, void*, StreamHandle) {
  require_cuda_device("convert_batch");
}
#endif

}  // namespace stoker

// ---- the conversion as a GpuFeed stage ----------------------------------------------------------

namespace stoker {
namespace {

class ConvertSlot final : public DeviceStageSlot {
 public:
  explicit ConvertSlot(const ConvertSpec& spec) : spec_(spec) {}
  void run(const DeviceStageInput& in, void* out, StreamHandle stream) override {
    convert_batch(spec_, in.shape, in.size, in.pixels, out, stream);
  }

 private:
  ConvertSpec spec_;
};

class ConvertStage final : public DeviceStage {
 public:
  explicit ConvertStage(const ConvertSpec& spec) : spec_(spec) {}
  const char* name() const noexcept override { return "convert"; }
  SampleShape output_shape(const SampleShape& input) const override {
    check_convert(spec_, input);
    return spec_.output_shape(input);
  }
  std::size_t workspace_bytes(const SampleShape&, int) const override { return 0; }
  std::unique_ptr<DeviceStageSlot> make_slot(const SampleShape& input, int) const override {
    check_convert(spec_, input);
    return std::make_unique<ConvertSlot>(spec_);
  }

 private:
  ConvertSpec spec_;
};

}  // namespace

std::shared_ptr<const DeviceStage> make_convert_stage(const ConvertSpec& spec) {
  return std::make_shared<ConvertStage>(spec);
}

}  // namespace stoker
