"""stoker.Loader and the helpers it is built from: datasets from folders, CSV files, DataFrames
or lists, and the augmentation description."""

from __future__ import annotations

import copy as copy_module
import functools
import os
import threading
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Union

from . import _stoker, _targets
from ._settings import default as _default

PathLike = Union[str, "os.PathLike[str]"]


def Augment(**settings: Any) -> _stoker.AugmentSpec:
    """An augmentation: Keras ImageDataGenerator's parameter names and meaning (rotation_range,
    width_shift_range, height_shift_range, shear_range, zoom_range, horizontal_flip, vertical_flip,
    brightness_range, channel_shift_range, fill_mode, cval, interpolation_order, rescale,
    featurewise/samplewise centring and normalisation) plus stoker's additions (center_crop,
    random_resized_crop, contrast, saturation, hue, normalization, dtype, layout, training).
    The output size comes from the Loader's image_size unless height/width are given."""
    spec = _stoker.AugmentSpec()
    for name, value in settings.items():
        if name.startswith("_") or not hasattr(spec, name):
            raise TypeError(f"Augment() got an unknown setting {name!r}")
        setattr(spec, name, value)
    return spec


# normalize= presets of the framework adapters -> AugmentSpec.normalization presets.
_NORMALIZE_PRESETS = {"imagenet": "torch", "torch": "torch", "tf": "tf", "minus_one_to_one": "tf", "caffe": "caffe"}


def _per_channel(v: Any) -> list:
    if isinstance(v, (int, float)):
        return [float(v)]
    out = [float(x) for x in v]
    if not 1 <= len(out) <= 4:
        raise ValueError("one value per channel")
    return out


def output_spec(augment: Any, output: str, normalize: Any, layout: str) -> Optional[_stoker.AugmentSpec]:
    """What the framework adapters (stoker.torch, stoker.jax) ask the loader for: the caller's
    augmentation (copied, never changed) with the adapter's output. output='uint8': uint8 in
    `layout` as decoded (None: the plain resize, NHWC); 'float': float32 in `layout`, on the 0..1
    scale unless `normalize` ('imagenet' / 'torch', 'tf', 'caffe', or (mean, std) on the 0..1
    scale as torchvision's Normalize) or the augmentation's own rescale/normalization says so."""
    if output not in ("float", "uint8"):
        raise _stoker.InvalidArgument(f"output must be 'float' or 'uint8', received {output!r}")
    if isinstance(augment, dict):
        spec = Augment(**augment)
    elif augment is None:
        spec = None
    elif isinstance(augment, _stoker.AugmentSpec):
        spec = copy_module.copy(augment)
    else:
        raise TypeError("augment must be None, stoker.Augment(...) or a dict of its settings")
    if output == "uint8":
        if normalize is not None:
            raise _stoker.InvalidArgument("normalize needs output='float' (uint8 cannot hold normalised values)")
        if spec is None and layout.lower() in ("nhwc", "channels_last"):
            return None
        spec = spec or _stoker.AugmentSpec()
        if spec.normalization is not None or spec.rescale is not None:
            raise _stoker.InvalidArgument(
                "output='uint8' cannot hold the augmentation's rescale/normalization; use output='float'")
        spec.dtype = "uint8"
        spec.layout = layout
        return spec
    spec = spec or _stoker.AugmentSpec()  # no random transform: resize, convert, normalise
    spec.dtype = "float32"
    spec.layout = layout
    if normalize is None:
        if spec.normalization is None and spec.rescale is None:
            spec.rescale = 1.0 / 255.0  # ToTensor(): 0..1
        return spec
    spec.rescale = None
    if isinstance(normalize, str):
        if normalize.lower() not in _NORMALIZE_PRESETS:
            raise _stoker.InvalidArgument(f"normalize must be None, one of {sorted(_NORMALIZE_PRESETS)} or "
                                          f"(mean, std), received {normalize!r}")
        spec.normalization = _NORMALIZE_PRESETS[normalize.lower()]
        return spec
    try:
        mean, std = normalize
        mean, std = _per_channel(mean), _per_channel(std)
    except (TypeError, ValueError):
        raise _stoker.InvalidArgument("normalize must be a preset or (mean, std) on the 0..1 scale, as "
                                      "torchvision's transforms.Normalize takes them")
    if any(v == 0 for v in std):
        raise _stoker.InvalidArgument("normalize: std must not be 0")
    # Normalize works on ToTensor's 0..1 scale; stoker's normalization on 0..255.
    spec.normalization = {"mean": [255.0 * m for m in mean], "std": [255.0 * v for v in std]}
    return spec


