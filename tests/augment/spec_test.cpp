// Invalid settings fail when the Augmenter is built, with a message naming the parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"

namespace stoker {
namespace {

AugmentSpec valid() {
  AugmentSpec s;
  s.height = 32;
  s.width = 32;
  return s;
}

void expect_rejected(const std::function<void(AugmentSpec&)>& change, const std::string& parameter) {
  AugmentSpec s = valid();
  change(s);
  try {
    Augmenter a(s);
    ADD_FAILURE() << "accepted an invalid " << parameter;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(parameter), std::string::npos) << e.what();
  }
}

TEST(AugmentSpec, InvalidSettingsFailAtConstructionNamingTheParameter) {
  expect_rejected([](AugmentSpec& s) { s.height = 0; }, "height");
  expect_rejected([](AugmentSpec& s) { s.width = -3; }, "width");
  expect_rejected([](AugmentSpec& s) { s.channels = 2; }, "channels");
  expect_rejected([](AugmentSpec& s) { s.rotation_range = -10; }, "rotation_range");
  expect_rejected([](AugmentSpec& s) { s.width_shift_range = ShiftRange::uniform(-0.2); }, "width_shift_range");
  expect_rejected([](AugmentSpec& s) { s.height_shift_range = ShiftRange::integer(-2); }, "height_shift_range");
  expect_rejected([](AugmentSpec& s) { s.height_shift_range = ShiftRange::choices({}); }, "height_shift_range");
  expect_rejected([](AugmentSpec& s) { s.shear_range = -1; }, "shear_range");
  expect_rejected([](AugmentSpec& s) { s.width_shift_range = ShiftRange::uniform(1e9); }, "width_shift_range");
  expect_rejected([](AugmentSpec& s) { s.zoom_range = AugmentSpec::zoom(1.0); }, "zoom_range");  // [0, 2]
  expect_rejected([](AugmentSpec& s) { s.zoom_range = Range{0, 0}; }, "zoom_range");
  expect_rejected([](AugmentSpec& s) { s.zoom_range = Range{1.2, 0.8}; }, "zoom_range");
  expect_rejected([](AugmentSpec& s) { s.brightness_range = Range{-0.5, 1}; }, "brightness_range");
  expect_rejected([](AugmentSpec& s) { s.brightness_range = Range{1.5, 0.5}; }, "brightness_range");
  expect_rejected([](AugmentSpec& s) { s.channel_shift_range = -5; }, "channel_shift_range");
  expect_rejected([](AugmentSpec& s) { s.fill_mode = static_cast<FillMode>(9); }, "fill_mode");
  expect_rejected([](AugmentSpec& s) { s.cval = std::nan(""); }, "cval");
  expect_rejected([](AugmentSpec& s) { s.interpolation_order = 3; }, "interpolation_order");
  expect_rejected([](AugmentSpec& s) { s.center_crop = CenterCrop{1.25, true}; }, "center_crop.fraction");
  expect_rejected([](AugmentSpec& s) { s.center_crop = CenterCrop{0.0, true}; }, "center_crop.fraction");
  expect_rejected(
      [](AugmentSpec& s) {
        s.random_resized_crop = RandomResizedCrop{{0.5, 1.5}, {0.75, 1.33}};
      },
      "random_resized_crop.scale");
  expect_rejected(
      [](AugmentSpec& s) {
        s.random_resized_crop = RandomResizedCrop{{0.5, 0.2}, {0.75, 1.33}};
      },
      "random_resized_crop.scale");
  expect_rejected(
      [](AugmentSpec& s) {
        s.random_resized_crop = RandomResizedCrop{{0.2, 0.5}, {0, 1.33}};
      },
      "random_resized_crop.ratio");
  expect_rejected(
      [](AugmentSpec& s) {
        s.center_crop = CenterCrop{};
        s.random_resized_crop = RandomResizedCrop{};
      },
      "center_crop");
  expect_rejected([](AugmentSpec& s) { s.contrast = -0.1; }, "contrast");
  expect_rejected([](AugmentSpec& s) { s.hue = 0.7; }, "hue");
  expect_rejected(
      [](AugmentSpec& s) {
        s.channels = 1;
        s.saturation = 0.2;
      },
      "saturation");
  expect_rejected([](AugmentSpec& s) { s.rescale = 0.0; }, "rescale");
  expect_rejected([](AugmentSpec& s) { s.rescale = 1.0 / 255; }, "dtype");  // u8 cannot hold it
  expect_rejected(
      [](AugmentSpec& s) {
        s.dtype = DType::F32;
        s.featurewise_center = true;
      },
      "featurewise_center");
  expect_rejected(
      [](AugmentSpec& s) {
        s.dtype = DType::F32;
        s.normalization = ChannelNormalization{{0, 0, 0, 0}, {1, 0, 1, 1}, false};
      },
      "normalization.std");
}

TEST(AugmentSpec, FillModeNamesAreKeras) {
  EXPECT_EQ(fill_mode_from_string("constant"), FillMode::Constant);
  EXPECT_EQ(fill_mode_from_string("nearest"), FillMode::Nearest);
  EXPECT_EQ(fill_mode_from_string("reflect"), FillMode::Reflect);
  EXPECT_EQ(fill_mode_from_string("wrap"), FillMode::Wrap);
  try {
    fill_mode_from_string("mirror");
    ADD_FAILURE() << "accepted an unknown fill mode";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fill_mode"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("mirror"), std::string::npos);
  }
}

TEST(AugmentSpec, KerasDefaultsAndImpliedSettings) {
  AugmentSpec s = valid();
  s.dtype = DType::F32;
  s.samplewise_std_normalization = true;
  const Augmenter a(s);
  EXPECT_TRUE(a.plan().samplewise_center);  // Keras turns centring on with std normalisation
  EXPECT_EQ(a.plan().fill_mode, FillMode::Nearest);
  EXPECT_EQ(a.plan().interpolation_order, 1);
  // Keras: a shift range of 0.0 or 0 means no shift; float < 1 is a fraction, >= 1 pixels.
  AugmentSpec t = valid();
  t.width_shift_range = ShiftRange::uniform(0.0);
  t.height_shift_range = ShiftRange::uniform(3.0);
  const Augmenter b(t);
  EXPECT_EQ(b.plan().width_shift.kind, augment::ShiftKind::None);
  EXPECT_FALSE(b.plan().height_shift.fraction);
}

TEST(AugmentSpec, SourceThatDoesNotMatchIsRejectedAtApply) {
  const Augmenter a(valid());
  std::vector<std::uint8_t> grey(16 * 16);
  std::vector<std::byte> out(a.output_shape().bytes());
  EXPECT_THROW(a.apply(ImageView{grey.data(), 16, 16, 1, 16}, SampleContext{}, out.data()), InvalidArgument);
  EXPECT_THROW(a.apply(ImageView{}, SampleContext{}, out.data()), InvalidArgument);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

TEST(AugmentSpec, MinimumDecodeSizeKeepsTheCropAtOutputResolution) {
  AugmentSpec s = valid();
  EXPECT_EQ(Augmenter(s).min_decode_height(), 32);
  s.center_crop = CenterCrop{0.5, true};
  EXPECT_EQ(Augmenter(s).min_decode_height(), 64);
  EXPECT_EQ(Augmenter(s).min_decode_width(), 64);
  s.center_crop.reset();
  s.random_resized_crop = RandomResizedCrop{{0.25, 1.0}, {0.75, 1.33}};
  EXPECT_EQ(Augmenter(s).min_decode_height(), 64);
  EXPECT_EQ(Augmenter(s.validation()).min_decode_height(), 32);
  EXPECT_TRUE(Augmenter(s).cache_identity().empty());
  EXPECT_FALSE(Augmenter(s.validation()).cache_identity().empty());
}

}  // namespace
}  // namespace stoker
