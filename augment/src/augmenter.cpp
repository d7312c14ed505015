// The CPU executor: one warp per image (warp.hpp: the fixed-point loop, vectorised where the CPU
// allows; cv::resize when the geometry is only crop + resize + flips), then one pass that applies the
// photometric steps, the standardisation and the output conversion.
#include "stoker/augment/augmenter.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "params.hpp"
#include "photometric_rows.hpp"
#include "pixel.hpp"
#include "stoker/core/error.hpp"
#include "warp.hpp"

namespace stoker {
namespace {

using augment::AugmentPlan;
using augment::SampleParams;

augment::PixelSource pixel_source(const ImageView& v) { return {v.data, v.height, v.width, v.channels, v.row_stride}; }

void check_source(const AugmentPlan& p, const ImageView& src) {
  if (src.empty()) throw InvalidArgument("Augmenter: empty source image");
  if (src.channels != p.channels) {
    throw InvalidArgument("Augmenter: source has " + std::to_string(src.channels) + " channels, expected " +
                          std::to_string(p.channels));
  }
  if (src.row_stride < static_cast<std::size_t>(src.width) * static_cast<std::size_t>(src.channels)) {
    throw InvalidArgument("Augmenter: row_stride " + std::to_string(src.row_stride) + " is below width * channels");
  }
}

// Per-thread scratch buffers, reused across samples (no allocation in steady state).
struct Scratch {
  std::vector<std::uint8_t> warped;
  std::vector<float> values;
  std::vector<float> planes;  // one output row per channel (photometric_rows.hpp)
  std::vector<int> xofs, yofs;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The geometric part: src -> out (uint8, out_height x out_width, interleaved); lut: 256 entries
// applied to every value.
void run_geometry(const AugmentPlan& p, const SampleParams& s, const ImageView& src, std::uint8_t* out_data,
                  const std::uint8_t* lut = nullptr) {
  const int cn = p.channels;
  const cv::Mat srcm(src.height, src.width, CV_8UC(cn), const_cast<std::uint8_t*>(src.data), src.row_stride);
  cv::Mat out(p.out_height, p.out_width, CV_8UC(cn), out_data);
  if (augment::is_resize_only(s)) {
    const cv::Rect box(static_cast<int>(s.crop_x), static_cast<int>(s.crop_y), static_cast<int>(s.crop_w),
                       static_cast<int>(s.crop_h));
    const cv::Mat roi = srcm(box);
    if (p.interpolation_order == 1) {
      cv::resize(roi, out, out.size(), 0, 0, cv::INTER_LINEAR);
      if (s.flip_horizontal || s.flip_vertical) {
        cv::flip(out, out, s.flip_horizontal && s.flip_vertical ? -1 : (s.flip_horizontal ? 1 : 0));
      }
    } else {
      // Nearest with pixel centres (PIL's convention), flips folded into the index tables.
      Scratch& sc = scratch();
      sc.xofs.resize(static_cast<std::size_t>(p.out_width));
      sc.yofs.resize(static_cast<std::size_t>(p.out_height));
      float f;
      for (int x = 0; x < p.out_width; ++x) {
        const int ox = s.flip_horizontal ? p.out_width - 1 - x : x;
        augment::resize_coord(ox, p.out_width, s.crop_x, s.crop_w, 0, sc.xofs[x], f);
      }
      for (int y = 0; y < p.out_height; ++y) {
        const int oy = s.flip_vertical ? p.out_height - 1 - y : y;
        augment::resize_coord(oy, p.out_height, s.crop_y, s.crop_h, 0, sc.yofs[y], f);
      }
      for (int y = 0; y < p.out_height; ++y) {
        const std::uint8_t* row = src.data + static_cast<std::size_t>(sc.yofs[y]) * src.row_stride;
        std::uint8_t* o = out.ptr<std::uint8_t>(y);
        for (int x = 0; x < p.out_width; ++x)
          std::memcpy(o + x * cn, row + sc.xofs[x] * cn, static_cast<std::size_t>(cn));
      }
    }
    if (lut) {
      const std::size_t row = static_cast<std::size_t>(p.out_width) * cn;
      for (int y = 0; y < p.out_height; ++y) augment::apply_lut_row(lut, out_data + y * row, static_cast<int>(row));
    }
    return;
  }
  augment::WarpJob job;
  job.plan = &p;
  job.src = pixel_source(src);
  job.affine = augment::build_affine(p, s);
  job.truncate = s.has_brightness;
  job.lut = lut;
  job.out = out_data;
  augment::warp(job);
}

augment::WarpStats warp_stats(const AugmentPlan& p, const SampleParams& s, const std::uint8_t* w) {
  augment::WarpStats st;
  const int cn = p.channels;
  const std::size_t pixels = static_cast<std::size_t>(p.out_height) * static_cast<std::size_t>(p.out_width);
  st.pixels = pixels;
  if (s.has_channel_shift) {
    const auto [mn, mx] = std::minmax_element(w, w + pixels * cn);
    st.min = *mn;
    st.max = *mx;
  }
  if (s.has_contrast) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < pixels; ++i) {
      const std::uint8_t* px = w + i * cn;
      sum += cn >= 3 ? augment::pil_luma(px[0], px[1], px[2]) : px[0];
    }
    st.luma_sum = sum;
  }
  return st;
}

template <typename T>
void store(std::byte* dst, std::size_t index, float v) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    reinterpret_cast<std::uint8_t*>(dst)[index] = augment::hd::to_u8(v);
  } else {
    reinterpret_cast<float*>(dst)[index] = v;
  }
}

