#include "utilisation.hpp"

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#if defined(STOKER_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

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

// NVML, loaded at run time so that stoker neither links nor requires it. The signatures are
// nvml.h's (nvmlReturn_t is an int enum, 0 = NVML_SUCCESS; nvmlDevice_t a pointer).
struct Nvml {
  struct Rates {  // nvmlUtilization_t
    unsigned gpu, memory;
  };
  struct Memory {  // nvmlMemory_t (v1)
    unsigned long long total, free, used;
  };
  using Init = int (*)();
  using GetCount = int (*)(unsigned*);
  using GetHandle = int (*)(unsigned, void**);
  using GetHandleByPci = int (*)(const char*, void**);
  using GetRates = int (*)(void*, Rates*);
  using GetMemory = int (*)(void*, Memory*);

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why = "NVML n/a: libnvidia-ml.so.1 not found";
      return;
    }
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    count = reinterpret_cast<GetCount>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    by_index = reinterpret_cast<GetHandle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    by_pci = reinterpret_cast<GetHandleByPci>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    rates = reinterpret_cast<GetRates>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    memory = reinterpret_cast<GetMemory>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    if (!init || !count || !by_index || !rates || !memory) {
      why = "NVML n/a: libnvidia-ml.so.1 lacks the functions used";
      return;
    }
    if (const int rc = init(); rc != 0) {
      why = "NVML n/a: nvmlInit failed (code " + std::to_string(rc) + ")";
      return;
    }
    ok = true;
  }
  void* lib = nullptr;
  GetCount count = nullptr;
  GetHandle by_index = nullptr;
  GetHandleByPci by_pci = nullptr;
  GetRates rates = nullptr;
  GetMemory memory = nullptr;
  bool ok = false;
  std::string why;
};

const Nvml& nvml() {
  static const Nvml instance;
  return instance;
}

}  // namespace

std::string nvml_status() {
  const Nvml& n = nvml();
  if (!n.ok) return n.why;
  unsigned devices = 0;
  if (const int rc = n.count(&devices); rc != 0)
    return "NVML n/a: nvmlDeviceGetCount failed (code " + std::to_string(rc) + ")";
  return std::to_string(devices) + (devices == 1 ? " device" : " devices");
}

namespace {

// The NVML handle of CUDA device `cuda_device`. NVML numbers devices in PCI order and ignores
// CUDA_VISIBLE_DEVICES, so the match goes through the PCI bus id; index 0 only when NVML sees a
// single device.
void* nvml_device_for(int cuda_device, std::string& why) {
  const Nvml& n = nvml();
  if (!n.ok) {
    why = n.why;
    return nullptr;
  }
#if defined(STOKER_HAVE_CUDA)
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), cuda_device) == cudaSuccess) {
    void* d = nullptr;
    if (n.by_pci && n.by_pci(bus, &d) == 0 && d) return d;
  } else {
    cudaGetLastError();
  }
#endif
  unsigned count = 0;
  void* d = nullptr;
  if (n.count(&count) == 0 && count == 1 && n.by_index(0, &d) == 0 && d) return d;
  why = "NVML n/a: CUDA device " + std::to_string(cuda_device) + " not matched to an NVML device";
  return nullptr;
}

}  // namespace

UtilisationMeter::UtilisationMeter(std::optional<int> cuda_device, const std::vector<int>& other_gpus) {
  // NVML first: loading and initialising it (the first time) can take a while, which is not the
  // stretch being measured.
  auto watch = [](int index) {
    GpuReadings g;
    g.index = index;
    g.device = nvml_device_for(index, g.note);
    return g;
  };
  if (cuda_device) gpu_ = watch(*cuda_device);
  for (const int index : other_gpus) others_.push_back(watch(index));
  start_ = std::chrono::steady_clock::now();
  cpu_seconds_ = process_cpu_seconds();
  process_io(read_bytes_, rchar_);
  if (!(gpu_ && gpu_->device) && others_.empty()) return;
  // NVML's utilisation is a trailing average over its own sample period (1/6 s to 1 s): one
  // reading at finish() would describe the last moment only (for a head-only epoch, the feature
  // extraction before it). Readings every 100 ms, averaged, describe the stretch.
  try {
    sampler_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) sample();
    });
  } catch (...) {
    // No thread: finish() still takes one reading.
  }
}

UtilisationMeter::~UtilisationMeter() { stop_sampler(); }

void UtilisationMeter::stop_sampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void UtilisationMeter::GpuReadings::read() {
  if (!device) return;
  Nvml::Rates r{};
  Nvml::Memory m{};
  if (nvml().rates(device, &r) == 0) {
    busy_sum += r.gpu;
    ++busy_samples;
  }
  if (nvml().memory(device, &m) == 0) {
    const double used = static_cast<double>(m.used) / (1 << 20);
    memory_peak_mib = std::max(memory_peak_mib.value_or(0.0), used);
  }
}

std::optional<double> UtilisationMeter::GpuReadings::busy_percent() const {
  return busy_samples > 0 ? std::optional<double>(busy_sum / busy_samples) : std::nullopt;
}

void UtilisationMeter::sample() {
  if (gpu_) gpu_->read();
  for (GpuReadings& g : others_) g.read();
}

