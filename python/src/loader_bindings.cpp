// Loader and its host batches. A batch's arrays are views of the loader's batch buffer (zero
// copy: NumPy's buffer protocol and DLPack both expose the same memory); the buffer returns to
// the pool when the last array that refers to it is gone. Every call that waits for C++ work
// releases the GIL: the loader's own threads decode and augment, Python threads run meanwhile.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include <oneapi/tbb/info.h>
#include "arrays.hpp"
#include "bindings.hpp"

#include "loader_options.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/pipeline/loader_settings.hpp"

namespace stoker::python {

namespace {

// A keyword argument's value as the settings' table spells it (loader_settings.hpp).
std::string setting_text(const std::string& name, nb::handle value) {
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value) ? "true" : "false";
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (nb::isinstance<nb::int_>(value) || nb::hasattr(value, "__index__")) {
    return nb::cast<std::string>(nb::str(nb::int_(value)));
  }
  if (nb::isinstance<nb::tuple>(value) || nb::isinstance<nb::list>(value)) {  // image_size=(H, W)
    std::string out;
    for (nb::handle v : value) out += (out.empty() ? "" : ",") + setting_text(name, v);
    return out;
  }
  if (nb::hasattr(value, "__fspath__")) return nb::cast<std::string>(nb::str(value.attr("__fspath__")()));
  throw InvalidArgument(name + ": a " + std::string(nb::type_name(value.type()).c_str()) +
                        " is not a value of this setting");
}

// sample_weights: a 1-D float64 array (what stoker.Loader passes) or any sequence of numbers.
std::vector<double> weights_from(nb::handle value) {
  using Weights = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  Weights array;
  if (nb::try_cast(value, array, false)) return {array.data(), array.data() + array.shape(0)};
  std::vector<double> out;
  if (nb::isinstance<nb::str>(value) || !nb::hasattr(value, "__iter__")) {
    throw InvalidArgument("sample_weights: a " + std::string(nb::type_name(value.type()).c_str()) +
                          " is not a sequence of numbers (one weight per sample)");
  }
  for (nb::handle v : value) {
    double d = 0;
    if (!nb::try_cast(v, d)) {
      throw InvalidArgument("sample_weights: weight " + std::to_string(out.size()) + " is a " +
                            std::string(nb::type_name(v.type()).c_str()) + ", not a number");
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace

LoaderOptions loader_options(const nb::dict& settings, std::optional<AugmentSpec>* augment_out) {
  LoaderSettingValues given;
  std::optional<AugmentSpec> augment;
  WeightedSampling sampling;
  for (auto [key, value] : settings) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "augment") {
      if (!value.is_none()) augment = nb::cast<AugmentSpec>(value);
    } else if (k == "sample_weights") {  // per-sample data, not a setting of the table
      if (!value.is_none()) sampling.weights = weights_from(value);
    } else if (k == "num_samples") {
      if (!value.is_none()) {
        const auto m = nb::cast<std::int64_t>(nb::int_(value));
        if (m < 1) throw InvalidArgument("num_samples must be >= 1, received " + std::to_string(m));
        sampling.num_samples = static_cast<std::size_t>(m);
      }
    } else if (k == "replacement") {
      if (!value.is_none()) sampling.replacement = nb::cast<bool>(value);
    } else if (!value.is_none()) {
      given.emplace(k, setting_text(k, value));
    }
  }
  LoaderOptions o = loader_options_from(given, kWherePython);
  o.sampling = std::move(sampling);
  if (augment_out != nullptr) {
    *augment_out = augment;
  } else if (augment) {
    o.transform = std::make_shared<const Augmenter>(*augment);
  }
  return o;
}

nb::object label_view(const float* labels, const std::int32_t* classes, std::size_t count, LabelMode mode,
                      int label_width, nb::handle owner) {
  switch (mode) {
    case LabelMode::None: return nb::none();
    case LabelMode::Sparse: return host_view(classes, {count}, owner);
    case LabelMode::Binary: return host_view(labels, {count}, owner);
    case LabelMode::Categorical: return host_view(labels, {count, static_cast<std::size_t>(label_width)}, owner);
  }
  return nb::none();
}

nb::object copy_if(nb::object array, bool copy) {
  if (!copy || array.is_none()) return array;
  return array.attr("copy")();
}

void check_signals() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw SignalRaised{};
}

std::string forked_message(pid_t parent, const char* left_behind) {
  return "this Loader was made in process " + std::to_string(parent) + " and cannot be used in process " +
         std::to_string(::getpid()) + ", a child made by fork() (" + left_behind +
         " stayed in the parent): make the Loader in the child (a DataLoader's worker_init_fn, or after the "
         "fork), or start children with 'spawn'";
}

namespace {

// What Python sees of a batch. The arrays own the slot; this object only refers to them.
struct HostBatch {
  nb::object images, labels, classes, sample_ids, padding;
  int size = 0;
  std::uint64_t epoch = 0;
  std::int64_t index = 0;
  std::shared_ptr<const Dataset> dataset;
};

// Page-locked batch buffers when asked for and possible: a build with CUDA (or the emulated
// device) and a device to pin for. Otherwise null (pageable memory); the caller says so.
std::shared_ptr<HostAllocator> pinned_allocator_if(bool pin_memory) {
  if (!pin_memory || !built_with_cuda() || cuda_device_count() == 0) return nullptr;
  return std::make_shared<PinnedHostAllocator>();
}

// The owner of a batch's arrays: the Batch, given back when the last array goes, except in a
// child of fork().
nb::capsule batch_owner(std::shared_ptr<Batch> batch) {
  struct Owner {
    std::shared_ptr<Batch> batch;
    pid_t pid;
  };
  auto* held = new Owner{std::move(batch), ::getpid()};
  return nb::capsule(held, [](void* p) noexcept {
    auto* o = static_cast<Owner*>(p);
    if (o->pid == ::getpid()) delete o;  // in a child of fork(): left alone
  });
}

class PyLoader {
 public:
  PyLoader(Dataset dataset, LoaderOptions options, bool copy, bool pin_memory)
      : dataset_(std::make_shared<const Dataset>(dataset)), copy_(copy) {
    options.allocator = pinned_allocator_if(pin_memory);
    pinned_ = options.allocator != nullptr;
    nb::gil_scoped_release unlocked;  // allocates every batch buffer; may read a cache file
    loader_ = std::make_shared<Loader>(std::move(dataset), std::move(options));
  }
  ~PyLoader() {
    if (::getpid() != pid_) {
      new std::shared_ptr<Loader>(std::move(loader_));  // a child of fork(): see forked_message()
      return;
    }
    close();
    nb::gil_scoped_release unlocked;
    loader_.reset();
  }

