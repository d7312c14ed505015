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

On the GPU (device='cuda:N') stoker's GPU feed decodes on the host, augments with CUDA kernels
and hands the batch over through DLPack on the current PyTorch stream (no host synchronisation);
the slot is reused after the work queued on that stream is done.

Importing this module imports torch; without PyTorch it raises ImportError with an install hint.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Tuple, Union

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


def _torch_device(device: str) -> _torch.device:
    cuda = _loader._device(device)
    return _torch.device("cpu") if cuda is None else _torch.device("cuda", cuda)


class DataLoader(_loader.FrameworkLoader):
    """An iterable of (images, labels) torch tensors, one epoch per iteration.

    source, image_size, batch_size, shuffle, seed, cache, cache_budget, cache_file, threads,
    prefetch, drop_last, on_bad_sample, keep_aspect_ratio, dct_scaling: as stoker.Loader, with the
    defaults of docs/loader-settings.md (threads=0: all cores; stoker's threads do the work, there
    are no worker processes).
    interpolation: 'bilinear' by default here, on purpose: torchvision's Resize resizes bilinearly
      and PyTorch users expect it (stoker.Loader and the command default to Keras' 'nearest').

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
    device: 'cpu' or 'cuda:N' (GPU augmentation, tensors on that device; dtype may then be
      'float16' or 'bfloat16').
    copy: True makes every batch an independent tensor (no pooled buffer is held).
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
        batch_size: int = _default("batch_size", "torch"),
        shuffle: bool = _default("shuffle", "torch"),
        seed: int = _default("seed", "torch"),
        augment: Any = None,
        output: str = "float",
        normalize: Any = None,
        label_mode: Optional[str] = _default("label_mode", "torch"),
        cache: Any = _default("cache", "torch"),
        threads: int = _default("threads", "torch"),
        prefetch: int = _default("prefetch", "torch"),
        drop_last: bool = _default("drop_last", "torch"),
        on_bad_sample: str = _default("on_bad_sample", "torch"),
        device: str = "cpu",
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
    ):
        self.device = _torch_device(device)
        cuda = self.device.type == "cuda"
        spec = _loader.output_spec(augment, output, normalize, "nchw" if output == "float" else "nhwc")
        if dtype is not None and not cuda and dtype != ("float32" if output == "float" else "uint8"):
            raise _stoker.InvalidArgument(
                f"dtype {dtype!r} on the CPU: output='float' gives float32, output='uint8' uint8")
        data = _loader.dataset(source)
        if rank is None and world_size is None and _torch.distributed.is_available() \
                and _torch.distributed.is_initialized():
            rank, world_size = _torch.distributed.get_rank(), _torch.distributed.get_world_size()
        self.with_padding = with_padding
        self.output = output
        self.label_mode = label_mode
        self.copy = copy
        self.loader = _loader.Loader(
            data,
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
            copy=copy and not cuda,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype if cuda else None,
            depth=depth,
            rank=rank,
            world_size=world_size,
            shard_mode=shard_mode,
            drop_remainder=drop_remainder,
            dct_scaling=dct_scaling,
            cache_budget=cache_budget,
            cache_file=cache_file,
        )
        self.batch_size = batch_size

    # ---- iteration
    def __iter__(self) -> Iterator[Tuple[_torch.Tensor, Optional[_torch.Tensor]]]:
        convert = self._device_batch if self.device.type == "cuda" else self._host_batch
        for batch in self.loader:
            out = convert(batch)
            if self.with_padding:
                out = (*out, _torch.from_numpy(batch.padding.copy()))
            del batch  # only the tensors hold the buffer: dropping them frees it
            yield out

    def _host_batch(self, batch: Any) -> Tuple[_torch.Tensor, Optional[_torch.Tensor]]:
        # torch.from_dlpack over the NumPy view: the tensor holds the view, the view the slot.
        images = _torch.from_dlpack(batch.images)
        return images, self._labels(batch.labels)

    def _device_batch(self, batch: Any) -> Tuple[_torch.Tensor, Optional[_torch.Tensor]]:
        # DeviceArray.__dlpack__(stream=...) receives torch's current stream: that stream waits
        # for the batch's ready event, and the slot is recycled after the work queued on it.
        with _torch.cuda.device(self.device):
            images = _torch.from_dlpack(batch.images)
            if self.copy:
                images = images.clone()
            if self.label_mode is None:
                return images, None
            labels = _torch.from_dlpack(batch.device_labels)
            if self.label_mode == "sparse":
                labels = labels.reshape(-1).to(_torch.int64)
            elif self.label_mode == "binary":
                labels = labels.reshape(-1).clone()
            else:
                labels = labels.clone()
        return images, labels

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


