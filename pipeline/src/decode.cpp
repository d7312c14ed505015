#include "stoker/pipeline/decode.hpp"

#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "stoker/core/error.hpp"

namespace stoker {

const char* to_string(ImageFormat f) noexcept {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Bmp: return "BMP";
    case ImageFormat::Pnm: return "PNM";
    case ImageFormat::Tiff: return "TIFF";
    case ImageFormat::WebP: return "WebP";
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

namespace {

std::uint32_t be32(const std::uint8_t* p) { return (std::uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3]; }
std::int32_t le32(const std::uint8_t* p) {
  return static_cast<std::int32_t>(std::uint32_t{p[0]} | (p[1] << 8) | (p[2] << 16) | (std::uint32_t{p[3]} << 24));
}

bool starts_with(std::span<const std::uint8_t> b, std::initializer_list<std::uint8_t> sig) {
  return b.size() >= sig.size() && std::equal(sig.begin(), sig.end(), b.begin());
}

// Width and height from a PNM header ("P6\n# comment\n640 480\n255\n").
bool parse_pnm(std::span<const std::uint8_t> b, int& width, int& height) {
  std::size_t i = 2;
  long values[2];
  for (long& v : values) {
    while (i < b.size()) {
      if (b[i] == '#') {
        while (i < b.size() && b[i] != '\n') ++i;
      } else if (std::isspace(b[i])) ++i;
      else break;
    }
    if (i >= b.size() || !std::isdigit(b[i])) return false;
    v = 0;
    while (i < b.size() && std::isdigit(b[i]) && v < (1L << 31)) v = v * 10 + (b[i++] - '0');
  }
  if (values[0] >= (1L << 31) || values[1] >= (1L << 31)) return false;
  width = static_cast<int>(values[0]);
  height = static_cast<int>(values[1]);
  return true;
}

// Width and height from the first IFD of a TIFF file (tags 256/257, SHORT or LONG).
bool parse_tiff(std::span<const std::uint8_t> b, int& width, int& height) {
  const bool little = b[0] == 'I';
  auto u16 = [&](std::size_t o) -> std::uint32_t {
    return little ? (b[o] | (b[o + 1] << 8)) : ((b[o] << 8) | b[o + 1]);
  };
  auto u32 = [&](std::size_t o) -> std::uint32_t {
    return little ? (u16(o) | (u16(o + 2) << 16)) : ((u16(o) << 16) | u16(o + 2));
  };
  if (b.size() < 8) return false;
  const std::size_t ifd = u32(4);
  if (ifd + 2 > b.size()) return false;
  const std::size_t entries = u16(ifd);
  std::int64_t w = -1, h = -1;
  for (std::size_t i = 0; i < entries; ++i) {
    const std::size_t e = ifd + 2 + 12 * i;
    if (e + 12 > b.size()) return false;
    const std::uint32_t tag = u16(e), type = u16(e + 2);
    const std::int64_t value = type == 3 ? u16(e + 8) : type == 4 ? u32(e + 8) : -1;
    if (tag == 256) w = value;
    if (tag == 257) h = value;
  }
  if (w < 0 || h < 0 || w > INT32_MAX || h > INT32_MAX) return false;
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  return true;
}

// Canvas size of a WebP file from its VP8, VP8L or VP8X chunk.
bool parse_webp(std::span<const std::uint8_t> b, int& width, int& height) {
  if (b.size() < 30) return false;
  const std::uint8_t* p = b.data();
  if (std::memcmp(p + 12, "VP8 ", 4) == 0) {  // lossy: frame tag, start code, 14-bit sizes
    if (p[23] != 0x9D || p[24] != 0x01 || p[25] != 0x2A) return false;
    width = (p[26] | (p[27] << 8)) & 0x3FFF;
    height = (p[28] | (p[29] << 8)) & 0x3FFF;
  } else if (std::memcmp(p + 12, "VP8L", 4) == 0) {  // lossless: signature, 14-bit sizes minus one
    if (p[20] != 0x2F) return false;
    const std::uint32_t bits = p[21] | (p[22] << 8) | (p[23] << 16) | (std::uint32_t{p[24]} << 24);
    width = static_cast<int>((bits & 0x3FFF) + 1);
    height = static_cast<int>(((bits >> 14) & 0x3FFF) + 1);
  } else if (std::memcmp(p + 12, "VP8X", 4) == 0) {  // extended: 24-bit canvas sizes minus one
    width = static_cast<int>((p[24] | (p[25] << 8) | (p[26] << 16)) + 1);
    height = static_cast<int>((p[27] | (p[28] << 8) | (p[29] << 16)) + 1);
  } else {
    return false;
  }
  return true;
}

std::string tj_error(tjhandle h) { return tjGetErrorStr2(h); }

// A TurboJPEG decompressor owned by its scope.
struct Decompressor {
  Decompressor() : tj(tjInitDecompress()) {
    if (!tj) throw Error("TurboJPEG: cannot create a decompressor");
  }
  ~Decompressor() { tjDestroy(tj); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  tjhandle tj;
};

// read_image_header with the caller's decompressor, so that ImageDecoder::decode parses a JPEG's
// header once; `jpeg_colorspace` (TJCS_*) is set for JPEGs.
ImageHeader read_header(std::span<const std::uint8_t> b, const std::string& name, tjhandle& tj, int& jpeg_colorspace) {
  if (b.empty()) throw DecodeError(name, "empty file");
  ImageHeader h;
  if (starts_with(b, {0xFF, 0xD8, 0xFF})) {
    h.format = ImageFormat::Jpeg;
    int subsamp = 0;
    if (tjDecompressHeader3(tj, b.data(), static_cast<unsigned long>(b.size()), &h.width, &h.height, &subsamp,
                            &jpeg_colorspace)) {
      const std::string why = tj_error(tj);
      // A failed header read leaves the handle mid-parse (TurboJPEG does not abort it), and the
      // next file's header would read as 0x0: the next file gets a fresh handle.
      tjDestroy(tj);
      tj = tjInitDecompress();
      if (!tj) throw Error("TurboJPEG: cannot create a decompressor");
      throw DecodeError(name, "corrupt JPEG header (" + why + ")");
    }
  } else if (starts_with(b, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A})) {
    h.format = ImageFormat::Png;
    if (b.size() < 24 || std::memcmp(b.data() + 12, "IHDR", 4) != 0) throw DecodeError(name, "truncated PNG header");
    const std::uint32_t w = be32(b.data() + 16), hh = be32(b.data() + 20);
    if (w > INT32_MAX || hh > INT32_MAX) throw DecodeError(name, "PNG header announces an impossible size");
    h.width = static_cast<int>(w);
    h.height = static_cast<int>(hh);
  } else if (starts_with(b, {'B', 'M'})) {
    h.format = ImageFormat::Bmp;
    if (b.size() < 26) throw DecodeError(name, "truncated BMP header");
    const std::int32_t w = le32(b.data() + 18), hh = le32(b.data() + 22);
    if (w == INT32_MIN || hh == INT32_MIN) throw DecodeError(name, "BMP header announces an impossible size");
    h.width = std::abs(w);
    h.height = std::abs(hh);  // negative height = top-down rows
  } else if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') {
    h.format = ImageFormat::Pnm;
    if (!parse_pnm(b, h.width, h.height)) throw DecodeError(name, "malformed PNM header");
  } else if (starts_with(b, {'I', 'I', 42, 0}) || starts_with(b, {'M', 'M', 0, 42})) {
    h.format = ImageFormat::Tiff;
    if (!parse_tiff(b, h.width, h.height)) throw DecodeError(name, "malformed TIFF header");
  } else if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) {
    h.format = ImageFormat::WebP;
    if (!parse_webp(b, h.width, h.height)) throw DecodeError(name, "malformed WebP header");
  } else {
    throw DecodeError(name, "not an image (unrecognised file signature)");
  }
  if (h.width <= 0 || h.height <= 0) {
    throw DecodeError(name, std::string(to_string(h.format)) + " header announces " + std::to_string(h.width) + "x" +
                                std::to_string(h.height) + " pixels");
  }
  return h;
}

}  // namespace

