// The host half of the CUDA executor: checks, the job table (parameters drawn with the CPU
// executor's Augmenter::params), the launches, the host emulation of the kernel and the GpuFeed
// stage. The kernels are in cuda_augmenter.cu (built only with CUDA).
#include "stoker/augment/cuda_augmenter.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_launch.hpp"
#include "stoker/core/error.hpp"
#if defined(STOKER_CUDA_EMULATION)
#include "stoker/core/detail/cuda_emulation.hpp"
#endif

namespace stoker {

using augment::SampleJob;

// Both travel by value or by memcpy to the device.
static_assert(std::is_trivially_copyable_v<SampleJob>, "the job table is copied to the device as bytes");
static_assert(std::is_trivially_copyable_v<augment::AugmentPlan>, "the plan is a kernel argument");
static_assert(sizeof(SampleJob) % 8 == 0, "the kernels copy a job as 8-byte words");

std::size_t CudaAugmentWorkspace::device_bytes_for(int capacity) noexcept {
  return sizeof(SampleJob) * static_cast<std::size_t>(capacity);
}

CudaAugmentWorkspace::CudaAugmentWorkspace(int capacity)
    : capacity_(capacity),
      host_(device_bytes_for(capacity > 0 ? capacity : 1), "the augmentation job table"),
      device_(device_bytes_for(capacity > 0 ? capacity : 1), "the augmentation job table") {
  if (capacity < 1)
    throw InvalidArgument("CudaAugmentWorkspace: capacity must be >= 1, received " + std::to_string(capacity));
}

CudaAugmenter::CudaAugmenter(std::shared_ptr<const Augmenter> augmenter, std::optional<DType> dtype)
    : augmenter_(std::move(augmenter)) {
  if (!augmenter_) throw InvalidArgument("CudaAugmenter: augmenter is null");
  const AugmentSpec& spec = augmenter_->spec();
  if (spec.preprocessing_function) {
    throw InvalidArgument("CudaAugmenter: a preprocessing_function runs on the CPU only; use the CPU executor");
  }
  shape_ = augmenter_->output_shape();
  if (dtype) {
    const bool float_spec = augmenter_->plan().float_output;
    if ((*dtype == DType::U8) == float_spec) {
      throw InvalidArgument(std::string("CudaAugmenter: output dtype ") + to_string(*dtype) +
                            " does not fit a spec with " + to_string(shape_.dtype) +
                            " output (f16 and bf16 need a float spec)");
    }
    shape_.dtype = *dtype;
  }
  output_.dtype = shape_.dtype;
  output_.sample_elements = shape_.elements();
}

void CudaAugmenter::check_image(int i, int height, int width, std::size_t row_stride) const {
  const int cn = augmenter_->plan().channels;
  if (height < 1 || width < 1) {
    throw InvalidArgument("CudaAugmenter: image " + std::to_string(i) + " is empty (" + std::to_string(width) + "x" +
                          std::to_string(height) + ")");
  }
  if (row_stride < static_cast<std::size_t>(width) * static_cast<std::size_t>(cn)) {
    throw InvalidArgument("CudaAugmenter: image " + std::to_string(i) + " has row_stride " +
                          std::to_string(row_stride) + ", below width * channels = " + std::to_string(width * cn));
  }
}

namespace {

void check_box(int i, const augment::SampleParams& s, int height, int width) {
  if (!(s.crop_x >= 0 && s.crop_y >= 0 && s.crop_w >= 1 && s.crop_h >= 1 && s.crop_x + s.crop_w <= width &&
        s.crop_y + s.crop_h <= height)) {
    throw InvalidArgument("CudaAugmenter: the crop box of sample " + std::to_string(i) + " (" +
                          std::to_string(s.crop_w) + "x" + std::to_string(s.crop_h) + "+" + std::to_string(s.crop_x) +
                          "+" + std::to_string(s.crop_y) + ") is not inside its " + std::to_string(width) + "x" +
                          std::to_string(height) + " source");
  }
}

// The kernels' work for one job on the host: the statistics pass (integer min/max/luma reduce to
// the same values in any order; the sample sums in sequential order, within rounding of the
// kernel's tree) and the output pixels. run_on_host and the emulated launches share them.
void job_stats_on_host(const augment::AugmentPlan& p, SampleJob& j, bool warp_stats, bool sample_stats) {
  const int w = p.out_width, h = p.out_height, cn = p.channels;
  if (warp_stats && augment::needs_warp_stats(j.params)) {
    augment::StatsPartial s;
    std::uint8_t u[augment::kMaxChannels];
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        augment::job_warp(p, j, x, y, u);
        s.add(u, cn);
      }
    augment::finish_warp_stats(j, s);
  }
  if (sample_stats) {
    double sum = 0.0, sq = 0.0;
    float v[augment::kMaxChannels];
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        augment::job_values(p, j, x, y, v);
        for (int c = 0; c < cn; ++c) {
          const double r = static_cast<double>(v[c]) * p.rescale;
          sum += r;
          sq += r * r;
        }
      }
    augment::finish_sample_stats(p, j, sum, sq);
  }
}

