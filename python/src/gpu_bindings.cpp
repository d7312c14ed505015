// GpuFeed and its device batches. A device batch's images are a DLPack producer on kDLCUDA:
// __dlpack__(stream=s) makes the consumer's stream wait for the batch's ready event (no host
// sync) and remembers s, and the slot is reused only after the work enqueued on s by the time
// the last reference is dropped has completed (DeviceBatch::release). Labels and sample ids come
// as host arrays (the feed keeps host copies) and as device arrays.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "loader_options.hpp"
#include "stoker/augment/cuda_augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/gpu_feed.hpp"

namespace stoker::python {
namespace {

constexpr int kDLCUDA = 2;

// The DLPack stream argument as a stream handle: None and 1 are the legacy default stream, 2 the
// per-thread default stream (both of the feed's device, whatever device is current), -1 asks for
// no synchronisation, anything else is a cudaStream_t.
std::optional<StreamHandle> consumer_stream(const std::optional<std::intptr_t>& stream) {
  if (!stream || *stream == 1) return StreamHandle{nullptr};
  if (*stream == -1) return std::nullopt;
  if (*stream == 0) throw InvalidArgument("__dlpack__: stream=0 is ambiguous in DLPack; pass 1 for the legacy default");
  if (*stream == 2) return per_thread_default_stream();
  return reinterpret_cast<StreamHandle>(*stream);
}

// Device memory of one batch, as a DLPack producer. Holds the batch: the slot stays lent while
// this object or any tensor made from it is alive.
class DeviceArray {
 public:
  DeviceArray(std::shared_ptr<DeviceBatch> batch, void* data, std::vector<std::size_t> shape, nb::dlpack::dtype dtype,
              int device)
      : batch_(std::move(batch)), data_(data), shape_(std::move(shape)), dtype_(dtype), device_(device) {}

  nb::capsule dlpack(std::optional<std::intptr_t> stream, nb::handle max_version, nb::handle dl_device,
                     std::optional<bool> copy) const {
    (void)max_version;  // an unversioned capsule: what every consumer accepts
    if (copy && *copy) throw nb::buffer_error("stoker device batches are exported without a copy (copy=True)");
    if (!dl_device.is_none()) {
      auto [type, id] = nb::cast<std::pair<int, int>>(dl_device);
      if (type != kDLCUDA || id != device_) throw nb::buffer_error("stoker device batches stay on their device");
    }
    if (auto s = consumer_stream(stream)) batch_->wait_on(*s);
    return dlpack_capsule(data_, shape_, dtype_, kDLCUDA, device_, batch_);
  }

  std::pair<int, int> dlpack_device() const { return {kDLCUDA, device_}; }
  const std::vector<std::size_t>& shape() const { return shape_; }
  std::uintptr_t data_ptr() const { return reinterpret_cast<std::uintptr_t>(data_); }

