// The emulated device (STOKER_CUDA_EMULATION): the backend's forward kernels compiled for the host,
// each launch a host loop queued on its stream (kernel_support.hpp).
#include "kernels.cu"  // NOLINT(bugprone-suspicious-include): the one source of the kernels
