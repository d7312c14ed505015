// What the host loader's and the GPU feed's bindings share: LoaderOptions from Python's keyword
// arguments, label arrays per label mode, the statistics and skip lists as Python objects.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "stoker/augment/spec.hpp"
#include "stoker/pipeline/loader.hpp"

namespace stoker::python {

namespace nb = nanobind;

// LoaderOptions from the settings dict stoker.Loader builds: its keys are the settings' table's
// names (stoker/pipeline/loader_settings.hpp; an unknown key is an InvalidArgument naming it), a
// None value leaves a setting at its default, and loader_options_from() converts them (defined in
// loader_bindings.cpp). `augment` (an AugmentSpec or None) becomes the loader's transform unless
// `augment_out` takes it (the GPU feed runs it on the GPU). `sample_weights` (a 1-D float64 array
// or a sequence of numbers), `num_samples` and `replacement` are LoaderOptions::sampling, checked
// by the Loader (plan.hpp's check_weighted_sampling).
LoaderOptions loader_options(const nb::dict& settings, std::optional<AugmentSpec>* augment_out = nullptr);

// The labels of `count` samples as label_mode shapes them (None for LabelMode::None).
nb::object label_view(const float* labels, const std::int32_t* classes, std::size_t count, LabelMode mode,
                      int label_width, nb::handle owner);
nb::object copy_if(nb::object array, bool copy);  // array.copy() when copy, else array
nb::object stats_object(const LoaderStats& stats);
nb::list skipped_list(const std::vector<SkippedSample>& skipped);

// state() and resume(state) on a Python class whose objects reach a Loader or a GpuFeed through
// live(): the position as LoaderState's one line of text, resumed without the GIL.
template <typename Py, typename... Extra>
void def_state_and_resume(nb::class_<Py, Extra...>& cls) {
  cls.def(
         "state", [](Py& self) { return self.live().state().to_string(); },
         "The state after the batches delivered so far (LoaderState::to_string)")
      .def(
          "resume",
          [](Py& self, const std::string& state) {
            const LoaderState st = LoaderState::parse(state);
            try {
              nb::gil_scoped_release unlocked;  // waits for the abandoned epoch's samples (Ctrl-C polled)
              self.live().resume(st, check_signals, kSignalPoll);
            } catch (const SignalRaised&) {
              throw nb::python_error();
            }
          },
          nb::arg("state"), "Starts the saved epoch at its next batch");
}

}  // namespace stoker::python
