#include "stoker/pipeline/transform.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "stoker/core/error.hpp"

namespace stoker {

const char* to_string(Interpolation i) noexcept {
  switch (i) {
    case Interpolation::Nearest: return "nearest";
    case Interpolation::Bilinear: return "bilinear";
    case Interpolation::Area: return "area";
  }
  return "?";
}

namespace {

// PIL's NEAREST (what Keras' load_img uses): output pixel x samples source floor((x + 0.5) * in/out).
// OpenCV's INTER_NEAREST uses floor(x * in/out), and 4.6's INTER_NEAREST_EXACT differs from PIL on
// even ratios, so the mapping is written out here.
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
         to_string(interpolation_) + (keep_aspect_ratio_ ? " keep-aspect" : "");
}

void ResizeTransform::apply(const ImageView& src, const SampleContext&, std::byte* dst) const {
  if (src.channels != 3)
    throw InvalidArgument("ResizeTransform expects 3 channels, received " + std::to_string(src.channels));
  cv::Mat in(src.height, src.width, CV_8UC3, const_cast<std::uint8_t*>(src.data), src.row_stride);
  if (keep_aspect_ratio_) {
    const CropBox box = centre_crop_box(src.height, src.width, shape_.height, shape_.width);
    in = in(cv::Rect(box.x, box.y, box.width, box.height));
  }
  cv::Mat out(shape_.height, shape_.width, CV_8UC3, dst);
  if (in.rows == out.rows && in.cols == out.cols) {
    in.copyTo(out);
    return;
  }
  if (interpolation_ == Interpolation::Nearest) {
    resize_nearest_centres(in, out);
    return;
  }
  cv::resize(in, out, out.size(), 0, 0, interpolation_ == Interpolation::Bilinear ? cv::INTER_LINEAR : cv::INTER_AREA);
}

}  // namespace stoker