class SkippedSample(NamedTuple):
    sample_id: int
    path: str
    reason: str


def _split_args(validation_split: float, subset: Optional[str]) -> dict:
    return {"validation_split": float(validation_split or 0.0), "subset": subset or "all"}


def dataset(
    source: Any,
    labels: Optional[Sequence[Any]] = None,
    class_names: Optional[Sequence[str]] = None,
    *,
    classes: Optional[Sequence[str]] = None,
    extensions: Optional[Sequence[str]] = None,
    follow_links: bool = False,
    validation_split: float = 0.0,
    subset: Optional[str] = None,
    x_col: str = "filename",
    y_col: Optional[str] = "class",
    directory: Optional[PathLike] = None,
    label_field: Optional[str] = None,
    skipped: Optional[list] = None,
    targets: Any = None,
) -> Union[_stoker.Dataset, _targets.Labelled]:
    """The samples a Loader visits, from
      - a folder with one sub-folder per class (Keras' flow_from_directory; `classes`,
        `extensions`, `follow_links`),
      - a .csv/.tsv file or a pandas DataFrame with a path column `x_col` and a label column
        `y_col` (or a list of columns: one row of values per sample), as Keras'
        flow_from_dataframe (relative paths against `directory`; a CSV file is typed as pandas'
        read_csv types it),
      - a list of paths with `labels` and optional `class_names`,
      - WebDataset tar shards: 'shards/train-{000000..000127}.tar', one .tar, or a .txt file
        listing shards; labels from each sample's .cls member (or the json member's
        `label_field`), class names from a classes.txt beside the shards. A damaged shard or a
        sample without image or label is a DatasetError naming the shard and key, unless
        `skipped` is a list: then they are left out and (shard, key, reason) appended to it.
    `validation_split` and `subset` ('training' / 'validation') split each class as Keras does.

    labels: what each sample's label is (a list of paths as the source; for a table, `y_col`'s
      column): class indices (int, used as given), class names (str, indexed in sorted order or
      `class_names`'), lists of them (multi-label: a multi-hot float32 row per sample), or
      values passed through unchanged (floats, 1-D or one row per sample: regression targets;
      never truncated to int).
    targets: extra per-sample columns that come with each batch (`batch.targets`), gathered by
      the batch's sample ids: a dict {name: column}, a DataFrame (a dict of its columns), one
      array (or Series), or, for a CSV file or DataFrame source, a column name or list of names;
      for a folder or tar shards, one value per sample in the order of the dataset's `.paths`.
    With values or targets the result is a stoker.Labelled (the Dataset in .dataset,
    the values in .labels, the columns in .targets); a Loader takes either."""
    if isinstance(source, (_stoker.Dataset, _targets.Labelled)):
        if labels is not None or targets is not None:
            raise _stoker.InvalidArgument("labels/targets: the source is already a dataset; give them to "
                                          "stoker.dataset() with its paths")
        return source
    split = _split_args(validation_split, subset)
    label_columns = [y_col] if isinstance(y_col, str) else list(y_col or [])
    if hasattr(source, "columns") and hasattr(source, "__getitem__"):  # a pandas DataFrame
        paths = [str(p) for p in source[x_col]]
        if directory is not None:
            paths = [os.path.join(os.fspath(directory), p) for p in paths]
        if labels is not None:
            raise _stoker.InvalidArgument("labels: a DataFrame's labels are its y_col column(s)")
        labels = None if y_col is None else source[y_col]
        table = {str(c): source[c].to_numpy() for c in source.columns}
        return _targets.labelled(paths, labels, class_names, split, targets, table)
    if isinstance(source, (str, os.PathLike)) and (labels is not None or targets is not None) \
            and not os.fspath(source).lower().endswith((".csv", ".tsv")):
        if labels is not None:
            raise _stoker.InvalidArgument(
                f"labels: {os.fspath(source)!r} brings its own labels (class folders or tar members); give a "
                "list of paths, a CSV file or a DataFrame to set them")
        # targets: one value per sample in the order the dataset lists them (its .paths)
        data = dataset(source, class_names=class_names, classes=classes, extensions=extensions,
                       follow_links=follow_links, validation_split=validation_split, subset=subset,
                       label_field=label_field, skipped=skipped)
        return _targets.Labelled(data, None, _targets.read_targets(targets, len(data)))
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isdir(path) and _stoker.is_shard_spec(path):
            data, left_out = _stoker.dataset_from_webdataset(path, label_field or "", skipped is not None)
            if skipped is not None:
                skipped.extend(left_out)
            if validation_split or subset:
                raise _stoker.InvalidArgument("validation_split/subset: split tar shards into their own sets")
            return data
        if os.path.isdir(path):
            return _stoker.dataset_from_directory(
                path, list(classes or []), [e.lower().lstrip(".") for e in (extensions or [])], follow_links, **split
            )
        if path.lower().endswith((".csv", ".tsv")):
            if labels is not None:
                raise _stoker.InvalidArgument("labels: a CSV file's labels are its y_col column(s)")
            extra = [targets] if isinstance(targets, str) else targets
            extra = list(extra) if isinstance(extra, (list, tuple)) and all(isinstance(t, str) for t in extra) else []
            paths, table = _targets.read_csv(path, x_col, list(dict.fromkeys(label_columns + extra)), directory)
            labels = _targets.table_labels(table, y_col)
            return _targets.labelled(paths, labels, class_names, split, targets, table)
        if not os.path.exists(path):
            raise _stoker.DatasetError(f"{path}: no such folder or file")
        raise _stoker.DatasetError(f"{path}: not a folder of class folders nor a .csv/.tsv file")
    return _targets.labelled([os.fspath(p) for p in source], labels, class_names, split, targets)


