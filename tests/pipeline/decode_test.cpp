#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <random>

#include <turbojpeg.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/transform.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using test::TempDir;

cv::Mat view_to_mat(const ImageView& v) {
  return cv::Mat(v.height, v.width, CV_8UC3, const_cast<std::uint8_t*>(v.data), v.row_stride).clone();
}

double max_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  double m = 0;
  cv::minMaxLoc(cv::abs(a - b) + cv::abs(b - a), nullptr, &m);
  return m;
}

// Decodes a file and expects a DecodeError naming it, with `reason_part` in the reason.
void expect_decode_error(const fs::path& file, const std::string& reason_part) {
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  try {
    read_file(file.string(), bytes);
    decoder.decode(bytes, file.string());
    FAIL() << "no error for " << file;
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.path(), file.string());
    EXPECT_NE(e.reason().find(reason_part), std::string::npos) << "reason: " << e.reason();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos);
  }
}

ImageView decode_file(ImageDecoder& decoder, std::vector<std::uint8_t>& bytes, const fs::path& file, int min_h = 0,
                      int min_w = 0) {
  read_file(file.string(), bytes);
  return decoder.decode(bytes, file.string(), min_h, min_w);
}

TEST(Decode, JpegDecodesToRgbCloseToTheSource) {
  TempDir dir;
  const cv::Mat src = test::make_pattern_rgb(64, 96);
  test::write_jpeg(dir / "a.jpg", src, 100);
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  const ImageView v = decode_file(decoder, bytes, dir / "a.jpg");
  ASSERT_EQ(v.height, 64);
  ASSERT_EQ(v.width, 96);
  cv::Mat got = view_to_mat(v), diff;
  cv::absdiff(got, src, diff);
  // Lossy (and 4:2:0 smears the sharp blue checkerboard), but the same picture: the smooth red and
  // green gradients survive almost exactly.
  EXPECT_LT(cv::mean(diff)[0], 4.0);
  EXPECT_LT(cv::mean(diff)[1], 4.0);
  EXPECT_LT(cv::mean(diff)[2], 30.0);
  // Channel order: the red channel follows x, the green one follows y.
  EXPECT_LT(got.at<cv::Vec3b>(32, 2)[0], 40);
  EXPECT_GT(got.at<cv::Vec3b>(32, 93)[0], 215);
}

TEST(Decode, JpegUsesTheSmallestFastDctScaleThatStaysAtLeastTheTarget) {
  int num = 0, denom = 0;
  // 5/8 (250x232) would fit, but only 1/1, 1/2, 1/4 and 1/8 are fast: full size.
  ImageDecoder::choose_jpeg_scale(400, 370, 224, 224, num, denom);
  EXPECT_EQ(num, denom);
  ImageDecoder::choose_jpeg_scale(1000, 800, 224, 224, num, denom);  // 1/2 → 500x400 (not 1/4: 250x200)
  EXPECT_EQ(num * 2, denom);
  ImageDecoder::choose_jpeg_scale(1000, 800, 100, 100, num, denom);  // 1/8 → 125x100
  EXPECT_EQ(num * 8, denom);
  ImageDecoder::choose_jpeg_scale(100, 100, 224, 224, num, denom);  // smaller than target: full size
  EXPECT_EQ(num, denom);
  ImageDecoder::choose_jpeg_scale(500, 500, 0, 0, num, denom);  // no target: full size
  EXPECT_EQ(num, denom);

  TempDir dir;
  test::write_jpeg(dir / "big.jpg", test::make_pattern_rgb(480, 640));
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  const ImageView v = decode_file(decoder, bytes, dir / "big.jpg", 224, 224);
  EXPECT_EQ(v.width, 320);  // 1/2 is the smallest scale with both sides >= 224
  EXPECT_EQ(v.height, 240);
}

