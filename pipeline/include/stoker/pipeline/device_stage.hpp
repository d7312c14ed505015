// A step that runs on the GPU on each batch after its copy (GpuFeed): the uint8 → float conversion
// (make_convert_stage) or the CUDA augmentation executor (augment/cuda_augmenter.hpp). A stage
// declares what it writes and how much device memory it needs before the first batch; the feed
// then makes one DeviceStageSlot per ring slot, once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "stoker/core/cuda.hpp"
#include "stoker/core/image.hpp"
#include "stoker/pipeline/convert.hpp"

namespace stoker {

// One copied batch, as a stage sees it.
struct DeviceStageInput {
  const std::uint8_t* pixels = nullptr;  // device: `size` samples of `shape`, sample-major
  SampleShape shape;
  int size = 0;
  std::span<const std::int64_t> sample_ids;  // host
  std::uint64_t seed = 0;                    // the loader's seed
  std::uint64_t epoch = 0;
};

// The per-slot state of a stage (staging tables and the like), allocated once.
class DeviceStageSlot {
 public:
  virtual ~DeviceStageSlot() = default;
  // Enqueues the stage on `stream`: reads `in.pixels`, writes `out` (device). May block the calling
  // (feeder) thread briefly while its own staging is still being read by an earlier copy.
  virtual void run(const DeviceStageInput& in, void* out, StreamHandle stream) = 0;
};

class DeviceStage {
 public:
  virtual ~DeviceStage() = default;
  virtual const char* name() const noexcept = 0;
  // What the stage writes per sample for this input; throws InvalidArgument for an input it
  // cannot take (the message says what was received).
  virtual SampleShape output_shape(const SampleShape& input) const = 0;
  // Device memory one slot needs besides its input and output buffers.
  virtual std::size_t workspace_bytes(const SampleShape& input, int batch_size) const = 0;
  virtual std::unique_ptr<DeviceStageSlot> make_slot(const SampleShape& input, int batch_size) const = 0;
};

// The conversion (convert.hpp) as a stage.
std::shared_ptr<const DeviceStage> make_convert_stage(const ConvertSpec& spec);

}  // namespace stoker