 private:
  std::shared_ptr<DeviceBatch> batch_;
  void* data_;
  std::vector<std::size_t> shape_;
  nb::dlpack::dtype dtype_;
  int device_;
};

struct GpuBatch {
  nb::object images;         // DeviceArray
  nb::object labels;         // host, as label_mode shapes them
  nb::object sample_ids;     // host int64
  nb::object padding;        // host bool: pads this rank's share (Batch::padding)
  nb::object device_labels;  // DeviceArray float32 (N, label width)
  int size = 0;
  std::uint64_t epoch = 0;
  std::int64_t index = 0;
};

class PyGpuFeed {
 public:
  PyGpuFeed(Dataset dataset, LoaderOptions loader, int device, int depth, std::optional<AugmentSpec> augment,
            const std::string& dtype)
      : rank(loader.sharding ? loader.sharding->rank : 0),
        world_size(loader.sharding ? loader.sharding->world_size : 1),
        device_(device),
        label_mode_(loader.label_mode) {
    require_cuda_device("stoker.Loader(device='cuda')");
    if (device < 0 || device >= cuda_device_count()) {
      throw InvalidArgument("device cuda:" + std::to_string(device) + " does not exist (" +
                            std::to_string(cuda_device_count()) + " CUDA devices)");
    }
    if (!dtype.empty() && dtype != "uint8" && dtype != "float32" && dtype != "float16" && dtype != "bfloat16") {
      throw InvalidArgument("dtype must be uint8, float32, float16 or bfloat16, received '" + dtype + "'");
    }
    GpuFeedOptions fo;
    fo.depth = depth;
    if (augment) {
      // The loader resizes to the output size (uint8); the CUDA executor warps on the GPU.
      auto spec = *augment;
      std::optional<DType> out;  // the executor's output: the spec's, or half precision from float32
      if (dtype == "float16" || dtype == "bfloat16") {
        out = dtype == "float16" ? DType::F16 : DType::BF16;
        spec.dtype = DType::F32;
      }
      loader.image_height = spec.height;
      loader.image_width = spec.width;
      loader.transform.reset();
      fo.stage = std::make_shared<CudaAugmenter>(std::make_shared<const Augmenter>(spec), out);
    } else if (!dtype.empty() && dtype != "uint8") {
      throw InvalidArgument("dtype '" + dtype + "' on the GPU needs an augmentation (augment=...) to convert");
    }
    // The feed lives on `device`; the calling thread's current device (which PyTorch shares) is
    // left as it was (GpuFeedOptions::device).
    fo.device = device;
    nb::gil_scoped_release unlocked;
    feed_ = std::make_shared<GpuFeed>(std::move(dataset), std::move(loader), fo);
  }
  ~PyGpuFeed() {
    if (::getpid() != pid_) {
      new std::shared_ptr<GpuFeed>(std::move(feed_));  // a child of fork(): see forked_message()
      return;
    }
    close();
    nb::gil_scoped_release unlocked;
    feed_.reset();
  }

  // Stops the feed; the object lives on until this one goes, as a thread may still be in one of
  // its calls (next() waiting in another thread returns with an error saying it was closed).
  void close() {
    if (!feed_ || closed_) return;
    closed_ = true;
    if (::getpid() != pid_) return;
    const std::shared_ptr<GpuFeed> held = feed_;
    nb::gil_scoped_release unlocked;  // waits for the feed's streams
    held->shutdown();
  }

  void begin_epoch(std::uint64_t epoch) {
    const std::shared_ptr<GpuFeed> held = hold();
    try {
      nb::gil_scoped_release unlocked;  // the feeder's batch and the abandoned epoch's samples
      held->begin_epoch(epoch, check_signals, kSignalPoll);
    } catch (const SignalRaised&) {
      throw nb::python_error();
    } catch (const Error&) {
      if (closed_) throw Error("the loader was closed");
      throw;
    }
  }

  std::optional<GpuBatch> next() {
    const std::shared_ptr<GpuFeed> feed = hold();  // close() from another thread cannot free it
    std::optional<DeviceBatch> b;
    try {
      nb::gil_scoped_release unlocked;
      b = feed->next(check_signals, kSignalPoll);
    } catch (const SignalRaised&) {
      throw nb::python_error();  // KeyboardInterrupt, or what the handler raised
    } catch (const Error&) {
      if (closed_) throw Error("the loader was closed while next() waited for a batch");
      throw;
    }
    if (!b) return std::nullopt;
    auto held = std::make_shared<DeviceBatch>(std::move(*b));
    const auto n = static_cast<std::size_t>(held->size());
    const auto width = static_cast<std::size_t>(held->label_width());
    GpuBatch out;
    out.size = held->size();
    out.epoch = held->epoch();
    out.index = held->index();
    out.images = nb::cast(DeviceArray(held, held->mutable_data(), batch_shape(n, held->sample_shape()),
                                      dlpack_dtype(held->dtype()), device_));
    out.device_labels =
        nb::cast(DeviceArray(held, const_cast<float*>(held->device_labels()), {n, width}, nb::dtype<float>(), device_));
    nb::capsule owner = keep_alive(held);
    out.sample_ids = host_view(held->sample_ids().data(), {n}, owner);
    out.padding = host_view(reinterpret_cast<const bool*>(held->padding().data()), {n}, owner);
    if (label_mode_ == LabelMode::Sparse) {
      // The feed keeps sparse labels as floats: the int32 class array the host batches have.
      nb::object f = host_view(held->labels().data(), {n}, owner);
      out.labels = f.attr("astype")("int32");
    } else {
      out.labels = label_view(held->labels().data(), nullptr, n, label_mode_, held->label_width(), owner);
    }
    return out;
  }