def _cache_args(cache: Any, budget: str = _default("cache_budget"), file: Any = _default("cache_file")) -> dict:
    """The three cache settings: `cache` is a kind ('none', 'encoded', 'decoded'; None or False:
    'none') or dict(kind=, budget=, file=), which overrides `budget` and `file`."""
    if isinstance(cache, dict):
        unknown = set(cache) - {"kind", "budget", "file"}
        if unknown:
            raise TypeError(f"cache: unknown keys {sorted(unknown)} (kind, budget, file)")
        return {
            "cache": cache.get("kind", "decoded"),
            "cache_budget": str(cache.get("budget", budget)) or budget,
            "cache_file": os.fspath(cache.get("file", file)),
        }
    if cache is None or cache is False:
        cache = "none"
    if not isinstance(cache, str):
        raise TypeError("cache must be None, 'encoded', 'decoded' or dict(kind=, budget=, file=)")
    return {"cache": cache, "cache_budget": str(budget), "cache_file": os.fspath(file or "")}


def sample_weights(weights: Any) -> Any:
    """sample_weights as the C++ loader takes them: a 1-D float64 NumPy array from any sequence of
    numbers, NumPy array, pandas Series or (CPU) torch tensor; None stays None. The values are
    checked by the loader (finite, >= 0, not all 0, one per sample)."""
    if weights is None:
        return None
    import numpy as np

    if hasattr(weights, "detach"):  # a torch tensor
        weights = weights.detach().cpu().numpy()
    elif hasattr(weights, "to_numpy"):  # a pandas Series
        weights = weights.to_numpy()
    try:
        array = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise _stoker.InvalidArgument(f"sample_weights: not a sequence of numbers ({e})") from None
    if array.ndim != 1:
        raise _stoker.InvalidArgument(f"sample_weights: one weight per sample (1-D), received shape {array.shape}")
    return np.ascontiguousarray(array)


