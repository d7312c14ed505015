// Two small kernels for the tests of the runtime's error handling, compiled for a GPU
// (launch_probe.cu) and for the emulated device (launch_probe.cpp), so that one test runs on both.
#pragma once

#include "stoker/core/cuda.hpp"

namespace stoker::test {

// out[i] = i for i < n, with `block` threads per block and ceil(n / block) blocks, then
// STOKER_CUDA_CHECK_LAUNCH("probe_fill_kernel"): a block of more than 1024 threads or n = 0 (an
// empty grid) throws CudaError(cudaErrorInvalidConfiguration).
void launch_probe_fill(int* out, int n, int block, StreamHandle stream);

// Keeps `stream` busy for about `ms` milliseconds.
void launch_probe_sleep(int ms, StreamHandle stream);

}  // namespace stoker::test
