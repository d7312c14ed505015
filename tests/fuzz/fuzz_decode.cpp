// Fuzzes the image decoding path every sample takes (ImageDecoder::decode: the header sniffing and
// size checks of read_image_header, TurboJPEG with DCT scaling and CMYK conversion, OpenCV for PNG,
// BMP, PPM, TIFF and WebP), reads every pixel of what it returned, then resizes it as the loader
// does (ResizeTransform: every interpolation, with and without Keras' aspect crop) to a size the
// input chooses. Then decodes a box of it alone (ImageDecoder::decode_prepared with a region: libjpeg's
// crop and skip for JPEGs) and aborts unless its pixels are the whole decode's.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/pipeline/decode.hpp>
#include <stoker/pipeline/transform.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  // Byte 0: the smallest size a JPEG may be shrunk to in the DCT domain (0: full size).
  const int min_size = data[0] % 64;
  // Bytes 1-2: the resize's output (1..32 square or 1..8 × 1..64), interpolation and aspect crop.
  const int out_h = 1 + data[1] % 32, out_w = data[2] & 0x80 ? 1 + (data[2] >> 3) % 8 : out_h;
  const auto interpolation = static_cast<stoker::Interpolation>(data[2] % 9);
  const bool keep_aspect = data[2] & 0x40;
  const std::span<const std::uint8_t> bytes(data + 3, size - 3);
  // A small pixel limit: an image announcing more is rejected before any allocation.
  static stoker::ImageDecoder decoder(stoker::DecodeLimits{4'000'000});
  static stoker::ImageDecoder region_decoder(stoker::DecodeLimits{4'000'000});
  bool whole_decoded = false;
  try {
    const stoker::ImageView v = decoder.decode(bytes, "fuzz-input", min_size, min_size);
    if (v.empty() || v.channels != 3 || v.row_stride < static_cast<std::size_t>(v.width) * 3) std::abort();
    if (static_cast<std::int64_t>(v.width) * v.height > 4'000'000) std::abort();
    unsigned sum = 0;
    for (int y = 0; y < v.height; ++y)
      for (std::size_t x = 0; x < static_cast<std::size_t>(v.width) * 3; ++x) sum += v.row(y)[x];
    if (sum == 0xFFFFFFFFu) std::fprintf(stderr, "(unlikely sum)\n");  // keeps the reads
    const stoker::ResizeTransform resize(out_h, out_w, interpolation, keep_aspect);
    std::vector<std::byte> out(resize.output_shape().bytes());
    resize.apply(v, stoker::SampleContext{}, out.data());

    // A box from bytes 1-2: its origin and size as fractions of the image. A file that decodes
    // whole must decode in part too (an error from here on aborts).
    whole_decoded = true;
    const int bx = data[1] * v.width / 256, by = data[2] * v.height / 256;
    const stoker::CropBox box{bx, by, 1 + (data[2] * 7 + data[1]) % (v.width - bx),
                              1 + (data[1] * 5 + data[2]) % (v.height - by)};
    const stoker::DecodedSize full = region_decoder.prepare(bytes, "fuzz-input", min_size, min_size);
    if (full.height != v.height || full.width != v.width) std::abort();
    const stoker::ImageView part = region_decoder.decode_prepared(&box);
    if (part.width != box.width || part.height != box.height) std::abort();
    for (int y = 0; y < box.height; ++y) {
      if (std::memcmp(part.row(y), v.row(box.y + y) + static_cast<std::size_t>(box.x) * 3,
                      static_cast<std::size_t>(box.width) * 3) != 0)
        std::abort();
    }
  } catch (const stoker::Error& e) {
    if (whole_decoded) {
      std::fprintf(stderr, "the whole image decoded, a box of it did not: %s\n", e.what());
      // Which of the two depends on what the decoders met before: a fresh one says.
      try {
        stoker::ImageDecoder fresh(stoker::DecodeLimits{4'000'000});
        fresh.decode(bytes, "fuzz-input", min_size, min_size);
        std::fprintf(stderr, "a fresh decoder decodes the whole image too\n");
      } catch (const stoker::Error& again) {
        std::fprintf(stderr, "a fresh decoder fails on the whole image: %s\n", again.what());
      }
      std::abort();
    }
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
