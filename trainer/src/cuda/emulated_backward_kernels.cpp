// The emulated device (STOKER_CUDA_EMULATION): the trainer's backward kernels compiled for the
// host, each launch a host loop queued on its stream (kernel_support.hpp).
#include "backward_kernels.cu"  // NOLINT(bugprone-suspicious-include): the one source of the kernels
