// cuDNN backend benchmark (issue 6): forward throughput of the frozen MobileNetV2 α=0.35 backbone
// (224×224 → 1280 pooled features) at batch 256, input already on the device (what the GPU feed
// delivers), fp16 and bf16 storage. bench/torch_mobilenet_peer.py is the PyTorch figure for the
// same work on the same GPU (scripts/gpu_check.sh runs both).
//
//   trainer_gpu_bench [--model PATH.h5] [--cut sequential_9] [--batch 256] [--iters 30]
//
// PATH defaults to $STOKER_SHARED_DATA (or ../shared/data)/models/keras/mobilenet_v2_0.35_224_3class.h5.
// Prints "trainer_gpu_bench img/s (<storage>): <value>" lines.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <stoker/error.hpp>
#include <stoker/pipeline/convert.hpp>
#include <stoker/pipeline/cuda.hpp>
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
};

Args parse(int argc, char** argv) {
  Args a;
  const char* env = std::getenv("STOKER_SHARED_DATA");
  a.model = (fs::path(env ? env : "../shared/data") / "models/keras/mobilenet_v2_0.35_224_3class.h5").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--cut") a.cut = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else throw InvalidArgument("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    require_cuda_device("trainer_gpu_bench");
    std::printf("device: %s\n", cuda_device_description().c_str());
    Model backbone = load_model(a.model).cut_at(a.cut);
    const auto in_shape = backbone.input_shape();
    const std::size_t per = static_cast<std::size_t>(in_shape[0]) * in_shape[1] * in_shape[2];
    std::printf("model: %s cut at %s, input %dx%dx%d, output %s, batch %d\n", a.model.c_str(), a.cut.c_str(),
                in_shape[0], in_shape[1], in_shape[2], shape_to_string(backbone.output_shape()).c_str(), a.batch);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(per * static_cast<std::size_t>(a.batch));
    for (auto& v : x) v = u(rng);
    Stream stream;
    for (DType st : {DType::F16, DType::BF16}) {
      CudnnBackendOptions o;
      o.max_batch = a.batch;
      o.storage = st;
      auto gpu = make_cudnn_backend(backbone.graph(), o);
      // The input in the storage type, on the device: read in place, no conversion.
      std::vector<std::uint16_t> bits(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) bits[i] = st == DType::F16 ? convert::f16_bits(x[i]) : convert::bf16_bits(x[i]);
      DeviceBuffer dx(bits.size() * 2, "bench input");
      copy_to_device_async(dx.get(), bits.data(), bits.size() * 2, stream.get());
      for (int i = 0; i < 5; ++i) gpu->forward_device(dx.get(), st, a.batch, stream.get());  // warm-up
      stream.synchronize();
      Event t0(true), t1(true);
      t0.record(stream);
      for (int i = 0; i < a.iters; ++i) gpu->forward_device(dx.get(), st, a.batch, stream.get());
      t1.record(stream);
      t1.synchronize();
      const double ms = Event::elapsed_ms(t0, t1);
      const double ips = a.batch * a.iters / (ms / 1000.0);
      std::printf("trainer_gpu_bench img/s (%s): %.0f  (%.2f ms per batch of %d, %d batches, %.1f MiB on the device)\n",
                  to_string(st), ips, ms / a.iters, a.batch, a.iters, gpu->device_bytes() / 1048576.0);
      if (st == DType::F16) std::printf("%s", gpu->describe().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_gpu_bench: %s\n", e.what());
    return 1;
  }
}