TEST(Decode, GrayscaleJpegComesOutAsRgb) {
  TempDir dir;
  cv::Mat gray(32, 32, CV_8UC1, cv::Scalar(128));
  gray(cv::Rect(0, 0, 16, 32)).setTo(30);
  test::write_gray_jpeg(dir / "g.jpg", gray, 100);
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  const cv::Mat got = view_to_mat(decode_file(decoder, bytes, dir / "g.jpg"));
  const auto left = got.at<cv::Vec3b>(16, 4), right = got.at<cv::Vec3b>(16, 28);
  EXPECT_NEAR(left[0], 30, 3);
  EXPECT_EQ(left[0], left[1]);
  EXPECT_EQ(left[1], left[2]);
  EXPECT_NEAR(right[2], 128, 3);
}

TEST(Decode, CmykJpegComesOutAsRgb) {
  TempDir dir;
  // Adobe (inverted) CMYK: 255 = no ink. Left half red (no cyan, full magenta+yellow), right half
  // mid-grey through K alone.
  cv::Mat cmyk(16, 32, CV_8UC4, cv::Scalar(255, 0, 0, 255));
  cmyk(cv::Rect(16, 0, 16, 16)).setTo(cv::Scalar(255, 255, 255, 128));
  test::write_cmyk_jpeg(dir / "cmyk.jpg", cmyk, 100);
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  const cv::Mat got = view_to_mat(decode_file(decoder, bytes, dir / "cmyk.jpg"));
  const auto red = got.at<cv::Vec3b>(8, 4), grey = got.at<cv::Vec3b>(8, 27);
  EXPECT_GT(red[0], 240);
  EXPECT_LT(red[1], 15);
  EXPECT_LT(red[2], 15);
  EXPECT_NEAR(grey[0], 128, 4);
  EXPECT_NEAR(grey[1], 128, 4);
}

TEST(Decode, PngAndBmpAreExact) {
  TempDir dir;
  const cv::Mat src = test::make_pattern_rgb(20, 30, 1);
  test::write_png(dir / "a.png", src);
  test::write_bmp(dir / "a.bmp", src);
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  for (const char* name : {"a.png", "a.bmp"}) {
    const cv::Mat got = view_to_mat(decode_file(decoder, bytes, dir / name));
    EXPECT_EQ(max_abs_diff(got, src), 0) << name;
  }
}

TEST(Decode, HeaderSizes) {
  TempDir dir;
  test::write_png(dir / "a.png", test::make_pattern_rgb(7, 11));
  test::write_bmp(dir / "a.bmp", test::make_pattern_rgb(7, 11));
  test::write_jpeg(dir / "a.jpg", test::make_pattern_rgb(7, 11));
  cv::Mat bgr = test::make_pattern_rgb(7, 11);
  for (const char* name : {"a.tif", "a.webp"}) {
    ASSERT_TRUE(cv::imwrite((dir / name).string(), bgr)) << name;
  }
  ASSERT_TRUE(cv::imwrite((dir / "lossless.webp").string(), bgr, {cv::IMWRITE_WEBP_QUALITY, 101}));
  for (const char* name : {"a.png", "a.bmp", "a.jpg", "a.tif", "a.webp", "lossless.webp"}) {
    const auto bytes = test::read_bytes(dir / name);
    const ImageHeader h = read_image_header(bytes, name);
    EXPECT_EQ(h.width, 11) << name;
    EXPECT_EQ(h.height, 7) << name;
  }
  const std::string pnm = "P6\n# comment\n640 480\n255\n";
  const ImageHeader h = read_image_header({reinterpret_cast<const std::uint8_t*>(pnm.data()), pnm.size()}, "x.ppm");
  EXPECT_EQ(h.format, ImageFormat::Pnm);
  EXPECT_EQ(h.width, 640);
  EXPECT_EQ(h.height, 480);
}

TEST(Decode, TiffAndWebPDecodeThroughOpenCv) {
  TempDir dir;
  const cv::Mat rgb = test::make_pattern_rgb(12, 18);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  ASSERT_TRUE(cv::imwrite((dir / "a.tif").string(), bgr));
  ASSERT_TRUE(cv::imwrite((dir / "a.webp").string(), bgr, {cv::IMWRITE_WEBP_QUALITY, 101}));  // lossless
  ImageDecoder decoder;
  std::vector<std::uint8_t> bytes;
  for (const char* name : {"a.tif", "a.webp"}) {
    EXPECT_EQ(max_abs_diff(view_to_mat(decode_file(decoder, bytes, dir / name)), rgb), 0) << name;
  }
}

