// The pieces of the extension module stoker._stoker, one bind_* per file; module.cpp calls them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

namespace stoker::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);   // stoker.Error and its subclasses; C++ exceptions translated
void bind_dataset(nb::module_& m);  // Dataset and its sources (folder, CSV, list)
void bind_augment(nb::module_& m);  // AugmentSpec, Augmenter (batches of arrays), fit_featurewise
void bind_loader(nb::module_& m);   // Loader and host Batch (NumPy views, DLPack)
void bind_gpu(nb::module_& m);      // GpuFeed and device batches (DLPack CUDA with streams)

// Names from the file system (paths, class folders) as Python's os.fsdecode gives them: bytes
// that are not UTF-8 become surrogate escapes (PEP 383), so that os.fsencode and open() get the
// same bytes back; fs_bytes is os.fsencode (a str, surrogate escapes included, as the bytes it
// names). message_str: a message for Python, bytes that are not UTF-8 shown as \xNN (fs_names.cpp).
nb::str fs_str(const std::string& bytes);
nb::list fs_strs(const std::vector<std::string>& names);
std::string fs_bytes(nb::handle name);
std::vector<std::string> fs_bytes(const std::vector<nb::object>& names);
nb::str message_str(const char* text);

// What the host and the device loaders' bindings share (loader_bindings.cpp).

// Ctrl-C while next() waits: the wait wakes this often and runs Python's signal handlers (they
// run in the main thread only), so KeyboardInterrupt comes within about this time, not after the
// batch. What a handler raised is left set for the caller, who raises it with the GIL back.
constexpr std::chrono::milliseconds kSignalPoll{20};
struct SignalRaised {};
void check_signals();  // takes the GIL; throws SignalRaised when a handler raised

// A loader's decode threads (and a device feed's CUDA context) are not copied by fork(): in a
// child, a loader made by the parent would wait for them forever. The child gets an error
// instead, and leaves the parent's batches and loader as they are (returning a slot or joining
// tasks there could wait forever too). `left_behind`: what stayed in the parent.
std::string forked_message(pid_t parent, const char* left_behind);

}  // namespace stoker::python
