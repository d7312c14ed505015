// AugmentSpec (Keras ImageDataGenerator's parameters and stoker's additions) and the CPU
// Augmenter over NumPy images: a whole batch augmented on stoker's threads with the GIL released
// (Keras' flow over arrays), the parameter draw of one sample (get_random_transform) and the
// augmentation with given parameters (apply_transform).
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"

namespace stoker::python {
namespace {

using U8Images = nb::ndarray<const std::uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using U8Image = nb::ndarray<const std::uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

DType dtype_from(const std::string& name) {
  const std::string n = lower(name);
  if (n == "uint8" || n == "u8") return DType::U8;
  if (n == "float32" || n == "f32") return DType::F32;
  if (n == "float16" || n == "f16") return DType::F16;
  if (n == "bfloat16" || n == "bf16") return DType::BF16;
  throw InvalidArgument("dtype must be uint8, float32, float16 or bfloat16, received '" + name + "'");
}

Layout layout_from(const std::string& name) {
  const std::string n = lower(name);
  if (n == "nhwc" || n == "channels_last") return Layout::NHWC;
  if (n == "nchw" || n == "channels_first") return Layout::NCHW;
  throw InvalidArgument("layout must be 'nhwc' (channels_last) or 'nchw' (channels_first), received '" + name + "'");
}

// Keras' width/height_shift_range: a float (fraction when < 1, else pixels), an int (pixels,
// drawn as an integer), or a list of choices.
ShiftRange shift_from(nb::handle v, const char* name) {
  if (v.is_none()) return ShiftRange::none();
  if (nb::isinstance<nb::bool_>(v) || nb::isinstance<nb::int_>(v)) return ShiftRange::integer(nb::cast<int>(v));
  if (nb::isinstance<nb::float_>(v)) return ShiftRange::uniform(nb::cast<double>(v));
  try {
    return ShiftRange::choices(nb::cast<std::vector<double>>(nb::module_::import_("builtins").attr("list")(v)));
  } catch (const std::exception&) {
    throw InvalidArgument(std::string(name) + " must be a float, an int or a list of numbers");
  }
}

nb::object shift_to(const ShiftRange& r) {
  switch (r.kind) {
    case augment::ShiftKind::None: return nb::float_(0.0);
    case augment::ShiftKind::Uniform: return nb::float_(r.range);
    case augment::ShiftKind::Integer: return nb::int_(r.pixels);
    case augment::ShiftKind::Choices: return nb::cast(r.values);
  }
  return nb::none();
}

Range pair_from(nb::handle v, const char* name) {
  std::vector<double> p;
  try {
    p = nb::cast<std::vector<double>>(nb::module_::import_("builtins").attr("list")(v));
  } catch (const std::exception&) {
    throw InvalidArgument(std::string(name) + " must be a pair of numbers");
  }
  if (p.size() != 2)
    throw InvalidArgument(std::string(name) + " must be a pair of numbers, received " + std::to_string(p.size()) +
                          " values");
  return {p[0], p[1]};
}

std::array<float, 4> channels_from(nb::handle v, const char* name) {
  std::vector<float> c;
  if (nb::isinstance<nb::float_>(v) || nb::isinstance<nb::int_>(v)) {
    c.assign(4, nb::cast<float>(v));
  } else {
    c = nb::cast<std::vector<float>>(nb::module_::import_("builtins").attr("list")(v));
  }
  if (c.empty() || c.size() > 4) throw InvalidArgument(std::string(name) + ": one value per channel (1 to 4)");
  std::array<float, 4> out{c[0], c[0], c[0], c[0]};
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = c[i];
  return out;
}

void bind_spec(nb::module_& m) {
  // The settings whose "off" is None (brightness_range=None, rescale=None, ...).
  const auto accepts_none = nb::for_setter(nb::arg("value").none());
  nb::class_<AugmentSpec>(m, "AugmentSpec",
                          "The augmentation: Keras ImageDataGenerator's parameters and stoker's additions.")
      .def(nb::init<>())
      .def_rw("height", &AugmentSpec::height, "Output height in pixels (0: the Loader's image_size).")
      .def_rw("width", &AugmentSpec::width, "Output width in pixels (0: the Loader's image_size).")
      .def_rw("channels", &AugmentSpec::channels, "Channels of the decoded input and of the output: 1, 3 or 4.")
      .def_prop_rw(
          "dtype", [](const AugmentSpec& s) { return std::string(numpy_name(s.dtype)); },
          [](AugmentSpec& s, const std::string& v) { s.dtype = dtype_from(v); },
          "Output dtype: 'uint8', 'float32', 'float16' or 'bfloat16' (the float32 values rounded as they are stored).")
      .def_prop_rw(
          "layout", [](const AugmentSpec& s) { return std::string(s.layout == Layout::NCHW ? "nchw" : "nhwc"); },
          [](AugmentSpec& s, const std::string& v) { s.layout = layout_from(v); },
          "Output layout: 'nhwc' (channels last) or 'nchw' (channels first).")
      .def_rw("rotation_range", &AugmentSpec::rotation_range,
              "Keras' rotation_range: degrees, drawn uniformly in [-r, r).")
      .def_prop_rw(
          "width_shift_range", [](const AugmentSpec& s) { return shift_to(s.width_shift_range); },
          [](AugmentSpec& s, nb::handle v) { s.width_shift_range = shift_from(v, "width_shift_range"); }, accepts_none,
          "Keras' width_shift_range: a float (a fraction of the width when < 1, else pixels, uniform in [-r, r)), "
          "an int n (whole pixels in (-n, n)), or a list of choices; None or 0: off.")
      .def_prop_rw(
          "height_shift_range", [](const AugmentSpec& s) { return shift_to(s.height_shift_range); },
          [](AugmentSpec& s, nb::handle v) { s.height_shift_range = shift_from(v, "height_shift_range"); },
          accepts_none, "Keras' height_shift_range, as width_shift_range for the height.")
      .def_rw("shear_range", &AugmentSpec::shear_range,
              "Keras' shear_range: degrees (Keras 2 semantics), drawn uniformly in [-s, s).")
      .def_prop_rw(
          "zoom_range", [](const AugmentSpec& s) { return std::make_pair(s.zoom_range.lo, s.zoom_range.hi); },
          [](AugmentSpec& s, nb::handle v) {
            // Keras: a number z means [1 - z, 1 + z]; a pair is [lo, hi].
            if (nb::isinstance<nb::float_>(v) || nb::isinstance<nb::int_>(v)) {
              s.zoom_range = AugmentSpec::zoom(nb::cast<double>(v));
            } else {
              s.zoom_range = pair_from(v, "zoom_range");
            }
          },
          accepts_none,
          "Keras' zoom_range: a number z means (1 - z, 1 + z), or a pair (lo, hi); x and y zooms drawn "
          "independently.")
      .def_rw("horizontal_flip", &AugmentSpec::horizontal_flip,
              "Keras' horizontal_flip: mirror left-right with probability 1/2.")
      .def_rw("vertical_flip", &AugmentSpec::vertical_flip,
              "Keras' vertical_flip: mirror top-bottom with probability 1/2.")
      .def_prop_rw(
          "brightness_range",
          [](const AugmentSpec& s) -> nb::object {
            if (!s.brightness_range) return nb::none();
            return nb::cast(std::make_pair(s.brightness_range->lo, s.brightness_range->hi));
          },
          [](AugmentSpec& s, nb::handle v) {
            if (v.is_none()) {
              s.brightness_range.reset();
            } else {
              s.brightness_range = pair_from(v, "brightness_range");
            }
          },
          accepts_none, "Keras' brightness_range: (lo, hi) factor of PIL's ImageEnhance.Brightness; None: off.")
      .def_rw("channel_shift_range", &AugmentSpec::channel_shift_range,
              "Keras' channel_shift_range: one value in [-r, r) added to every channel, clipped to the image's range.")
      .def_prop_rw(
          "fill_mode", [](const AugmentSpec& s) { return std::string(to_string(s.fill_mode)); },
          [](AugmentSpec& s, const std::string& v) { s.fill_mode = fill_mode_from_string(v); },
          "Keras' fill_mode outside the image: 'constant' (cval), 'nearest' (default), 'reflect' or 'wrap'.")
      .def_rw("cval", &AugmentSpec::cval, "Keras' cval: the value outside the image with fill_mode='constant'.")
      .def_rw("interpolation_order", &AugmentSpec::interpolation_order,
              "Keras' interpolation_order: 0 nearest, 1 bilinear (the default); higher orders: stoker.keras only.")
      .def_prop_rw(
          "rescale", [](const AugmentSpec& s) { return s.rescale; },
          [](AugmentSpec& s, std::optional<double> v) {
            // Keras: None or 0 means no rescaling.
            if (v && *v == 0.0) v.reset();
            s.rescale = v;
          },
          accepts_none, "Keras' rescale: a factor applied to the pixel values (1/255: 0..1); None or 0: off.")
      .def_rw("featurewise_center", &AugmentSpec::featurewise_center,
              "Keras' featurewise_center: subtract the fitted mean (needs featurewise, from fit_featurewise).")
      .def_rw("samplewise_center", &AugmentSpec::samplewise_center,
              "Keras' samplewise_center: subtract each image's own mean.")
      .def_rw("featurewise_std_normalization", &AugmentSpec::featurewise_std_normalization,
              "Keras' featurewise_std_normalization: divide by the fitted std (needs featurewise).")
      .def_rw("samplewise_std_normalization", &AugmentSpec::samplewise_std_normalization,
              "Keras' samplewise_std_normalization: divide by each image's own std.")
      .def_prop_rw(
          "featurewise",
          [](const AugmentSpec& s) -> nb::object {
            if (!s.featurewise) return nb::none();
            return nb::cast(std::make_pair(s.featurewise->mean, s.featurewise->std));
          },
          [](AugmentSpec& s, nb::handle v) {
            if (v.is_none()) {
              s.featurewise.reset();
              return;
            }
            auto seq = nb::cast<std::vector<nb::object>>(nb::module_::import_("builtins").attr("list")(v));
            if (seq.size() != 2) throw InvalidArgument("featurewise must be (mean, std), one value per channel each");
            s.featurewise =
                FeaturewiseStats{channels_from(seq[0], "featurewise mean"), channels_from(seq[1], "featurewise std")};
          },
          accepts_none,
          "Featurewise (mean, std) per channel, on rescaled values (from fit_featurewise); None if not fitted.")
      .def_prop_rw(
          "center_crop",
          [](const AugmentSpec& s) -> nb::object {
            if (!s.center_crop) return nb::none();
            return nb::cast(std::make_pair(s.center_crop->fraction, s.center_crop->keep_aspect_ratio));
          },
          [](AugmentSpec& s, nb::handle v) {
            if (v.is_none()) {
              s.center_crop.reset();
            } else if (nb::isinstance<nb::float_>(v) || nb::isinstance<nb::int_>(v)) {
              s.center_crop = CenterCrop{nb::cast<double>(v), true};
            } else {
              auto p = nb::cast<std::pair<double, bool>>(v);
              s.center_crop = CenterCrop{p.first, p.second};
            }
          },
          accepts_none, "Central crop before the resize: a side fraction, or (fraction, keep_aspect_ratio).")
      .def_prop_rw(
          "random_resized_crop",
          [](const AugmentSpec& s) -> nb::object {
            if (!s.random_resized_crop) return nb::none();
            const auto& r = *s.random_resized_crop;
            nb::dict d;
            d["scale"] = std::make_pair(r.scale.lo, r.scale.hi);
            d["ratio"] = std::make_pair(r.ratio.lo, r.ratio.hi);
            d["center_fraction"] = r.center.fraction;
            return d;
          },
          [](AugmentSpec& s, nb::handle v) {
            if (v.is_none() || (nb::isinstance<nb::bool_>(v) && !nb::cast<bool>(v))) {
              s.random_resized_crop.reset();
              return;
            }
            RandomResizedCrop r;
            if (nb::isinstance<nb::dict>(v)) {
              nb::dict d = nb::borrow<nb::dict>(v);
              for (auto [key, value] : d) {
                const std::string k = nb::cast<std::string>(key);
                if (k == "scale") {
                  r.scale = pair_from(value, "random_resized_crop scale");
                } else if (k == "ratio") {
                  r.ratio = pair_from(value, "random_resized_crop ratio");
                } else if (k == "center_fraction") {
                  r.center.fraction = nb::cast<double>(value);
                } else {
                  throw InvalidArgument("random_resized_crop: unknown key '" + k + "' (scale, ratio, center_fraction)");
                }
              }
            } else if (!nb::isinstance<nb::bool_>(v)) {
              throw InvalidArgument(
                  "random_resized_crop must be True, None or a dict(scale=, ratio=, center_fraction=)");
            }
            s.random_resized_crop = r;
          },
          accepts_none, "torchvision's RandomResizedCrop: True (its defaults) or dict(scale=(lo, hi), ratio=(lo, hi)).")
      .def_rw("contrast", &AugmentSpec::contrast,
              "Contrast factor drawn in [max(0, 1 - c), 1 + c] (torchvision's ColorJitter); 0: off.")
      .def_rw("saturation", &AugmentSpec::saturation,
              "Saturation factor drawn in [max(0, 1 - s), 1 + s] (torchvision's ColorJitter); 0: off.")
      .def_rw("hue", &AugmentSpec::hue,
              "Hue shift in turns drawn in [-h, h], h <= 0.5 (torchvision's ColorJitter); 0: off.")
      .def_prop_rw(
          "normalization",
          [](const AugmentSpec& s) -> nb::object {
            if (!s.normalization) return nb::none();
            nb::dict d;
            d["mean"] = s.normalization->mean;
            d["std"] = s.normalization->std;
            d["bgr"] = s.normalization->bgr;
            return d;
          },
          [](AugmentSpec& s, nb::handle v) {
            if (v.is_none()) {
              s.normalization.reset();
            } else if (nb::isinstance<nb::str>(v)) {
              const std::string preset = nb::cast<std::string>(v);
              if (preset == "tf" || preset == "minus_one_to_one") {
                s.normalization = ChannelNormalization::minus_one_to_one();
              } else if (preset == "caffe") {
                s.normalization = ChannelNormalization::caffe();
              } else if (preset == "torch") {
                s.normalization = ChannelNormalization::torch();
              } else {
                throw InvalidArgument("normalization preset must be 'tf', 'caffe' or 'torch', received '" + preset +
                                      "'");
              }
            } else {
              nb::dict d = nb::borrow<nb::dict>(v);
              ChannelNormalization n;
              if (d.contains("mean")) n.mean = channels_from(d["mean"], "normalization mean");
              if (d.contains("std")) n.std = channels_from(d["std"], "normalization std");
              if (d.contains("bgr")) n.bgr = nb::cast<bool>(d["bgr"]);
              s.normalization = n;
            }
          },
          accepts_none,
          "Per-channel (x - mean) / std on the 0..255 scale: 'tf', 'caffe', 'torch' or dict(mean=, std=, bgr=).")
      .def_rw("training", &AugmentSpec::training, "False: only the deterministic part (validation).")
      .def_rw("keras_axis_conventions", &AugmentSpec::keras_axis_conventions,
              "True: Keras' exact axis conventions for the geometric transforms (pixel parity with Keras); False: the "
              "geometric ones.")
      .def("validation", &AugmentSpec::validation, "The same spec in validation mode.")
      .def("__copy__", [](const AugmentSpec& s) { return s; });
}

ImageView view_of(const U8Image& a, int channels, std::size_t index) {
  if (static_cast<int>(a.shape(2)) != channels) {
    throw InvalidArgument("image " + std::to_string(index) + " has " + std::to_string(a.shape(2)) +
                          " channels; the augmentation expects " + std::to_string(channels));
  }
  return {a.data(), static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)), channels, a.shape(1) * a.shape(2)};
}