  // Stops the loader; the object lives on until this one goes, as a thread may still be in one
  // of its calls (next() waiting in another thread returns with an error saying it was closed).
  void close() {
    if (!loader_ || closed_) return;
    closed_ = true;
    if (::getpid() != pid_) return;
    const std::shared_ptr<Loader> held = loader_;
    nb::gil_scoped_release unlocked;  // joins the decode tasks
    held->close();
  }

  void begin_epoch(std::uint64_t epoch) {
    const std::shared_ptr<Loader> held = hold();
    try {
      nb::gil_scoped_release unlocked;  // waits for the abandoned epoch's samples being decoded
      held->begin_epoch(epoch, check_signals, kSignalPoll);
    } catch (const SignalRaised&) {
      throw nb::python_error();
    }
  }

  std::optional<HostBatch> next() {
    const std::shared_ptr<Loader> loader = hold();  // close() from another thread cannot free it
    std::optional<Batch> b;
    try {
      nb::gil_scoped_release unlocked;
      b = loader->next(check_signals, kSignalPoll);
    } catch (const SignalRaised&) {
      throw nb::python_error();  // KeyboardInterrupt, or what the handler raised
    }
    if (!b) return std::nullopt;
    auto held = std::make_shared<Batch>(std::move(*b));
    nb::capsule owner = batch_owner(held);
    const auto n = static_cast<std::size_t>(held->size());
    HostBatch out;
    out.size = held->size();
    out.epoch = held->epoch();
    out.index = held->index();
    out.dataset = dataset_;
    out.images = copy_if(host_view(held->pixels(), batch_shape(n, held->sample_shape()),
                                   dlpack_dtype(held->sample_shape().dtype), owner),
                         copy_);
    out.labels = copy_if(label_view(held->labels().data(), held->classes().data(), n, loader->options().label_mode,
                                    held->label_width(), owner),
                         copy_);
    out.classes = copy_if(host_view(held->classes().data(), {n}, owner), copy_);
    out.sample_ids = copy_if(host_view(held->sample_ids().data(), {n}, owner), copy_);
    out.padding = copy_if(host_view(reinterpret_cast<const bool*>(held->padding().data()), {n}, owner), copy_);
    return out;
  }

