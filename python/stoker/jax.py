"""stoker for JAX: batches of jax.Array made by stoker's C++ threads.

    import stoker, stoker.jax
    loader = stoker.jax.Loader("data/train", image_size=224, batch_size=64,
                               augment=stoker.Augment(random_resized_crop=True, horizontal_flip=True),
                               normalize="imagenet")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:    # float32 (64, 224, 224, 3), int32 (64,)
            params = step(params, images, labels)

The decode, augmentation, conversion and normalisation run in C++; the finished batch buffer is
handed to JAX through DLPack. On the CPU the images are not copied: stoker's buffers are 64-byte
aligned, which is what XLA's CPU client needs to alias external memory
(`images.unsafe_buffer_pointer()` is the buffer's address). Small label arrays that are not
64-byte aligned are copied by JAX (a few bytes per sample).

The images array is a view of one of the loader's pooled buffers; the buffer returns to the pool
when the jax.Array is deleted, and the loader has only prefetch + 1 of them. Keeping arrays for
later (a list of batches) needs copy=True (or jnp.array(x, copy=True)), else the loader raises
stoker.Error saying every buffer is held. Do not donate these arrays to a jitted function
(donate_argnums): the memory belongs to stoker.

Importing this module imports jax; without JAX it raises ImportError with an install hint.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Tuple, Union

try:
    import jax as _jax
    import jax.dlpack as _jax_dlpack
    import jax.numpy as _jnp
except ImportError as _e:  # pragma: no cover - exercised in the venv without jax
    raise ImportError(
        "stoker.jax needs JAX, which is not installed: pip install jax "
        "(or use stoker.Loader, which gives NumPy arrays)"
    ) from _e

import numpy as _np

from . import _loader, _stoker
from ._settings import default as _default

__all__ = ["Loader", "batches"]

class _Capsule:
    """A DLPack capsule of host memory (a bfloat16 host batch: NumPy has no bfloat16) as the
    producer object jax.dlpack.from_dlpack takes (it no longer takes bare capsules)."""

    def __init__(self, capsule: Any):
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)  # kDLCPU


def _to_jax(array: Any) -> "_jax.Array":
    """A jax.Array over a DLPack producer (a NumPy view, a stoker DeviceArray or a host capsule)."""
    if not hasattr(array, "__dlpack__"):
        array = _Capsule(array)
    return _jax_dlpack.from_dlpack(array)


def _values(values: Any, sharding: Any = None) -> Any:
    """Labels or per-sample columns as JAX arrays (strings stay NumPy arrays; a dict a dict); with
    a sharding, global arrays made from this process's rows."""
    if values is None:
        return None
    if isinstance(values, dict):
        return {name: _values(column, sharding) for name, column in values.items()}
    if values.dtype.kind in "OUS":
        return values
    if sharding is not None:
        return _jax.make_array_from_process_local_data(sharding, _np.ascontiguousarray(values))
    return _jnp.asarray(values)


def _check_sharding(sharding: Any) -> Any:
    if sharding is None:
        return None
    if not isinstance(sharding, _jax.sharding.NamedSharding):
        raise _stoker.InvalidArgument(
            "sharding must be a jax.sharding.NamedSharding (a Mesh and a PartitionSpec whose first entry "
            f"splits the batch), received {type(sharding).__name__}")
    return sharding


def _rows_sharding(sharding: Any) -> Any:
    """The sharding of a batch's other arrays: the images' mesh, the rows split as the images'."""
    spec = sharding.spec
    return _jax.sharding.NamedSharding(sharding.mesh, _jax.sharding.PartitionSpec(spec[0] if len(spec) else None))


def _check_batches(sharding: Any, loader: Any, batch_size: int, drop_last: bool) -> None:
    """Every batch must split over the sharding's devices: a clear error now, not JAX's later."""
    shape = (batch_size * _jax.process_count(),) + tuple(getattr(loader._core, "sample_shape", (1,))[1:])
    try:
        sharding.shard_shape(shape)
    except ValueError as e:
        raise _stoker.InvalidArgument(
            f"sharding: a batch of {batch_size} per process ({shape[0]} in all) does not split over the "
            f"sharding's devices ({e}); choose a batch_size that does") from None
    per_rank = loader._core.samples_per_epoch if hasattr(loader._core, "samples_per_epoch") else len(loader.dataset)
    if not drop_last and per_rank % batch_size:
        raise _stoker.InvalidArgument(
            f"sharding: the last batch of each epoch would hold {per_rank % batch_size} of {batch_size} samples, "
            "which does not split over the devices; give drop_last=True")