ImageHeader read_image_header(std::span<const std::uint8_t> b, const std::string& name) {
  thread_local Decompressor d;  // one per thread, not one per call
  int colorspace = 0;
  return read_header(b, name, d.tj, colorspace);
}

SourceStamp read_file(const std::string& path, std::vector<std::uint8_t>& out) {
  // O_NONBLOCK: a FIFO or device named as an image must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw DecodeError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DecodeError(path, "not a regular file");
  }
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "file shrank while reading";
      ::close(fd);
      throw DecodeError(path, "read failed: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (out.empty()) throw DecodeError(path, "empty file");
  return stamp_from(st);
}

SourceStamp read_file_range(const std::string& path, const ByteRange& range, const std::string& name,
                            std::vector<std::uint8_t>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw DecodeError(name, std::string("cannot open ") + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DecodeError(name, path + " is not a regular file");
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (range.offset > file_size || range.size > file_size - range.offset) {
    ::close(fd);
    throw DecodeError(name, "bytes " + std::to_string(range.offset) + "+" + std::to_string(range.size) +
                                " lie past the end of " + path + " (" + std::to_string(file_size) +
                                " bytes); was it rewritten since it was indexed?");
  }
  out.resize(static_cast<std::size_t>(range.size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(range.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "file shrank while reading";
      ::close(fd);
      throw DecodeError(name, "read failed: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (out.empty()) throw DecodeError(name, "empty member");
  return stamp_from(st);
}

struct ImageDecoder::Impl {
  DecodeLimits limits;
  tjhandle tj = nullptr;
  std::vector<std::uint8_t> pixels;  // RGB output
  std::vector<std::uint8_t> cmyk;    // CMYK scratch
  cv::Mat opencv;                    // OpenCV decode scratch (reallocated only when size grows)

  ImageView decode_jpeg(std::span<const std::uint8_t> b, const std::string& name, const ImageHeader& header,
                        int colorspace, int min_h, int min_w);
  ImageView decode_opencv(std::span<const std::uint8_t> b, const std::string& name);
};

ImageDecoder::ImageDecoder(DecodeLimits limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->tj = tjInitDecompress();
  if (!impl_->tj) throw Error("TurboJPEG: cannot create a decompressor");
}

ImageDecoder::~ImageDecoder() {
  if (impl_ && impl_->tj) tjDestroy(impl_->tj);
}
ImageDecoder::ImageDecoder(ImageDecoder&&) noexcept = default;
ImageDecoder& ImageDecoder::operator=(ImageDecoder&&) noexcept = default;

void ImageDecoder::choose_jpeg_scale(int width, int height, int min_h, int min_w, int& num, int& denom) {
  num = denom = 1;
  if (min_h <= 0 && min_w <= 0) return;  // no target size: decode at full resolution
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  long best = static_cast<long>(width) * height;
  for (int i = 0; factors && i < count; ++i) {
    const auto& f = factors[i];
    // Only 1/1, 1/2, 1/4, 1/8: libjpeg-turbo's other factors (7/8, 3/4, 5/8, 3/8...) use scalar
    // IDCTs and decode slower than full size (measured on 500x375 photos: 7/8 898 us, 3/4 747 us,
    // 5/8 576 us against 383 us at 1/1 and 299 us at 1/2).
    if (f.num != 1 || (f.denom & (f.denom - 1)) != 0) continue;
    const int w = TJSCALED(width, f), h = TJSCALED(height, f);
    if (w < min_w || h < min_h) continue;
    if (static_cast<long>(w) * h < best) {
      best = static_cast<long>(w) * h;
      num = f.num;
      denom = f.denom;
    }
  }
}

ImageView ImageDecoder::Impl::decode_jpeg(std::span<const std::uint8_t> b, const std::string& name,
                                          const ImageHeader& header, int colorspace, int min_h, int min_w) {
  int num = 1, denom = 1;
  choose_jpeg_scale(header.width, header.height, min_h, min_w, num, denom);
  const tjscalingfactor f{num, denom};
  const int w = TJSCALED(header.width, f), h = TJSCALED(header.height, f);
  const bool is_cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int channels = is_cmyk ? 4 : 3;
  auto& target = is_cmyk ? cmyk : pixels;
  target.resize(static_cast<std::size_t>(w) * h * channels);
  // Warnings (e.g. "premature end of data" for a truncated file) are errors too: a half-grey image
  // must never reach a batch.
  if (tjDecompress2(tj, b.data(), static_cast<unsigned long>(b.size()), target.data(), w, 0, h,
                    is_cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_STOPONWARNING)) {
    throw DecodeError(name, "corrupt or truncated JPEG data (" + tj_error(tj) + ")");
  }
  if (is_cmyk) {
    // Adobe CMYK JPEGs store inverted inks: channel value v means (255 - v) ink, so R = C * K / 255.
    pixels.resize(static_cast<std::size_t>(w) * h * 3);
    for (std::size_t i = 0, n = static_cast<std::size_t>(w) * h; i < n; ++i) {
      const unsigned k = cmyk[4 * i + 3];
      for (int c = 0; c < 3; ++c) pixels[3 * i + c] = static_cast<std::uint8_t>((cmyk[4 * i + c] * k + 127) / 255);
    }
  }
  return ImageView{pixels.data(), h, w, 3, static_cast<std::size_t>(w) * 3};
}

ImageView ImageDecoder::Impl::decode_opencv(std::span<const std::uint8_t> b, const std::string& name) {
  const cv::Mat raw(1, static_cast<int>(b.size()), CV_8UC1, const_cast<std::uint8_t*>(b.data()));
  cv::Mat bgr;
  try {
    bgr = cv::imdecode(raw, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    throw DecodeError(name, std::string("OpenCV could not decode it: ") + e.what());
  }
  if (bgr.empty()) throw DecodeError(name, "corrupt, truncated or unsupported image data (OpenCV could not decode it)");
  pixels.resize(bgr.total() * 3);
  cv::Mat rgb(bgr.rows, bgr.cols, CV_8UC3, pixels.data());
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return ImageView{pixels.data(), bgr.rows, bgr.cols, 3, static_cast<std::size_t>(bgr.cols) * 3};
}

ImageView ImageDecoder::decode(std::span<const std::uint8_t> bytes, const std::string& name, int min_height,
                               int min_width) {
  int colorspace = 0;
  const ImageHeader header = read_header(bytes, name, impl_->tj, colorspace);  // a JPEG's header once, here
  if (static_cast<std::int64_t>(header.width) * header.height > impl_->limits.max_pixels) {
    throw DecodeError(name, std::string(to_string(header.format)) + " header announces " +
                                std::to_string(header.width) + "x" + std::to_string(header.height) +
                                " pixels, over the limit of " + std::to_string(impl_->limits.max_pixels));
  }
  if (header.format == ImageFormat::Jpeg)
    return impl_->decode_jpeg(bytes, name, header, colorspace, min_height, min_width);
  return impl_->decode_opencv(bytes, name);
}

}  // namespace stoker
