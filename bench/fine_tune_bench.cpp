// Fine-tuning throughput: one training step of Keras' second phase — the frozen part of the
// backbone forward (the CPU backend, folded and fused; with --device cuda the cuDNN backend), the
// trainable top forward keeping its activations, the head's loss and gradients, the top's backward
// (with --device cuda the GPU trainer, bf16) and Adam over every trainable weight — on pre-made
// host batches, so only compute (and, on the GPU, the copies of the batch and of the boundary
// values) is timed. bench/fine_tune_peers.py is PyTorch doing the same step with torchvision's
// MobileNetV2 (run both one after the other on the same machine: the ratio is what to quote).
//
//   fine_tune_bench [--model PATH] [--cut LAYER] [--from LAYER] [--size 224] [--batch 32] [--steps 6]
//                   [--reps 1] [--threads 0] [--device cpu|cuda]
//
// Defaults: MobileNetV2 α=0.35 (data/models/ of the source tree it was built from; on another
// machine pass --model) cut at sequential_9 (1280 features), unfrozen from block_13_expand. Two
// warm-up steps, then --reps runs of --steps timed ones; prints the median run's
// "fine_tune_bench img/s: <n>" for the step (and the frozen part's share of its time) and
// "fine_tune_bench forward img/s: <n>" for the frozen backbone's inference alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include <stoker/core/error.hpp>
#include <stoker/trainer/cudnn_backend.hpp>
#include <stoker/trainer/fine_tune.hpp>
#include <stoker/trainer/head.hpp>
#include <stoker/trainer/model.hpp>

using namespace stoker;
using namespace stoker::trainer;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = std::string(STOKER_SOURCE_DIR) + "/data/models/mobilenet_v2_0.35_224_3class.h5";
  std::string cut = "sequential_9";
  std::string from = "block_13_expand";
  int size = 224;
  int batch = 32;
  int steps = 6;
  int reps = 1;
  int threads = 0;
  std::string device = "cpu";
};

Args parse(int argc, char** argv) {
  Args a;
  bool model_given = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw InvalidArgument("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--model") a.model = v, model_given = true;
    else if (k == "--cut") a.cut = v;
    else if (k == "--from") a.from = v;
    else if (k == "--size") a.size = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--device") a.device = v;
    else throw InvalidArgument("unknown option " + k);
  }
  if (a.batch < 1 || a.steps < 1 || a.reps < 1 || a.size < 1 || a.threads < 0)
    throw InvalidArgument("--batch, --steps, --reps and --size must be >= 1, --threads >= 0");
  if (!model_given && !std::filesystem::exists(a.model))
    throw InvalidArgument("no model at " + a.model + " (the source tree this was built from): pass --model PATH");
  if (a.device != "cpu" && a.device != "cuda") throw InvalidArgument("--device must be cpu or cuda");
  return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::optional<tbb::global_control> threads;
  if (a.threads > 0) threads.emplace(tbb::global_control::max_allowed_parallelism, a.threads);
  Model backbone = load_model(a.model, {{a.size, a.size}}).cut_at(a.cut);
  TrainableTop top(backbone.graph(), a.from);
  Model below = backbone.cut_at(top.boundary());
  if (a.device == "cuda") {
    GpuTrainOptions go;
    go.max_batch = a.batch;
    top.run_on_gpu(go);
    CudnnBackendOptions bo;
    bo.max_batch = a.batch;
    bo.storage = DType::BF16;
    below.set_backend(make_cudnn_backend(below.graph(), bo));
    backbone.set_backend(make_cudnn_backend(backbone.graph(), bo));
    const TrainableTop::GpuGradientCheck check = top.check_gpu_gradients(2);
    std::printf(
        "on the GPU: %s; the frozen part on %s; gradients' relative L2 error to the CPU's float32: %.3g "
        "(the bf16 host twin's: %.3g)\n",
        top.executor().c_str(), below.backend().name().c_str(), check.gpu, check.rounding);
  }
  Head head = Head::sigmoid(top.features());
  TopAndHead model(top, head, top.optimizer().config());

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> images(static_cast<std::size_t>(a.batch) * a.size * a.size * 3);
  for (float& x : images) x = u(rng);
  std::vector<int> labels(static_cast<std::size_t>(a.batch));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int>(i % 2);

  double frozen_seconds = 0;  // of the timed steps: the frozen part's forward
  auto step = [&] {
    const auto f0 = Clock::now();
    const Tensor x = below.forward(images.data(), a.batch);
    frozen_seconds += seconds_since(f0);
    model.train_step(x.data.data(), labels.data(), a.batch);
  };
  step();
  step();
  struct Run {
    double rate, frozen_share;
  };
  std::vector<Run> runs;
  for (int r = 0; r < a.reps; ++r) {
    frozen_seconds = 0;
    const auto t0 = Clock::now();
    for (int s = 0; s < a.steps; ++s) step();
    const double seconds = seconds_since(t0);
    runs.push_back({a.batch * a.steps / seconds, frozen_seconds / seconds});
  }
  std::sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.rate < y.rate; });
  const Run median = runs[runs.size() / 2];

  backbone.forward(images.data(), a.batch);
  std::vector<double> forward_rates;
  for (int r = 0; r < a.reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < a.steps; ++s) backbone.forward(images.data(), a.batch);
    forward_rates.push_back(a.batch * a.steps / seconds_since(t0));
  }
  std::sort(forward_rates.begin(), forward_rates.end());
  const double forward_rate = forward_rates[forward_rates.size() / 2];

  std::printf(
      "model %s cut at %s, %dx%d, batch %d, trainable from %s (%zu weights; frozen part ends at %s), "
      "%.1f MB of activations kept\n",
      a.model.c_str(), a.cut.c_str(), a.size, a.size, a.batch, a.from.c_str(), top.trainable_parameters(),
      top.boundary().c_str(), top.activation_bytes(a.batch) / 1e6);
  std::printf(
      "fine_tune_bench img/s: %.1f (the frozen part's forward %.0f%% of the step's time; median of %d runs "
      "of %d steps, %.1f to %.1f)\n",
      median.rate, 100 * median.frozen_share, a.reps, a.steps, runs.front().rate, runs.back().rate);
  std::printf("fine_tune_bench forward img/s: %.1f\n", forward_rate);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fine_tune_bench: %s\n", e.what());
  return 1;
}