// Expects the view to hold exactly `box` of `whole`.
void expect_region_of(const ImageView& part, const ImageView& whole, const CropBox& box, const std::string& what) {
  ASSERT_EQ(part.width, box.width) << what;
  ASSERT_EQ(part.height, box.height) << what;
  int differing = 0;
  for (int y = 0; y < box.height; ++y) {
    const std::uint8_t* want = whole.row(box.y + y) + static_cast<std::size_t>(box.x) * 3;
    differing += std::memcmp(part.row(y), want, static_cast<std::size_t>(box.width) * 3) != 0;
  }
  EXPECT_EQ(differing, 0) << what << ": rows differing from the whole decode";
}

// A region decode gives the whole decode's pixels there: every chroma subsampling (fancy
// upsampling blends neighbouring chroma samples, so a region's edge pixels need the columns beyond
// it), baseline and progressive, each DCT scale, odd sizes, 1xN and Nx1, boxes at the edges.
TEST(DecodeRegion, EveryRegionHoldsTheWholeDecodesPixels) {
  std::mt19937 rng(7);
  struct Size {
    int height, width;
  };
  int checked = 0, partial = 0;
  for (const Size size : {Size{61, 97}, Size{1, 37}, Size{37, 1}, Size{180, 250}}) {
    const cv::Mat src = test::make_pattern_rgb(size.height, size.width, 2);
    for (const int subsampling : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411, TJSAMP_GRAY}) {
      for (const bool progressive : {false, true}) {
        const auto jpeg = test::encode_jpeg(src, TJPF_RGB, subsampling, 90, progressive);
        for (const int min_side : {0, 40}) {  // full size; DCT-scaled where the image is large enough
          ImageDecoder whole_decoder, part_decoder;
          const ImageView whole = whole_decoder.decode(jpeg, "a.jpg", min_side, min_side);
          const DecodedSize full = part_decoder.prepare(jpeg, "a.jpg", min_side, min_side);
          ASSERT_EQ(full.height, whole.height);
          ASSERT_EQ(full.width, whole.width);
          // The whole decode is TurboJPEG's own (tjDecompress2 at the same scale), byte for byte.
          std::vector<std::uint8_t> reference(static_cast<std::size_t>(whole.width) * whole.height * 3);
          tjhandle tj = tjInitDecompress();
          ASSERT_EQ(tjDecompress2(tj, jpeg.data(), static_cast<unsigned long>(jpeg.size()), reference.data(),
                                  whole.width, 0, whole.height, TJPF_RGB, 0),
                    0);
          tjDestroy(tj);
          expect_region_of(
              ImageView{reference.data(), whole.height, whole.width, 3, static_cast<std::size_t>(whole.width) * 3},
              whole, CropBox{0, 0, whole.width, whole.height}, "against tjDecompress2");
          std::vector<CropBox> boxes{{0, 0, 1, 1},
                                     {full.width - 1, full.height - 1, 1, 1},
                                     {0, full.height / 2, full.width, full.height - full.height / 2},
                                     {full.width / 3, 0, full.width - full.width / 3, full.height}};
          for (int i = 0; i < 12; ++i) {
            const int w = std::uniform_int_distribution<int>(1, full.width)(rng);
            const int h = std::uniform_int_distribution<int>(1, full.height)(rng);
            boxes.push_back({std::uniform_int_distribution<int>(0, full.width - w)(rng),
                             std::uniform_int_distribution<int>(0, full.height - h)(rng), w, h});
          }
          for (const CropBox& box : boxes) {
            part_decoder.prepare(jpeg, "a.jpg", min_side, min_side);
            const ImageView part = part_decoder.decode_prepared(&box);
            const bool is_whole = box.width == full.width && box.height == full.height;
            EXPECT_EQ(part_decoder.decoded_part(), !is_whole);
            partial += part_decoder.decoded_part();
            expect_region_of(part, whole, box,
                             std::to_string(size.width) + "x" + std::to_string(size.height) + " subsampling " +
                                 std::to_string(subsampling) + (progressive ? " progressive" : "") + " scale to " +
                                 std::to_string(full.width) + "x" + std::to_string(full.height) + ", box " +
                                 std::to_string(box.width) + "x" + std::to_string(box.height) + "+" +
                                 std::to_string(box.x) + "+" + std::to_string(box.y));
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(partial, checked / 2);
}

TEST(DecodeRegion, CmykJpegsAndOtherFormats) {
  TempDir dir;
  cv::Mat cmyk(40, 52, CV_8UC4);
  cv::randu(cmyk, 0, 256);
  test::write_cmyk_jpeg(dir / "cmyk.jpg", cmyk, 90);
  test::write_png(dir / "a.png", test::make_pattern_rgb(40, 52, 1));
  const CropBox box{9, 5, 30, 21};
  for (const char* name : {"cmyk.jpg", "a.png"}) {
    const auto bytes = test::read_bytes(dir / name);
    ImageDecoder whole_decoder, part_decoder;
    const ImageView whole = whole_decoder.decode(bytes, name);
    part_decoder.prepare(bytes, name);
    const ImageView part = part_decoder.decode_prepared(&box);
    EXPECT_EQ(part_decoder.decoded_part(), std::string(name) == "cmyk.jpg");
    expect_region_of(part, whole, box, name);
  }
}

// A JPEG without Huffman tables (a Motion-JPEG frame: DHT segments left out, the standard tables
// meant) decodes the same whatever the decoder decoded before. Found by fuzz_decode: a decoder
// kept for the next file used the tables the previous file had defined.
TEST(Decode, AJpegWithoutHuffmanTablesDoesNotInheritThePreviousFilesTables) {
  const cv::Mat src = test::make_pattern_rgb(48, 64, 1);
  const auto baseline = test::encode_jpeg(src, TJPF_RGB, TJSAMP_420, 90);
  std::vector<std::uint8_t> no_dht(baseline.begin(), baseline.begin() + 2);
  for (std::size_t i = 2; i + 4 <= baseline.size();) {  // the marker segments before the scan
    ASSERT_EQ(baseline[i], 0xFF);
    const std::uint8_t marker = baseline[i + 1];
    const std::size_t length = 2 + (std::size_t{baseline[i + 2]} << 8 | baseline[i + 3]);
    if (marker == 0xDA) {
      no_dht.insert(no_dht.end(), baseline.begin() + static_cast<std::ptrdiff_t>(i), baseline.end());
      break;
    }
    if (marker != 0xC4) {
      no_dht.insert(no_dht.end(), baseline.begin() + static_cast<std::ptrdiff_t>(i),
                    baseline.begin() + static_cast<std::ptrdiff_t>(i + length));
    }
    i += length;
  }
  ASSERT_LT(no_dht.size(), baseline.size());
  ImageDecoder fresh;
  const cv::Mat want = view_to_mat(fresh.decode(no_dht, "no-dht.jpg"));
  EXPECT_EQ(max_abs_diff(want, view_to_mat(fresh.decode(baseline, "baseline.jpg"))), 0)
      << "TurboJPEG writes the standard tables";
  // A progressive file defines other tables under the same slots.
  const auto progressive = test::encode_jpeg(test::make_pattern_rgb(40, 40, 2), TJPF_RGB, TJSAMP_444, 80, true);
  for (const bool part : {false, true}) {
    ImageDecoder used;
    used.decode(progressive, "progressive.jpg");
    const DecodedSize size = used.prepare(no_dht, "no-dht.jpg");
    const CropBox box{0, 0, size.width, part ? size.height - 1 : size.height};
    const ImageView got = used.decode_prepared(&box);
    const cv::Mat region = want(cv::Rect(0, 0, box.width, box.height));
    EXPECT_EQ(max_abs_diff(region, view_to_mat(got)), 0) << (part ? "in part" : "whole");
  }
}

// Found by fuzz_decode: a TIFF whose first IFD announces another size than the pixels OpenCV
// decodes. prepare() gives the pixels' size (it decodes such formats whole), so a box drawn from it
// lies inside what decode_prepared() returns.
TEST(DecodeRegion, TheSizeOfAFormatOpenCvDecodesIsThatOfItsPixels) {
  const auto bytes = test::read_bytes(test::source_dir() / "tests/pipeline/vectors/decode/tiff_header_disagrees.tif");
  ASSERT_FALSE(bytes.empty());
  ImageDecoder whole_decoder, part_decoder;
  const ImageView whole = whole_decoder.decode(bytes, "x.tif");
  const ImageHeader header = read_image_header(bytes, "x.tif");
  EXPECT_NE(header.width * 1000 + header.height, whole.width * 1000 + whole.height) << "the header agrees now";
  const DecodedSize size = part_decoder.prepare(bytes, "x.tif");
  ASSERT_EQ(size.width, whole.width);
  ASSERT_EQ(size.height, whole.height);
  const CropBox box{whole.width / 2, whole.height / 2, whole.width - whole.width / 2, whole.height - whole.height / 2};
  expect_region_of(part_decoder.decode_prepared(&box), whole, box, "x.tif");
}

// The region path reads the file to its end: a truncated or corrupt JPEG fails whichever part is
// asked for (the rows above the damage too), and the decoder decodes the next file.
TEST(DecodeRegion, ATruncatedJpegFailsWhicheverPartIsAsked) {
  const auto good = test::encode_jpeg(test::make_pattern_rgb(128, 96), TJPF_RGB, TJSAMP_420);
  auto cut = good;
  cut.resize(cut.size() * 2 / 3);
  ImageDecoder decoder;
  for (const CropBox box : {CropBox{0, 0, 20, 8}, CropBox{40, 100, 50, 28}}) {
    decoder.prepare(cut, "cut.jpg");
    try {
      decoder.decode_prepared(&box);
      FAIL() << "no error for a truncated JPEG, box at row " << box.y;
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.path(), "cut.jpg");
      EXPECT_NE(e.reason().find("corrupt or truncated JPEG"), std::string::npos) << e.reason();
    }
    decoder.prepare(good, "good.jpg");
    EXPECT_EQ(decoder.decode_prepared(&box).width, box.width);
  }
  // Damaged entropy-coded data below the region: fails as the whole decode does.
  int damaged_whole = 0;
  for (std::size_t at = good.size() / 2; at < good.size() - 8; at += good.size() / 9) {
    auto bad = good;
    for (std::size_t i = at; i < at + 6; ++i) bad[i] = static_cast<std::uint8_t>(bad[i] ^ 0xA5);
    bool whole_fails = false, part_fails = false;
    try {
      decoder.decode(bad, "bad.jpg");
    } catch (const DecodeError&) {
      whole_fails = true;
    }
    const CropBox top{0, 0, 30, 8};
    try {
      decoder.prepare(bad, "bad.jpg");
      decoder.decode_prepared(&top);
    } catch (const DecodeError&) {
      part_fails = true;
    }
    EXPECT_EQ(part_fails, whole_fails) << "damage at byte " << at;
    damaged_whole += whole_fails;
  }
  EXPECT_GT(damaged_whole, 0);
  decoder.prepare(good, "good.jpg");
  const CropBox outside{90, 0, 10, 10};  // 90 + 10 > 96
  EXPECT_THROW(decoder.decode_prepared(&outside), InvalidArgument);
}

TEST(DecodeErrors, MissingEmptyDirectoryAndFifo) {
  TempDir dir;
  expect_decode_error(dir / "missing.jpg", "cannot open");
  test::write_bytes(dir / "empty.jpg", {});
  expect_decode_error(dir / "empty.jpg", "empty file");
  fs::create_directories(dir / "folder.jpg");
  expect_decode_error(dir / "folder.jpg", "not a regular file");
  ASSERT_EQ(::mkfifo((dir / "pipe.jpg").c_str(), 0600), 0);
  expect_decode_error(dir / "pipe.jpg", "not a regular file");  // must not block
}

TEST(DecodeErrors, NotAnImage) {
  TempDir dir;
  const std::string text = "hello, I am a text file pretending to be a JPEG";
  test::write_bytes(dir / "text.jpg", {text.begin(), text.end()});
  expect_decode_error(dir / "text.jpg", "not an image");
}

TEST(DecodeErrors, TruncatedJpeg) {
  TempDir dir;
  test::write_jpeg(dir / "full.jpg", test::make_pattern_rgb(64, 64));
  auto bytes = test::read_bytes(dir / "full.jpg");
  bytes.resize(bytes.size() / 2);
  test::write_bytes(dir / "half.jpg", bytes);
  expect_decode_error(dir / "half.jpg", "JPEG");
  bytes.resize(40);  // cut inside the header
  test::write_bytes(dir / "head.jpg", bytes);
  expect_decode_error(dir / "head.jpg", "JPEG");
}

// One decoder, as a loader thread keeps it: a JPEG whose header fails to parse must not spoil the
// next file (TurboJPEG leaves its handle mid-parse; the next header read as 0x0 before the fix).
TEST(DecodeErrors, AJpegAfterACorruptHeaderDecodes) {
  TempDir dir;
  test::write_jpeg(dir / "good.jpg", test::make_pattern_rgb(48, 40));
  const auto good = test::read_bytes(dir / "good.jpg");
  auto head = good;
  head.resize(40);  // cut inside the header
  ImageDecoder decoder;
  for (int round = 0; round < 3; ++round) {
    EXPECT_THROW(decoder.decode(head, "head.jpg"), DecodeError);
    const ImageView v = decoder.decode(good, "good.jpg");
    EXPECT_EQ(v.width, 40);
    EXPECT_EQ(v.height, 48);
    EXPECT_THROW(read_image_header(head, "head.jpg"), DecodeError);
    EXPECT_EQ(read_image_header(good, "good.jpg").width, 40);
  }
}

TEST(DecodeErrors, CorruptJpegAndPng) {
  TempDir dir;
  test::write_jpeg(dir / "a.jpg", test::make_pattern_rgb(32, 32));
  auto jpeg = test::read_bytes(dir / "a.jpg");
  for (std::size_t i = 3; i < 200 && i < jpeg.size(); ++i) jpeg[i] = static_cast<std::uint8_t>(i * 37);
  test::write_bytes(dir / "bad.jpg", jpeg);
  expect_decode_error(dir / "bad.jpg", "JPEG");

  test::write_png(dir / "a.png", test::make_pattern_rgb(32, 32));
  auto png = test::read_bytes(dir / "a.png");
  png.resize(png.size() / 2);
  test::write_bytes(dir / "half.png", png);
  expect_decode_error(dir / "half.png", "could not decode");
}

// Patches the size fields of a real, tiny file: the decoder must refuse from the header alone.
TEST(DecodeErrors, AbsurdDimensionsAreRejectedBeforeAllocating) {
  TempDir dir;
  test::write_jpeg(dir / "a.jpg", test::make_pattern_rgb(16, 16));
  auto jpeg = test::read_bytes(dir / "a.jpg");
  for (std::size_t i = 2; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)) {  // SOF: length, precision, H, W
      jpeg[i + 5] = 0xEA;
      jpeg[i + 6] = 0x60;  // 60000
      jpeg[i + 7] = 0xEA;
      jpeg[i + 8] = 0x60;
      break;
    }
  }
  test::write_bytes(dir / "huge.jpg", jpeg);
  expect_decode_error(dir / "huge.jpg", "60000x60000 pixels, over the limit");

  test::write_png(dir / "a.png", test::make_pattern_rgb(16, 16));
  auto png = test::read_bytes(dir / "a.png");
  png[16] = 0;
  png[17] = 1;
  png[18] = 0x86;
  png[19] = 0xA0;  // width 100000
  png[20] = 0;
  png[21] = 1;
  png[22] = 0x86;
  png[23] = 0xA0;  // height 100000
  test::write_bytes(dir / "huge.png", png);
  expect_decode_error(dir / "huge.png", "100000x100000 pixels, over the limit");

  // TIFF: patch ImageWidth/ImageLength in the first IFD.
  ASSERT_TRUE(cv::imwrite((dir / "a.tif").string(), test::make_pattern_rgb(16, 16)));
  auto tif = test::read_bytes(dir / "a.tif");
  ASSERT_EQ(tif[0], 'I');
  const std::size_t ifd = tif[4] | (tif[5] << 8) | (tif[6] << 16) | (std::size_t{tif[7]} << 24);
  const std::size_t entries = tif[ifd] | (tif[ifd + 1] << 8);
  for (std::size_t i = 0; i < entries; ++i) {
    const std::size_t e = ifd + 2 + 12 * i;
    const int tag = tif[e] | (tif[e + 1] << 8);
    if (tag == 256 || tag == 257) {
      tif[e + 2] = 4;  // LONG
      tif[e + 3] = 0;
      tif[e + 8] = 0x40;
      tif[e + 9] = 0x9C;
      tif[e + 10] = 0;
      tif[e + 11] = 0;  // 40000
    }
  }
  test::write_bytes(dir / "huge.tif", tif);
  expect_decode_error(dir / "huge.tif", "40000x40000 pixels, over the limit");

  png[16] = 0x80;  // width >= 2^31
  test::write_bytes(dir / "impossible.png", png);
  expect_decode_error(dir / "impossible.png", "impossible size");

  // A custom, smaller limit applies too.
  ImageDecoder strict(DecodeLimits{100});
  const auto ok = test::read_bytes(dir / "a.jpg");
  EXPECT_THROW(strict.decode(ok, "a.jpg"), DecodeError);
}

TEST(ResizeTransform, KeepAspectRatioCropsTheCentreLikeKeras) {
  // 100x50 (w x h) to 20x20: Keras crops the centred 50x50 box.
  const CropBox box = centre_crop_box(50, 100, 20, 20);
  EXPECT_EQ(box.x, 25);
  EXPECT_EQ(box.y, 0);
  EXPECT_EQ(box.width, 50);
  EXPECT_EQ(box.height, 50);
  const CropBox tall = centre_crop_box(101, 40, 10, 20);  // target aspect 2:1
  EXPECT_EQ(tall.width, 40);
  EXPECT_EQ(tall.height, 20);
  EXPECT_EQ(tall.y, 40);
}

// Found by fuzz_decode: a target aspect far from the source's leaves Keras' integer box 0 pixels
// wide (17x1 from 9x7: 7 * 1 / 17 = 0). Every interpolation gives an image (OpenCV's from the
// centre column), none reads outside the source.
TEST(ResizeTransform, AnAspectCropNarrowerThanAPixelKeepsTheCentreColumn) {
  EXPECT_EQ(centre_crop_box(7, 9, 17, 1).width, 0);
  const cv::Mat img = test::make_pattern_rgb(7, 9, 2);
  const ImageView src{img.data, img.rows, img.cols, 3, img.step};
  for (int i = 0; i <= static_cast<int>(Interpolation::OpenCvLinear); ++i) {
    const auto interpolation = static_cast<Interpolation>(i);
    SCOPED_TRACE(to_string(interpolation));
    for (const auto& [h, w] : {std::pair{17, 1}, std::pair{1, 17}}) {
      const ResizeTransform resize(h, w, interpolation, /*keep_aspect_ratio=*/true);
      std::vector<std::byte> out(resize.output_shape().bytes());
      ASSERT_NO_THROW(resize.apply(src, {}, out.data()));
      if (interpolation == Interpolation::CentreNearest && w == 1) {
        for (int y = 0; y < h; ++y)  // every row reads the centre column, x = 4
          EXPECT_EQ(std::memcmp(out.data() + 3 * y, img.ptr(static_cast<int>((y + 0.5) * 7 / 17)) + 3 * 4, 3), 0) << y;
      }
    }
  }
}

TEST(ResizeTransform, NearestSamplesPixelCentresLikePil) {
  // 4x4 → 2x2 nearest: PIL picks source pixels 1 and 3 (centres at 1.0 and 3.0 → floor).
  cv::Mat src(4, 4, CV_8UC3);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) src.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uchar>(x * 10 + y), 0, 0);
  ResizeTransform t(2, 2, Interpolation::Nearest);
  std::vector<std::byte> out(t.output_shape().bytes());
  t.apply(ImageView{src.data, 4, 4, 3, src.step}, {}, out.data());
  EXPECT_EQ(static_cast<int>(out[0]), 11);
  EXPECT_EQ(static_cast<int>(out[3]), 31);
  EXPECT_EQ(static_cast<int>(out[6]), 13);
  EXPECT_THROW(ResizeTransform(0, 10), InvalidArgument);
}

}  // namespace
}  // namespace stoker
