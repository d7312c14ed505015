// Augmentation throughput per core: the seed's Keras augmentation (rotation 30, shifts 0.4,
// shear 0.4, zoom 0.25, horizontal flip, brightness [0.5, 1.5]) at 299x299 from decoded photos
// (catsdogs, decoded in memory), next to a plain resize and a few variants, and at 224x224; the
// seed rows with the scalar warp loop and with the vector kernel chosen at run time (warp.hpp),
// one core and all cores. Prints a table; "x resize" is against cv::resize's bilinear at the same
// size and thread count.
//
//   augment_bench [--data DIR] [--images N] [--seconds S]
//
// DIR defaults to $STOKER_SHARED_DATA/catsdogs or ../shared/data/catsdogs. Single-threaded unless
// a row says otherwise (OpenCV's own threads are switched off: cv::setNumThreads(1)).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "stoker/augment/augmenter.hpp"
#include "stoker/pipeline/decode.hpp"
#include "stoker/pipeline/transform.hpp"
#include "warp.hpp"

#ifndef STOKER_BENCH_SOURCE_DIR
#define STOKER_BENCH_SOURCE_DIR "."  // the repository root; set by bench/CMakeLists.txt
#endif

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Decoded {
  std::vector<std::uint8_t> pixels;
  stoker::ImageView view;
};

stoker::AugmentSpec seed_spec() { return stoker::keras_example_augmentation(299, 299); }

