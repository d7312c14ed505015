// Augmentation throughput per core: the seed's Keras augmentation (rotation 30, shifts 0.4,
// shear 0.4, zoom 0.25, horizontal flip, brightness [0.5, 1.5]) at 299x299 from decoded photos
// (catsdogs, decoded in memory), next to a plain resize and a few variants. Prints a table.
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

  stoker::ImageDecoder decoder;
  std::vector<std::vector<std::uint8_t>> encoded;
  std::vector<Decoded> images;
  double pixels = 0;
  for (const fs::path& f : picked) {
    std::vector<std::uint8_t> bytes;
    stoker::read_file(f.string(), bytes);
    const stoker::ImageView v = decoder.decode(bytes, f.string(), 299, 299);
    Decoded d;
    d.pixels.resize(v.row_stride * static_cast<std::size_t>(v.height));
    std::copy(v.data, v.data + d.pixels.size(), d.pixels.begin());
    d.view = v;
    d.view.data = d.pixels.data();
    pixels += static_cast<double>(v.width) * v.height;
    images.push_back(std::move(d));
    encoded.push_back(std::move(bytes));
  }
  for (Decoded& d : images) d.view.data = d.pixels.data();
  const std::size_t n_images = images.size();
  std::printf(
      "augment_bench: %zu catsdogs photos decoded in memory (DCT-scaled to >= 299, mean %.0f px), "
      "output 299x299x3, %.1f s per row\n\n",
      n_images, pixels / n_images, seconds);

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

  std::vector<std::byte> out(seed_f32.output_shape().bytes());
  auto run_transform = [&](const stoker::SampleTransform& t) {
    return [&, tp = &t](std::size_t i) {
      tp->apply(images[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
    };
  };

  struct Row {
    std::string name;
    double per_s;
    int threads;
  };
  std::vector<Row> rows;
  rows.push_back({"plain resize (ResizeTransform, bilinear, u8)", rate(seconds, n_images, run_transform(resize)), 1});
  rows.push_back(
      {"validation mode (deterministic part: resize)", rate(seconds, n_images, run_transform(validation)), 1});
  rows.push_back({"seed augmentation, u8 NHWC", rate(seconds, n_images, run_transform(seed)), 1});
  rows.push_back({"seed augmentation, f32 NCHW [-1,1]", rate(seconds, n_images, run_transform(seed_f32)), 1});
  rows.push_back({"seed + contrast/saturation/hue, f32 NCHW", rate(seconds, n_images, run_transform(seed_jitter)), 1});
  rows.push_back({"random-resized-crop + flip, u8", rate(seconds, n_images, run_transform(crop_flip)), 1});
  rows.push_back({"seed augmentation, slow reference executor",
                  rate(seconds / 2, 16,
                       [&](std::size_t i) {
                         seed.apply_reference(images[i % n_images].view,
                                              stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
                       }),
                  1});
  {
    stoker::ImageDecoder dec;
    rows.push_back({"JPEG decode (DCT-scaled) + seed augmentation, u8",
                    rate(seconds, n_images,
                         [&](std::size_t i) {
                           const auto& bytes = encoded[i % n_images];
                           const stoker::ImageView v = dec.decode(bytes, "bench", 299, 299);
                           seed.apply(v, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)}, out.data());
                         }),
                    1});
  }
  {
    // All cores of this machine through oneTBB, as the loader runs it.
    const int threads = tbb::this_task_arena::max_concurrency();
    std::vector<std::vector<std::byte>> outs(static_cast<std::size_t>(threads), std::vector<std::byte>(out.size()));
    const std::size_t chunk = 64;
    const double batches = rate(seconds, 4, [&](std::size_t b) {
      tbb::parallel_for(std::size_t{0}, chunk, [&](std::size_t k) {
        const std::size_t i = b * chunk + k;
        const int slot = tbb::this_task_arena::current_thread_index();
        seed.apply(images[i % n_images].view, stoker::SampleContext{1, 0, static_cast<std::int64_t>(i)},
                   outs[static_cast<std::size_t>(slot)].data());
      });
    });
    rows.push_back({"seed augmentation, u8, all cores (oneTBB)", batches * chunk, threads});
  }

  const double base = rows[0].per_s;
  std::printf("%-52s %8s %10s %10s %9s\n", "configuration", "threads", "img/s", "us/img", "x resize");
  for (const Row& r : rows) {
    std::printf("%-52s %8d %10.0f %10.1f %9.2f\n", r.name.c_str(), r.threads, r.per_s, 1e6 * r.threads / r.per_s,
                r.per_s / base);
  }
  return 0;
}
