// The probe kernels of launch_probe.hpp on the emulated device: host functions launched with the
// grid and block a GPU launch would get, which the emulated launch checks as CUDA does.
#include <chrono>
#include <thread>

#include "launch_probe.hpp"
#include "stoker/core/detail/cuda_emulation.hpp"

namespace stoker::test {

void launch_probe_fill(int* out, int n, int block, StreamHandle stream) {
  const unsigned grid = block > 0 ? static_cast<unsigned>((n + block - 1) / block) : 0u;
  emulation::launch(stream, {grid}, {static_cast<unsigned>(block)}, [=] {
    for (int i = 0; i < n; ++i) out[i] = i;
  });
  STOKER_CUDA_CHECK_LAUNCH("probe_fill_kernel");
}

void launch_probe_sleep(int ms, StreamHandle stream) {
  emulation::launch(stream, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
  STOKER_CUDA_CHECK_LAUNCH("probe_sleep_kernel");
}

}  // namespace stoker::test
