#include "stoker/pipeline/decode.hpp"

#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstring>

#include <jpeglib.h>

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

namespace {

// libjpeg's error handler for the decodes: errors and warnings (corrupt data, a truncated file)
// alike jump back to the caller with the message, as TurboJPEG's TJFLAG_STOPONWARNING does: a
// half-grey image must never reach a batch.
struct JpegErrors {
  jpeg_error_mgr mgr{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_warn(j_common_ptr c, int level) {
  if (level < 0) jpeg_fail(c);  // a warning; trace messages (level >= 0) are ignored
}

// Decodes rows [box.y, box.y + box.height) of the JPEG at 1/denom scale, columns from the iMCU
// boundary at or left of box.x - margin to box.x + box.width + margin (the margin keeps the box's
// edge pixels away from the cropped part's edge, where fancy upsampling has no neighbour to
// blend), into `out` (`columns` * channels bytes a row, the first column `first_column`). Reads
// the rest of the file too (skipping its rows; the last one into last_row), so that a truncated
// or corrupt file fails here.
// Returns false with the message in err. No C++ object with a destructor is made in this frame
// after setjmp: libjpeg's errors return to it by longjmp, which runs no destructor.
bool decode_jpeg_rows(JpegErrors& err, std::span<const std::uint8_t> b, int denom, bool cmyk, const CropBox& box,
                      std::vector<std::uint8_t>& out, std::vector<std::uint8_t>& last_row, int& first_column,
                      int& columns) {
  // A decompressor per file (a few small allocations): a decompressor keeps the Huffman and
  // quantisation tables a file defined, and a later file that leaves them out (a Motion-JPEG frame
  // relies on the standard Huffman tables) would decode with them instead.
  jpeg_decompress_struct ci{};
  // Destroys the decompressor however the frame is left: a return, libjpeg's longjmp (to the
  // setjmp below, inside this guard's life) or a std::bad_alloc from a buffer's resize.
  // jpeg_destroy_decompress does nothing to a decompressor not created or already destroyed.
  struct Destroy {
    jpeg_decompress_struct* ci;
    ~Destroy() { jpeg_destroy_decompress(ci); }
  } destroy{&ci};
  ci.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_warn;
  if (setjmp(err.jump)) return false;
  jpeg_create_decompress(&ci);
  jpeg_mem_src(&ci, b.data(), static_cast<unsigned long>(b.size()));
  jpeg_read_header(&ci, TRUE);
  // libjpeg's defaults otherwise: the accurate integer IDCT and fancy upsampling (what TurboJPEG's
  // tjDecompress2 does without flags).
  ci.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
  ci.scale_num = 1;
  ci.scale_denom = static_cast<unsigned>(denom);
  jpeg_start_decompress(&ci);
  const int width = static_cast<int>(ci.output_width), margin = ci.max_h_samp_factor;
  const int x0 = std::max(0, box.x - margin), x1 = std::min(width, box.x + box.width + margin);
  JDIMENSION x = static_cast<JDIMENSION>(x0), w = static_cast<JDIMENSION>(x1 - x0);
  if (x0 > 0 || x1 < width) jpeg_crop_scanline(&ci, &x, &w);  // widens to whole iMCUs
  first_column = static_cast<int>(x);
  columns = static_cast<int>(w);
  const std::size_t row_bytes = static_cast<std::size_t>(columns) * static_cast<std::size_t>(ci.output_components);
  out.resize(row_bytes * static_cast<std::size_t>(box.height));
  if (box.y > 0) jpeg_skip_scanlines(&ci, static_cast<JDIMENSION>(box.y));
  for (int r = 0; r < box.height; ++r) {
    JSAMPROW row = out.data() + row_bytes * static_cast<std::size_t>(r);
    jpeg_read_scanlines(&ci, &row, 1);
  }
  // The rows below are entropy-decoded while skipped, but a skip to the very end decodes nothing:
  // the last row is read.
  if (ci.output_scanline < ci.output_height) {
    const JDIMENSION rest = ci.output_height - ci.output_scanline;
    if (rest > 1) jpeg_skip_scanlines(&ci, rest - 1);
    last_row.resize(row_bytes);
    JSAMPROW row = last_row.data();
    jpeg_read_scanlines(&ci, &row, 1);
  }
  jpeg_finish_decompress(&ci);
  return true;
}

// Adobe CMYK JPEGs store inverted inks: channel value v means (255 - v) ink, so R = C * K / 255.
void cmyk_to_rgb(const std::uint8_t* cmyk, std::size_t pixels, std::uint8_t* rgb) {
  for (std::size_t i = 0; i < pixels; ++i) {
    const unsigned k = cmyk[4 * i + 3];
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = static_cast<std::uint8_t>((cmyk[4 * i + c] * k + 127) / 255);
  }
}

}  // namespace

struct ImageDecoder::Impl {
  DecodeLimits limits;
  tjhandle tj = nullptr;
  JpegErrors jpeg_errors;              // of the libjpeg decompressor made for each JPEG
  std::vector<std::uint8_t> pixels;    // RGB output
  std::vector<std::uint8_t> cmyk;      // CMYK scratch
  std::vector<std::uint8_t> last_row;  // a region decode's read of the image's last row

  // What prepare() found, for decode_prepared().
  struct Prepared {
    bool ready = false;                   // a prepare() succeeded
    std::span<const std::uint8_t> bytes;  // the caller's
    std::string name;                     // a copy: a name given as a temporary is gone by then
    ImageHeader header;
    int colorspace = 0;
    int denom = 1;    // the JPEG's DCT scale 1/denom
    ImageView whole;  // other formats: decoded by prepare()
    DecodedSize size;
  } prepared;
  bool part = false;

