// The per-sample stage that turns a decoded image into its slot of a batch. The loader owns one
// transform; the default resizes (Keras' load_img semantics), an augmenter (augment/) draws random
// parameters from the sample context and warps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "stoker/core/image.hpp"

namespace stoker {

// Identifies one draw: the same (seed, epoch, sample_id) always gives the same random parameters,
// whichever thread runs the sample.
struct SampleContext {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::int64_t sample_id = 0;
};

// How ResizeTransform samples. The first six are Pillow's Image.resize filters, pixel for pixel
// (Keras' load_img names; see resample.hpp): bilinear, bicubic, lanczos, box and hamming are
// convolutions whose support grows with the downscale factor (antialiased). Area is OpenCV's
// INTER_AREA. The last two are what augment/'s warp does at neutral parameters (its orders 0 and
// 1), kept so a plain-resize loader can prepare images as an Augmenter would: centre_nearest
// samples floor((x + 0.5) * in/out) and opencv_linear is OpenCV's INTER_LINEAR (not antialiased).
enum class Interpolation : std::uint8_t {
  Nearest,
  Bilinear,
  Area,
  Bicubic,
  Lanczos,
  Box,
  Hamming,
  CentreNearest,
  OpenCvLinear,
};

const char* to_string(Interpolation i) noexcept;

class SampleTransform {
 public:
  virtual ~SampleTransform() = default;

  // Shape and dtype of what apply() writes; fixed for the transform's lifetime.
  virtual SampleShape output_shape() const = 0;

  // The decoder may shrink JPEGs in the DCT domain down to, but not below, this size.
  virtual int min_decode_height() const { return output_shape().height; }
  virtual int min_decode_width() const { return output_shape().width; }

  // Non-empty when apply() ignores the context (no randomness) and the output is uint8 NHWC: then
  // a decoded cache keeps the output itself, and a warm epoch is a copy. Two transforms with the
  // same identity must produce the same output.
  virtual std::string cache_identity() const { return {}; }

  // Writes exactly output_shape().bytes() bytes to dst. Must be thread-safe (called concurrently
  // for different samples) and deterministic in (src, ctx). Throws stoker::Error on failure.
  virtual void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const = 0;

  // The box of a src_height x src_width source that apply() reads for this sample, when that is
  // less than the whole image: the loader then decodes only that part (a JPEG's rows and iMCU
  // columns there) and calls apply_part. nullopt (the default): the whole image.
  virtual std::optional<CropBox> source_region(const SampleContext& /*ctx*/, int /*src_height*/,
                                               int /*src_width*/) const {
    return std::nullopt;
  }

  // apply() for a source of which only `region` (what source_region returned) was decoded: `part`
  // holds that region of the full_height x full_width image. Writes what apply() would write for
  // the whole image. Only called on transforms whose source_region() returns a box.
  virtual void apply_part(const ImageView& part, const CropBox& region, int full_height, int full_width,
                          const SampleContext& ctx, std::byte* dst) const;
};

// Resize to a fixed size (uint8 NHWC) as Keras' load_img does (Pillow's Image.resize), optionally
// from the centre box of the target aspect ratio (Keras' keep_aspect_ratio: Pillow's resize with
// that box, so its filters also read the pixels just outside the box). Area, centre_nearest and
// opencv_linear crop to the box first, then resize it.
class ResizeTransform final : public SampleTransform {
 public:
  ResizeTransform(int height, int width, Interpolation interpolation = Interpolation::Nearest,
                  bool keep_aspect_ratio = false);
  SampleShape output_shape() const override { return shape_; }
  std::string cache_identity() const override;
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override;

 private:
  SampleShape shape_;
  Interpolation interpolation_;
  bool keep_aspect_ratio_;
};

// Keras' keep_aspect_ratio crop: the largest centred box of the target aspect ratio.
CropBox centre_crop_box(int src_height, int src_width, int target_height, int target_width) noexcept;

}  // namespace stoker
