// The pieces of the extension module stoker._stoker, one bind_* per file; module.cpp calls them.
#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);   // stoker.Error and its subclasses; C++ exceptions translated
void bind_dataset(nb::module_& m);  // Dataset and its sources (folder, CSV, list)
void bind_augment(nb::module_& m);  // AugmentSpec, Augmenter (batches of arrays), fit_featurewise
void bind_loader(nb::module_& m);   // Loader and host Batch (NumPy views, DLPack)
void bind_gpu(nb::module_& m);      // GpuFeed and device batches (DLPack CUDA with streams)

}  // namespace stoker::python
