// The probe kernels of launch_probe.hpp on a GPU.
#include <cuda_runtime.h>

#include "launch_probe.hpp"

namespace stoker::test {
namespace {

__global__ void probe_fill_kernel(int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = i;
}

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void probe_sleep_kernel(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) __nanosleep(10000);
}

}  // namespace

void launch_probe_fill(int* out, int n, int block, StreamHandle stream) {
  const unsigned grid = block > 0 ? static_cast<unsigned>((n + block - 1) / block) : 0u;
  probe_fill_kernel<<<grid, static_cast<unsigned>(block), 0, stream>>>(out, n);
  STOKER_CUDA_CHECK_LAUNCH("probe_fill_kernel");
}

void launch_probe_sleep(int ms, StreamHandle stream) {
  probe_sleep_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ms) * 1000000ULL);
  STOKER_CUDA_CHECK_LAUNCH("probe_sleep_kernel");
}

}  // namespace stoker::test