// One row of the photometric steps (photometric_rows.hpp), flattened so that every loop is
// compiled (and vectorised) for the clone's instruction set. On x86-64 target_clones builds a copy
// for AVX2 as well (as the trainer's GEMM does), picked at load time: 8 pixels per instruction
// instead of 4, the same IEEE float operations on each value ("avx2" does not enable FMA, so no
// multiply-add can be fused into one rounding, whatever -ffp-contract says).
// (Not under ThreadSanitizer: the clones' ifunc resolvers would run before its runtime starts.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define STOKER_ROW_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#else
#define STOKER_ROW_CLONES __attribute__((flatten))
#endif
STOKER_ROW_CLONES void photometric_row(const augment::rows::PhotometricConstants& k, const augment::rows::RowTarget& t,
                                       const std::uint8_t* warped, int y, float* const* plane) {
  augment::rows::process_row(k, t, warped, y, plane);
}
STOKER_ROW_CLONES void values_output_row(const augment::rows::RowTarget& t, const std::uint8_t* values, int y,
                                         float* const* plane) {
  augment::rows::values_row(t, values, y, plane);
}

// The row target of the output (through oa into dst) or of the photometric values (values), and
// the scratch rows it goes through.
struct RowPass {
  augment::rows::RowTarget target;
  float* plane[augment::kMaxChannels];

  RowPass(const AugmentPlan& p, const augment::OutputAffine* oa, std::byte* dst, float* values) {
    const int cn = p.channels, w = p.out_width;
    target.oa = oa;
    target.dst = dst;
    target.values = values;
    target.width = w;
    target.height = p.out_height;
    target.channels = cn;
    target.float_output = p.float_output;
    target.dtype = p.output_dtype;
    target.nchw = p.nchw;
    std::vector<float>& buf = scratch().planes;
    buf.resize(static_cast<std::size_t>(cn) * w);
    for (int c = 0; c < cn; ++c) plane[c] = buf.data() + static_cast<std::size_t>(c) * w;
  }
};

// The per-pixel photometric steps (those that are not a function of the single value:
// saturation, hue), row by row: bit-identical to photometric() on every pixel. Either writes the
// output through oa (dst) or, when values is set, the photometric results as interleaved floats.
void photometric_rows(const AugmentPlan& p, const SampleParams& s, const augment::WarpStats& st, float cmean,
                      const std::uint8_t* warped, const augment::OutputAffine* oa, std::byte* dst, float* values) {
  const augment::rows::PhotometricConstants k = augment::rows::photometric_constants(s, st, cmean, p.channels);
  RowPass pass(p, oa, dst, values);
  for (int y = 0; y < p.out_height; ++y) photometric_row(k, pass.target, warped, y, pass.plane);
}

