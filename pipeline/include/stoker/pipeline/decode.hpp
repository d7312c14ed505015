// Reading and decoding one image file to interleaved RGB uint8.
// JPEG goes through libjpeg-turbo (its TurboJPEG API for the header, its libjpeg API for the pixels:
// DCT-domain downscaling, and decoding only a region); PNG, BMP, PPM/PGM, TIFF and WebP through
// OpenCV. The header is checked before any pixel buffer is allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/cache/source_stamp.hpp"
#include "stoker/core/image.hpp"
#include "stoker/pipeline/dataset.hpp"

namespace stoker {

enum class ImageFormat : std::uint8_t { Jpeg, Png, Bmp, Pnm, Tiff, WebP, Unknown };

const char* to_string(ImageFormat f) noexcept;

struct ImageHeader {
  ImageFormat format = ImageFormat::Unknown;
  int width = 0;
  int height = 0;
};

// Identifies the format from its signature and reads the announced size (every format above).
// Throws DecodeError(name, reason) for an empty, unrecognised or malformed header.
ImageHeader read_image_header(std::span<const std::uint8_t> bytes, const std::string& name);

struct DecodeLimits {
  // Headers announcing more pixels than this are rejected before allocation. The default is
  // Pillow's Image.MAX_IMAGE_PIXELS (about 179 MP); the loader's setting max_image_pixels.
  std::int64_t max_pixels = 178'956'970;
};

// Reads a whole file into `out` (reusing its capacity) and returns its stamp. Throws DecodeError
// for a missing, unreadable or empty file.
SourceStamp read_file(const std::string& path, std::vector<std::uint8_t>& out);

// Reads only `range` of the file (pread): an archive member. Errors are DecodeError(name, …), name
// being how the member is known ("shard.tar:key.jpg"); a range past the file's end (a shard that
// shrank since it was indexed) is one. The stamp is the whole file's.
SourceStamp read_file_range(const std::string& path, const ByteRange& range, const std::string& name,
                            std::vector<std::uint8_t>& out);

// The size an ImageDecoder's decode produces (a JPEG's after its DCT scaling).
struct DecodedSize {
  int height = 0;
  int width = 0;
};

// One decoder per thread: owns a TurboJPEG handle (headers) and pixel buffers that grow to the
// largest image seen and are then reused. libjpeg's working memory is made for each JPEG: a
// decompressor kept across files would lend one file's Huffman tables to the next.
class ImageDecoder {
 public:
  explicit ImageDecoder(DecodeLimits limits = {});
  ~ImageDecoder();
  ImageDecoder(ImageDecoder&&) noexcept;
  ImageDecoder& operator=(ImageDecoder&&) noexcept;
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Decodes `bytes` to RGB. JPEGs are shrunk in the DCT domain to the smallest scale whose size is
  // still >= (min_height, min_width) (full size when the image is smaller, or when both are 0). The view stays valid
  // until the next call. Grayscale and CMYK sources come out as RGB. Throws DecodeError(name, …).
  ImageView decode(std::span<const std::uint8_t> bytes, const std::string& name, int min_height = 0, int min_width = 0);

  // decode() in two steps, for a caller that chooses what to decode from the size: prepare() parses
  // the header (once) and fixes the DCT scale; decode_prepared() decodes the bytes given to
  // prepare() (which must still be valid) whole, or only `region` of the size
  // prepare() returned. With a region the view holds exactly its pixels, equal to the whole
  // decode's there: a JPEG's IDCT, upsampling and colour conversion run on the region's rows and
  // iMCU columns only (libjpeg's jpeg_skip_scanlines and jpeg_crop_scanline), its entropy-coded
  // data is still read to the end, so a truncated or corrupt file fails whichever part is asked
  // for. Other formats are decoded whole by prepare() (its size is their pixels', whatever their
  // header says) and the view is the region of them.
  DecodedSize prepare(std::span<const std::uint8_t> bytes, const std::string& name, int min_height = 0,
                      int min_width = 0);
  ImageView decode_prepared(const CropBox* region = nullptr);

  // Whether the last decode_prepared() decoded only part of the image (a JPEG region).
  bool decoded_part() const noexcept;

  // The DCT scale TurboJPEG would use for this image and minimum size (numerator/denominator).
  static void choose_jpeg_scale(int width, int height, int min_height, int min_width, int& num, int& denom);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
