// What the machine did during a stretch of training: disk, CPU, GPU and how long the trainer
// waited for data. Samples process counters (/proc) and, for a run on a GPU where
// libnvidia-ml.so.1 loads, NVML (sampled through the stretch, on the run's own device).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stoker/training/feature_source.hpp"

namespace stoker::app {

struct Utilisation {
  double seconds = 0;
  double disk_read_mb_per_s = 0;  // bytes the process read from storage (not the page cache)
  double file_read_mb_per_s = 0;  // bytes read through read() calls, page cache included
  double cpu_percent_of_all_cores = 0;
  bool gpu_run = false;  // the meter watched a CUDA device
  // NVML's utilisation (share of time a kernel of any process ran on the device), the mean of
  // the samples taken through the stretch; NVML averages each over its own window (up to 1 s).
  std::optional<double> gpu_busy_percent;
  int gpu_busy_samples = 0;
  std::optional<double> gpu_memory_used_mib;  // NVML, whole device, all processes: the peak seen
  std::string gpu_note;                       // why there is no NVML figure, when there is none
  // The run's own GPU work (the backbone and the copy of its features), timed with CUDA events,
  // over the wall time. Not the head: it trains on the host.
  std::optional<double> backbone_gpu_share;
  double data_wait_share = 0;  // time the trainer waited for batches / wall time
  double compute_share = 0;    // time in the backbone (or, for head-only epochs, the head) / wall time
  // The input pipeline's stages: each one's busy time over its threads' time (threads x wall).
  // The transform is the augmentation on the CPU path, the plain resize on the GPU path.
  int loader_threads = 0;
  double read_share = 0, decode_share = 0, transform_share = 0;
  // GPU path: the backbone's stream waited for a batch's copy and GPU augmentation / wall time.
  std::optional<double> transfer_share;
  // Several ranks: this rank's time in exchanges with the others (waiting for slower ranks
  // included) / wall time.
  std::optional<double> exchange_share;
  // Several ranks: the other GPUs this machine's ranks use, as NVML sees them (device-wide).
  struct OtherGpu {
    int index = 0;  // CUDA device index
    std::optional<double> busy_percent, memory_used_mib;
    std::string note;  // why there is no NVML figure, when there is none
  };
  std::vector<OtherGpu> other_gpus;
};

// Snapshots the counters at construction; finish() returns the usage since then. With a CUDA
// device, NVML is sampled on a background thread until finish().
class UtilisationMeter {
 public:
  // `other_gpus`: CUDA devices of this machine that other ranks of the run use, watched too.
  explicit UtilisationMeter(std::optional<int> cuda_device = std::nullopt, const std::vector<int>& other_gpus = {});
  ~UtilisationMeter();
  UtilisationMeter(const UtilisationMeter&) = delete;
  UtilisationMeter& operator=(const UtilisationMeter&) = delete;

  // The stretch's times as the training library measured them (waits, compute, the GPU time from
  // CUDA events, the loader's stage times).
  Utilisation finish(const training::EpochTimes& times);

 private:
  void sample();  // one NVML reading into the sums (mu_ held)
  void stop_sampler();

  std::chrono::steady_clock::time_point start_;
  double cpu_seconds_ = 0;
  std::uint64_t read_bytes_ = 0, rchar_ = 0;
  // One GPU's NVML readings over the stretch.
  struct GpuReadings {
    int index = 0;           // CUDA device index
    void* device = nullptr;  // nvmlDevice_t, null when NVML cannot watch it (`note` says why)
    std::string note;
    double busy_sum = 0;
    int busy_samples = 0;
    std::optional<double> memory_peak_mib;
    void read();  // one reading
    std::optional<double> busy_percent() const;
  };
  std::optional<GpuReadings> gpu_;   // the run's device
  std::vector<GpuReadings> others_;  // other ranks' GPUs on this machine
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread sampler_;
};

// Whether NVML (the GPUs' busy share and memory) can be read here: "N devices", or why not.
std::string nvml_status();

// One line: "disk 12.3 MB/s | CPU 85% of 2 cores | GPU … | waited for data 3% → limited by …".
std::string describe(const Utilisation& u);

// Which stage limits throughput, in words, from the shares above: when the trainer waits for data,
// the input stage with the largest share (reading, decoding, the augmentation, or the copy to the
// GPU and its augmentation there), with what to try; else the model's compute or the host's work.
std::string limiting_stage(const Utilisation& u);

}  // namespace stoker::app