def _sampling_args(weights: Any, num_samples: Any, replacement: Any) -> dict:
    """The weighted-sampling arguments of stoker.Loader, typed as the C++ loader takes them."""
    if num_samples is not None:
        if isinstance(num_samples, bool) or not hasattr(num_samples, "__index__"):
            raise _stoker.InvalidArgument(f"num_samples must be a whole number >= 1, received {num_samples!r}")
        num_samples = int(num_samples)
    if not isinstance(replacement, bool):
        raise _stoker.InvalidArgument(f"replacement must be True or False, received {replacement!r}")
    return dict(sample_weights=sample_weights(weights), num_samples=num_samples, replacement=replacement)


def _device(device: Any) -> Optional[int]:
    """None for the CPU, else the CUDA device index. `device` is 'cpu', 'cuda', 'cuda:N' or an object
    whose str() is one of them (torch.device)."""
    if device is not None and not isinstance(device, str) and hasattr(device, "type"):
        device = str(device)  # torch.device('cuda', 1) -> 'cuda:1'
    if device in ("cpu", None):
        return None
    if device == "cuda":
        return 0
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    raise _stoker.InvalidArgument(f"device must be 'cpu', 'cuda' or 'cuda:N', received {device!r}")


_PAGEABLE_NOTE = (
    "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory "
    "won't be used (stoker: this build has no CUDA or no CUDA device is visible; the batches are in "
    "pageable memory)")

_noted: set = set()  # the notes already given in this process (each once)


def _note_once(key: str, message: str, stacklevel: int = 4) -> None:
    """warnings.warn(message) the first time `key` comes up in this process; `stacklevel` counts
    from this function (4: the caller of an adapter that built a Loader)."""
    if key in _noted:
        return
    _noted.add(key)
    import warnings

    warnings.warn(message, UserWarning, stacklevel=stacklevel)


def _make_core(dataset: _stoker.Dataset, settings: dict, cuda: Optional[int], copy: bool, pin_memory: bool,
               depth: int, dtype: str) -> Any:
    """The C++ loader of a stoker.Loader: the host loader, or the GPU feed of device `cuda`."""
    if cuda is None:
        return _stoker.Loader(dataset, settings, copy=copy, pin_memory=pin_memory)
    return _stoker.GpuFeed(dataset, settings, device=cuda, depth=depth, dtype=dtype)


class _Cores:
    """The C++ loaders of one stoker.Loader and which iteration uses each.

    A C++ loader runs one epoch at a time for one consumer. The first (`primary`) serves one
    iteration at a time; an iteration that starts while it is taken gets a core of its own, made
    by `make()` and closed when that iteration ends, so every iteration is an epoch of its own and
    none waits for another. The counters of those cores are kept when they close."""

    def __init__(self, primary: Any):
        self.primary = primary
        self.latest: Optional[Any] = primary  # the latest iteration's core; None once closed (an extra)
        self.lock = threading.RLock()  # RLock: a generator closed by the GC may give back inside it
        self._primary_taken = False
        self._extras: list = []
        self._closed = False
        self._retired_stats: dict = {}
        self._retired_skipped: Optional[list] = None  # the latest iteration's, when its core is closed

    def take(self, make: Any) -> Any:
        with self.lock:
            if not self._primary_taken:
                self._primary_taken = True
                return self.primary
        len(self.primary)  # a closed loader, or one in a child of fork(), raises what every call does
        core = make()
        with self.lock:
            if not self._closed:
                self._extras.append(core)
                return core
        core.close()
        raise _stoker.Error("the loader was closed")

    def give_back(self, core: Any) -> None:
        if core is self.primary:
            with self.lock:
                self._primary_taken = False
            return
        with self.lock:
            if self.alive(core) is None:
                return
            try:
                stats, skipped = core.stats(), _skipped_of(core)
            except _stoker.Error:
                stats, skipped = {}, []
            for name, value in stats.items():
                self._retired_stats[name] = self._retired_stats.get(name, 0) + value
            if core is self.latest:
                self.latest, self._retired_skipped = None, skipped
            self._extras.remove(core)
        core.close()  # joins its decode tasks (without the GIL); batches still held stay valid

    def stats(self) -> dict:
        with self.lock:
            out = dict(self.primary.stats())
            for stats in [core.stats() for core in self._extras] + [self._retired_stats]:
                for name, value in stats.items():
                    out[name] = out.get(name, 0) + value
            return out

    def alive(self, core: Any) -> Optional[Any]:
        """`core` while it serves this loader, else None (an extra core closed since)."""
        return core if core is self.primary or any(core is c for c in self._extras) else None

    def skipped(self) -> list:
        with self.lock:
            return list(self._retired_skipped or []) if self.latest is None else _skipped_of(self.latest)

    def close(self) -> None:
        with self.lock:
            self._closed = True
            cores = [self.primary] + self._extras
        for core in cores:
            core.close()


