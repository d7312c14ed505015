"""stoker for PyTorch: a DataLoader whose batches are made by stoker's C++ threads.

    import stoker, stoker.torch
    loader = stoker.torch.DataLoader(
        "data/train", image_size=224, batch_size=64,
        augment=stoker.Augment(random_resized_crop=True, horizontal_flip=True),
        normalize="imagenet")
    for epoch in range(epochs):
        loader.set_epoch(epoch)              # as with DistributedSampler
        for images, labels in loader:        # float32 (64, 3, 224, 224), int64 (64,)
            ...

The decode, the augmentation, the conversion to float32 NCHW and the normalisation all run in
C++ (the augmentation spec's dtype/layout/normalization); Python only wraps the finished buffer.

Zero copy, and what it means for your loop: on the CPU `images` is a view of one of the loader's
pooled batch buffers (torch.from_dlpack over stoker's memory: `images.data_ptr()` is the
buffer's address). The buffer goes back to the pool when the last tensor (or view of it) is
gone, and the loader has only prefetch + 1 buffers: a loop that keeps tensors beyond the step
(a list of batches, a tensor stored for later) must `.clone()` them, or pass copy=True, else the
loader raises stoker.Error saying that every buffer is held (it never hangs). In-place ops on
`images` write into the buffer, which is yours until you drop the tensor. Labels are converted to
int64 (a small copy), so they never hold a buffer.

PyTorch's own arguments keep their meaning where stoker has one: num_workers (decode threads),
prefetch_factor (batches ahead per thread), generator (the seed), pin_memory (page-locked batch
buffers), shuffle (False unless asked), drop_last; with neither seed nor generator the seed is
drawn from torch's RNG, so torch.manual_seed makes runs repeatable. persistent_workers, timeout
and multiprocessing_context are accepted (threads make them moot: a note says so once); a
WeightedRandomSampler as sampler= becomes stoker's own weighted draw (sample_weights=, num_samples=,
replacement=: deterministic per seed and epoch, shared by the ranks); other samplers,
batch_sampler, collate_fn and worker_init_fn are refused with stoker's way of doing the same.

    loader = stoker.torch.DataLoader("data/train", 224, batch_size=64, shuffle=True,
                                     num_workers=8, pin_memory=True, normalize="imagenet")
    for images, labels in loader:
        images = images.to("cuda", non_blocking=True)   # a true async copy from pinned memory

Pinned batches and non_blocking copies: a batch's buffer goes back to the pool only after the
copies queued from it could have completed. When the loop asks for the next batch, the loader
records a CUDA event on torch's current stream and keeps the previous batch's buffer until that
event has passed; rebinding `images` to its GPU copy, as above, is therefore safe. Copies queued on
another stream (a `with torch.cuda.stream(s):` inside the loop) are not covered: keep the host
tensor until that stream has passed the copy, or synchronize it.

On the GPU (device='cuda:N') stoker's GPU feed decodes on the host, augments with CUDA kernels
and hands the batch over through DLPack on the current PyTorch stream (no host synchronisation);
the slot is reused after the work queued on that stream is done.

Importing this module imports torch; without PyTorch it raises ImportError with an install hint.
"""

from __future__ import annotations

import collections
import inspect
import os
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - exercised in the venv without torch
    raise ImportError(
        "stoker.torch needs PyTorch, which is not installed: pip install torch "
        "(or use stoker.Loader, which gives NumPy arrays)"
    ) from _e

from . import _loader, _stoker
from ._settings import default as _default

__all__ = ["DataLoader", "IMAGENET_MEAN", "IMAGENET_STD"]

# torchvision's ImageNet statistics, on the 0..1 scale of ToTensor().
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _torch_device(device: Union[str, _torch.device]) -> _torch.device:
    cuda = _loader._device(device)
    return _torch.device("cpu") if cuda is None else _torch.device("cuda", cuda)


# PyTorch's DataLoader arguments that worker processes need and stoker's threads make moot:
# accepted, with a note (once) when given a value other than PyTorch's default.
_MOOT = {
    "persistent_workers": (False, "stoker's decode threads live as long as the loader; there are no worker "
                                  "processes to keep"),
    "timeout": (0, "stoker's threads hand batches over in memory; a batch that cannot be made raises "
                   "its error (never a hang), so there is no worker to time out"),
    "multiprocessing_context": (None, "stoker decodes on threads in this process; there are no worker "
                                      "processes to start"),
}