// Warped values that are already the photometric results (the warp applied their table) through
// the output affine into dst: the same float operations as finish()'s per-value tables.
void write_values(const AugmentPlan& p, const std::uint8_t* values, std::byte* dst) {
  const augment::OutputAffine oa = augment::output_affine(p, p.channels, 0.0f, 1.0f);
  RowPass pass(p, &oa, dst, nullptr);
  for (int y = 0; y < p.out_height; ++y) values_output_row(pass.target, values, y, pass.plane);
}

}  // namespace

Augmenter::Augmenter(AugmentSpec spec) : spec_(std::move(spec)), plan_(make_plan(spec_)) {}

namespace {
int min_decode(const AugmentPlan& p, int out) {
  double fraction = 1.0;
  if (p.crop == augment::CropKind::Center || (p.crop == augment::CropKind::RandomResized && !p.training)) {
    fraction = p.center_fraction;
  } else if (p.crop == augment::CropKind::RandomResized) {
    fraction = std::sqrt(static_cast<double>(p.crop_scale_lo));
  }
  return static_cast<int>(std::ceil(out / fraction - 1e-9));
}
}  // namespace

int Augmenter::min_decode_height() const { return min_decode(plan_, plan_.out_height); }
int Augmenter::min_decode_width() const { return min_decode(plan_, plan_.out_width); }

std::optional<Augmenter::ChannelAffine> Augmenter::output_affine() const {
  if (plan_.samplewise_center || plan_.samplewise_std || spec_.preprocessing_function) return std::nullopt;
  const augment::OutputAffine a = augment::output_affine(plan_, plan_.channels, 0.0f, 1.0f);
  ChannelAffine out;
  for (int c = 0; c < plan_.channels; ++c) {
    out.scale.push_back(a.scale[c]);
    out.offset.push_back(a.offset[c]);
    out.source_channel.push_back(a.source_channel[c]);
  }
  return out;
}

std::string Augmenter::cache_identity() const {
  const AugmentPlan& p = plan_;
  if (p.training || p.float_output || p.nchw || spec_.preprocessing_function) return {};
  std::string id = "augment-validation:" + std::to_string(p.out_height) + "x" + std::to_string(p.out_width) + "x" +
                   std::to_string(p.channels) + ":order" + std::to_string(p.interpolation_order);
  if (p.crop != augment::CropKind::None) {
    id += ":centre" + std::to_string(p.center_fraction) + (p.keep_aspect_ratio ? ":keep-aspect" : "");
  }
  return id;
}

augment::SampleParams Augmenter::params(const SampleContext& ctx, int src_height, int src_width) const {
  return augment::draw_params(plan_, ctx.seed, ctx.epoch, ctx.sample_id, src_height, src_width);
}

augment::Affine Augmenter::matrix(const augment::SampleParams& params) const {
  return augment::build_affine(plan_, params);
}

static void check_box(const SampleParams& s, const ImageView& src) {
  if (!(s.crop_x >= 0 && s.crop_y >= 0 && s.crop_w >= 1 && s.crop_h >= 1 && s.crop_x + s.crop_w <= src.width &&
        s.crop_y + s.crop_h <= src.height)) {
    throw InvalidArgument("Augmenter: crop box " + std::to_string(s.crop_w) + "x" + std::to_string(s.crop_h) + "+" +
                          std::to_string(s.crop_x) + "+" + std::to_string(s.crop_y) + " is not inside the " +
                          std::to_string(src.width) + "x" + std::to_string(src.height) + " source");
  }
}

void Augmenter::apply(const ImageView& src, const SampleContext& ctx, std::byte* dst) const {
  check_source(plan_, src);
  apply_with(src, params(ctx, src.height, src.width), ctx, dst);
}

std::optional<CropBox> Augmenter::source_region(const SampleContext& ctx, int src_height, int src_width) const {
  const SampleParams s = params(ctx, src_height, src_width);
  if (!augment::is_resize_only(s)) return std::nullopt;  // a warp may read anywhere (fill modes)
  const CropBox box{static_cast<int>(s.crop_x), static_cast<int>(s.crop_y), static_cast<int>(s.crop_w),
                    static_cast<int>(s.crop_h)};
  if (box.width == src_width && box.height == src_height) return std::nullopt;
  return box;
}