Utilisation UtilisationMeter::finish(const training::EpochTimes& t) {
  stop_sampler();
  Utilisation u;
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double wall = u.seconds > 0 ? u.seconds : 1e-9;
  std::uint64_t read_bytes = 0, rchar = 0;
  process_io(read_bytes, rchar);
  u.disk_read_mb_per_s = static_cast<double>(read_bytes - read_bytes_) / 1e6 / wall;
  u.file_read_mb_per_s = static_cast<double>(rchar - rchar_) / 1e6 / wall;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  u.cpu_percent_of_all_cores = 100.0 * (process_cpu_seconds() - cpu_seconds_) / wall / cores;
  u.data_wait_share = t.data_wait_seconds / wall;
  u.compute_share = t.compute_seconds / wall;
  u.gpu_run = gpu_.has_value();
  if (t.gpu_seconds) u.backbone_gpu_share = *t.gpu_seconds / wall;
  u.loader_threads = t.loader_threads;
  const double thread_time = wall * std::max(1, t.loader_threads);
  u.read_share = t.read_seconds / thread_time;
  u.decode_share = t.decode_seconds / thread_time;
  u.transform_share = t.transform_seconds / thread_time;
  if (t.transfer_wait_seconds) u.transfer_share = *t.transfer_wait_seconds / wall;
  std::lock_guard lock(mu_);
  sample();  // the last stretch, and the only reading of a stretch shorter than 100 ms
  if (gpu_) {
    u.gpu_busy_percent = gpu_->busy_percent();
    u.gpu_busy_samples = gpu_->busy_samples;
    u.gpu_memory_used_mib = gpu_->memory_peak_mib;
    u.gpu_note = gpu_->note;
    if (gpu_->device && gpu_->busy_samples == 0)
      u.gpu_note = "NVML gives no utilisation for this device (MIG instance?)";
  }
  for (const GpuReadings& g : others_) u.other_gpus.push_back({g.index, g.busy_percent(), g.memory_peak_mib, g.note});
  return u;
}

std::string limiting_stage(const Utilisation& u) {
  if (u.data_wait_share > 0.2) {
    // Most of the wait is the GPU's, for the copy and the augmentation on the device.
    if (u.transfer_share && *u.transfer_share > 0.5 * u.data_wait_share)
      return "the copy to the GPU and the augmentation there (the host's loader keeps up)";
    const double busiest = std::max({u.read_share, u.decode_share, u.transform_share});
    if (busiest < 0.05) return "the input pipeline, though its threads are idle: try a larger --prefetch";
    if (busiest == u.read_share)
      return u.disk_read_mb_per_s > 50 ? "reading files (disk reads): try --cache encoded or decoded"
                                       : "reading files: try --cache encoded or decoded, or more --threads";
    if (busiest == u.decode_share) return "decoding: try --cache decoded or more --threads";
    return u.gpu_run ? "resizing on the CPU: try --cache decoded or more --threads"
                     : "the augmentation on the CPU: try more --threads or --device cuda";
  }
  if (u.compute_share > 0.6) return "the model's compute (the input pipeline keeps up)";
  return "neither clearly: host-side work between batches (the head's training step, bookkeeping)";
}

std::string describe(const Utilisation& u) {
  char buf[2048];
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string gpu = "GPU not used";
  if (u.gpu_run) {
    char g[256];
    gpu = "GPU:";
    if (u.backbone_gpu_share) {
      std::snprintf(g, sizeof g, " backbone %.0f%% of wall time (CUDA events),", 100 * *u.backbone_gpu_share);
      gpu += g;
    }
    if (u.gpu_busy_percent) {
      std::snprintf(g, sizeof g,
                    " device busy %.0f%% (NVML, any process, mean of %d samples), %.0f MiB used on the device",
                    *u.gpu_busy_percent, u.gpu_busy_samples, u.gpu_memory_used_mib.value_or(0));
      gpu += g;
    } else {
      gpu += " " + (u.gpu_note.empty() ? std::string("NVML n/a") : u.gpu_note);
    }
  }
  char transfer[96] = "";
  if (u.transfer_share)
    std::snprintf(transfer, sizeof transfer, ", GPU copy + augmentation wait %.0f%% of wall time",
                  100 * *u.transfer_share);
  std::string exchange;
  if (u.exchange_share) {
    char e[96];
    std::snprintf(e, sizeof e, " | exchange between ranks %.1f%% of wall time", 100 * *u.exchange_share);
    exchange = e;
  }
  for (std::size_t i = 0; i < u.other_gpus.size(); ++i) {
    const Utilisation::OtherGpu& g = u.other_gpus[i];
    char e[160];
    if (g.busy_percent)
      std::snprintf(e, sizeof e, "%scuda:%d busy %.0f%%, %.0f MiB", i ? "; " : " | other ranks' GPUs (NVML): ", g.index,
                    *g.busy_percent, g.memory_used_mib.value_or(0));
    else
      std::snprintf(e, sizeof e, "%scuda:%d %s", i ? "; " : " | other ranks' GPUs (NVML): ", g.index,
                    g.note.empty() ? "NVML n/a" : g.note.c_str());
    exchange += e;
  }
  std::snprintf(
      buf, sizeof buf,
      "disk %.1f MB/s (files %.1f MB/s incl. page cache) | CPU %.0f%% of %u cores | %s | loader (%d threads): "
      "read %.0f%%, decode %.0f%%, %s %.0f%% of their time%s | waited for data %.0f%%, model compute %.0f%% "
      "of wall time%s -> limited by %s",
      u.disk_read_mb_per_s, u.file_read_mb_per_s, u.cpu_percent_of_all_cores, cores, gpu.c_str(), u.loader_threads,
      100 * u.read_share, 100 * u.decode_share, u.gpu_run ? "resize" : "augmentation", 100 * u.transform_share,
      transfer, 100 * u.data_wait_share, 100 * u.compute_share, exchange.c_str(), limiting_stage(u).c_str());
  return buf;
}

}  // namespace stoker::app
