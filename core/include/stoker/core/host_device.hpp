// STOKER_HOST_DEVICE marks functions that compile for the host and, under nvcc, for the GPU too:
// the per-element math that a CUDA kernel and its CPU reference share.
#pragma once

#if defined(__CUDACC__)
#define STOKER_HOST_DEVICE __host__ __device__
#else
#define STOKER_HOST_DEVICE
#endif
