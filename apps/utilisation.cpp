#include "utilisation.hpp"

#include <dlfcn.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <thread>

namespace stoker::app {
namespace {

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

void process_io(std::uint64_t& read_bytes, std::uint64_t& rchar) {
  std::ifstream in("/proc/self/io");
  for (std::string key; in >> key;) {
    std::uint64_t v = 0;
    in >> v;
    if (key == "read_bytes:") read_bytes = v;
    if (key == "rchar:") rchar = v;
  }
}

// NVML, loaded at run time so that stoker neither links nor requires it.
struct Nvml {
  struct Rates {
    unsigned gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  using Init = int (*)();
  using GetHandle = int (*)(unsigned, void**);
  using GetRates = int (*)(void*, Rates*);
  using GetMemory = int (*)(void*, Memory*);

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    auto handle = reinterpret_cast<GetHandle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    rates = reinterpret_cast<GetRates>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    memory = reinterpret_cast<GetMemory>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    ok = init && handle && rates && memory && init() == 0 && handle(0, &device) == 0;
  }
  void* lib = nullptr;
  void* device = nullptr;
  GetRates rates = nullptr;
  GetMemory memory = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml instance;
  return instance;
}

}  // namespace

UtilisationMeter::UtilisationMeter() : start_(std::chrono::steady_clock::now()), cpu_seconds_(process_cpu_seconds()) {
  process_io(read_bytes_, rchar_);
}

Utilisation UtilisationMeter::finish(double data_wait_seconds, double compute_seconds) const {
  Utilisation u;
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double wall = u.seconds > 0 ? u.seconds : 1e-9;
  std::uint64_t read_bytes = 0, rchar = 0;
  process_io(read_bytes, rchar);
  u.disk_read_mb_per_s = static_cast<double>(read_bytes - read_bytes_) / 1e6 / wall;
  u.file_read_mb_per_s = static_cast<double>(rchar - rchar_) / 1e6 / wall;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  u.cpu_percent_of_all_cores = 100.0 * (process_cpu_seconds() - cpu_seconds_) / wall / cores;
  u.data_wait_share = data_wait_seconds / wall;
  u.compute_share = compute_seconds / wall;
  if (nvml().ok) {
    Nvml::Rates r{};
    Nvml::Memory m{};
    if (nvml().rates(nvml().device, &r) == 0) u.gpu_busy_percent = r.gpu;
    if (nvml().memory(nvml().device, &m) == 0) u.gpu_memory_used_mib = static_cast<double>(m.used) / (1 << 20);
  }
  return u;
}

std::string limiting_stage(const Utilisation& u) {
  if (u.data_wait_share > 0.2) {
    return u.disk_read_mb_per_s > 50 ? "the input pipeline (disk reads): try --cache decoded"
                                     : "the input pipeline (decode/augmentation on the CPU): try --cache decoded or more --threads";
  }
  if (u.compute_share > 0.6) return "the model's compute (the input pipeline keeps up)";
  return "neither clearly: host-side overheads between batches";
}

std::string describe(const Utilisation& u) {
  char buf[512];
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string gpu = "GPU n/a (CPU run or NVML unavailable)";
  if (u.gpu_busy_percent) {
    char g[128];
    std::snprintf(g, sizeof g, "GPU busy %.0f%% (NVML), %.0f MiB held", *u.gpu_busy_percent,
                  u.gpu_memory_used_mib.value_or(0));
    gpu = g;
  }
  std::snprintf(buf, sizeof buf,
                "disk %.1f MB/s (files %.1f MB/s incl. page cache) | CPU %.0f%% of %u cores | %s | waited for data "
                "%.0f%%, model compute %.0f%% of wall time -> limited by %s",
                u.disk_read_mb_per_s, u.file_read_mb_per_s, u.cpu_percent_of_all_cores, cores, gpu.c_str(),
                100 * u.data_wait_share, 100 * u.compute_share, limiting_stage(u).c_str());
  return buf;
}

}  // namespace stoker::app
