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

LoaderOptions loader_options(int batch_size, int height, int width, const std::string& interpolation,
                             bool keep_aspect_ratio, const std::optional<AugmentSpec>& augment,
                             const std::string& label_mode, bool shuffle, std::uint64_t seed, bool drop_last,
                             int threads, int prefetch, const std::string& on_bad_sample, const std::string& cache,
                             const std::string& cache_budget, const std::string& cache_file, bool dct_scaling);

// The labels of `count` samples as label_mode shapes them (None for LabelMode::None).
nb::object label_view(const float* labels, const std::int32_t* classes, std::size_t count, LabelMode mode,
                      int label_width, nb::handle owner);
nb::object copy_if(nb::object array, bool copy);  // array.copy() when copy, else array
nb::object stats_object(const LoaderStats& stats);
nb::list skipped_list(const std::vector<SkippedSample>& skipped);

}  // namespace stoker::python