  GpuFeed& live() { return *hold(); }
  // Called with the GIL held, as close() is.
  const std::shared_ptr<GpuFeed>& hold() const {
    if (::getpid() != pid_) throw Error(forked_message(pid_, "its decode threads and CUDA context"));
    if (!feed_ || closed_) throw Error("the loader was closed");
    return feed_;
  }

  const int rank;  // the loader's sharding, as resolved from the settings or the environment
  const int world_size;

 private:
  int device_;
  LabelMode label_mode_;
  bool closed_ = false;
  pid_t pid_ = ::getpid();
  std::shared_ptr<GpuFeed> feed_;
};

}  // namespace

void bind_gpu(nb::module_& m) {
  nb::class_<DeviceArray>(m, "DeviceArray", "A batch array in device memory, exported through DLPack.")
      .def("__dlpack__", &DeviceArray::dlpack, nb::kw_only(), nb::arg("stream") = nb::none(),
           nb::arg("max_version") = nb::none(), nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack_device__", &DeviceArray::dlpack_device)
      .def_prop_ro("shape", [](const DeviceArray& a) { return nb::tuple(nb::cast(a.shape())); })
      .def_prop_ro("data_ptr", &DeviceArray::data_ptr);

  nb::class_<GpuBatch>(m, "DeviceBatch", "A batch in device memory (images, device_labels) with host labels.")
      .def_ro("images", &GpuBatch::images)
      .def_ro("labels", &GpuBatch::labels)
      .def_ro("sample_ids", &GpuBatch::sample_ids)
      .def_ro("padding", &GpuBatch::padding)
      .def_ro("device_labels", &GpuBatch::device_labels)
      .def_ro("epoch", &GpuBatch::epoch)
      .def_ro("index", &GpuBatch::index)
      .def("__len__", [](const GpuBatch& b) { return b.size; });

  nb::class_<PyGpuFeed> feed(m, "GpuFeed", "The GPU feed (use stoker.Loader(device='cuda:N')).");
  feed.def(
          "__init__",
          [](PyGpuFeed* self, const Dataset& dataset, const nb::dict& settings, int device, int depth,
             const std::string& dtype) {
            std::optional<AugmentSpec> augment;
            LoaderOptions loader = loader_options(settings, &augment);
            new (self) PyGpuFeed(dataset, std::move(loader), device, depth, augment, dtype);
          },
          nb::arg("dataset"), nb::arg("settings"), nb::arg("device") = 0, nb::arg("depth") = 3, nb::arg("dtype") = "")
      .def("begin_epoch", &PyGpuFeed::begin_epoch, nb::arg("epoch"))
      .def("next", &PyGpuFeed::next)
      .def("close", &PyGpuFeed::close)
      .def("__len__", [](PyGpuFeed& f) { return f.live().batches_per_epoch(); })
      .def("describe", [](PyGpuFeed& f) { return f.live().describe(); })
      .def_prop_ro("sharding", [](PyGpuFeed& f) { return nb::make_tuple(f.rank, f.world_size); })
      .def("stats", [](PyGpuFeed& f) { return stats_object(f.live().stats().loader); });
  def_state_and_resume(feed);
}

}  // namespace stoker::python