// A (N, H, W, C) uint8 array or a sequence of (H, W, C) ones; the arrays must outlive the views.
std::vector<ImageView> views_of(nb::handle images, int channels) {
  std::vector<ImageView> views;
  U8Images batch;
  if (nb::try_cast(images, batch)) {
    const std::size_t n = batch.shape(0), h = batch.shape(1), w = batch.shape(2), c = batch.shape(3);
    if (static_cast<int>(c) != channels) {
      throw InvalidArgument("images have " + std::to_string(c) + " channels; the augmentation expects " +
                            std::to_string(channels));
    }
    for (std::size_t i = 0; i < n; ++i) {
      views.push_back({batch.data() + i * h * w * c, static_cast<int>(h), static_cast<int>(w), channels, w * c});
    }
    return views;
  }
  for (nb::handle item : images) {
    U8Image a;
    if (!nb::try_cast(item, a)) {
      throw InvalidArgument("image " + std::to_string(views.size()) +
                            ": expected a uint8 array of shape (height, width, channels)");
    }
    views.push_back(view_of(a, channels, views.size()));
  }
  return views;
}

nb::dict params_to_dict(const augment::SampleParams& p) {
  nb::dict d;
  d["theta"] = p.theta;
  d["tx"] = p.tx;
  d["ty"] = p.ty;
  d["shear"] = p.shear;
  d["zx"] = p.zx;
  d["zy"] = p.zy;
  d["flip_horizontal"] = p.flip_horizontal;
  d["flip_vertical"] = p.flip_vertical;
  d["crop"] = std::array<float, 4>{p.crop_x, p.crop_y, p.crop_w, p.crop_h};
  d["channel_shift"] = p.has_channel_shift ? nb::cast(p.channel_shift) : nb::none();
  d["brightness"] = p.has_brightness ? nb::cast(p.brightness) : nb::none();
  d["contrast"] = p.has_contrast ? nb::cast(p.contrast) : nb::none();
  d["saturation"] = p.has_saturation ? nb::cast(p.saturation) : nb::none();
  d["hue"] = p.has_hue ? nb::cast(p.hue) : nb::none();
  return d;
}

