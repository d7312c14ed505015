// Internal to the trainer and its tests: fine-tuning on the GPU trainer's host twins instead of a
// GPU — the same plan and per-element math, float32 throughout (F32) or rounding where the GPU
// stores bf16 (BF16). What the gradient check (TrainableTop::check_gpu_gradients) and the tests
// compare the GPU and the CPU backward with, on machines without a GPU.
#pragma once

#include <stoker/core/image.hpp>
#include <stoker/trainer/fine_tune.hpp>

namespace stoker::trainer::detail {

// As top.run_on_gpu(), with the host twins as the executor.
void run_on_host_twin(TrainableTop& top, int max_batch, DType storage);

}  // namespace stoker::trainer::detail