# PyTorch's DataLoader arguments stoker does not take, and what does the same.
_REFUSED = {
    "sampler": "stoker orders the samples itself: shuffle= and seed=/generator= for the order, "
               "rank=/world_size= for DistributedSampler's shares, set_epoch(), sample_weights= (or a "
               "torch.utils.data.WeightedRandomSampler) for a weighted draw; for a subset, pass the "
               "paths (a list, a CSV file or stoker.dataset(...)) as the source",
    "batch_sampler": "stoker makes the batches itself: batch_size= and drop_last= (with rank=/world_size= "
                     "and drop_remainder= across ranks)",
    "collate_fn": "stoker assembles whole batches in C++: output=, normalize=, dtype= and label_mode= "
                  "set the tensors' form, augment=stoker.Augment(...) the transforms; anything else can "
                  "be done on the (images, labels) the loop receives",
    "worker_init_fn": "there are no worker processes to initialise: stoker's threads need no set-up, and "
                      "seed=/generator= key every random draw (the order and the augmentation)",
}


def _threads_and_prefetch(threads: Optional[int], prefetch: Optional[int], num_workers: Optional[int],
                          prefetch_factor: Optional[int]) -> Tuple[int, int]:
    """threads and prefetch from PyTorch's num_workers and prefetch_factor when they are given."""
    threads = 0 if threads is None else int(threads)
    prefetch = _default("prefetch", "torch") if prefetch is None else int(prefetch)
    if num_workers is not None:
        if threads != _default("threads", "torch"):
            raise TypeError("stoker.torch.DataLoader: give threads or num_workers (PyTorch's name for them), not both")
        if int(num_workers) < 0:
            raise _stoker.InvalidArgument(f"num_workers must be >= 0, received {num_workers!r}")
        threads = max(1, int(num_workers))  # 0: one decode thread (stoker never decodes in the caller's)
    if prefetch_factor is not None:
        if prefetch != _default("prefetch", "torch"):
            raise TypeError("stoker.torch.DataLoader: give prefetch (batches ahead in all) or prefetch_factor "
                            "(batches ahead per thread), not both")
        if int(prefetch_factor) < 1:
            raise _stoker.InvalidArgument(f"prefetch_factor must be >= 1, received {prefetch_factor!r}")
        prefetch = int(prefetch_factor) * (threads or _stoker.default_threads())
    return threads, prefetch


def _from_sampler(sampler: Any, shuffle: bool, sample_weights: Any, num_samples: Optional[int],
                  replacement: bool) -> Tuple[Any, Optional[int], bool, Optional[_torch.Generator]]:
    """(sample_weights, num_samples, replacement, generator) of a WeightedRandomSampler given as
    sampler=; any other sampler is refused as before."""
    if type(sampler) is not _torch.utils.data.WeightedRandomSampler:  # a subclass may draw otherwise
        raise TypeError(f"stoker.torch.DataLoader does not take sampler={type(sampler).__name__} (only a "
                        f"torch.utils.data.WeightedRandomSampler): {_REFUSED['sampler']}")
    if shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle (as in PyTorch's DataLoader: the "
                         "WeightedRandomSampler draws the order)")
    if sample_weights is not None or num_samples is not None or replacement is not True:
        raise TypeError("stoker.torch.DataLoader: give sampler=WeightedRandomSampler(...) or sample_weights= "
                        "(with num_samples=, replacement=), not both")
    return sampler.weights, int(sampler.num_samples), bool(sampler.replacement), sampler.generator


def _draw_seed(generator: Optional[_torch.Generator]) -> int:
    """A seed from torch's RNG (or `generator`), drawn as PyTorch's RandomSampler draws its own."""
    return int(_torch.empty((), dtype=_torch.int64).random_(generator=generator).item())


_HELD_HINT = ("tensors kept beyond their step hold their batch buffers: .clone() the ones you keep (or .to() "
              "another device), or pass copy=True to stoker.torch.DataLoader")


