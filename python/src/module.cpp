#include <nanobind/stl/string.h>

#include "bindings.hpp"

#include "stoker/core/cuda.hpp"

NB_MODULE(_stoker, m) {
  using namespace stoker::python;
  m.doc() = "stoker's C++ pipeline; use the stoker package (stoker.Loader, stoker.keras, stoker.torch, stoker.jax)";
  bind_errors(m);
  bind_dataset(m);
  bind_augment(m);
  bind_loader(m);
  bind_gpu(m);
  m.def("cuda_device_count", &stoker::cuda_device_count, "CUDA devices usable here (0 without a GPU or CUDA)");
  m.def("cuda_unavailable_reason", &stoker::cuda_unavailable_reason, "Why cuda_device_count() is 0 ('' when not)");
  m.def(
      "stream_synchronize",
      [](std::intptr_t stream) {
        nb::gil_scoped_release unlocked;
        stoker::stream_synchronize(stream == 1 ? nullptr : reinterpret_cast<stoker::StreamHandle>(stream));
      },
      nb::arg("stream") = 1,
      "The host waits for a CUDA stream (DLPack's numbering: 1 the legacy default stream), for consumers "
      "without a CUDA library of their own.");
  // "cuda", "emulated" (the host-emulated runtime of the test builds) or "none".
  m.attr("cuda_build") = stoker::cuda_is_emulated() ? "emulated" : stoker::built_with_cuda() ? "cuda" : "none";
}