  Loader& live() { return *hold(); }
  // Called with the GIL held, as close() is.
  const std::shared_ptr<Loader>& hold() const {
    if (::getpid() != pid_) throw Error(forked_message(pid_, "its decode threads"));
    if (!loader_ || closed_) throw Error("the loader was closed");
    return loader_;
  }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  bool pinned() const noexcept { return pinned_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  bool copy_;
  bool pinned_ = false;
  bool closed_ = false;
  pid_t pid_ = ::getpid();
  std::shared_ptr<Loader> loader_;
};

nb::dict stats_dict(const LoaderStats& s) {
  nb::dict d;
  d["files_read"] = s.files_read;
  d["bytes_read"] = s.bytes_read;
  d["samples_decoded"] = s.samples_decoded;
  d["samples_skipped"] = s.samples_skipped;
  d["batches_delivered"] = s.batches_delivered;
  d["read_seconds"] = s.read_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["transform_seconds"] = s.transform_seconds;
  d["consumer_wait_seconds"] = s.consumer_wait_seconds;
  d["cache_hits"] = s.cache_hits;
  d["cache_misses"] = s.cache_misses;
  d["cache_bytes_held"] = s.cache_bytes_held;
  d["samples_decoded_in_part"] = s.samples_decoded_in_part;
  return d;
}

}  // namespace

nb::object stats_object(const LoaderStats& s) { return stats_dict(s); }

nb::list skipped_list(const std::vector<SkippedSample>& skipped) {
  nb::list out;
  for (const auto& s : skipped) out.append(nb::make_tuple(s.sample_id, fs_str(s.path), message_str(s.reason.c_str())));
  return out;
}

void bind_loader(nb::module_& m) {
  m.def(
      "loader_settings",
      [] {
        nb::list out;
        for (const LoaderSetting& s : stoker::loader_settings()) {
          nb::dict d;
          d["name"] = std::string(s.name);
          d["type"] = std::string(setting_type_name(s.type));
          d["default"] = s.may_be_unset() ? nb::none() : nb::cast(std::string(s.default_value));
          d["help"] = std::string(s.help);
          nb::list choices;
          for (const auto c : s.choices) choices.append(std::string(c));
          d["choices"] = choices;
          const bool ranged = s.type == SettingType::Integer || s.type == SettingType::ImageSize;
          d["min"] = ranged ? nb::cast(s.min) : nb::none();
          d["max"] = ranged && s.max != std::numeric_limits<std::int64_t>::max() ? nb::cast(s.max) : nb::none();
          d["flag"] = s.flag();
          nb::dict differences;
          for (const auto& diff : s.differences) {
            differences[std::string(diff.where).c_str()] =
                nb::make_tuple(std::string(diff.value), std::string(diff.why));
          }
          d["differences"] = differences;
          out.append(d);
        }
        return out;
      },
      "The loader's settings as one table describes them (stoker/pipeline/loader_settings.hpp): dicts of "
      "name, type, default (text; None: unset), help, choices, min, max, flag (the command's) and "
      "differences ({where: (default, why)}: the defaults that differ on purpose).");
  m.def(
      "resolve_sharding",
      [](std::optional<int> rank, std::optional<int> world_size) {
        const Sharding s = stoker::resolve_sharding(rank, world_size);
        return nb::make_tuple(s.rank, s.world_size);
      },
      nb::arg("rank").none() = nb::none(), nb::arg("world_size").none() = nb::none(),
      "(rank, world_size) as a loader resolves them: both given, or neither (then the launcher's "
      "environment: RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, else 0 of 1).");
  m.def(
      "default_threads", [] { return tbb::info::default_concurrency(); },
      "The decode threads of threads=0: the cores this process may use (affinity mask, cgroup quota).");
  nb::class_<HostBatch>(m, "Batch", "A batch in host memory; its arrays are views of the loader's buffer.")
      .def_ro("images", &HostBatch::images, "Pixels: (N, H, W, C) or (N, C, H, W), the augmentation's dtype.")
      .def_ro("labels", &HostBatch::labels,
              "Per label_mode: int32 (N,) sparse, float32 (N,) binary, (N, K) categorical")
      .def_ro("classes", &HostBatch::classes, "Class index per sample, int32 (-1: unlabelled)")
      .def_ro("sample_ids", &HostBatch::sample_ids, "Index of each sample in the dataset, int64")
      .def_ro("padding", &HostBatch::padding,
              "True for a sample that only pads this rank's share to the common count (count it once)")
      .def_ro("epoch", &HostBatch::epoch)
      .def_ro("index", &HostBatch::index, "Position of the batch in its epoch")
      .def_prop_ro("paths",  // "shard.tar:member" for a sample of a tar shard
                   [](const HostBatch& b) {
                     nb::list paths;
                     auto ids = nb::cast<std::vector<std::int64_t>>(b.sample_ids.attr("tolist")());
                     for (auto id : ids)
                       paths.append(fs_str(sample_name(b.dataset->samples[static_cast<std::size_t>(id)])));
                     return paths;
                   })
      .def("__len__", [](const HostBatch& b) { return b.size; })
      .def("__repr__", [](const HostBatch& b) {
        return "<stoker.Batch " + std::to_string(b.index) + " of epoch " + std::to_string(b.epoch) + ": " +
               std::to_string(b.size) + " samples>";
      });

  nb::class_<PyLoader> loader(m, "Loader", "The C++ loader (use stoker.Loader).");
  loader
      .def(
          "__init__",
          [](PyLoader* self, const Dataset& dataset, const nb::dict& settings, bool copy, bool pin_memory) {
            new (self) PyLoader(dataset, loader_options(settings), copy, pin_memory);
          },
          nb::arg("dataset"), nb::arg("settings"), nb::arg("copy") = false, nb::arg("pin_memory") = false,
          "pin_memory: batch buffers in page-locked memory when the build has CUDA and a device is "
          "visible (see `pinned`), else pageable memory.")
      .def("begin_epoch", &PyLoader::begin_epoch, nb::arg("epoch"))
      .def("next", &PyLoader::next, "The next batch of the epoch, or None at its end (waits without the GIL).")
      .def("close", &PyLoader::close,
           "Stops decoding and joins the loader's threads; batches still held stay valid. A next() waiting in "
           "another thread raises stoker.Error saying the loader was closed, as every later call does.")
      .def("__len__", [](PyLoader& l) { return l.live().batches_per_epoch(); })
      .def_prop_ro("dataset", [](const PyLoader& l) { return *l.dataset(); })
      .def_prop_ro("threads", [](PyLoader& l) { return l.live().threads(); })
      .def_prop_ro("buffer_bytes", [](PyLoader& l) { return l.live().buffer_bytes(); })
      .def_prop_ro("pinned", &PyLoader::pinned, "True when the batch buffers are page-locked (pin_memory)")
      .def_prop_ro("sample_shape", [](PyLoader& l) { return batch_shape(1, l.live().sample_shape()); })
      .def_prop_ro("dtype", [](PyLoader& l) { return std::string(numpy_name(l.live().sample_shape().dtype)); })
      .def_prop_ro("label_width", [](PyLoader& l) { return l.live().label_width(); })
      .def_prop_ro("samples_per_epoch", [](PyLoader& l) { return l.live().samples_per_epoch(); })
      .def_prop_ro(
          "sharding",
          [](PyLoader& l) {
            const Sharding& s = l.live().sharding();
            return nb::make_tuple(s.rank, s.world_size);
          },
          "(rank, world_size) as resolved at construction")
      .def("stats", [](PyLoader& l) { return stats_object(l.live().stats()); })
      .def("reset_stats", [](PyLoader& l) { l.live().reset_stats(); })
      .def(
          "skipped", [](PyLoader& l) { return skipped_list(l.live().skipped()); },
          "(sample_id, path, reason) of each sample skipped in the current epoch")
      .def("cache_status", [](PyLoader& l) { return l.live().cache_status(); });
  def_state_and_resume(loader);
}

}  // namespace stoker::python
