// What the machine did during a stretch of training: disk, CPU, GPU and how long the trainer
// waited for data. Samples process counters (/proc) and, where libnvidia-ml.so.1 loads, NVML.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace stoker::app {

struct Utilisation {
  double seconds = 0;
  double disk_read_mb_per_s = 0;     // bytes the process read from storage (not the page cache)
  double file_read_mb_per_s = 0;     // bytes read through read() calls, page cache included
  double cpu_percent_of_all_cores = 0;
  std::optional<double> gpu_busy_percent;     // NVML utilisation, when NVML loads
  std::optional<double> gpu_memory_used_mib;  // NVML, whole device
  double data_wait_share = 0;        // time the trainer waited for batches / wall time
  double compute_share = 0;          // time in the model (forward + head) / wall time
};

// Snapshots the counters at construction; finish() returns the usage since then.
class UtilisationMeter {
 public:
  UtilisationMeter();
  Utilisation finish(double data_wait_seconds, double compute_seconds) const;

 private:
  std::chrono::steady_clock::time_point start_;
  double cpu_seconds_ = 0;
  std::uint64_t read_bytes_ = 0, rchar_ = 0;
};

// One line: "disk 12.3 MB/s | CPU 85% of 2 cores | GPU n/a | waited for data 3% → limited by …".
std::string describe(const Utilisation& u);

// Which stage limits throughput, in words, from the shares above.
std::string limiting_stage(const Utilisation& u);

}  // namespace stoker::app