def _channels_last(memory_format: Any, output: str) -> bool:
    """Whether images are channels_last NCHW views of NHWC batches (memory_format=)."""
    if memory_format is None or memory_format is _torch.contiguous_format:
        return False
    if memory_format is _torch.channels_last:
        if output != "float":
            raise _stoker.InvalidArgument("memory_format=torch.channels_last needs output='float' (NCHW images); "
                                          "output='uint8' is NHWC already")
        return True
    raise _stoker.InvalidArgument(f"memory_format must be torch.contiguous_format or torch.channels_last, "
                                  f"received {memory_format!r}")


def ranks_now() -> Tuple[int, int]:
    """(rank, world_size) of this process as a job of several sees it now: an initialised
    torch.distributed; else the launcher's environment: RANK/WORLD_SIZE (torchrun), LOCAL_RANK
    with WORLD_SIZE and no RANK (Lightning's DDP children; rank NODE_RANK x LOCAL_WORLD_SIZE +
    LOCAL_RANK, NODE_RANK 0 when unset), SLURM_PROCID/SLURM_NTASKS; else 0 of 1."""
    dist = _torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env = os.environ
    if "RANK" not in env and "WORLD_SIZE" in env and "LOCAL_RANK" in env:
        world, local, node = int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]), int(env.get("NODE_RANK", "0"))
        if node and "LOCAL_WORLD_SIZE" not in env:
            raise _stoker.InvalidArgument(
                f"the environment sets NODE_RANK={node} and LOCAL_RANK={local} but neither RANK nor "
                "LOCAL_WORLD_SIZE: initialise torch.distributed before iterating, or give rank= and world_size=")
        rank = node * int(env.get("LOCAL_WORLD_SIZE", "0")) + local
        return tuple(_stoker.resolve_sharding(rank, world))
    return tuple(_stoker.resolve_sharding(None, None))


def _for_rank(state: dict, rank: int, world_size: int) -> dict:
    """`state` with its rank made `rank` when it is another rank's of a job of `world_size` (the
    position in the epoch is the same for every rank of a DDP job); anything else as it is, for
    the loader to check."""
    text = state.get("stoker_loader_state") if isinstance(state, dict) else None
    if not isinstance(text, str):
        return state
    fields = text.split()
    values = dict(f.split("=", 1) for f in fields[2:] if "=" in f)
    if values.get("world_size") != str(world_size) or values.get("rank") in (None, str(rank)):
        return state
    fields = [f"rank={rank}" if f.startswith("rank=") else f for f in fields]
    return dict(state, stoker_loader_state=" ".join(fields))


