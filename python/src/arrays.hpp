// Arrays over memory stoker owns, handed to Python without a copy: NumPy views for host batches
// (buffer protocol and DLPack both come with NumPy), and DLPack capsules for device batches.
// The owner keeps the memory alive (a batch's slot) for as long as any array refers to it.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "stoker/core/image.hpp"

namespace stoker::python {

namespace nb = nanobind;

// A capsule that holds `owner` until Python drops it: the owner of zero-copy arrays.
template <class T>
nb::capsule keep_alive(std::shared_ptr<T> owner) {
  auto* held = new std::shared_ptr<T>(std::move(owner));
  return nb::capsule(held, [](void* p) noexcept { delete static_cast<std::shared_ptr<T>*>(p); });
}

nb::dlpack::dtype dlpack_dtype(DType dtype);
const char* numpy_name(DType dtype);  // "uint8", "float32", "float16", "bfloat16"

// A C-contiguous host array of `shape` over `data`, owned by `owner`: a numpy.ndarray when NumPy
// has the dtype, else (bfloat16) a DLPack-only array that torch/jax.from_dlpack take.
nb::object host_view(const void* data, const std::vector<std::size_t>& shape, nb::dlpack::dtype dtype,
                     nb::handle owner);
template <class T>
nb::object host_view(const T* data, const std::vector<std::size_t>& shape, nb::handle owner) {
  return host_view(data, shape, nb::dtype<T>(), owner);
}

// The shape of a batch of `count` samples of `shape` (NHWC or NCHW).
std::vector<std::size_t> batch_shape(std::size_t count, const SampleShape& shape);

// A DLPack capsule ("dltensor") over C-contiguous memory on a device (kDLCPU = 1, kDLCUDA = 2),
// keeping `owner` alive until the consumer's deleter runs.
nb::capsule dlpack_capsule(void* data, const std::vector<std::size_t>& shape, nb::dlpack::dtype dtype, int device_type,
                           int device_id, std::shared_ptr<void> owner);

}  // namespace stoker::python
