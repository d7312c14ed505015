// Augmentation throughput per core: the seed's Keras augmentation (rotation 30, shifts 0.4,
// shear 0.4, zoom 0.25, horizontal flip, brightness [0.5, 1.5]) at 299x299 from decoded photos
// (catsdogs, decoded in memory), next to a plain resize and a few variants, and at 224x224; the
// seed rows with the scalar warp loop and with the vector kernel chosen at run time (warp.hpp),
// one core and all cores. Prints a table; "x resize" is against cv::resize's bilinear at the same
// size and thread count, measured in turns with the rows it is compared to (see rates()).
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

using Body = std::function<void(std::size_t)>;

// Rates (calls per second) of several bodies, body(i) for i = 0, 1, ... each, measured in turns
// of `batch` calls, round robin, until every body has run `seconds` (and `min_items` calls): a
// change in the machine's load (other users of a shared machine) falls on all of them alike, so
// their ratios hold even when the absolute figures move.
std::vector<double> rates(double seconds, std::size_t min_items, const std::vector<Body>& bodies,
                          std::size_t batch = 16) {
  std::vector<std::size_t> calls(bodies.size(), 0);
  std::vector<double> elapsed(bodies.size(), 0.0);
  for (const Body& b : bodies)
    for (std::size_t i = 0; i < 8; ++i) b(i);  // warm-up: thread-local scratch, caches
  bool more = true;
  while (more) {
    more = false;
    for (std::size_t k = 0; k < bodies.size(); ++k) {
      if (calls[k] >= min_items && elapsed[k] >= seconds) continue;
      const auto start = Clock::now();
      for (std::size_t j = 0; j < batch; ++j) bodies[k](calls[k]++);
      elapsed[k] += std::chrono::duration<double>(Clock::now() - start).count();
      more = true;
    }
  }
  std::vector<double> out(bodies.size());
  for (std::size_t k = 0; k < bodies.size(); ++k) out[k] = static_cast<double>(calls[k]) / elapsed[k];
  return out;
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
  // All cores of this machine through oneTBB, as the loader runs it: one call is 64 images.
  constexpr std::size_t kChunk = 64;
  std::vector<std::vector<std::byte>> outs(static_cast<std::size_t>(threads), std::vector<std::byte>(out.size()));
  auto all_cores = [&](const stoker::SampleTransform& t, const std::vector<Decoded>& from) -> Body {
    return [&, tp = &t, src = &from](std::size_t b) {
      tbb::parallel_for(std::size_t{0}, kChunk, [&](std::size_t k) {
        const std::size_t i = b * kChunk + k;
        const int slot = tbb::this_task_arena::current_thread_index();
        tp->apply((*src)[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)},
                  outs[static_cast<std::size_t>(slot)].data());
      });
    };
  };
  // The scalar loop (the warp before the vector kernels), the kernel chosen at run time, and the
  // AVX2 one where AVX-512 is the choice: each body sets its warp before it runs.
  const stoker::augment::WarpIsa vector_isa = stoker::augment::warp_isa();
  auto with_warp = [](stoker::augment::WarpIsa isa, Body body) -> Body {
    return [isa, body](std::size_t i) {
      stoker::augment::set_warp_isa(isa);
      body(i);
    };
  };
  const auto scalar = stoker::augment::WarpIsa::Scalar;
  const bool avx2_row = vector_isa == stoker::augment::WarpIsa::Avx512;

  struct Row {
    std::string name;
    double per_s;
    int threads;
    double base;  // cv::resize at the same size and thread count, measured in the same turns
  };
  std::vector<Row> rows;
  for (const int size : {299, 224}) {
    const stoker::ResizeTransform& rs = size == 299 ? cv_resize : cv_resize224;
    const stoker::ResizeTransform& pil = size == 299 ? resize : resize224;
    const stoker::Augmenter& sd = size == 299 ? seed : seed224;
    const std::vector<Decoded>& from = size == 299 ? images : images224;
    const std::string at = " " + std::to_string(size);
    std::vector<Body> one = {run_transform(rs, from), run_transform(pil, from),
                             with_warp(scalar, run_transform(sd, from)),
                             with_warp(vector_isa, run_transform(sd, from))};
    if (avx2_row) one.push_back(with_warp(stoker::augment::WarpIsa::Avx2, run_transform(sd, from)));
    const std::vector<double> r1 = rates(seconds, n_images, one);
    rows.push_back({"plain resize (cv::resize bilinear, u8)" + at, r1[0], 1, r1[0]});
    rows.push_back({"plain resize (Pillow bilinear, antialiased, u8)" + at, r1[1], 1, r1[0]});
    rows.push_back({"seed augmentation u8, scalar warp (before)" + at, r1[2], 1, r1[0]});
    rows.push_back({std::string("seed augmentation u8, ") + stoker::augment::warp_isa_name(vector_isa) + " warp" + at,
                    r1[3], 1, r1[0]});
    if (avx2_row) rows.push_back({"seed augmentation u8, avx2 warp" + at, r1[4], 1, r1[0]});
    const std::vector<double> rn = rates(
        seconds, 4,
        {all_cores(rs, from), with_warp(scalar, all_cores(sd, from)), with_warp(vector_isa, all_cores(sd, from))}, 1);
    rows.push_back({"plain resize, all cores" + at, rn[0] * kChunk, threads, rn[0] * kChunk});
    rows.push_back({"seed augmentation u8, scalar warp, all cores" + at, rn[1] * kChunk, threads, rn[0] * kChunk});
    rows.push_back(
        {std::string("seed augmentation u8, ") + stoker::augment::warp_isa_name(vector_isa) + " warp, all cores" + at,
         rn[2] * kChunk, threads, rn[0] * kChunk});
  }
  stoker::augment::set_warp_isa(vector_isa);
  stoker::ImageDecoder dec;
  const std::vector<double> r = rates(
      seconds, n_images,
      {run_transform(cv_resize, images), run_transform(validation, images), run_transform(seed_f32, images),
       run_transform(seed_jitter, images), run_transform(crop_flip, images),
       [&](std::size_t i) {
         seed.apply_reference(images[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)},
                              out.data());
       },
       [&](std::size_t i) {
         const stoker::ImageView v = dec.decode(encoded[i % n_images], "bench", 299, 299);
         seed.apply(v, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
       },
       [&](std::size_t i) {
         const stoker::ImageView v =
             dec.decode(encoded[i % n_images], "bench", crop_flip.min_decode_height(), crop_flip.min_decode_width());
         crop_flip.apply(v, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
       },
       [&](std::size_t i) {
         // As the loader does: only the box the crop reads.
         const stoker::SampleContext ctx{1, 0, static_cast<std::int64_t>(i)};
         const stoker::DecodedSize full =
             dec.prepare(encoded[i % n_images], "bench", crop_flip.min_decode_height(), crop_flip.min_decode_width());
         const auto box = crop_flip.source_region(ctx, full.height, full.width);
         const stoker::ImageView v = dec.decode_prepared(box ? &*box : nullptr);
         if (box) {
           crop_flip.apply_part(v, *box, full.height, full.width, ctx, out.data());
         } else {
           crop_flip.apply(v, ctx, out.data());
         }
       }});
  const char* names[] = {"plain resize (cv::resize bilinear, u8) 299",
                         "validation mode (deterministic part: resize)",
                         "seed augmentation, f32 NCHW [-1,1]",
                         "seed + contrast/saturation/hue, f32 NCHW",
                         "random-resized-crop + flip, u8",
                         "seed augmentation, slow reference executor",
                         "JPEG decode (DCT-scaled) + seed augmentation, u8",
                         "JPEG decode + random-resized-crop + flip, whole image",
                         "JPEG decode + random-resized-crop + flip, its box only"};
  for (std::size_t k = 0; k < r.size(); ++k) rows.push_back({names[k], r[k], 1, r[0]});

  std::printf("%-56s %8s %10s %10s %9s\n", "configuration", "threads", "img/s", "us/img", "x resize");
  for (const Row& r : rows) {
    std::printf("%-56s %8d %10.0f %10.1f %9.2f\n", r.name.c_str(), r.threads, r.per_s, 1e6 * r.threads / r.per_s,
                r.per_s / r.base);
  }
  return 0;
}
