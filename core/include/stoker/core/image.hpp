// Plain views and shape descriptions shared by the pipeline, the augmenters and the trainer.
// Views are small and trivially copyable so they can be passed by value into CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker {

enum class DType : std::uint8_t { U8, F32, F16, BF16 };
enum class Layout : std::uint8_t { NHWC, NCHW };

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::U8: return 1;
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
  }
  return 0;
}

const char* to_string(DType t) noexcept;
const char* to_string(Layout l) noexcept;

// Shape of one sample as it lands in a batch.
struct SampleShape {
  int height = 0;
  int width = 0;
  int channels = 3;
  DType dtype = DType::U8;
  Layout layout = Layout::NHWC;

  constexpr std::size_t elements() const noexcept {
    return static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  }
  constexpr std::size_t bytes() const noexcept { return elements() * dtype_size(dtype); }
  friend constexpr bool operator==(const SampleShape&, const SampleShape&) = default;
};

// A read-only view of an interleaved 8-bit image (RGB unless stated otherwise).
struct ImageView {
  const std::uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 3;
  std::size_t row_stride = 0;  // bytes between the starts of two rows

  const std::uint8_t* row(int y) const noexcept { return data + static_cast<std::size_t>(y) * row_stride; }
  bool empty() const noexcept { return data == nullptr || height <= 0 || width <= 0; }
};

// A box of pixels in an image: columns [x, x + width), rows [y, y + height).
struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
  friend constexpr bool operator==(const CropBox&, const CropBox&) = default;
};

}  // namespace stoker