// Keras' transform_parameters names (theta, tx, ty, shear, zx, zy, flip_horizontal,
// flip_vertical, channel_shift_intensity, brightness) and stoker's own; missing keys are neutral.
augment::SampleParams params_from_dict(const nb::dict& d, int src_height, int src_width) {
  augment::SampleParams p;
  p.crop_w = static_cast<float>(src_width);
  p.crop_h = static_cast<float>(src_height);
  auto optional_float = [&](const char* key, bool& has, float& value) {
    if (d.contains(key) && !d[key].is_none()) {
      has = true;
      value = nb::cast<float>(d[key]);
    }
  };
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(key);
    if (value.is_none()) continue;
    if (k == "theta") {
      p.theta = nb::cast<float>(value);
    } else if (k == "tx") {
      p.tx = nb::cast<float>(value);
    } else if (k == "ty") {
      p.ty = nb::cast<float>(value);
    } else if (k == "shear") {
      p.shear = nb::cast<float>(value);
    } else if (k == "zx") {
      p.zx = nb::cast<float>(value);
    } else if (k == "zy") {
      p.zy = nb::cast<float>(value);
    } else if (k == "flip_horizontal") {
      p.flip_horizontal = nb::cast<bool>(value);
    } else if (k == "flip_vertical") {
      p.flip_vertical = nb::cast<bool>(value);
    } else if (k == "crop") {
      auto c = nb::cast<std::array<float, 4>>(value);
      p.crop_x = c[0], p.crop_y = c[1], p.crop_w = c[2], p.crop_h = c[3];
    } else if (k != "channel_shift" && k != "channel_shift_intensity" && k != "brightness" && k != "contrast" &&
               k != "saturation" && k != "hue") {
      throw InvalidArgument("transform parameters: unknown key '" + k + "'");
    }
  }
  optional_float("channel_shift", p.has_channel_shift, p.channel_shift);
  optional_float("channel_shift_intensity", p.has_channel_shift, p.channel_shift);
  optional_float("brightness", p.has_brightness, p.brightness);
  optional_float("contrast", p.has_contrast, p.contrast);
  optional_float("saturation", p.has_saturation, p.saturation);
  optional_float("hue", p.has_hue, p.hue);
  return p;
}

