// Loader and its host batches. A batch's arrays are views of the loader's batch buffer (zero
// copy: NumPy's buffer protocol and DLPack both expose the same memory); the buffer returns to
// the pool when the last array that refers to it is gone. Every call that waits for C++ work
// releases the GIL: the loader's own threads decode and augment, Python threads run meanwhile.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "loader_options.hpp"
#include "stoker/augment/augmenter.hpp"
#include "stoker/core/error.hpp"
#include "stoker/pipeline/loader.hpp"

namespace stoker::python {

LoaderOptions loader_options(const nb::dict& settings, std::optional<AugmentSpec>* augment_out) {
  static const char* const known[] = {
      "batch_size",    "height",     "width",         "interpolation", "keep_aspect_ratio", "augment",
      "label_mode",    "shuffle",    "seed",          "drop_last",     "threads",           "prefetch",
      "on_bad_sample", "cache",      "cache_budget",  "cache_file",    "dct_scaling",       "rank",
      "world_size",    "shard_mode", "drop_remainder"};
  for (auto [key, value] : settings) {
    const std::string k = nb::cast<std::string>(key);
    if (std::find(std::begin(known), std::end(known), k) == std::end(known)) {
      throw InvalidArgument("unknown loader setting '" + k + "'");
    }
  }
  auto get = [&]<class T>(const char* key, T fallback) {
    return settings.contains(key) && !settings[key].is_none() ? nb::cast<T>(settings[key]) : fallback;
  };
  LoaderOptions o;
  o.batch_size = get("batch_size", o.batch_size);
  o.image_height = get("height", o.image_height);
  o.image_width = get("width", o.image_width);
  o.interpolation = parse_interpolation(get("interpolation", std::string("nearest")));
  o.keep_aspect_ratio = get("keep_aspect_ratio", o.keep_aspect_ratio);
  std::optional<AugmentSpec> augment;
  if (settings.contains("augment") && !settings["augment"].is_none()) {
    augment = nb::cast<AugmentSpec>(settings["augment"]);
  }
  if (augment_out != nullptr) {
    *augment_out = augment;
  } else if (augment) {
    o.transform = std::make_shared<const Augmenter>(*augment);
  }
  o.label_mode = parse_label_mode(get("label_mode", std::string("sparse")));
  o.shuffle = get("shuffle", o.shuffle);
  o.seed = get("seed", o.seed);
  o.drop_last = get("drop_last", o.drop_last);
  o.threads = get("threads", o.threads);
  o.prefetch = get("prefetch", o.prefetch);
  o.on_bad_sample = parse_bad_sample_policy(get("on_bad_sample", std::string("fail")));
  o.cache.kind = parse_cache_kind(get("cache", std::string("none")));
  const std::string budget = get("cache_budget", std::string());
  if (!budget.empty()) o.cache.budget_bytes = parse_byte_size(budget);
  o.cache.file = get("cache_file", std::string());
  o.dct_scaling = get("dct_scaling", o.dct_scaling);
  // Rank and world size: both given, or both from the launcher's environment (torchrun, Slurm).
  const int rank = get("rank", -1), world = get("world_size", 0);
  if ((rank >= 0) != (world >= 1)) throw InvalidArgument("give rank and world_size together");
  Sharding sharding = rank >= 0 ? Sharding{rank, world} : sharding_from_environment();
  sharding.mode = parse_shard_mode(get("shard_mode", std::string("interleaved")));
  sharding.drop_remainder = get("drop_remainder", false);
  o.sharding = sharding;
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

namespace {

// What Python sees of a batch. The arrays own the slot; this object only refers to them.
struct HostBatch {
  nb::object images, labels, classes, sample_ids, padding;
  int size = 0;
  std::uint64_t epoch = 0;
  std::int64_t index = 0;
  std::shared_ptr<const Dataset> dataset;
};

class PyLoader {
 public:
  PyLoader(Dataset dataset, LoaderOptions options, bool copy)
      : dataset_(std::make_shared<const Dataset>(dataset)), copy_(copy) {
    nb::gil_scoped_release unlocked;  // allocates every batch buffer; may read a cache file
    loader_ = std::make_unique<Loader>(std::move(dataset), std::move(options));
  }
  ~PyLoader() { close(); }

  void close() {
    if (!loader_) return;
    nb::gil_scoped_release unlocked;  // joins the decode tasks
    loader_.reset();
  }

  void begin_epoch(std::uint64_t epoch) {
    nb::gil_scoped_release unlocked;
    live().begin_epoch(epoch);
  }

  std::optional<HostBatch> next() {
    std::optional<Batch> b;
    {
      nb::gil_scoped_release unlocked;
      b = live().next();
    }
    if (!b) return std::nullopt;
    auto held = std::make_shared<Batch>(std::move(*b));
    nb::capsule owner = keep_alive(held);
    const auto n = static_cast<std::size_t>(held->size());
    HostBatch out;
    out.size = held->size();
    out.epoch = held->epoch();
    out.index = held->index();
    out.dataset = dataset_;
    out.images = copy_if(host_view(held->pixels(), batch_shape(n, held->sample_shape()),
                                   dlpack_dtype(held->sample_shape().dtype), owner),
                         copy_);
    out.labels = copy_if(label_view(held->labels().data(), held->classes().data(), n, live().options().label_mode,
                                    held->label_width(), owner),
                         copy_);
    out.classes = copy_if(host_view(held->classes().data(), {n}, owner), copy_);
    out.sample_ids = copy_if(host_view(held->sample_ids().data(), {n}, owner), copy_);
    out.padding = copy_if(host_view(reinterpret_cast<const bool*>(held->padding().data()), {n}, owner), copy_);
    return out;
  }

  Loader& live() {
    if (!loader_) throw Error("the loader was closed");
    return *loader_;
  }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  bool copy_;
  std::unique_ptr<Loader> loader_;
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
  for (const auto& s : skipped) out.append(nb::make_tuple(s.sample_id, s.path, s.reason));
  return out;
}

void bind_loader(nb::module_& m) {
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
                     for (auto id : ids) paths.append(sample_name(b.dataset->samples[static_cast<std::size_t>(id)]));
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
          [](PyLoader* self, const Dataset& dataset, const nb::dict& settings, bool copy) {
            new (self) PyLoader(dataset, loader_options(settings), copy);
          },
          nb::arg("dataset"), nb::arg("settings"), nb::arg("copy") = false)
      .def("begin_epoch", &PyLoader::begin_epoch, nb::arg("epoch"))
      .def("next", &PyLoader::next, "The next batch of the epoch, or None at its end (waits without the GIL).")
      .def("close", &PyLoader::close, "Stops decoding and frees the loader; batches still held stay valid.")
      .def("__len__", [](PyLoader& l) { return l.live().batches_per_epoch(); })
      .def_prop_ro("dataset", [](const PyLoader& l) { return *l.dataset(); })
      .def_prop_ro("threads", [](PyLoader& l) { return l.live().threads(); })
      .def_prop_ro("buffer_bytes", [](PyLoader& l) { return l.live().buffer_bytes(); })
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
