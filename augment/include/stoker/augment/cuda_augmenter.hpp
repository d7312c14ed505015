// The CUDA augmentation executor: the CPU executor's description, parameters and per-pixel math
// (augment/src: pixel.hpp, batch_math.hpp) in one fused kernel per batch: warp + flips + photometric +
// standardisation + normalisation + layout + dtype. uint8 interleaved images in device memory
// (one per sample, each with its own size) in; the final tensor out.
//
//   stoker::CudaAugmenter gpu(std::make_shared<stoker::Augmenter>(spec), stoker::DType::BF16);
//   stoker::CudaAugmentWorkspace ws(256);                      // once: pinned + device job table
//   gpu.run(images, contexts, out_device, ws, stream);        // per batch, asynchronous
//
// Parameters are drawn on the host with Augmenter::params (the same Philox draw as the CPU
// executor, a few KB per batch), copied with the batch's job table, and the kernel reads them.
// When the photometric steps need statistics of the warped image (channel shift: min/max;
// contrast: mean luma) or the standardisation is sample-wise, a statistics kernel (one block per
// sample, integer reductions, deterministic) runs first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/pipeline/device_stage.hpp"

namespace stoker {
namespace augment {
struct SampleJob;
}  // namespace augment

// One uint8 interleaved source image in device memory (the augmenter's channel count).
struct DeviceImage {
  const std::uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  std::size_t row_stride = 0;  // bytes
};

// The job table of one batch in flight: pinned staging + its device copy, allocated once. A
// workspace may be reused for the next batch at once: run() waits (host side) only until the
// previous table copy from it has completed, and the new table copy waits (on the GPU, which
// matters when the next batch goes to another stream) until the previous batch's kernels, which
// read the device table, have finished.
class CudaAugmentWorkspace {
 public:
  explicit CudaAugmentWorkspace(int capacity);
  int capacity() const noexcept { return capacity_; }
  std::size_t device_bytes() const noexcept { return device_.bytes(); }
  static std::size_t device_bytes_for(int capacity) noexcept;  // the job table of `capacity` samples

 private:
  friend class CudaAugmenter;
  int capacity_;
  PinnedBuffer host_;
  DeviceBuffer device_;
  Event copied_;  // the table copy of the last batch (the pinned staging is free again)
  Event done_;    // the kernels of the last batch (the device table is free again)
};

class CudaAugmenter final : public DeviceStage {
 public:
  // dtype: the output type (default: the spec's, u8 or f32); f16 and bf16 need a spec with f32
  // output. Throws InvalidArgument for what the GPU cannot run (a preprocessing_function).
  explicit CudaAugmenter(std::shared_ptr<const Augmenter> augmenter, std::optional<DType> dtype = {});

  SampleShape output_shape() const noexcept { return shape_; }
  const Augmenter& augmenter() const noexcept { return *augmenter_; }

  // Enqueues one batch on `stream`: images[i] augmented with the parameters of contexts[i] into
  // sample i of `out` (device memory, output_shape() per sample). Throws CudaError on a CUDA
  // failure and InvalidArgument on a bad input (count, channels, empty image).
  void run(std::span<const DeviceImage> images, std::span<const SampleContext> contexts, void* out,
           CudaAugmentWorkspace& ws, StreamHandle stream) const;
  // The same with given parameters (their crop boxes must lie inside the images).
  void run_with(std::span<const DeviceImage> images, std::span<const augment::SampleParams> params, void* out,
                CudaAugmentWorkspace& ws, StreamHandle stream) const;

  // The kernel's body compiled for the host, in loops over the same job table and the same
  // statistics: host images in, host output out. Tests compare it with the CPU executor.
  void run_on_host(std::span<const ImageView> images, std::span<const augment::SampleParams> params, void* out) const;

  // ---- DeviceStage (GpuFeed): input batches of uint8 NHWC samples, one source per sample.
  const char* name() const noexcept override { return "cuda-augment"; }
  SampleShape output_shape(const SampleShape& input) const override;
  std::size_t workspace_bytes(const SampleShape& input, int batch_size) const override;
  std::unique_ptr<DeviceStageSlot> make_slot(const SampleShape& input, int batch_size) const override;

 private:
  void check_image(int i, int height, int width, std::size_t row_stride) const;
  void enqueue(std::span<const DeviceImage> images, const SampleContext* contexts, const augment::SampleParams* params,
               void* out, CudaAugmentWorkspace& ws, StreamHandle stream) const;

  std::shared_ptr<const Augmenter> augmenter_;
  SampleShape shape_;
  augment::BatchOutput output_;
};

}  // namespace stoker