void Augmenter::apply_part(const ImageView& part, const CropBox& region, int full_height, int full_width,
                           const SampleContext& ctx, std::byte* dst) const {
  SampleParams s = params(ctx, full_height, full_width);
  s.crop_x -= static_cast<float>(region.x);
  s.crop_y -= static_cast<float>(region.y);
  apply_with(part, s, ctx, dst);
}

void Augmenter::apply_reference(const ImageView& src, const SampleContext& ctx, std::byte* dst) const {
  check_source(plan_, src);
  apply_reference_with(src, params(ctx, src.height, src.width), ctx, dst);
}

void Augmenter::apply_with(const ImageView& src, const SampleParams& s, const SampleContext& ctx,
                           std::byte* dst) const {
  check_source(plan_, src);
  check_box(s, src);
  const bool per_value = !s.has_saturation && !s.has_hue && !spec_.preprocessing_function && !plan_.samplewise_center &&
                         !plan_.samplewise_std;
  Scratch& sc = scratch();
  const std::size_t warped_bytes = static_cast<std::size_t>(plan_.out_height) * plan_.out_width * plan_.channels;
  const bool u8_nhwc = !plan_.float_output && !plan_.nchw;
  if (per_value && !s.has_channel_shift && !s.has_contrast) {
    // Photometric steps that need no image statistics (brightness: integers, the same function
    // of the value on every channel) are one table that the warp applies as it stores rows.
    std::uint8_t lut[256];
    if (s.photometric()) {
      for (int v = 0; v < 256; ++v) {
        float x = static_cast<float>(v);
        augment::photometric(s, augment::WarpStats{}, 0.0f, 1, &x);
        lut[v] = augment::hd::to_u8(x);
      }
    }
    const std::uint8_t* table = s.photometric() ? lut : nullptr;
    if (u8_nhwc) {
      // Straight into the slot.
      run_geometry(plan_, s, src, reinterpret_cast<std::uint8_t*>(dst), table);
      return;
    }
    sc.warped.resize(warped_bytes);
    run_geometry(plan_, s, src, sc.warped.data(), table);
    write_values(plan_, sc.warped.data(), dst);
    return;
  }
  if (u8_nhwc && per_value) {
    // The other per-value steps: one in-place pass after the warp.
    std::uint8_t* out = reinterpret_cast<std::uint8_t*>(dst);
    run_geometry(plan_, s, src, out);
    finish(out, s, ctx, dst, false);
    return;
  }
  sc.warped.resize(warped_bytes);
  run_geometry(plan_, s, src, sc.warped.data());
  finish(sc.warped.data(), s, ctx, dst, false);
}

void Augmenter::apply_reference_with(const ImageView& src, const SampleParams& s, const SampleContext& ctx,
                                     std::byte* dst) const {
  check_source(plan_, src);
  check_box(s, src);
  const augment::Affine a = matrix(s);
  const augment::PixelSource ps = pixel_source(src);
  std::vector<std::uint8_t> warped(static_cast<std::size_t>(plan_.out_height) * plan_.out_width * plan_.channels);
  for (int y = 0; y < plan_.out_height; ++y) {
    for (int x = 0; x < plan_.out_width; ++x) {
      augment::sample_geometry(ps, plan_, s, a, x, y,
                               warped.data() + (static_cast<std::size_t>(y) * plan_.out_width + x) * plan_.channels);
    }
  }
  finish(warped.data(), s, ctx, dst, true);
}

