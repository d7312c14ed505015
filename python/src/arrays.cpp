#include "arrays.hpp"

#include <Python.h>

namespace stoker::python {

nb::dlpack::dtype dlpack_dtype(DType dtype) {
  using nb::dlpack::dtype_code;
  switch (dtype) {
    case DType::U8: return {static_cast<std::uint8_t>(dtype_code::UInt), 8, 1};
    case DType::F32: return {static_cast<std::uint8_t>(dtype_code::Float), 32, 1};
    case DType::F16: return {static_cast<std::uint8_t>(dtype_code::Float), 16, 1};
    case DType::BF16: return {static_cast<std::uint8_t>(dtype_code::Bfloat), 16, 1};
  }
  return {};
}

const char* numpy_name(DType dtype) {
  switch (dtype) {
    case DType::U8: return "uint8";
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

nb::object host_view(const void* data, const std::vector<std::size_t>& shape, nb::dlpack::dtype dtype,
                     nb::handle owner) {
  void* p = const_cast<void*>(data);  // the consumer may work in place: the slot is lent to it
  if (dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat)) {
    return nb::cast(nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr, dtype));
  }
  return nb::cast(nb::ndarray<nb::numpy>(p, shape.size(), shape.data(), owner, nullptr, dtype));
}

std::vector<std::size_t> batch_shape(std::size_t count, const SampleShape& s) {
  const auto h = static_cast<std::size_t>(s.height), w = static_cast<std::size_t>(s.width),
             c = static_cast<std::size_t>(s.channels);
  if (s.layout == Layout::NCHW) return {count, c, h, w};
  return {count, h, w, c};
}

namespace {

// DLPack's (unversioned) managed tensor, the form every consumer accepts.
struct ManagedTensor {
  nb::dlpack::dltensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};

struct Exported {
  ManagedTensor tensor{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements; given, as newer DLPack consumers expect
  std::shared_ptr<void> owner;
};

void delete_exported(ManagedTensor* t) { delete static_cast<Exported*>(t->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumed one was renamed "used_dltensor".
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* t = static_cast<ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
}

}  // namespace

nb::capsule dlpack_capsule(void* data, const std::vector<std::size_t>& shape, nb::dlpack::dtype dtype, int device_type,
                           int device_id, std::shared_ptr<void> owner) {
  auto* e = new Exported;
  e->shape.assign(shape.begin(), shape.end());
  e->strides.resize(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    e->strides[i] = stride;
    stride *= e->shape[i];
  }
  e->owner = std::move(owner);
  e->tensor.dl_tensor.data = data;
  e->tensor.dl_tensor.device = {device_type, device_id};
  e->tensor.dl_tensor.ndim = static_cast<std::int32_t>(shape.size());
  e->tensor.dl_tensor.dtype = dtype;
  e->tensor.dl_tensor.shape = e->shape.data();
  e->tensor.dl_tensor.strides = e->strides.data();
  e->tensor.manager_ctx = e;
  e->tensor.deleter = delete_exported;
  PyObject* capsule = PyCapsule_New(&e->tensor, "dltensor", capsule_destructor);
  if (capsule == nullptr) {
    delete e;
    throw nb::python_error();
  }
  return nb::steal<nb::capsule>(capsule);
}

}  // namespace stoker::python