class EpochSampler:
    """What code written for DistributedSampler finds at `loader.sampler` (Lightning calls its
    set_epoch at each epoch): set_epoch(e) chooses the epoch of the loader's next iteration;
    rank, num_replicas, epoch, shuffle, seed and drop_last say what the loader uses; len() is
    this rank's samples per epoch. stoker orders the samples itself, so it yields no indices."""

    def __init__(self, owner: "DataLoader"):
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch being iterated, else the one the next iteration runs."""
        loader = self._owner.loader
        return loader.epoch if loader._in_epoch else loader._next_epoch

    @property
    def rank(self) -> int:
        return self._owner.loader.sharding[0]

    @property
    def num_replicas(self) -> int:
        return self._owner.loader.sharding[1]

    @property
    def shuffle(self) -> bool:
        return bool(self._owner._loader_args["shuffle"])

    @property
    def seed(self) -> int:
        return self._owner.seed

    @property
    def drop_last(self) -> bool:
        return bool(self._owner._loader_args["drop_remainder"])

    def __len__(self) -> int:
        core = self._owner.loader._core
        if hasattr(core, "samples_per_epoch"):
            return int(core.samples_per_epoch)
        args = self._owner._loader_args  # the GPU feed: the same rule, over the draws with weights
        n = len(self._owner.dataset) if args["sample_weights"] is None else \
            args["num_samples"] or len(args["sample_weights"])
        ranks = self.num_replicas
        return n // ranks if self.drop_last else -(-n // ranks)

    def __repr__(self) -> str:
        return f"<stoker.torch.EpochSampler: rank {self.rank} of {self.num_replicas}, epoch {self.epoch}>"


def _samples_of(batch: Any) -> Iterator[Any]:
    """A batch's samples one by one (batch_size=None), as PyTorch's DataLoader yields a dataset's
    items unbatched: each tensor, list and dict of the batch indexed by the sample, other values
    (a meta dict's epoch and index) as they are."""
    images = batch["images"] if isinstance(batch, dict) else batch[0]
    count = images.shape[0]

    def row(value: Any, i: int) -> Any:
        if isinstance(value, dict):
            return {name: row(v, i) for name, v in value.items()}
        if isinstance(value, (_torch.Tensor, list)) and len(value) == count:
            return value[i]
        return value

    for i in range(count):
        yield row(batch, i) if isinstance(batch, dict) else tuple(row(v, i) for v in batch)


class _HeldUntilCopied:
    """Keeps host batches alive until the copies queued from them could have completed.

    add(tensor) is called for each batch as the loop asks for the next one: it records an event on
    torch's current stream (every copy the loop queued from that batch is before it) and holds the
    tensor until the event has passed. At most `limit` are held: beyond it the host waits for the
    oldest event, so the loader always has a free buffer."""

    def __init__(self, limit: int, make_event: Callable[[], Any]):
        self.limit = max(1, limit)
        self.make_event = make_event
        self.held: collections.deque = collections.deque()

    def add(self, tensor: Any) -> None:
        event = self.make_event()
        event.record()
        self.held.append((event, tensor))
        while self.held and self.held[0][0].query():
            self.held.popleft()
        while len(self.held) > self.limit:
            self.held.popleft()[0].synchronize()

    def clear(self) -> None:
        for event, _ in self.held:
            event.synchronize()
        self.held.clear()


class DataLoader(_loader.FrameworkLoader):
    """An iterable of (images, labels) torch tensors, one epoch per iteration.

    source, image_size, batch_size, cache, cache_budget, cache_file, threads, prefetch, drop_last,
    on_bad_sample, keep_aspect_ratio, dct_scaling, max_image_pixels: as stoker.Loader, with the defaults of
    docs/loader-settings.md (threads=0: all cores; stoker's threads do the work, there are no
    worker processes).
    batch_size=None: PyTorch's unbatched loading: each sample on its own, (image, label) with the
      image (C, H, W) and the label its row; len() counts samples (drop_last is refused with it,
      as PyTorch refuses it). stoker still decodes batches of the default size behind it.
    interpolation: 'bilinear' by default here, on purpose: torchvision's Resize resizes bilinearly
      and PyTorch users expect it (stoker.Loader and the command default to Keras' 'nearest').
    shuffle: False by default here, as PyTorch's DataLoader (stoker.Loader shuffles by default).
    seed: None by default here: drawn from torch's RNG when the loader is made (one draw, as
      PyTorch's RandomSampler seeds itself), so torch.manual_seed(s) before it makes runs
      repeatable and different seeds give different orders and augmentations. In a job of several
      ranks (world_size > 1) it is 0 instead, DistributedSampler's default, because every rank
      must compute the same order. Give seed= (or generator=) to choose it, and to resume from a
      state_dict() in another process. `loader.seed` is the seed in use.

    PyTorch's DataLoader arguments (keyword only):
    num_workers: decode threads (threads=). stoker decodes on threads of this process, never in
      the calling thread: num_workers=0 (PyTorch's "load in the main process") gives one decode
      thread, which still works ahead of the loop. Not given: threads= (0: all cores).
    prefetch_factor: batches decoded ahead per thread, as PyTorch's (batches ahead in all:
      prefetch_factor x threads; threads=0 counts the cores). Not given: prefetch=.
    generator: a torch.Generator; the seed is drawn from it (not with seed=).
    pin_memory: True puts the host batches in page-locked memory, so `.to('cuda',
      non_blocking=True)` is an asynchronous DMA (see the module docstring for how long a batch
      is kept). Without CUDA in this build or a visible device it warns once, as PyTorch does,
      and the batches stay in pageable memory; `loader.pinned` says which.
    persistent_workers, timeout, multiprocessing_context: accepted; threads make them moot (a note
      says so once when given something other than PyTorch's default).
    sampler: torch.utils.data.WeightedRandomSampler(weights, num_samples, replacement, generator)
      is taken as sample_weights=weights, num_samples=, replacement= (its generator, when it has
      one, gives the seed as generator= does; not with shuffle=True, as in PyTorch). Any other
      sampler is refused (TypeError) with what does the same in stoker.
    batch_sampler, collate_fn, worker_init_fn: refused (TypeError) with what does the same in
      stoker. Any other unknown argument is a TypeError naming it and the accepted ones.
    sample_weights, num_samples, replacement: (keyword) PyTorch's WeightedRandomSampler: one
      weight per sample (a sequence, NumPy array or tensor of numbers >= 0, not all 0), and each
      epoch draws num_samples samples (None: as many as the dataset has) by weight, with
      replacement or (False) each at most once. The draw is a function of (seed, epoch) and the
      ranks share it as DistributedSampler shares a permutation; len() follows num_samples. See
      stoker.Loader.

    augment: stoker.Augment(...) (or a dict of its settings): the random transforms, e.g.
      torchvision's RandomResizedCrop + RandomHorizontalFlip is
      stoker.Augment(random_resized_crop=True, horizontal_flip=True). Its dtype, layout and
      normalisation are set by `output` and `normalize`.
    output: 'float' (default): float32 NCHW, ToTensor()'s 0..1 scale unless `normalize` (or the
      augmentation's own rescale/normalization) says otherwise; 'uint8': uint8 NHWC as decoded.
    normalize: None, 'imagenet' (transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)), or
      (mean, std) per channel on the 0..1 scale, as transforms.Normalize takes them.
    label_mode: 'sparse' (int64 class indices, default), 'binary' (float32 (N,)),
      'categorical' (float32 (N, K)) or None (labels is None).
    labels: (keyword) each sample's label when `source` is a list of paths (a CSV file's or
      DataFrame's come from its y_col): class indices (int, used as given: int64 tensors as
      above), class names (str, indexed in sorted order), lists of them (multi-label: float32
      multi-hot (N, K), for BCEWithLogitsLoss), or values passed through unchanged (floats, 1-D
      or one row per sample: regression targets, never truncated; the tensor keeps the array's
      dtype, as default_collate does, so a float64 column gives float64: `.float()` it for a
      float32 model).
    targets: (keyword) extra per-sample columns: a dict {name: column}, a DataFrame (a dict of
      its columns), one array, or column names of a CSV/DataFrame source. The loop then gets
      (images, labels, targets): each column's rows of the batch's samples, as default_collate
      makes them (a tensor of the column's dtype; strings as a list; a dict stays a dict).
    memory_format: (keyword) torch.contiguous_format (default) or torch.channels_last: the C++
      side writes NHWC and the images are its NCHW-shaped view with channels_last strides, no
      copy (`images.is_contiguous(memory_format=torch.channels_last)`), for channels_last models.
    return_meta: (keyword) True yields dicts {'images', 'labels', ['targets'], 'sample_ids'
      (int64, the samples' indices in the dataset), 'paths' (list of str), 'padding' (bool),
      'epoch', 'index'} instead of tuples.
    dtype: the images' dtype with output='float': 'float32' (default), 'float16' or 'bfloat16',
      rounded from float32 as the C++ side writes them (on the CPU as on the GPU).
    device: 'cpu', 'cuda', 'cuda:N' or a torch.device (GPU augmentation, tensors on that device).
    copy: True makes every batch an independent tensor (no pooled buffer is held).
    depth: with device='cuda', the GPU feed's slots (batches in flight on the device).
    rank, world_size, shard_mode, drop_remainder: this process's share of each epoch, with
      DistributedSampler's semantics (stoker.Loader). Not given: torch.distributed's rank and
      world size when it is initialised, else the launcher's environment (RANK/WORLD_SIZE,
      SLURM_PROCID/SLURM_NTASKS), else 0 of 1. `padding` on the loader's batches marks the
      repeats that even out the ranks; `with_padding=True` yields (images, labels, padding).

    Tensors on the CPU are views of pooled buffers: see the module docstring.
    """

    def __init__(
        self,
        source: Any,
        image_size: Union[int, Sequence[int]] = _default("image_size", "torch"),
        batch_size: Optional[int] = _default("batch_size", "torch"),
        shuffle: bool = _default("shuffle", "torch"),
        seed: Optional[int] = _default("seed", "torch"),
        augment: Any = None,
        output: str = "float",
        normalize: Any = None,
        label_mode: Optional[str] = _default("label_mode", "torch"),
        cache: Any = _default("cache", "torch"),
        threads: int = _default("threads", "torch"),
        prefetch: int = _default("prefetch", "torch"),
        drop_last: bool = _default("drop_last", "torch"),
        on_bad_sample: str = _default("on_bad_sample", "torch"),
        device: Union[str, _torch.device] = "cpu",
        copy: bool = False,
        interpolation: str = _default("interpolation", "torch"),
        keep_aspect_ratio: bool = _default("keep_aspect_ratio", "torch"),
        dtype: Optional[str] = None,
        depth: int = 3,
        rank: Optional[int] = _default("rank", "torch"),
        world_size: Optional[int] = _default("world_size", "torch"),
        shard_mode: str = _default("shard_mode", "torch"),
        drop_remainder: bool = _default("drop_remainder", "torch"),
        with_padding: bool = False,

        dct_scaling: bool = _default("dct_scaling", "torch"),
        cache_budget: str = _default("cache_budget", "torch"),
        cache_file: str = _default("cache_file", "torch"),
        max_image_pixels: int = _default("max_image_pixels", "torch"),
        *,
        labels: Any = None,
        targets: Any = None,
        memory_format: Optional[_torch.memory_format] = None,
        return_meta: bool = False,
        num_workers: Optional[int] = None,
        prefetch_factor: Optional[int] = None,
        generator: Optional[_torch.Generator] = None,
        sample_weights: Any = None,
        num_samples: Optional[int] = None,
        replacement: bool = True,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        timeout: float = 0,
        multiprocessing_context: Any = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        collate_fn: Any = None,
        worker_init_fn: Any = None,
        **unknown: Any,
    ):
        if unknown:
            accepted = [p for p in inspect.signature(DataLoader.__init__).parameters if p not in ("self", "unknown")]
            raise TypeError(f"stoker.torch.DataLoader() got an unexpected keyword argument {sorted(unknown)[0]!r}; "
                            f"it takes {', '.join(accepted)}")
        given = dict(batch_sampler=batch_sampler, collate_fn=collate_fn, worker_init_fn=worker_init_fn)
        for name, value in given.items():
            if value is not None:
                raise TypeError(f"stoker.torch.DataLoader does not take {name}: {_REFUSED[name]}")
        if sampler is not None:
            sample_weights, num_samples, replacement, sampler_generator = _from_sampler(
                sampler, shuffle, sample_weights, num_samples, replacement)
            if sampler_generator is not None:
                if seed is not None or generator is not None:
                    raise TypeError("stoker.torch.DataLoader: the sampler's generator gives the seed; give "
                                    "seed= or generator= only with a sampler that has none")
                generator = sampler_generator
        moot = dict(persistent_workers=persistent_workers, timeout=timeout,
                    multiprocessing_context=multiprocessing_context)
        for name, value in moot.items():
            if value != _MOOT[name][0]:
                _loader._note_once(f"torch.{name}", f"stoker.torch.DataLoader: {name} has no effect: {_MOOT[name][1]}",
                                   stacklevel=3)
        threads, prefetch = _threads_and_prefetch(threads, prefetch, num_workers, prefetch_factor)
        self._unbatched = batch_size is None
        if self._unbatched:  # PyTorch's batch_size=None: the samples one at a time, not batched
            if drop_last:
                raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                                 "drop_last")
            batch_size = _default("batch_size", "torch")  # the loader's batches, given out sample by sample
        if generator is not None:
            if seed is not None:
                raise TypeError("stoker.torch.DataLoader: give seed or generator, not both")
            seed = _draw_seed(generator)
        # Not given: resolved now and again when each iteration starts (ranks_now()), so a loader
        # made before the job's processes know their rank takes its share once they do.
        self._auto_ranks = rank is None and world_size is None
        if self._auto_ranks:
            rank, world_size = ranks_now()
        self._seed_drawn = seed is None and generator is None
        if self._seed_drawn:
            seed = 0 if _stoker.resolve_sharding(rank, world_size)[1] > 1 else _draw_seed(None)
        self.device = _torch_device(device)
        cuda = self.device.type == "cuda"
        self._channels_last = _channels_last(memory_format, output)
        layout = "nhwc" if output != "float" or self._channels_last else "nchw"
        spec = _loader.output_spec(augment, output, normalize, layout)
        half = dtype in ("float16", "bfloat16")
        if dtype is not None and not cuda and dtype != ("float32" if output == "float" else "uint8") \
                and not (half and output == "float"):
            raise _stoker.InvalidArgument(
                f"dtype {dtype!r} on the CPU: output='float' gives float32, float16 or bfloat16, output='uint8' "
                "uint8")
        data = _loader.dataset(source, labels, targets=targets)
        self.with_padding = with_padding
        self.return_meta = bool(return_meta)
        self.output = output
        self.label_mode = label_mode
        self.copy = copy
        self._data, self._image_size = data, image_size
        self._loader_args = dict(
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
            device=str(self.device),
            copy=copy and not cuda,
            pin_memory=pin_memory and not cuda,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype if cuda or half else None,
            depth=depth,
            rank=rank,
            world_size=world_size,
            shard_mode=shard_mode,
            drop_remainder=drop_remainder,
            dct_scaling=dct_scaling,
            cache_budget=cache_budget,
            cache_file=cache_file,
            max_image_pixels=max_image_pixels,
            **_loader._sampling_args(sample_weights, num_samples, replacement),
        )
        self.loader = _loader.Loader(data, image_size, **self._loader_args)
        self.sampler = EpochSampler(self)
        # PyTorch's DataLoader always has the attribute; stoker makes the batches itself, so code
        # that inspects it (Lightning does, for a validation loader's shuffling) finds none.
        self.batch_sampler = None
        self.batch_size = None if self._unbatched else batch_size
        self.seed = seed
        self._prefetch = prefetch if prefetch > 0 else 2 * (threads or _stoker.default_threads())

    @property
    def pinned(self) -> bool:
        """True when host batches are in page-locked memory (pin_memory=True with CUDA and a device)."""
        return self.loader.pinned

    def _follow_ranks(self) -> None:
        """Rebuilds the loader for the rank and world size of now when they were not given and
        changed since it was made (a loader made before torch.distributed was initialised, or
        before the launcher's environment said the rank); the epoch to run and a loaded state
        carry over. A seed drawn from torch's RNG becomes 0 in a job of several ranks."""
        if not self._auto_ranks:
            return
        now = ranks_now()
        if now == tuple(self.loader.sharding):
            return
        old = self.loader
        args = dict(self._loader_args, rank=now[0], world_size=now[1])
        if self._seed_drawn and now[1] > 1:
            args["seed"] = 0
        new = _loader.Loader(self._data, self._image_size, **args)
        new.set_epoch(old._next_epoch)
        if old._resume is not None:
            new.load_state_dict(_for_rank({"stoker_loader_state": old._resume}, *now))
        old.close()
        self.loader, self._loader_args, self.seed = new, args, args["seed"]

    def load_state_dict(self, state: dict) -> None:
        """Loader.load_state_dict() for the rank of now (Lightning restores it after the process
        group is up, possibly into a loader made before).

        When the ranks were not given (the loader follows the job's), a state saved by another
        rank of a job of the same size is taken for this rank: the same epoch and batches
        delivered, this rank's share. Lightning writes rank 0's loader state into its checkpoint
        and every rank loads that one; the ranks of a DDP job deliver their batches in step, so
        rank 0's position is every rank's. Other data, settings, seed or world size are refused
        as always, and so is another rank's state when rank= was given."""
        self._follow_ranks()
        if self._auto_ranks:
            state = _for_rank(state, *self.loader.sharding)
        self.loader.load_state_dict(state)

    # ---- iteration
    def __iter__(self) -> Iterator[Tuple[_torch.Tensor, Optional[_torch.Tensor]]]:
        self._follow_ranks()
        convert = self._device_batch if self.device.type == "cuda" else self._host_batch
        with_targets = self.loader.targets is not None
        # Pinned host batches may be read by a non_blocking copy after the loop moved on.
        guard = None
        if self.device.type == "cpu" and self.loader.pinned and _torch.cuda.is_available():
            guard = _HeldUntilCopied(self._prefetch - 1, _torch.cuda.Event)
        try:
            paths = self.loader.dataset.paths if self.return_meta else None
            for batch in self._batches(_HELD_HINT):
                out = convert(batch)
                if self.return_meta:
                    out = self._meta(batch, out, paths)
                else:
                    if with_targets:
                        out = (*out, self._values(batch.targets))
                    if self.with_padding:
                        out = (*out, _torch.from_numpy(batch.padding.copy()))
                del batch  # only the tensors hold the buffer: dropping them frees it
                if self._unbatched:
                    yield from _samples_of(out)
                else:
                    yield out
                if guard is not None:
                    guard.add(out["images"] if self.return_meta else out[0])
                del out
        finally:
            if guard is not None:
                guard.clear()

    def __len__(self) -> int:
        """Batches per epoch; samples with batch_size=None."""
        return len(self.sampler) if self._unbatched else len(self.loader)

    def _meta(self, batch: Any, out: Tuple[Any, ...], paths: list) -> dict:
        """return_meta=True's dict: the tensors and what identifies each sample."""
        ids = batch.sample_ids.copy()
        meta = {"images": out[0], "labels": out[1]}
        if self.loader.targets is not None:
            meta["targets"] = self._values(batch.targets)
        meta.update(sample_ids=_torch.from_numpy(ids.astype("int64")), paths=[paths[i] for i in ids],
                    padding=_torch.from_numpy(batch.padding.copy()), epoch=int(batch.epoch),
                    index=int(batch.index))
        return meta

    def _host_batch(self, batch: Any) -> Tuple[_torch.Tensor, Optional[_torch.Tensor]]:
        # torch.from_dlpack over the NumPy view: the tensor holds the view, the view the slot.
        images = _torch.from_dlpack(batch.images)
        if self._channels_last:  # NHWC memory seen as NCHW: channels_last strides, no copy
            images = images.permute(0, 3, 1, 2)
        if not getattr(batch, "labels_are_classes", True):
            return images, self._values(batch.labels)
        return images, self._labels(batch.labels)

    def _device_batch(self, batch: Any) -> Tuple[_torch.Tensor, Optional[_torch.Tensor]]:
        # DeviceArray.__dlpack__(stream=...) receives torch's current stream: that stream waits
        # for the batch's ready event, and the slot is recycled after the work queued on it.
        with _torch.cuda.device(self.device):
            images = _torch.from_dlpack(batch.images)
            if self._channels_last:
                images = images.permute(0, 3, 1, 2)
            if self.copy:
                images = images.clone(memory_format=_torch.preserve_format)
            if self.label_mode is None:
                return images, None
            if not getattr(batch, "labels_are_classes", True):
                return images, self._values(batch.labels)
            labels = _torch.from_dlpack(batch.device_labels)
            if self.label_mode == "sparse":
                labels = labels.reshape(-1).to(_torch.int64)
            elif self.label_mode == "binary":
                labels = labels.reshape(-1).clone()
            else:
                labels = labels.clone()
        return images, labels

    def _values(self, values: Any) -> Any:
        """Labels or targets given as they are, as torch's default_collate makes them from NumPy
        values: a tensor of the same dtype (on the loader's device), strings as a list, a dict of
        columns as a dict."""
        if values is None:
            return None
        if isinstance(values, dict):
            return {name: self._values(column) for name, column in values.items()}
        if values.dtype.kind in "OUS":
            return values.tolist()
        t = _torch.from_numpy(values)  # the gathered rows: a new array, holds no buffer
        return t if self.device.type == "cpu" else t.to(self.device)

    def _labels(self, labels: Any) -> Optional[_torch.Tensor]:
        if labels is None:
            return None
        t = _torch.from_numpy(labels)
        if self.label_mode == "sparse":
            return t.to(_torch.int64)  # a new int64 tensor: holds no slot
        return t.clone()

    # ---- what the loader knows
    @property
    def classes(self) -> list:
        """Class names; the label is the index (ImageFolder's .classes)."""
        return self.loader.class_names

    @property
    def class_to_idx(self) -> dict:
        return {name: i for i, name in enumerate(self.classes)}

    def __repr__(self) -> str:
        return (f"<stoker.torch.DataLoader: {len(self.dataset)} samples, {len(self)} batches of "
                f"{self.batch_size}, output {self.output}, device {self.device}>")


