// Names that come from the file system cross into Python as os.fsdecode / os.fsencode carry them,
// and messages that quote such names stay readable (bindings.hpp).
#include "bindings.hpp"

namespace stoker::python {

nb::str fs_str(const std::string& bytes) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
  if (!s) throw nb::python_error();
  return nb::steal<nb::str>(s);
}

nb::list fs_strs(const std::vector<std::string>& names) {
  nb::list out;
  for (const std::string& n : names) out.append(fs_str(n));
  return out;
}

std::string fs_bytes(nb::handle name) {
  const nb::object text = nb::str(name);
  PyObject* b = PyUnicode_EncodeFSDefault(text.ptr());
  if (!b) throw nb::python_error();
  const nb::object bytes = nb::steal(b);
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw nb::python_error();
  return std::string(data, static_cast<std::size_t>(size));
}

std::vector<std::string> fs_bytes(const std::vector<nb::object>& names) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const nb::object& n : names) out.push_back(fs_bytes(n));
  return out;
}

nb::str message_str(const char* text) {
  PyObject* s =
      PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::char_traits<char>::length(text)), "backslashreplace");
  if (!s) throw nb::python_error();
  return nb::steal<nb::str>(s);
}

}  // namespace stoker::python