  ImageView decode_jpeg(const CropBox& box);
  ImageView decode_opencv();
  bool is_cmyk() const { return prepared.colorspace == TJCS_CMYK || prepared.colorspace == TJCS_YCCK; }
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

ImageView ImageDecoder::Impl::decode_jpeg(const CropBox& box) {
  const bool four = is_cmyk();
  int first = 0, columns = 0;
  if (!decode_jpeg_rows(jpeg_errors, prepared.bytes, prepared.denom, four, box, four ? cmyk : pixels, last_row, first,
                        columns)) {
    throw DecodeError(prepared.name, std::string("corrupt or truncated JPEG data (") + jpeg_errors.message + ")");
  }
  if (four) {
    pixels.resize(static_cast<std::size_t>(columns) * box.height * 3);
    cmyk_to_rgb(cmyk.data(), static_cast<std::size_t>(columns) * box.height, pixels.data());
  }
  const std::size_t stride = static_cast<std::size_t>(columns) * 3;
  return ImageView{pixels.data() + static_cast<std::size_t>(box.x - first) * 3, box.height, box.width, 3, stride};
}

ImageView ImageDecoder::Impl::decode_opencv() {
  const std::span<const std::uint8_t> b = prepared.bytes;
  const cv::Mat raw(1, static_cast<int>(b.size()), CV_8UC1, const_cast<std::uint8_t*>(b.data()));
  cv::Mat bgr;
  try {
    bgr = cv::imdecode(raw, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    throw DecodeError(prepared.name, std::string("OpenCV could not decode it: ") + e.what());
  }
  if (bgr.empty()) {
    throw DecodeError(prepared.name, "corrupt, truncated or unsupported image data (OpenCV could not decode it)");
  }
  pixels.resize(bgr.total() * 3);
  cv::Mat rgb(bgr.rows, bgr.cols, CV_8UC3, pixels.data());
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return ImageView{pixels.data(), bgr.rows, bgr.cols, 3, static_cast<std::size_t>(bgr.cols) * 3};
}

DecodedSize ImageDecoder::prepare(std::span<const std::uint8_t> bytes, const std::string& name, int min_height,
                                  int min_width) {
  Impl::Prepared& p = impl_->prepared;
  p.ready = false;
  p.name.assign(name);  // reusing the string's capacity
  p.colorspace = 0;
  p.denom = 1;
  p.whole = {};
  p.header = read_header(bytes, name, impl_->tj, p.colorspace);  // a JPEG's header once, here
  const ImageHeader& header = p.header;
  if (static_cast<std::int64_t>(header.width) * header.height > impl_->limits.max_pixels) {
    throw DecodeError(name, std::string(to_string(header.format)) + " header announces " +
                                std::to_string(header.width) + "x" + std::to_string(header.height) +
                                " pixels, over the limit of " + std::to_string(impl_->limits.max_pixels));
  }
  p.bytes = bytes;
  if (header.format == ImageFormat::Jpeg) {
    int num = 1;
    choose_jpeg_scale(header.width, header.height, min_height, min_width, num, p.denom);
    const tjscalingfactor f{num, p.denom};
    p.size = {TJSCALED(header.height, f), TJSCALED(header.width, f)};
  } else {
    // Decoded whole here: no part of them can be decoded alone, and the size is that of the
    // pixels, which a malformed header (or an EXIF rotation OpenCV applies) need not announce.
    p.whole = impl_->decode_opencv();
    p.size = {p.whole.height, p.whole.width};
  }
  p.ready = true;
  return p.size;
}

ImageView ImageDecoder::decode_prepared(const CropBox* region) {
  Impl& d = *impl_;
  if (!d.prepared.ready) throw InvalidArgument("ImageDecoder::decode_prepared without a successful prepare()");
  const DecodedSize size = d.prepared.size;
  d.part = false;
  const bool whole =
      !region || (region->x == 0 && region->y == 0 && region->width == size.width && region->height == size.height);
  if (!whole && !(region->x >= 0 && region->y >= 0 && region->width >= 1 && region->height >= 1 &&
                  region->x + region->width <= size.width && region->y + region->height <= size.height)) {
    throw InvalidArgument(d.prepared.name + ": region " + std::to_string(region->width) + "x" +
                          std::to_string(region->height) + "+" + std::to_string(region->x) + "+" +
                          std::to_string(region->y) + " is not inside the " + std::to_string(size.width) + "x" +
                          std::to_string(size.height) + " image");
  }
  if (d.prepared.header.format == ImageFormat::Jpeg) {
    d.part = !whole;
    return d.decode_jpeg(whole ? CropBox{0, 0, size.width, size.height} : *region);
  }
  ImageView image = d.prepared.whole;
  if (!whole) {
    image.data += static_cast<std::size_t>(region->y) * image.row_stride + static_cast<std::size_t>(region->x) * 3;
    image.height = region->height;
    image.width = region->width;
  }
  return image;
}

bool ImageDecoder::decoded_part() const noexcept { return impl_->part; }

ImageView ImageDecoder::decode(std::span<const std::uint8_t> bytes, const std::string& name, int min_height,
                               int min_width) {
  prepare(bytes, name, min_height, min_width);
  return decode_prepared();
}

}  // namespace stoker