// A fresh host array for `count` outputs of `shape`, owned by its capsule.
struct OutputBuffer {
  std::shared_ptr<std::vector<std::byte>> bytes;
  nb::object array;
};
OutputBuffer new_output(std::size_t count, const SampleShape& shape) {
  auto bytes = std::make_shared<std::vector<std::byte>>(count * shape.bytes());
  nb::object array = host_view(bytes->data(), batch_shape(count, shape), dlpack_dtype(shape.dtype), keep_alive(bytes));
  return {bytes, array};
}

void bind_augmenter(nb::module_& m) {
  nb::class_<Augmenter>(m, "Augmenter", "The CPU augmentation: Keras' random transforms, stoker's RNG.")
      .def(nb::init<AugmentSpec>(), nb::arg("spec"))
      .def_prop_ro("spec", &Augmenter::spec)
      .def_prop_ro("output_shape", [](const Augmenter& a) { return batch_shape(1, a.output_shape()); })
      .def(
          "apply_batch",
          [](const Augmenter& a, nb::handle images, std::uint64_t seed, std::uint64_t epoch,
             std::optional<std::vector<std::int64_t>> sample_ids, int threads) {
            const std::vector<ImageView> views = views_of(images, a.spec().channels);
            if (sample_ids && sample_ids->size() != views.size()) {
              throw InvalidArgument("sample_ids: " + std::to_string(sample_ids->size()) + " ids for " +
                                    std::to_string(views.size()) + " images");
            }
            const SampleShape shape = a.output_shape();
            OutputBuffer out = new_output(views.size(), shape);
            std::byte* dst = out.bytes->data();
            {
              nb::gil_scoped_release unlocked;
              auto run = [&] {
                tbb::parallel_for(std::size_t{0}, views.size(), [&](std::size_t i) {
                  const SampleContext ctx{seed, epoch, sample_ids ? (*sample_ids)[i] : static_cast<std::int64_t>(i)};
                  a.apply(views[i], ctx, dst + i * shape.bytes());
                });
              };
              if (threads > 0) {
                tbb::task_arena(threads).execute(run);
              } else {
                run();
              }
            }
            return out.array;
          },
          nb::arg("images"), nb::arg("seed") = 0, nb::arg("epoch") = 0, nb::arg("sample_ids") = nb::none(),
          nb::arg("threads") = 0,
          "Augments a uint8 batch (N, H, W, C) or a list of (H, W, C) images on stoker's threads. Sample i "
          "draws its parameters from (seed, epoch, sample_ids[i] or i).")
      .def(
          "params",
          [](const Augmenter& a, std::uint64_t seed, std::uint64_t epoch, std::int64_t sample_id, int src_height,
             int src_width) {
            return params_to_dict(a.params({seed, epoch, sample_id}, src_height, src_width));
          },
          nb::arg("seed"), nb::arg("epoch"), nb::arg("sample_id"), nb::arg("src_height"), nb::arg("src_width"),
          "The parameters apply_batch draws for this sample and source size.")
      .def(
          "apply_with",
          [](const Augmenter& a, const U8Image& image, const nb::dict& params) {
            const ImageView view = view_of(image, a.spec().channels, 0);
            const augment::SampleParams p = params_from_dict(params, view.height, view.width);
            OutputBuffer out = new_output(1, a.output_shape());
            {
              nb::gil_scoped_release unlocked;
              a.apply_with(view, p, SampleContext{}, out.bytes->data());
            }
            return out.array;
          },
          nb::arg("image"), nb::arg("params"), "Augments one image with the given parameters (N = 1 in the result).");

  m.def(
      "fit_featurewise",
      [](const AugmentSpec& spec, nb::handle images) {
        const std::vector<ImageView> views = views_of(images, spec.channels);
        nb::gil_scoped_release unlocked;
        const FeaturewiseStats s = fit_featurewise(spec, views);
        return std::make_pair(s.mean, s.std);
      },
      nb::arg("spec"), nb::arg("images"),
      "Keras' ImageDataGenerator.fit: per-channel mean and std of the images brought to the output size "
      "(deterministic part of the spec) and rescaled.");
}

}  // namespace

void bind_augment(nb::module_& m) {
  bind_spec(m);
  bind_augmenter(m);
}

}  // namespace stoker::python
