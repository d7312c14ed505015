// The CPU executor: a SampleTransform that draws per-sample parameters from (seed, epoch,
// sample id) and writes the augmented sample straight into its slot of the batch. All geometry
// (crop, resize, Keras' rotation/shift/shear/zoom, flips) is one affine matrix and one
// cv::warpAffine (cv::resize when the geometry is only crop + resize + flips).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/augment/plan.hpp"
#include "stoker/augment/spec.hpp"
#include "stoker/pipeline/transform.hpp"

namespace stoker {

class Augmenter final : public SampleTransform {
 public:
  // Throws InvalidArgument naming the parameter when a setting cannot work.
  explicit Augmenter(AugmentSpec spec);

  SampleShape output_shape() const override { return spec_.output_shape(); }
  // Large enough that the crop box still holds the output size: output / centre fraction, or
  // output / sqrt(smallest area fraction) for a training random-resized-crop.
  int min_decode_height() const override;
  int min_decode_width() const override;
  void apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const override;

  // The crop box, when the sample's geometry is only a crop and resize (+ flips: random-resized
  // crop, a centre crop) and the box is less than the image: the warp reads nothing outside it.
  std::optional<CropBox> source_region(const SampleContext& ctx, int src_height, int src_width) const override;
  void apply_part(const ImageView& part, const CropBox& region, int full_height, int full_width,
                  const SampleContext& ctx, std::byte* dst) const override;
  // Validation mode with uint8 NHWC output and no preprocessing_function ignores the context:
  // a decoded cache may keep its output. Empty otherwise.
  std::string cache_identity() const override;

  // The slow per-pixel executor built from pixel.hpp (the CUDA kernel's CPU twin): same result
  // as apply() within one grey level (uint8), for tests and for checking other executors.
  void apply_reference(const ImageView& src, const SampleContext& ctx, std::byte* dst) const;

  // apply() and apply_reference() with given parameters instead of drawn ones (their crop box
  // must lie inside src): Keras' apply_transform, and the host half of the CUDA executor.
  void apply_with(const ImageView& src, const augment::SampleParams& params, const SampleContext& ctx,
                  std::byte* dst) const;
  void apply_reference_with(const ImageView& src, const augment::SampleParams& params, const SampleContext& ctx,
                            std::byte* dst) const;

  // The parameters and the output->source matrix apply() uses for this sample and source size.
  augment::SampleParams params(const SampleContext& ctx, int src_height, int src_width) const;
  augment::Affine matrix(const augment::SampleParams& params) const;

  const AugmentSpec& spec() const noexcept { return spec_; }
  const augment::AugmentPlan& plan() const noexcept { return plan_; }

  // What the standardisation does to each output value when it is the same for every image:
  // output[c] = source[source_channel[c]] * scale[c] + offset[c] (rescale, featurewise statistics
  // and the normalisation folded; source_channel swaps red and blue for BGR). None with
  // sample-wise statistics or a preprocessing_function, which depend on the image.
  struct ChannelAffine {
    std::vector<float> scale, offset;
    std::vector<int> source_channel;
  };
  std::optional<ChannelAffine> output_affine() const;

 private:
  void finish(const std::uint8_t* warped, const augment::SampleParams& params, const SampleContext& ctx, std::byte* dst,
              bool reference) const;

  AugmentSpec spec_;
  augment::AugmentPlan plan_;
};

// Keras' ImageDataGenerator.fit for featurewise_center / featurewise_std_normalization: brings
// each image to the output size with the deterministic part of `spec` (crop + resize, no
// augmentation), multiplies by spec.rescale and returns the per-channel mean and (population)
// standard deviation. Put the result in spec.featurewise before building the Augmenter.
FeaturewiseStats fit_featurewise(const AugmentSpec& spec, std::span<const ImageView> images);

// The same statistics over images that arrive a batch at a time (a Loader over a whole training
// set, with an Augmenter of input_spec(spec) as its transform): add() takes them already brought
// to the output size by input_spec (uint8 HWC), result() is what fit_featurewise returns for them.
class FeaturewiseFit {
 public:
  explicit FeaturewiseFit(const AugmentSpec& spec);
  // The deterministic part of `spec` (crop + resize) with uint8 HWC output: what add() takes.
  static AugmentSpec input_spec(const AugmentSpec& spec);
  void add(const std::uint8_t* images, std::size_t count);  // `count` images of input_spec's shape
  FeaturewiseStats result() const;                          // InvalidArgument when nothing was added

 private:
  double rescale_;
  int channels_;
  std::size_t image_values_;
  std::array<double, 4> sum_{}, squares_{};
  double pixels_ = 0;
};

}  // namespace stoker