// Runs body(i) for sample i = 0, 1, ... until `seconds` have passed (at least `min_items`).
double rate(double seconds, std::size_t min_items, const std::function<void(std::size_t)>& body) {
  for (std::size_t i = 0; i < 8; ++i) body(i);  // warm-up: thread-local scratch, caches
  const auto start = Clock::now();
  std::size_t n = 0;
  double elapsed = 0;
  while (n < min_items || elapsed < seconds) {
    for (int k = 0; k < 16; ++k) body(n++);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(n) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path data;
  if (const char* env = std::getenv("STOKER_SHARED_DATA")) data = fs::path(env) / "catsdogs";
  else data = fs::path(STOKER_BENCH_SOURCE_DIR) / ".." / "shared" / "data" / "catsdogs";
  std::size_t max_images = 200;
  double seconds = 2.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--data") data = argv[i + 1];
    else if (a == "--images") max_images = std::stoul(argv[i + 1]);
    else if (a == "--seconds") seconds = std::stod(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: augment_bench [--data DIR] [--images N] [--seconds S]\n");
      return 2;
    }
  }
  cv::setNumThreads(1);

  std::vector<fs::path> files;
  for (const char* cls : {"cat", "dog"}) {
    if (!fs::exists(data / cls)) continue;
    for (const auto& e : fs::directory_iterator(data / cls)) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "augment_bench: no images under %s (set --data)\n", data.c_str());
    return 1;
  }
  // Interleave cats and dogs, keep max_images.
  std::vector<fs::path> picked;
  for (std::size_t i = 0; i < files.size() && picked.size() < max_images;
       i += std::max<std::size_t>(1, files.size() / max_images)) {
    picked.push_back(files[i]);
  }

  // The photos decoded (DCT-scaled to >= size) once per output size.
  auto decode_all = [&](int size, std::vector<Decoded>& out, std::vector<std::vector<std::uint8_t>>* encoded) {
    stoker::ImageDecoder decoder;
    double pixels = 0;
    for (const fs::path& f : picked) {
      std::vector<std::uint8_t> bytes;
      stoker::read_file(f.string(), bytes);
      const stoker::ImageView v = decoder.decode(bytes, f.string(), size, size);
      Decoded d;
      d.pixels.assign(v.data, v.data + v.row_stride * static_cast<std::size_t>(v.height));
      d.view = v;
      pixels += static_cast<double>(v.width) * v.height;
      out.push_back(std::move(d));
      if (encoded) encoded->push_back(std::move(bytes));
    }
    for (Decoded& d : out) d.view.data = d.pixels.data();
    return pixels / static_cast<double>(out.size());
  };
  std::vector<std::vector<std::uint8_t>> encoded;
  std::vector<Decoded> images, images224;
  const double mean299 = decode_all(299, images, &encoded);
  const double mean224 = decode_all(224, images224, nullptr);
  const std::size_t n_images = images.size();
  const int threads = tbb::this_task_arena::max_concurrency();
  std::printf(
      "augment_bench: %zu catsdogs photos decoded in memory (DCT-scaled to >= the output, mean %.0f px for 299, "
      "%.0f px for 224), %.1f s per row; vector warp: %s; %d cores\n\n",
      n_images, mean299, mean224, seconds, stoker::augment::warp_isa_name(stoker::augment::warp_isa()), threads);

  const stoker::ResizeTransform resize(299, 299, stoker::Interpolation::Bilinear);
  const stoker::Augmenter seed(seed_spec());
  const stoker::Augmenter validation(seed_spec().validation());
  stoker::AugmentSpec f32s = seed_spec();
  f32s.dtype = stoker::DType::F32;
  f32s.layout = stoker::Layout::NCHW;
  f32s.normalization = stoker::ChannelNormalization::minus_one_to_one();
  const stoker::Augmenter seed_f32(f32s);
  stoker::AugmentSpec jitter = f32s;
  jitter.contrast = 0.4;
  jitter.saturation = 0.4;
  jitter.hue = 0.1;
  const stoker::Augmenter seed_jitter(jitter);
  stoker::AugmentSpec rrc;
  rrc.height = rrc.width = 299;
  rrc.random_resized_crop = stoker::RandomResizedCrop{};
  rrc.horizontal_flip = true;
  const stoker::Augmenter crop_flip(rrc);
  // The plain resize: cv::resize's bilinear (what the augmenter's own resize path runs), and
  // Pillow's antialiased bilinear (ResizeTransform's Bilinear, several times slower).
  const stoker::ResizeTransform cv_resize(299, 299, stoker::Interpolation::OpenCvLinear);
  const stoker::ResizeTransform cv_resize224(224, 224, stoker::Interpolation::OpenCvLinear);
  const stoker::ResizeTransform resize224(224, 224, stoker::Interpolation::Bilinear);
  const stoker::Augmenter seed224(stoker::keras_example_augmentation(224, 224));

  std::vector<std::byte> out(seed_f32.output_shape().bytes());
  auto run_transform = [&](const stoker::SampleTransform& t, const std::vector<Decoded>& from) {
    return [&, tp = &t, src = &from](std::size_t i) {
      tp->apply((*src)[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
    };
  };
  // All cores of this machine through oneTBB, as the loader runs it.
  std::vector<std::vector<std::byte>> outs(static_cast<std::size_t>(threads), std::vector<std::byte>(out.size()));
  auto all_cores = [&](const stoker::SampleTransform& t, const std::vector<Decoded>& from) {
    const std::size_t chunk = 64;
    return chunk * rate(seconds, 4, [&](std::size_t b) {
             tbb::parallel_for(std::size_t{0}, chunk, [&](std::size_t k) {
               const std::size_t i = b * chunk + k;
               const int slot = tbb::this_task_arena::current_thread_index();
               t.apply(from[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)},
                       outs[static_cast<std::size_t>(slot)].data());
             });
           });
  };
  // The scalar loop (the warp before the vector kernels) and the kernel chosen at run time.
  const stoker::augment::WarpIsa vector_isa = stoker::augment::warp_isa();
  auto with_warp = [&](stoker::augment::WarpIsa isa, auto&& measure) {
    stoker::augment::set_warp_isa(isa);
    const double r = measure();
    stoker::augment::set_warp_isa(vector_isa);
    return r;
  };
  const auto scalar = stoker::augment::WarpIsa::Scalar;

  struct Row {
    std::string name;
    double per_s;
    int threads;
    double base;  // the plain resize of the same size and thread count
  };
  std::vector<Row> rows;
  for (const int size : {299, 224}) {
    const stoker::ResizeTransform& rs = size == 299 ? cv_resize : cv_resize224;
    const stoker::ResizeTransform& pil = size == 299 ? resize : resize224;
    const stoker::Augmenter& sd = size == 299 ? seed : seed224;
    const std::vector<Decoded>& from = size == 299 ? images : images224;
    const std::string at = " " + std::to_string(size);
    const double base1 = rate(seconds, n_images, run_transform(rs, from));
    rows.push_back({"plain resize (cv::resize bilinear, u8)" + at, base1, 1, base1});
    rows.push_back({"plain resize (Pillow bilinear, antialiased, u8)" + at,
                    rate(seconds, n_images, run_transform(pil, from)), 1, base1});
    rows.push_back({"seed augmentation u8, scalar warp (before)" + at,
                    with_warp(scalar, [&] { return rate(seconds, n_images, run_transform(sd, from)); }), 1, base1});
    rows.push_back(
        {"seed augmentation u8, vector warp" + at, rate(seconds, n_images, run_transform(sd, from)), 1, base1});
    if (vector_isa == stoker::augment::WarpIsa::Avx512) {
      rows.push_back(
          {"seed augmentation u8, AVX2 warp" + at,
           with_warp(stoker::augment::WarpIsa::Avx2, [&] { return rate(seconds, n_images, run_transform(sd, from)); }),
           1, base1});
    }
    const double base_all = all_cores(rs, from);
    rows.push_back({"plain resize, all cores" + at, base_all, threads, base_all});
    rows.push_back({"seed augmentation u8, scalar warp, all cores" + at,
                    with_warp(scalar, [&] { return all_cores(sd, from); }), threads, base_all});
    rows.push_back({"seed augmentation u8, vector warp, all cores" + at, all_cores(sd, from), threads, base_all});
  }
  const double base = rows[0].per_s;
  rows.push_back({"validation mode (deterministic part: resize)",
                  rate(seconds, n_images, run_transform(validation, images)), 1, base});
  rows.push_back(
      {"seed augmentation, f32 NCHW [-1,1]", rate(seconds, n_images, run_transform(seed_f32, images)), 1, base});
  rows.push_back({"seed + contrast/saturation/hue, f32 NCHW",
                  rate(seconds, n_images, run_transform(seed_jitter, images)), 1, base});
  rows.push_back(
      {"random-resized-crop + flip, u8", rate(seconds, n_images, run_transform(crop_flip, images)), 1, base});
  rows.push_back({"seed augmentation, slow reference executor",
                  rate(seconds / 2, 16,
                       [&](std::size_t i) {
                         seed.apply_reference(images[i % n_images].view,
                                              stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
                       }),
                  1, base});
  {
    stoker::ImageDecoder dec;
    rows.push_back({"JPEG decode (DCT-scaled) + seed augmentation, u8",
                    rate(seconds, n_images,
                         [&](std::size_t i) {
                           const auto& bytes = encoded[i % n_images];
                           const stoker::ImageView v = dec.decode(bytes, "bench", 299, 299);
                           seed.apply(v, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
                         }),
                    1, base});
  }

  std::printf("%-56s %8s %10s %10s %9s\n", "configuration", "threads", "img/s", "us/img", "x resize");
  for (const Row& r : rows) {
    std::printf("%-56s %8d %10.0f %10.1f %9.2f\n", r.name.c_str(), r.threads, r.per_s, 1e6 * r.threads / r.per_s,
                r.per_s / r.base);
  }
  return 0;
}
