// `stoker env`: what this build and this machine give stoker, in one place — the version, the
// build's GPU parts, every CUDA device or why there is none, cuDNN, NVML, the CPU and its
// features, the libraries that decode. A run on a machine without a GPU only says "no GPU found";
// the detail is here.
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/version.h>
#include <opencv2/core/version.hpp>

#include "commands.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/trainer/cudnn_backend.hpp"
#include "utilisation.hpp"

namespace stoker::app {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string cpu_features() {
  std::string out;
  auto has = [&](const char* name, bool present) {
    if (present) out += (out.empty() ? "" : " ") + std::string(name);
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  has("sse4.2", __builtin_cpu_supports("sse4.2"));
  has("avx", __builtin_cpu_supports("avx"));
  has("avx2", __builtin_cpu_supports("avx2"));
  has("fma", __builtin_cpu_supports("fma"));
  has("avx512f", __builtin_cpu_supports("avx512f"));
  has("avx512bw", __builtin_cpu_supports("avx512bw"));
#endif
  return out.empty() ? "none detected" : out;
}

void print_env() {
  std::printf("stoker %s\n", STOKER_VERSION);
  std::printf("build: CUDA %s, cuDNN backend %s, MPI %s\n",
              !built_with_cuda()   ? "no"
              : cuda_is_emulated() ? "emulated on the host"
                                   : "yes",
              trainer::built_with_cudnn() ? "yes" : "no",
#if defined(STOKER_HAVE_MPI)
              "yes"
#else
              "no"
#endif
  );
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    std::printf("GPUs: none (%s)\n", cuda_unavailable_reason().c_str());
  } else {
    std::printf("GPUs: %d\n", gpus);
    for (int i = 0; i < gpus; ++i) {
      const DeviceGuard on(i);
      std::printf("  cuda:%d %s\n", i, cuda_device_description().c_str());
    }
    std::printf("cuDNN: %s\n", trainer::cudnn_description().c_str());
  }
  const std::string nvml = nvml_status();  // "NVML n/a: why" or "N devices"
  std::printf("%s\n", (nvml.starts_with("NVML") ? nvml : "NVML: " + nvml).c_str());
  std::printf("CPU: %s, %u hardware threads, %d usable by this process\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), tbb::info::default_concurrency());
  std::printf("CPU features: %s\n", cpu_features().c_str());
  std::printf("libraries: OpenCV %s, oneTBB %s, libjpeg-turbo (TurboJPEG)\n", CV_VERSION, TBB_VERSION_STRING);
}

}  // namespace

void add_env_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("env", "report the build, the GPUs (or why none is used), cuDNN, NVML and the CPU");
  cmd->callback(print_env);
}

}  // namespace stoker::app
