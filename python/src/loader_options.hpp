// What the host loader's and the GPU feed's bindings share: LoaderOptions from Python's keyword
// arguments, label arrays per label mode, the statistics and skip lists as Python objects.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoker/augment/spec.hpp"
#include "stoker/pipeline/loader.hpp"

namespace stoker::python {

namespace nb = nanobind;

// LoaderOptions from the settings dict stoker.Loader builds (every key named in loader_options.cpp
// must be there; an unknown key is an InvalidArgument naming it). `augment` (an AugmentSpec or None)
// becomes the loader's transform unless `augment_out` takes it (the GPU feed runs it on the GPU).
LoaderOptions loader_options(const nb::dict& settings, std::optional<AugmentSpec>* augment_out = nullptr);

// The labels of `count` samples as label_mode shapes them (None for LabelMode::None).
nb::object label_view(const float* labels, const std::int32_t* classes, std::size_t count, LabelMode mode,
                      int label_width, nb::handle owner);
nb::object copy_if(nb::object array, bool copy);  // array.copy() when copy, else array
nb::object stats_object(const LoaderStats& stats);
nb::list skipped_list(const std::vector<SkippedSample>& skipped);

}  // namespace stoker::python
