#include "stoker/pipeline/transform.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/resample.hpp"

namespace stoker {

const char* to_string(Interpolation i) noexcept {
  switch (i) {
    case Interpolation::Nearest: return "nearest";
    case Interpolation::Bilinear: return "bilinear";
    case Interpolation::Area: return "area";
    case Interpolation::Bicubic: return "bicubic";
    case Interpolation::Lanczos: return "lanczos";
    case Interpolation::Box: return "box";
    case Interpolation::Hamming: return "hamming";
    case Interpolation::CentreNearest: return "centre_nearest";
    case Interpolation::OpenCvLinear: return "opencv_linear";
  }
  return "?";
}

namespace {

// centre_nearest (augment/'s order 0 at neutral parameters): output pixel x samples source
// floor((x + 0.5) * in/out), computed per pixel (Pillow's NEAREST accumulates the position, which
// differs at some ratios; OpenCV's INTER_NEAREST uses floor(x * in/out)).
void resize_nearest_centres(const cv::Mat& in, cv::Mat& out) {
  thread_local std::vector<int> x_offsets;
  x_offsets.resize(static_cast<std::size_t>(out.cols));
  const double sx = static_cast<double>(in.cols) / out.cols, sy = static_cast<double>(in.rows) / out.rows;
  for (int x = 0; x < out.cols; ++x) {
    x_offsets[static_cast<std::size_t>(x)] = 3 * std::min(in.cols - 1, static_cast<int>((x + 0.5) * sx));
  }
  // Pixels are copied as 4-byte words, the 4th byte being overwritten by the next pixel; so not the
  // row's last pixel, nor pixels read from the source row's last pixel.
  int words = out.cols - 1;
  while (words > 0 && x_offsets[static_cast<std::size_t>(words - 1)] + 4 > in.cols * 3) --words;
  // Plain locals: uint8_t stores may alias anything, so the compiler would reload vector internals.
  const int* const offsets = x_offsets.data();
  const int cols = out.cols;
  int previous_source_row = -1;
  for (int y = 0; y < out.rows; ++y) {
    const int source_row = std::min(in.rows - 1, static_cast<int>((y + 0.5) * sy));
    std::uint8_t* dst = out.ptr<std::uint8_t>(y);
    if (source_row == previous_source_row) {  // upscaling repeats rows
      std::memcpy(dst, out.ptr<std::uint8_t>(y - 1), static_cast<std::size_t>(out.cols) * 3);
      continue;
    }
    previous_source_row = source_row;
    const std::uint8_t* src = in.ptr<std::uint8_t>(source_row);
    int x = 0;
    for (; x < words; ++x) std::memcpy(dst + 3 * x, src + offsets[x], 4);
    for (; x < cols; ++x) std::memcpy(dst + 3 * x, src + offsets[x], 3);
  }
}

}  // namespace

void SampleTransform::apply_part(const ImageView&, const CropBox&, int, int, const SampleContext&, std::byte*) const {
  throw InvalidArgument("this transform reads whole images: it has no source_region(), so no apply_part()");
}

CropBox centre_crop_box(int src_height, int src_width, int target_height, int target_width) noexcept {
  // Keras (keras.utils.load_img): integer crop sizes, then int() of the half margins.
  int crop_h = static_cast<int>((static_cast<long>(src_width) * target_height) / target_width);
  int crop_w = static_cast<int>((static_cast<long>(src_height) * target_width) / target_height);
  crop_h = std::min(src_height, crop_h);
  crop_w = std::min(src_width, crop_w);
  return CropBox{(src_width - crop_w) / 2, (src_height - crop_h) / 2, crop_w, crop_h};
}

ResizeTransform::ResizeTransform(int height, int width, Interpolation interpolation, bool keep_aspect_ratio)
    : shape_{height, width, 3, DType::U8, Layout::NHWC},
      interpolation_(interpolation),
      keep_aspect_ratio_(keep_aspect_ratio) {
  if (height <= 0 || width <= 0 || height > 16384 || width > 16384) {
    throw InvalidArgument("image size must be in 1..16384, received " + std::to_string(height) + "x" +
                          std::to_string(width));
  }
}

std::string ResizeTransform::cache_identity() const {
  return "resize " + std::to_string(shape_.height) + "x" + std::to_string(shape_.width) + " " +
         to_string(interpolation_) + (is_pil_filter(interpolation_) ? " pillow" : "") +
         (keep_aspect_ratio_ ? " keep-aspect" : "");
}

void ResizeTransform::apply(const ImageView& src, const SampleContext&, std::byte* dst) const {
  if (src.channels != 3)
    throw InvalidArgument("ResizeTransform expects 3 channels, received " + std::to_string(src.channels));
  auto* const out_data = reinterpret_cast<std::uint8_t*>(dst);
  const std::size_t out_stride = static_cast<std::size_t>(shape_.width) * 3;
  const bool same_size = src.height == shape_.height && src.width == shape_.width;
  CropBox box = keep_aspect_ratio_ && !same_size ? centre_crop_box(src.height, src.width, shape_.height, shape_.width)
                                                 : CropBox{0, 0, src.width, src.height};
  if (is_pil_filter(interpolation_)) {
    pil_resize(src, shape_.height, shape_.width, interpolation_, out_data, out_stride,
               ResampleBox{box.x, box.y, box.x + box.width, box.y + box.height});
    return;
  }
  // An aspect ratio far from the source's can leave Keras' integer box empty (17x1 from 7x9: a
  // width of 7/17 = 0); OpenCV needs a pixel, so the box keeps at least its centre one.
  if (box.width < 1) box.x = std::min(box.x, src.width - 1), box.width = 1;
  if (box.height < 1) box.y = std::min(box.y, src.height - 1), box.height = 1;
  cv::Mat in(src.height, src.width, CV_8UC3, const_cast<std::uint8_t*>(src.data), src.row_stride);
  in = in(cv::Rect(box.x, box.y, box.width, box.height));
  cv::Mat out(shape_.height, shape_.width, CV_8UC3, out_data);
  if (in.rows == out.rows && in.cols == out.cols) {
    in.copyTo(out);
    return;
  }
  if (interpolation_ == Interpolation::CentreNearest) {
    resize_nearest_centres(in, out);
    return;
  }
  cv::resize(in, out, out.size(), 0, 0,
             interpolation_ == Interpolation::OpenCvLinear ? cv::INTER_LINEAR : cv::INTER_AREA);
}

}  // namespace stoker