void Augmenter::finish(const std::uint8_t* warped, const SampleParams& s, const SampleContext& ctx, std::byte* dst,
                       bool reference) const {
  const AugmentPlan& p = plan_;
  const int cn = p.channels;
  const int w = p.out_width, h = p.out_height;
  const std::size_t pixels = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  const augment::WarpStats st = warp_stats(p, s, warped);
  const float cmean = s.has_contrast ? augment::contrast_mean(s, st) : 0.0f;
  const bool needs_values = static_cast<bool>(spec_.preprocessing_function) || p.samplewise_center || p.samplewise_std;

  auto write_all = [&](auto tag, const augment::OutputAffine& oa, auto&& value_of) {
    using T = decltype(tag);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        float v[augment::kMaxChannels];
        value_of(static_cast<std::size_t>(y) * w + x, v);
        for (int oc = 0; oc < cn; ++oc) {
          const float val = augment::hd::add(augment::hd::mul(v[oa.source_channel[oc]], oa.scale[oc]), oa.offset[oc]);
          if constexpr (std::is_same_v<T, float>) {
            convert::store(p.output_dtype, dst, augment::output_index(p, x, y, oc), val);  // f32, f16 or bf16
          } else {
            store<T>(dst, augment::output_index(p, x, y, oc), val);
          }
        }
      }
    }
  };
  auto dispatch = [&](const augment::OutputAffine& oa, auto&& value_of) {
    if (p.float_output) {
      write_all(float{}, oa, value_of);
    } else {
      write_all(std::uint8_t{}, oa, value_of);
    }
  };

  if (!needs_values) {
    const augment::OutputAffine oa = augment::output_affine(p, cn, 0.0f, 1.0f);
    const bool per_value = !s.has_saturation && !s.has_hue;
    if (per_value && !reference) {
      // Every step is a function of the single value: tabulate value -> output per channel once
      // per image (the same float operations as the per-pixel path), then one lookup per element.
      // Elementwise, so warped may alias dst (uint8 NHWC in place).
      float lut[augment::kMaxChannels][256];
      for (int v = 0; v < 256; ++v) {
        float x = static_cast<float>(v);
        augment::photometric(s, st, cmean, 1, &x);
        for (int oc = 0; oc < cn; ++oc) lut[oc][v] = augment::hd::add(augment::hd::mul(x, oa.scale[oc]), oa.offset[oc]);
      }
      const std::size_t plane = pixels;
      // One lookup per element into a table of the output type.
      auto write_table = [&](auto* out, const auto& table) {
        if (p.nchw) {
          for (int oc = 0; oc < cn; ++oc) {
            const auto* l = table[oc];
            const std::uint8_t* in = warped + oa.source_channel[oc];
            auto* o = out + plane * oc;
            for (std::size_t i = 0; i < plane; ++i) o[i] = l[in[i * cn]];
          }
        } else {
          for (std::size_t i = 0; i < plane; ++i)
            for (int oc = 0; oc < cn; ++oc) out[i * cn + oc] = table[oc][warped[i * cn + oa.source_channel[oc]]];
        }
      };
      if (p.float_output && p.output_dtype == DType::F32) {
        write_table(reinterpret_cast<float*>(dst), lut);
        return;
      }
      if (p.float_output) {  // f16 / bf16: the float table's values rounded once
        std::uint16_t bits[augment::kMaxChannels][256];
        for (int oc = 0; oc < cn; ++oc)
          for (int v = 0; v < 256; ++v) convert::store(p.output_dtype, bits[oc], v, lut[oc][v]);
        write_table(reinterpret_cast<std::uint16_t*>(dst), bits);
        return;
      }
      std::uint8_t lut8[augment::kMaxChannels][256];
      for (int oc = 0; oc < cn; ++oc)
        for (int v = 0; v < 256; ++v) lut8[oc][v] = augment::hd::to_u8(lut[oc][v]);
      std::uint8_t* out = reinterpret_cast<std::uint8_t*>(dst);
      if (p.nchw) {
        for (int oc = 0; oc < cn; ++oc) {
          const std::uint8_t* l = lut8[oc];
          const std::uint8_t* in = warped + oa.source_channel[oc];
          std::uint8_t* o = out + plane * oc;
          for (std::size_t i = 0; i < plane; ++i) o[i] = l[in[i * cn]];
        }
      } else if (cn == 3) {
        for (std::size_t i = 0; i < plane * 3; i += 3) {
          out[i] = lut8[0][warped[i]];
          out[i + 1] = lut8[1][warped[i + 1]];
          out[i + 2] = lut8[2][warped[i + 2]];
        }
      } else {
        for (std::size_t i = 0; i < plane; ++i)
          for (int oc = 0; oc < cn; ++oc) out[i * cn + oc] = lut8[oc][warped[i * cn + oc]];
      }
      return;
    }
    if (!reference) {
      photometric_rows(p, s, st, cmean, warped, &oa, dst, nullptr);
      return;
    }
    // The reference executor: photometric() per pixel.
    dispatch(oa, [&](std::size_t i, float* v) {
      for (int c = 0; c < cn; ++c) v[c] = warped[i * cn + c];
      augment::photometric(s, st, cmean, cn, v);
    });
    return;
  }

  // Keras' standardize(): preprocessing_function, rescale, sample-wise statistics.
  std::vector<float> local;
  std::vector<float>& values = reference ? local : scratch().values;
  values.resize(pixels * cn);
  if (!reference) {
    photometric_rows(p, s, st, cmean, warped, nullptr, nullptr, values.data());
  } else {
    for (std::size_t i = 0; i < pixels; ++i) {
      float v[augment::kMaxChannels];
      for (int c = 0; c < cn; ++c) v[c] = warped[i * cn + c];
      augment::photometric(s, st, cmean, cn, v);
      for (int c = 0; c < cn; ++c) values[i * cn + c] = v[c];
    }
  }
  if (spec_.preprocessing_function) spec_.preprocessing_function(values.data(), h, w, cn, ctx);
  float mean = 0.0f, stdev = 1.0f;
  if (p.samplewise_center || p.samplewise_std) {
    double sum = 0.0, sq = 0.0;
    for (const float v : values) {
      const double r = static_cast<double>(v) * p.rescale;
      sum += r;
      sq += r * r;
    }
    const double n = static_cast<double>(values.size());
    const double m = sum / n;
    mean = static_cast<float>(m);
    stdev = static_cast<float>(std::sqrt(std::max(0.0, sq / n - m * m)));
  }
  const augment::OutputAffine oa = augment::output_affine(p, cn, mean, stdev);
  dispatch(oa, [&](std::size_t i, float* v) {
    for (int c = 0; c < cn; ++c) v[c] = values[i * cn + c];
  });
}