void job_output_on_host(const augment::AugmentPlan& p, DType dtype, const SampleJob& j, void* sample_out) {
  for (int y = 0; y < p.out_height; ++y)
    for (int x = 0; x < p.out_width; ++x) augment::job_output_pixel(p, dtype, j, x, y, sample_out);
}

}  // namespace

void CudaAugmenter::run(std::span<const DeviceImage> images, std::span<const SampleContext> contexts, void* out,
                        CudaAugmentWorkspace& ws, StreamHandle stream) const {
  if (contexts.size() != images.size()) {
    throw InvalidArgument("CudaAugmenter::run: " + std::to_string(images.size()) + " images but " +
                          std::to_string(contexts.size()) + " contexts");
  }
  enqueue(images, contexts.data(), nullptr, out, ws, stream);
}

void CudaAugmenter::run_with(std::span<const DeviceImage> images, std::span<const augment::SampleParams> params,
                             void* out, CudaAugmentWorkspace& ws, StreamHandle stream) const {
  if (params.size() != images.size()) {
    throw InvalidArgument("CudaAugmenter::run_with: " + std::to_string(images.size()) + " images but " +
                          std::to_string(params.size()) + " parameter sets");
  }
  enqueue(images, nullptr, params.data(), out, ws, stream);
}

// Fills the pinned job table (parameters drawn from `contexts` or given in `params`), copies it
// and launches the statistics pass (when needed) and the batch kernel, all on `stream`.
void CudaAugmenter::enqueue(std::span<const DeviceImage> images, const SampleContext* contexts,
                            const augment::SampleParams* params, void* out, CudaAugmentWorkspace& ws,
                            StreamHandle stream) const {
  if (images.size() > static_cast<std::size_t>(ws.capacity())) {
    throw InvalidArgument("CudaAugmenter: " + std::to_string(images.size()) + " images exceed the workspace's " +
                          std::to_string(ws.capacity()));
  }
  const augment::AugmentPlan& p = augmenter_->plan();
  ws.copied_.synchronize();  // the previous table copy from this workspace has completed
  auto* jobs = ws.host_.as<SampleJob>();
  bool warp = false;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const DeviceImage& im = images[i];
    const int index = static_cast<int>(i);
    if (!im.data) throw InvalidArgument("CudaAugmenter: image " + std::to_string(i) + " has no data pointer");
    check_image(index, im.height, im.width, im.row_stride);
    SampleJob& j = jobs[i];
    j = SampleJob{};
    j.src = {im.data, im.height, im.width, p.channels, im.row_stride};
    if (params) {
      check_box(index, params[i], im.height, im.width);
      j.params = params[i];
    } else {
      j.params = augmenter_->params(contexts[i], im.height, im.width);
    }
    augment::init_job(p, j);
    warp = warp || augment::needs_warp_stats(j.params);
  }
  const int n = static_cast<int>(images.size());
  if (n == 0) return;
  if (!out) throw InvalidArgument("CudaAugmenter: the output pointer is null");
  // The previous batch from this workspace may still be reading the device table on another
  // stream: the copy waits for its kernels (an event never recorded: no wait).
  stream_wait(stream, ws.done_.get());
  copy_to_device_async(ws.device_.get(), jobs, sizeof(SampleJob) * images.size(), stream);
  ws.copied_.record(stream);
  const bool sample = augment::needs_sample_stats(p);
  auto* dev = ws.device_.as<SampleJob>();
  try {
    if (warp || sample) detail::launch_augment_stats(p, dev, n, warp, sample, stream);
    detail::launch_augment_batch(p, output_, dev, n, out, stream);
  } catch (...) {
    try {
      ws.done_.record(stream);  // whatever was enqueued still reads the table
    } catch (...) {}
    throw;
  }
  ws.done_.record(stream);
}

