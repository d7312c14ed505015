// stoker's C++ error types as Python exceptions. Each is a stoker.Error and, where Python has a
// matching built-in, that too (InvalidArgument is a ValueError, IoError an OSError, BadAlloc a
// MemoryError), so both `except stoker.Error` and the usual built-in catch them.
#include <Python.h>

#include "bindings.hpp"
#include "stoker/core/error.hpp"

namespace stoker::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_dataset_error = nullptr;
PyObject* g_decode_error = nullptr;
PyObject* g_io_error = nullptr;
PyObject* g_cuda_error = nullptr;
PyObject* g_bad_alloc = nullptr;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("stoker.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

PyObject* bases(PyObject* a, PyObject* b = nullptr) {
  return b == nullptr ? PyTuple_Pack(1, a) : PyTuple_Pack(2, a, b);
}

}  // namespace

void bind_errors(nb::module_& m) {
  g_error = new_exception(m, "Error", bases(PyExc_RuntimeError), "Base class of every stoker error.");
  g_invalid_argument = new_exception(m, "InvalidArgument", bases(g_error, PyExc_ValueError),
                                     "An option or argument that cannot work; the message names it.");
  g_dataset_error = new_exception(m, "DatasetError", bases(g_error),
                                  "A dataset that cannot be used: missing folder, no images, malformed CSV.");
  g_decode_error = new_exception(m, "DecodeError", bases(g_error),
                                 "A sample's file could not be read or decoded (attributes path and reason).");
  g_io_error = new_exception(m, "IoError", bases(g_error, PyExc_OSError), "A file could not be read or written.");
  g_cuda_error = new_exception(m, "CudaError", bases(g_error),
                               "No usable CUDA device, or a CUDA call failed; the message says which.");
  g_bad_alloc = new_exception(m, "BadAlloc", bases(g_error, PyExc_MemoryError),
                              "Host or device memory could not be allocated; the message has the numbers.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const DecodeError& e) {
      // An instance with .path and .reason, so callers need not parse the message.
      nb::object err = nb::borrow(g_decode_error)(message_str(e.what()));
      err.attr("path") = fs_str(e.path());
      err.attr("reason") = message_str(e.reason().c_str());
      PyErr_SetObject(g_decode_error, err.ptr());
    } catch (const InvalidArgument& e) {
      PyErr_SetObject(g_invalid_argument, message_str(e.what()).ptr());
    } catch (const DatasetError& e) {
      PyErr_SetObject(g_dataset_error, message_str(e.what()).ptr());
    } catch (const IoError& e) {
      PyErr_SetObject(g_io_error, message_str(e.what()).ptr());
    } catch (const CudaError& e) {
      PyErr_SetObject(g_cuda_error, message_str(e.what()).ptr());
    } catch (const BadAlloc& e) {
      PyErr_SetObject(g_bad_alloc, message_str(e.what()).ptr());
    } catch (const Error& e) {
      PyErr_SetObject(g_error, message_str(e.what()).ptr());
    }
  });
}

}  // namespace stoker::python