AugmentSpec FeaturewiseFit::input_spec(const AugmentSpec& spec) {
  AugmentSpec det = spec;
  det.training = false;
  det.dtype = DType::U8;
  det.layout = Layout::NHWC;
  det.rescale.reset();
  det.normalization.reset();
  det.featurewise_center = det.featurewise_std_normalization = false;
  det.samplewise_center = det.samplewise_std_normalization = false;
  det.featurewise.reset();
  det.preprocessing_function = nullptr;
  return det;
}

FeaturewiseFit::FeaturewiseFit(const AugmentSpec& spec)
    : rescale_(spec.rescale.value_or(1.0)),
      channels_(spec.channels),
      image_values_(input_spec(spec).output_shape().bytes()) {}

void FeaturewiseFit::add(const std::uint8_t* images, std::size_t count) {
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint8_t* px = images + k * image_values_;
    for (std::size_t i = 0; i < image_values_; i += static_cast<std::size_t>(channels_)) {
      for (int c = 0; c < channels_; ++c) {
        const double v = px[i + static_cast<std::size_t>(c)] * rescale_;
        sum_[static_cast<std::size_t>(c)] += v;
        squares_[static_cast<std::size_t>(c)] += v * v;
      }
    }
    pixels_ += static_cast<double>(image_values_ / static_cast<std::size_t>(channels_));
  }
}

FeaturewiseStats FeaturewiseFit::result() const {
  if (pixels_ == 0) throw InvalidArgument("fit_featurewise: no images");
  FeaturewiseStats out;
  for (std::size_t c = 0; c < static_cast<std::size_t>(channels_); ++c) {
    const double m = sum_[c] / pixels_;
    out.mean[c] = static_cast<float>(m);
    out.std[c] = static_cast<float>(std::sqrt(std::max(0.0, squares_[c] / pixels_ - m * m)));
  }
  return out;
}

FeaturewiseStats fit_featurewise(const AugmentSpec& spec, std::span<const ImageView> images) {
  if (images.empty()) throw InvalidArgument("fit_featurewise: no images");
  const Augmenter resize(FeaturewiseFit::input_spec(spec));
  FeaturewiseFit fit(spec);
  std::vector<std::uint8_t> buf(resize.output_shape().bytes());
  for (const ImageView& im : images) {
    resize.apply(im, SampleContext{}, reinterpret_cast<std::byte*>(buf.data()));
    fit.add(buf.data(), 1);
  }
  return fit.result();
}

}  // namespace stoker
