// cuDNN backend benchmark: forward throughput of the frozen MobileNetV2 α=0.35 backbone
// (224×224 → every conv up to Conv_1/out_relu → global average pooling → 1280 features) at batch
// 256, NHWC input already on the device in the storage type (what the GPU feed delivers), fp16 and
// bf16 storage. bench/torch_mobilenet_peer.py is the PyTorch figure for the same graph
// (torchvision features + global average pooling, bf16 channels-last) on the same GPU
// (scripts/gpu_check.sh runs both).
//
//   trainer_gpu_bench [--model PATH.h5] [--cut sequential_9] [--batch 256] [--iters 30] [--reps 5]
//
// PATH defaults to $STOKER_SHARED_DATA (or ../shared/data)/models/keras/mobilenet_v2_0.35_224_3class.h5.
// cuDNN's algorithm search runs when the backend is made, before any timing; then a warm-up
// (>= 10 batches and >= 0.3 s), then --reps repetitions of --iters batches timed with CUDA events
// on the stream the work is enqueued on. Prints "trainer_gpu_bench img/s (F16): <median>" and
// "trainer_gpu_bench img/s (BF16): <median>" (scripts/gpu_check.sh reads the BF16 line's 4th field).
// Exit status 0 on success, 1 on an error (model missing, cuDNN failure, non-finite output), 2
// without a usable GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <stoker/core/cuda.hpp>
#include <stoker/core/error.hpp>
#include <stoker/pipeline/convert.hpp>
#include <stoker/trainer/cudnn_backend.hpp>
#include <stoker/trainer/model.hpp>

namespace fs = std::filesystem;
using namespace stoker;
using namespace stoker::trainer;

namespace {

struct Args {
  std::string model;
  std::string cut = "sequential_9";
  int batch = 256;
  int iters = 30;
  int reps = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  const char* env = std::getenv("STOKER_SHARED_DATA");
  a.model = (fs::path(env ? env : "../shared/data") / "models/keras/mobilenet_v2_0.35_224_3class.h5").string();
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw InvalidArgument("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--cut") a.cut = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else throw InvalidArgument("unknown option " + k);
  }
  if (a.batch < 1 || a.iters < 1 || a.reps < 1) throw InvalidArgument("--batch, --iters and --reps must be >= 1");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

const char* storage_name(DType t) { return t == DType::F16 ? "F16" : t == DType::BF16 ? "BF16" : to_string(t); }

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (cuda_device_count() == 0) {
      std::fprintf(stderr, "trainer_gpu_bench: %s\n", cuda_unavailable_reason().c_str());
      return 2;
    }
    std::printf("device: %s\n", cuda_device_description().c_str());
    if (!fs::exists(a.model)) throw InvalidArgument("model file not found: " + a.model);
    Model backbone = load_model(a.model).cut_at(a.cut);
    const auto in_shape = backbone.input_shape();
    const std::size_t per = static_cast<std::size_t>(in_shape[0]) * in_shape[1] * in_shape[2];
    std::printf("model: %s cut at %s, input %dx%dx%d NHWC, output %s, batch %d\n", a.model.c_str(), a.cut.c_str(),
                in_shape[0], in_shape[1], in_shape[2], shape_to_string(backbone.output_shape()).c_str(), a.batch);
    std::fflush(stdout);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(per * static_cast<std::size_t>(a.batch));
    for (auto& v : x) v = u(rng);
    Stream stream;
    for (DType st : {DType::F16, DType::BF16}) {
      CudnnBackendOptions o;
      o.max_batch = a.batch;
      o.storage = st;
      auto gpu = make_cudnn_backend(backbone.graph(), o);  // cuDNN's algorithm search happens here
      // The input in the storage type, on the device: read in place, no conversion.
      std::vector<std::uint16_t> bits(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        bits[i] = st == DType::F16 ? convert::f16_bits(x[i]) : convert::bf16_bits(x[i]);
      DeviceBuffer dx(bits.size() * 2, "bench input");
      copy_to_device_async(dx.get(), bits.data(), bits.size() * 2, stream.get());
      std::vector<DeviceTensor> out;
      // Warm-up by time (clocks, lazy module loading, per-size algorithm fallbacks), bounded. Each
      // batch is waited for: the calls only enqueue, so the host clock alone would let hundreds
      // of batches pile up before 0.3 s had passed.
      const auto w0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 500; ++i) {
        out = gpu->forward_device(dx.get(), st, a.batch, stream.get());
        stream.synchronize();
        if (i >= 9 && std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() > 0.3) break;
      }
      stream.synchronize();
      Event t0(true), t1(true);
      std::vector<double> rate, ms_per;
      for (int r = 0; r < a.reps; ++r) {
        t0.record(stream);
        for (int i = 0; i < a.iters; ++i) out = gpu->forward_device(dx.get(), st, a.batch, stream.get());
        t1.record(stream);
        t1.synchronize();
        const double ms = Event::elapsed_ms(t0, t1);
        rate.push_back(static_cast<double>(a.batch) * a.iters / (ms / 1000.0));
        ms_per.push_back(ms / a.iters);
      }
      // The features of the last batch must be finite (a failed kernel leaves garbage or NaN).
      if (out.empty()) throw Error("forward_device returned no output");
      std::size_t count = static_cast<std::size_t>(a.batch);
      for (std::size_t d = 1; d < out[0].shape.size(); ++d) count *= static_cast<std::size_t>(out[0].shape[d]);
      std::vector<float> y(count);
      copy_to_host_async(y.data(), out[0].data, count * sizeof(float), stream.get());
      stream.synchronize();
      double sum_abs = 0;
      bool finite = true;
      for (float v : y) finite = finite && std::isfinite(v), sum_abs += std::fabs(v);
      std::printf(
          "trainer_gpu_bench img/s (%s): %.0f  (median of %d reps x %d batches of %d, min %.0f max %.0f; "
          "%.3f ms per batch; %.1f MiB on the device; output %s, mean |y| %.4g)\n",
          storage_name(st), median(rate), a.reps, a.iters, a.batch, *std::min_element(rate.begin(), rate.end()),
          *std::max_element(rate.begin(), rate.end()), median(ms_per), gpu->device_bytes() / 1048576.0,
          shape_to_string(out[0].shape).c_str(), sum_abs / static_cast<double>(count));
      std::fflush(stdout);
      if (!finite) throw Error(std::string("non-finite features with ") + storage_name(st) + " storage");
      if (st == DType::F16) std::printf("%s", gpu->describe().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "trainer_gpu_bench: %s\n", e.what());
    return 1;
  }
}