void CudaAugmenter::run_on_host(std::span<const ImageView> images, std::span<const augment::SampleParams> params,
                                void* out) const {
  if (params.size() != images.size()) {
    throw InvalidArgument("CudaAugmenter::run_on_host: " + std::to_string(images.size()) + " images but " +
                          std::to_string(params.size()) + " parameter sets");
  }
  const augment::AugmentPlan& p = augmenter_->plan();
  const int cn = p.channels;
  const std::size_t sample_bytes = output_.sample_elements * dtype_size(output_.dtype);
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ImageView& im = images[i];
    if (im.channels != cn) {
      throw InvalidArgument("CudaAugmenter: image " + std::to_string(i) + " has " + std::to_string(im.channels) +
                            " channels, expected " + std::to_string(cn));
    }
    if (!im.data) throw InvalidArgument("CudaAugmenter: image " + std::to_string(i) + " has no data pointer");
    check_image(static_cast<int>(i), im.height, im.width, im.row_stride);
    check_box(static_cast<int>(i), params[i], im.height, im.width);
    SampleJob j{};
    j.src = {im.data, im.height, im.width, cn, im.row_stride};
    j.params = params[i];
    augment::init_job(p, j);
    job_stats_on_host(p, j, true, augment::needs_sample_stats(p));
    job_output_on_host(p, output_.dtype, j, static_cast<std::byte*>(out) + sample_bytes * i);
  }
}

SampleShape CudaAugmenter::output_shape(const SampleShape& input) const {
  const int cn = augmenter_->plan().channels;
  if (input.dtype != DType::U8 || input.layout != Layout::NHWC || input.channels != cn) {
    throw InvalidArgument(std::string("CudaAugmenter: input batches must be u8 NHWC with ") + std::to_string(cn) +
                          " channels, received " + to_string(input.dtype) + " " + to_string(input.layout) + " with " +
                          std::to_string(input.channels));
  }
  return shape_;
}

std::size_t CudaAugmenter::workspace_bytes(const SampleShape&, int batch_size) const {
  return CudaAugmentWorkspace::device_bytes_for(batch_size);
}

namespace {

class AugmentSlot final : public DeviceStageSlot {
 public:
  AugmentSlot(const CudaAugmenter& gpu, int batch_size)
      : gpu_(gpu),
        ws_(batch_size),
        images_(static_cast<std::size_t>(batch_size)),
        contexts_(static_cast<std::size_t>(batch_size)) {}
  void run(const DeviceStageInput& in, void* out, StreamHandle stream) override {
    const auto n = static_cast<std::size_t>(in.size);
    const std::size_t bytes = in.shape.bytes();
    for (std::size_t i = 0; i < n; ++i) {
      images_[i] = {in.pixels + bytes * i, in.shape.height, in.shape.width,
                    static_cast<std::size_t>(in.shape.width) * static_cast<std::size_t>(in.shape.channels)};
      contexts_[i] = {in.seed, in.epoch, in.sample_ids[i]};
    }
    gpu_.run(std::span(images_.data(), n), std::span(contexts_.data(), n), out, ws_, stream);
  }

 private:
  const CudaAugmenter& gpu_;  // the stage outlives its slots (GpuFeed keeps both)
  CudaAugmentWorkspace ws_;
  std::vector<DeviceImage> images_;
  std::vector<SampleContext> contexts_;
};

}  // namespace

std::unique_ptr<DeviceStageSlot> CudaAugmenter::make_slot(const SampleShape& input, int batch_size) const {
  output_shape(input);
  return std::make_unique<AugmentSlot>(*this, batch_size);
}

#if defined(STOKER_CUDA_EMULATION)
namespace detail {
// The kernels of cuda_augmenter.cu as host functions on the stream (the job table is in host memory).
void launch_augment_stats(const augment::AugmentPlan& plan, SampleJob* jobs, int n, bool warp_stats, bool sample_stats,
                          StreamHandle stream) {
  emulation::launch(stream, [=] {
    for (int i = 0; i < n; ++i) job_stats_on_host(plan, jobs[i], warp_stats, sample_stats);
  });
  STOKER_CUDA_CHECK_LAUNCH("augment_stats_kernel");
}
void launch_augment_batch(const augment::AugmentPlan& plan, const augment::BatchOutput& output, const SampleJob* jobs,
                          int n, void* out, StreamHandle stream) {
  const std::size_t sample_bytes = output.sample_elements * dtype_size(output.dtype);
  emulation::launch(stream, [=] {
    for (int i = 0; i < n; ++i) {
      job_output_on_host(plan, output.dtype, jobs[i],
                         static_cast<std::byte*>(out) + sample_bytes * static_cast<std::size_t>(i));
    }
  });
  STOKER_CUDA_CHECK_LAUNCH("augment_batch_kernel");
}
}  // namespace detail
#elif !defined(STOKER_HAVE_CUDA)
namespace detail {
void launch_augment_stats(const augment::AugmentPlan&, augment::SampleJob*, int, bool, bool, StreamHandle) {
  require_cuda_device("CudaAugmenter");
}
void launch_augment_batch(const augment::AugmentPlan&, const augment::BatchOutput&, const augment::SampleJob*, int,
                          void*, StreamHandle) {
  require_cuda_device("CudaAugmenter");
}
}  // namespace detail
#endif

}  // namespace stoker