def _skipped_of(core: Any) -> list:
    return list(core.skipped()) if hasattr(core, "skipped") else []


class Loader:
    """Batches of decoded (and augmented) images, made by stoker's C++ threads.

    Iterating gives one epoch of batches; each `for` over the loader is the next epoch unless
    set_epoch(e) chose one (as PyTorch's DistributedSampler). The order and the augmentation are
    functions of (seed, epoch, sample): reproducible whatever the thread count.

    Host batches (device='cpu') are views of the loader's buffers: batch.images is a NumPy array
    (buffer protocol and DLPack, so torch.from_dlpack / jax.dlpack.from_dlpack / np.from_dlpack
    take it without a copy). A buffer returns to the pool when the last array over it is gone;
    holding more than `prefetch` batches at once is an error that says so (copy=True gives
    independent arrays). Device batches (device='cuda:N') are DLPack CUDA arrays.

    dtype: the images' type with an augment: 'uint8', 'float32', 'float16' or 'bfloat16' (the
    float32 values rounded as they are written, on the CPU as on the GPU; bfloat16 host batches
    are DLPack arrays, as NumPy has no bfloat16: torch.from_dlpack takes them).

    rank, world_size: this process's share of each epoch in a job of several (torchrun, Slurm):
    PyTorch's DistributedSampler semantics (every rank computes the epoch's permutation alike and
    takes every world_size-th sample), equal counts by padding (batch.padding marks the repeats)
    or, with drop_remainder, by dropping the rest; shard_mode='fixed' keeps each rank on one part
    of the data across epochs. Not given: RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS, else 0 of 1.

    labels: each sample's label when `source` is a list of paths (stoker.dataset()): class
    indices (int, as given), class names (str), lists of them (multi-hot float32 rows), or
    values passed through unchanged (floats, 1-D or one row per sample). targets: extra
    per-sample columns (a dict, a DataFrame, one array, or column names of a CSV/DataFrame
    source). Both come with each batch (batch.labels, batch.targets) as the rows of its
    sample_ids, new arrays that hold no buffer.

    sample_weights: one weight per sample (any sequence or NumPy array of numbers: finite, >= 0,
    not all 0, need not sum to 1): each epoch then draws `num_samples` samples (None: as many as
    the dataset has) with probability weight / sum, as PyTorch's WeightedRandomSampler; with
    replacement=False each sample at most once, in the order torch.multinomial draws them. The
    draw is a function of (seed, epoch), the same on every rank, and the ranks share it as they
    share a permutation (shard_mode='interleaved' only); `shuffle` does not apply. len() follows
    num_samples, and the weights are part of the state a state_dict() is checked against.

    pin_memory: True puts the batch buffers in page-locked memory (`pinned` says whether they
    are), so that a host-to-GPU copy from a batch is a true asynchronous DMA. It needs a build with
    CUDA and a visible device; without them the loader warns once, as PyTorch does, and uses
    pageable memory. (device='cuda:N' pins its buffers anyway.)

    source: a folder of class folders, a .csv/.tsv file, a pandas DataFrame, WebDataset tar
    shards, a list of paths, or what stoker.dataset() returns.
    augment: stoker.Augment(...) (or a dict of its settings): the random transforms and the
    output's dtype, layout and normalisation; None: the plain resize, uint8 NHWC.
    device: 'cpu' (host batches) or 'cuda' / 'cuda:N' / a torch.device (the GPU feed: CUDA
    augmentation, DLPack CUDA arrays). depth: the GPU feed's slots, batches in flight on the
    device (device='cuda:N' only). copy: True makes every batch's arrays independent copies.

    Every loader setting (image_size, batch_size, shuffle, seed, threads, prefetch, drop_last,
    label_mode, on_bad_sample, interpolation, keep_aspect_ratio, dct_scaling, cache, cache_budget,
    cache_file, rank, world_size, shard_mode, drop_remainder, max_image_pixels) has the default,
    values and meaning that docs/loader-settings.md lists (stoker._stoker.loader_settings(), the
    table the command's flags come from too).

    interpolation: Pillow's filters exactly as Keras' load_img uses them (nearest, bilinear,
    bicubic, lanczos, box, hamming), area (OpenCV), centre_nearest / opencv_linear (the
    augmentation's own resize). dct_scaling=True lets JPEGs decode shrunk in the DCT domain
    (fast); False decodes them at full size as PIL does (pixel parity with Keras).
    """

    def __init__(
        self,
        source: Any,
        image_size: Union[int, Sequence[int]] = _default("image_size"),
        batch_size: int = _default("batch_size"),
        shuffle: bool = _default("shuffle"),
        seed: int = _default("seed"),
        augment: Optional[Union[_stoker.AugmentSpec, dict]] = None,
        cache: Any = _default("cache"),
        threads: int = _default("threads"),
        prefetch: int = _default("prefetch"),
        drop_last: bool = _default("drop_last"),
        label_mode: str = _default("label_mode"),
        on_bad_sample: str = _default("on_bad_sample"),
        device: str = "cpu",
        copy: bool = False,
        interpolation: str = _default("interpolation"),
        keep_aspect_ratio: bool = _default("keep_aspect_ratio"),
        dtype: Optional[str] = None,
        depth: int = 3,
        dct_scaling: bool = _default("dct_scaling"),
        rank: Optional[int] = _default("rank"),
        world_size: Optional[int] = _default("world_size"),
        shard_mode: str = _default("shard_mode"),
        drop_remainder: bool = _default("drop_remainder"),
        cache_budget: str = _default("cache_budget"),
        cache_file: str = _default("cache_file"),
        max_image_pixels: int = _default("max_image_pixels"),
        pin_memory: bool = False,
        labels: Any = None,
        targets: Any = None,
        sample_weights: Any = None,
        num_samples: Optional[int] = None,
        replacement: bool = True,
    ):
        if isinstance(image_size, int):
            height = width = image_size
        else:
            height, width = (int(v) for v in image_size)
        if isinstance(augment, dict):
            augment = Augment(**augment)
        elif augment is not None:
            augment = copy_module.copy(augment)  # the caller's spec is not changed
        if augment is not None:
            if augment.height == 0 and augment.width == 0:
                augment.height, augment.width = height, width
            # On the GPU the feed converts (GpuFeed's dtype); on the CPU the augmentation writes it.
            if dtype in ("uint8", "float32") or (dtype in ("float16", "bfloat16") and _device(device) is None):
                augment.dtype = dtype
        # Tar shards' bad samples are found while indexing: with on_bad_sample='skip' they are
        # left out and listed in skipped_at_index as (shard, key, reason).
        self.skipped_at_index: list = []
        data = dataset(source, labels, targets=targets,
                       skipped=self.skipped_at_index if on_bad_sample == "skip" else None)
        self._labelled, self.dataset = (data, data.dataset) if isinstance(data, _targets.Labelled) else (None, data)
        self._labelled, label_mode = _targets.check_label_mode(self._labelled, self.dataset, label_mode)
        args = dict(
            batch_size=batch_size,
            image_size=(height, width),
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            augment=augment,
            label_mode=label_mode,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            threads=threads,
            prefetch=prefetch,
            on_bad_sample=on_bad_sample,
            dct_scaling=dct_scaling,
            rank=rank,
            world_size=world_size,
            shard_mode=shard_mode,
            drop_remainder=drop_remainder,
            max_image_pixels=max_image_pixels,
            **_cache_args(cache, cache_budget, cache_file),
            **_sampling_args(sample_weights, num_samples, replacement),
        )
        cuda = _device(device)
        self.device = "cpu" if cuda is None else f"cuda:{cuda}"
        if cuda is None:
            if dtype not in (None, "uint8", "float32", "float16", "bfloat16"):
                raise _stoker.InvalidArgument(
                    f"dtype must be uint8, float32, float16 or bfloat16, received {dtype!r}")
            if dtype in ("float16", "bfloat16") and augment is None:
                raise _stoker.InvalidArgument(
                    f"dtype {dtype!r} on the CPU needs augment=stoker.Augment(...) (its output pass writes it)")
        self._core = _make_core(self.dataset, args, cuda, copy=copy, pin_memory=bool(pin_memory), depth=depth,
                                dtype=dtype or "")
        if cuda is None and pin_memory and not self._core.pinned:
            _note_once("pin_memory", _PAGEABLE_NOTE)
        # A second iteration while one is under way runs on a core of its own, made alike without
        # the cache (the same batches; the cache file stays the first core's to read and write).
        self._extra_core = functools.partial(_make_core, self.dataset, dict(args, cache="none", cache_file=""), cuda,
                                             copy=copy, pin_memory=bool(pin_memory), depth=depth, dtype=dtype or "")
        self._cores = _Cores(self._core)
        self.batch_size = batch_size
        self.seed = seed
        self._sharding = tuple(self._core.sharding) if hasattr(self._core, "sharding") else (rank or 0, world_size or 1)
        self._next_epoch = 0
        self._epoch: Optional[int] = None
        self._resume: Optional[str] = None  # a loaded state: the next iteration continues it
        self._in_epoch = False  # the latest iteration started and not finished (state_dict() is mid-epoch)
        self._iteration = 0  # iterations started

    # ---- epochs
    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (its order and augmentation)."""
        self._next_epoch = int(epoch)

    @property
    def epoch(self) -> Optional[int]:
        """The epoch being (or last) iterated; None before the first."""
        return self._epoch

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches. Each iteration is an epoch of its own, as each iterator of
        PyTorch's DataLoader is: two at once (zip(loader, loader), one per thread, an iterator kept
        while a new loop starts) run side by side, the second on a core of its own that is closed
        when it ends."""
        core = self._cores.take(self._extra_core)
        iteration = None
        try:
            with self._cores.lock:
                state, self._resume = self._resume, None
                epoch = self._next_epoch if state is None else int(state.split("epoch=")[1].split()[0])
                before = (self._next_epoch, self._epoch, self._in_epoch, self._cores.latest)
                self._next_epoch, self._epoch, self._in_epoch = epoch + 1, epoch, True
                self._iteration = iteration = self._iteration + 1
                self._cores.latest = core
            try:
                if state is None:
                    core.begin_epoch(epoch)
                else:
                    core.resume(state)
            except BaseException:
                with self._cores.lock:  # not begun: as if this iteration had not started
                    if self._iteration == iteration:
                        self._next_epoch, self._epoch, self._in_epoch, latest = before
                        self._cores.latest, self._resume = self._cores.alive(latest), state
                raise
            while True:
                batch = core.next()
                if batch is None:
                    return
                if self._labelled is not None:  # labels or targets given as they are: their rows
                    batch = _targets.LabelledBatch(batch, self._labelled)
                yield batch
                # Not held here while the next one is made: the consumer's reference is the only one.
                del batch
        finally:
            # The epoch ended, or the loop left it (break, an exception, Ctrl-C): the next
            # iteration starts the next epoch, and state_dict() says so.
            with self._cores.lock:
                if self._iteration == iteration:
                    self._in_epoch = False
            self._cores.give_back(core)

    @property
    def pinned(self) -> bool:
        """True when the host batch buffers are page-locked (pin_memory=True on a CUDA build with a
        device; always for device='cuda:N', whose feed pins them itself)."""
        return bool(getattr(self._core, "pinned", _device(self.device) is not None))

    @property
    def sharding(self) -> tuple:
        """(rank, world_size) of this loader, as given or read from the environment."""
        return self._sharding

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._core)

    # ---- checkpoints
    def state_dict(self) -> dict:
        """Where the loader stands: the epoch and the batches of it delivered so far, with a digest
        of the data and settings. A loader built alike continues from it with load_state_dict():
        its next iteration yields the rest of that epoch, the same batches pixel for pixel as an
        uninterrupted run (then the epochs after it, unless set_epoch() says otherwise). Called
        after a loop left its epoch early (break, an exception), it is the next epoch's start, where
        this loader's next iteration begins; to continue the rest of an epoch later, save the state
        inside the loop."""
        with self._cores.lock:
            if self._resume is not None:  # loaded and not iterated yet
                return {"stoker_loader_state": self._resume}
            in_epoch, next_epoch = self._in_epoch, self._next_epoch
            # The latest iteration's position; between epochs any core says the rest alike.
            text = (self._cores.latest if in_epoch else self._core).state()
        if not in_epoch:  # between epochs: the next iteration's epoch, from its start
            magic, version, *fields = text.split()
            values = dict(f.split("=", 1) for f in fields)
            values.update(epoch=str(next_epoch), next_batch="0")
            text = " ".join([magic, version] + [f"{k}={v}" for k, v in values.items()])
        return {"stoker_loader_state": text}

    def load_state_dict(self, state: dict) -> None:
        """Continue from state_dict()'s result at the next iteration. A state from other data,
        other settings, another seed or another rank is refused (stoker.InvalidArgument)."""
        text = state["stoker_loader_state"]
        core = self._cores.take(self._extra_core)  # not the core of an iteration under way
        try:
            core.resume(text)  # checked now; the next iteration starts there
        finally:
            self._cores.give_back(core)
        self._resume = text

    # ---- what happened
    @property
    def skipped(self) -> list:
        """SkippedSample(sample_id, path, reason) of each sample skipped in the current epoch
        (on_bad_sample='skip')."""
        return [SkippedSample(*s) for s in self._cores.skipped()]

    def stats(self) -> dict:
        """Cumulative counters: files read, samples decoded and skipped, busy and wait times, and
        samples_decoded_in_part: JPEGs of which only the crop box was decoded (random-resized and
        centre crops read nothing else). Iterations that ran side by side count together."""
        return self._cores.stats()

    @property
    def class_names(self) -> list:
        return list(self.dataset.class_names)

    @property
    def labels(self) -> Any:
        """The labels given as values (floats, multi-hot rows) in dataset order, or None when the
        labels are the dataset's class indices."""
        return None if self._labelled is None else self._labelled.labels

    @property
    def targets(self) -> Any:
        """The extra per-sample columns (an array or a dict of arrays) in dataset order, or None."""
        return None if self._labelled is None else self._labelled.targets

    def close(self) -> None:
        """Stops the loader's threads now, those of iterations under way too (their next() raises
        stoker.Error saying the loader was closed; batches still held stay valid)."""
        self._cores.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<stoker.Loader: {len(self.dataset)} samples, {len(self)} batches of {self.batch_size}, "
                f"device {self.device}>")


