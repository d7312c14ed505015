// CPU backend benchmark: forward throughput of a frozen backbone on this machine's cores, and the
// arithmetic rate it reaches (GFLOP/s counted from the layer graph: two FLOPs per multiply-add of
// every Conv2D, DepthwiseConv2D and Dense). bench/torch_mobilenet_peer.py --device cpu is the
// PyTorch figure for the same MobileNetV2 graph on the same cores (run both one after the other on
// the same machine: the ratio is what to quote).
//
//   cpu_backend_bench [--model PATH] [--cut LAYER] [--size N] [--batch 32] [--reps 5] [--min-time 1]
//                     [--threads 0]
//
// PATH defaults to data/models/mobilenet_v2_0.35_224_3class.h5 in the source tree, cut at
// sequential_9 (the 1280 pooled features). --size sets the input to N×N; by default the model's
// own size, 224×224 when the file leaves it unknown.
// One warm-up batch, then --reps timed runs of whole batches lasting at least --min-time seconds;
// the median is printed as "cpu_backend_bench img/s: <n>" and "cpu_backend_bench GFLOP/s: <n>".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/backend.hpp>
#include <stoker/trainer/model.hpp>

using namespace stoker;
using namespace stoker::trainer;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = std::string(STOKER_SOURCE_DIR) + "/data/models/mobilenet_v2_0.35_224_3class.h5";
  std::string cut = "sequential_9";
  int batch = 32;
  int reps = 5;
  double min_seconds = 1.0;
  int threads = 0;
  int size = 0;  // 0: the model's own
};

Args parse(int argc, char** argv) {
  Args a;
  bool model_given = false, cut_given = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw InvalidArgument("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--model") a.model = v, model_given = true;
    else if (k == "--cut") a.cut = v, cut_given = true;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--min-time") a.min_seconds = std::stod(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--size") a.size = std::stoi(v);
    else throw InvalidArgument("unknown option " + k);
  }
  if (model_given && !cut_given) a.cut.clear();  // another model: the whole graph unless told
  if (a.batch < 1 || a.reps < 1 || a.threads < 0 || a.size < 0 || !(a.min_seconds >= 0)) {
    throw InvalidArgument("--batch and --reps must be >= 1, --threads, --size and --min-time >= 0");
  }
  return a;
}

// Floating-point operations of one sample's forward pass (multiply-adds × 2).
double flops_per_sample(const Graph& g) {
  double madds = 0;
  for (const LayerNode& n : g.nodes) {
    if (n.inputs.empty()) continue;
    const std::vector<int>& in = g.nodes[static_cast<std::size_t>(n.inputs[0])].out_shape;
    const double out_values = static_cast<double>(Tensor::element_count(n.out_shape));
    switch (n.kind) {
      case LayerKind::Conv2D: madds += out_values * n.kernel_h * n.kernel_w * in.back(); break;
      case LayerKind::DepthwiseConv2D: madds += out_values * n.kernel_h * n.kernel_w; break;
      case LayerKind::Dense: madds += out_values * in.back(); break;
      default: break;
    }
  }
  return 2 * madds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    auto load = [&](int size) {
      LoadOptions lo;
      if (size > 0) lo.input_hw = {size, size};
      return load_model(a.model, lo);
    };
    Model full = [&] {
      if (a.size > 0) return load(a.size);
      try {
        return load(0);
      } catch (const InvalidArgument&) {
        return load(224);  // the file leaves the input size unknown
      }
    }();
    const Model net = a.cut.empty() ? full : full.cut_at(a.cut);
    const Graph& g = net.graph();
    const std::vector<int>& in_shape = g.nodes[static_cast<std::size_t>(g.inputs.at(0))].out_shape;
    const std::size_t per_sample = Tensor::element_count(in_shape);
    CpuBackendOptions o;
    o.max_threads = a.threads;
    const auto backend = make_cpu_backend(g, o);

    std::vector<float> input(per_sample * static_cast<std::size_t>(a.batch));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // the "tf" preprocessing range
    for (float& v : input) v = u(rng);

    auto run = [&] {
      const auto out = backend->forward(input.data(), a.batch);
      for (const float v : out.at(0).data) {
        if (!std::isfinite(v)) throw Error("cpu_backend_bench: the output is not finite");
      }
    };
    run();  // warm-up: buffer pools, page faults
    std::vector<double> rates;
    for (int r = 0; r < a.reps; ++r) {
      const auto t0 = Clock::now();
      long images = 0;
      double elapsed = 0;
      do {
        run();
        images += a.batch;
        elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      } while (elapsed < a.min_seconds);
      rates.push_back(static_cast<double>(images) / elapsed);
    }
    const double img_s = median(rates), flops = flops_per_sample(g);
    const unsigned cores = a.threads > 0 ? static_cast<unsigned>(a.threads) : std::thread::hardware_concurrency();
    std::printf("model: %s%s%s, input %dx%dx%d, %.1f MFLOP per image\n", a.model.c_str(),
                a.cut.empty() ? "" : " cut at ", a.cut.c_str(), in_shape.at(0), in_shape.at(1), in_shape.at(2),
                flops / 1e6);
    std::printf("backend: %s, %u threads, batch %d, median of %d runs of >= %.2g s\n", backend->name().c_str(), cores,
                a.batch, a.reps, a.min_seconds);
    std::printf("cpu_backend_bench img/s: %.1f\n", img_s);
    std::printf("cpu_backend_bench GFLOP/s: %.1f (%.1f per thread)\n", img_s * flops / 1e9,
                img_s * flops / 1e9 / cores);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_backend_bench: %s\n", e.what());
    return 1;
  }
}