def _device_put_if_accelerator() -> Any:
    """jax.device_put when JAX's default backend is not the CPU (host batches then go to the
    default device, not committed to the CPU), else None."""
    if _jax.default_backend() == "cpu":
        return None
    return _jax.device_put


class Loader(_loader.FrameworkLoader):
    """An iterable of (images, labels) jax.Arrays, one epoch per iteration.

    source, image_size, batch_size, shuffle, seed, augment, cache, cache_budget, cache_file,
    threads, prefetch, drop_last, on_bad_sample, keep_aspect_ratio, dct_scaling, max_image_pixels,
    device, dtype, depth: as stoker.Loader, with the defaults of docs/loader-settings.md (dtype with
    output='float': 'float32', 'float16' or 'bfloat16', on the CPU as on the GPU), except
    interpolation: 'bilinear' by default here, on purpose: JAX pipelines resize with
      jax.image.resize / tf.image.resize, bilinear (stoker.Loader defaults to Keras' 'nearest').
    rank, world_size, shard_mode, drop_remainder: this process's share of each epoch
      (stoker.Loader; not given: the launcher's environment, else 0 of 1).
    Plus
    output: 'float' (float32, 0..1 unless `normalize` or the augmentation's own rescale /
      normalization says otherwise) or 'uint8'.
    normalize: None, 'imagenet' (torchvision's mean/std), 'tf' (-1..1), 'caffe', or (mean, std)
      per channel on the 0..1 scale.
    layout: 'nhwc' (default: flax/haiku convolutions) or 'nchw'.
    label_mode: 'sparse' (int32 class indices), 'binary', 'categorical' (float32) or None.
    labels: each sample's label when `source` is a list of paths (stoker.dataset(): class
      indices, class names, lists of them for multi-hot float32 rows, or float values, 1-D or
      one row per sample, passed through with their dtype, which JAX may narrow: float64 is
      float32 unless jax_enable_x64).
    targets: extra per-sample columns (a dict, a DataFrame, one array, or column names of a
      CSV/DataFrame source); the loop then gets (images, labels, targets): the batch's rows of
      each column, numbers as jax.Arrays, strings as NumPy arrays.
    copy: True gives independent arrays (no pooled buffer held).
    sharding: (keyword) a jax.sharding.NamedSharding: every array of a batch is a global
      jax.Array made from this process's batch with jax.make_array_from_process_local_data
      (images with `sharding`, labels and targets with its mesh and the spec's first entry, so
      their rows are split like the images'). The global batch is batch_size x processes; each
      batch must split evenly over the devices, so the loader needs drop_last=True unless every
      rank's share is a whole number of batches.
    rank, world_size: not given (both), jax.process_index() and jax.process_count() in a job of
      several JAX processes (jax.distributed), else the launcher's environment, else 0 of 1.
    return_meta: (keyword) True yields dicts {'images', 'labels', ['targets'], 'sample_ids',
      'paths', 'padding', 'epoch', 'index'} instead of tuples (sample ids and padding as NumPy,
      this process's samples).
    Without `sharding`, host batches are jax.Arrays on the CPU when JAX's default backend is the
    CPU (over stoker's buffer, no copy), else put on the default device (jax.device_put, not
    committed to the CPU).
    """

    def __init__(
        self,
        source: Any,
        image_size: Union[int, Sequence[int]] = _default("image_size", "jax"),
        batch_size: int = _default("batch_size", "jax"),
        shuffle: bool = _default("shuffle", "jax"),
        seed: int = _default("seed", "jax"),
        augment: Any = None,
        output: str = "float",
        normalize: Any = None,
        layout: str = "nhwc",
        label_mode: Optional[str] = _default("label_mode", "jax"),
        cache: Any = _default("cache", "jax"),
        threads: int = _default("threads", "jax"),
        prefetch: int = _default("prefetch", "jax"),
        drop_last: bool = _default("drop_last", "jax"),
        on_bad_sample: str = _default("on_bad_sample", "jax"),
        device: str = "cpu",
        copy: bool = False,
        interpolation: str = _default("interpolation", "jax"),
        keep_aspect_ratio: bool = _default("keep_aspect_ratio", "jax"),
        dtype: Optional[str] = None,
        depth: int = 3,
        rank: Optional[int] = _default("rank", "jax"),
        world_size: Optional[int] = _default("world_size", "jax"),
        shard_mode: str = _default("shard_mode", "jax"),
        drop_remainder: bool = _default("drop_remainder", "jax"),
        dct_scaling: bool = _default("dct_scaling", "jax"),
        cache_budget: str = _default("cache_budget", "jax"),
        cache_file: str = _default("cache_file", "jax"),
        max_image_pixels: int = _default("max_image_pixels", "jax"),
        *,
        labels: Any = None,
        targets: Any = None,
        sharding: Any = None,
        return_meta: bool = False,
    ):
        spec = _loader.output_spec(augment, output, normalize, layout)
        if dtype is not None and _loader._device(device) is None and dtype != ("float32" if output == "float" else "uint8") \
                and not (output == "float" and dtype in ("float16", "bfloat16")):
            raise _stoker.InvalidArgument(
                f"dtype {dtype!r} on the CPU: output='float' gives float32, float16 or bfloat16, output='uint8' uint8")
        if rank is None and world_size is None and _jax.process_count() > 1:
            rank, world_size = _jax.process_index(), _jax.process_count()
        self.sharding = _check_sharding(sharding)
        self.return_meta = bool(return_meta)
        self._cuda = _loader._device(device) is not None
        self.copy = copy
        self.label_mode = label_mode
        self.loader = _loader.Loader(
            _loader.dataset(source, labels, targets=targets),
            image_size,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            augment=spec,
            cache=cache,
            threads=threads,
            prefetch=prefetch,
            drop_last=drop_last,
            label_mode="none" if label_mode is None else label_mode,
            on_bad_sample=on_bad_sample,
            device=device,
            copy=copy and not self._cuda,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype if self._cuda or (output == "float" and dtype in ("float16", "bfloat16")) else None,
            depth=depth,
            rank=rank,
            world_size=world_size,
            shard_mode=shard_mode,
            drop_remainder=drop_remainder,
            dct_scaling=dct_scaling,
            cache_budget=cache_budget,
            cache_file=cache_file,
            max_image_pixels=max_image_pixels,
        )
        self.batch_size = batch_size
        if self.sharding is not None:
            _check_batches(self.sharding, self.loader, batch_size, drop_last)

    def __iter__(self) -> Iterator[Tuple["_jax.Array", Optional["_jax.Array"]]]:
        with_targets = self.loader.targets is not None
        sharding = self.sharding
        put = _device_put_if_accelerator() if sharding is None and not self._cuda else None
        paths = self.loader.dataset.paths if self.return_meta else None
        for batch in self._batches("jax.Arrays kept beyond their step hold their batch buffers: copy the ones "
                                   "you keep (jnp.array(x, copy=True)), or pass copy=True to stoker.jax.Loader"):
            if sharding is not None:
                rows = _rows_sharding(sharding)
                local = _to_jax(batch.images) if self._cuda or not isinstance(batch.images, _np.ndarray) \
                    else batch.images
                images = _jax.make_array_from_process_local_data(sharding, local)
                labels = _values(batch.labels, rows)
                extra = _values(batch.targets, rows) if with_targets else None
            else:
                images = _to_jax(batch.images)
                if self._cuda and self.copy:
                    images = _jnp.array(images, copy=True)
                if put is not None:
                    images = put(images)
                labels = _values(batch.labels)
                extra = _values(batch.targets) if with_targets else None
            if self.return_meta:
                ids = batch.sample_ids.copy()
                out = {"images": images, "labels": labels}
                if with_targets:
                    out["targets"] = extra
                out.update(sample_ids=ids, paths=[paths[i] for i in ids], padding=batch.padding.copy(),
                           epoch=int(batch.epoch), index=int(batch.index))
            else:
                out = (images, labels) if not with_targets else (images, labels, extra)
            del batch  # only the arrays hold the buffer: deleting them frees it
            yield out

    def __repr__(self) -> str:
        return f"<stoker.jax.Loader: {len(self.dataset)} samples, {len(self)} batches of {self.batch_size}>"


def batches(source: Any, image_size: Union[int, Sequence[int]], epochs: int = 1, **options: Any):
    """(images, labels) jax.Arrays for `epochs` epochs in a row: Loader(source, image_size,
    **options), epoch after epoch."""
    loader = Loader(source, image_size, **options)
    try:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            yield from loader
    finally:
        loader.close()