class FrameworkLoader:
    """What stoker.torch.DataLoader and stoker.jax.Loader share: a stoker.Loader in `self.loader`
    and the calls that go straight to it. Subclasses turn its batches into their tensors."""

    loader: Loader

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (its order and augmentation), as
        DistributedSampler.set_epoch."""
        self.loader.set_epoch(epoch)

    @property
    def dataset(self) -> _stoker.Dataset:
        return self.loader.dataset

    @property
    def class_names(self) -> list:
        """Class names; the label is the index."""
        return self.loader.class_names

    @property
    def skipped(self) -> list:
        """SkippedSample(sample_id, path, reason) of the samples skipped this epoch."""
        return self.loader.skipped

    def stats(self) -> dict:
        return self.loader.stats()

    def state_dict(self) -> dict:
        """Loader.state_dict(): where the epoch stands, to continue after a restart."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()

    def _batches(self, hint: str) -> Iterator[Any]:
        """The loader's batches; the error of a consumer that holds every buffer gets `hint`
        (what a user of this framework does about it) added."""
        it = iter(self.loader)
        try:
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    return
                except _stoker.Error as e:
                    if "held by the consumer" not in str(e):
                        raise
                    raise type(e)(f"{e}; {hint}") from None
                yield batch
                del batch  # the consumer's reference is the only one while the next is made
        finally:
            it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
