"""
stoker's C++ pipeline; use the stoker package (stoker.Loader, stoker.keras, stoker.torch, stoker.jax)
"""

from collections.abc import Sequence
import os
from typing import Annotated

import numpy
from numpy.typing import NDArray
from typing_extensions import CapsuleType

from stoker import (
    BadAlloc as BadAlloc,
    CudaError as CudaError,
    DatasetError as DatasetError,
    DecodeError as DecodeError,
    Error as Error,
    InvalidArgument as InvalidArgument,
    IoError as IoError
)


class Dataset:
    """The samples a loader visits: file paths, class indices, class names."""

    def __len__(self) -> int: ...

    @property
    def paths(self) -> list[str]:
        """
        The file of each sample, in dataset order ('shard.tar:member' for a tar shard's).
        """

    @property
    def labels(self) -> list[int]:
        """The class index of each sample (-1: unlabelled)."""

    @property
    def class_names(self) -> list[str]:
        """Class names; the index is the label."""

    def __repr__(self) -> str: ...

def dataset_from_directory(root: str | os.PathLike, classes: Sequence[str] = [], extensions: Sequence[str] = [], follow_links: bool = False, validation_split: float = 0.0, subset: str = 'all') -> Dataset:
    """
    One sub-folder per class, files found recursively and sorted, as Keras' flow_from_directory.
    """

def dataset_from_csv(file: str | os.PathLike, base_dir: str | os.PathLike = ..., path_column: str = 'filename', label_column: str = 'class', delimiter: str = '', validation_split: float = 0.0, subset: str = 'all') -> Dataset:
    """A CSV/TSV file with a header row (Keras' flow_from_dataframe columns)."""

def is_shard_spec(arg: str, /) -> bool:
    """
    Whether --data-like text names WebDataset tar shards (a .tar path or pattern, or a .txt list)
    """

def dataset_from_webdataset(spec: str, label_field: str = '', skip_bad_samples: bool = False) -> tuple:
    """
    WebDataset tar shards (a brace pattern, a .tar, or a .txt list of shards) -> (Dataset, skipped), where skipped lists (shard, key, reason) of the samples left out with skip_bad_samples
    """

def dataset_from_list(paths: Sequence[str | os.PathLike], labels: Sequence[int] = [], class_names: Sequence[str] = [], validation_split: float = 0.0, subset: str = 'all') -> Dataset:
    """
    Samples from lists: file paths and their class indices into class_names.
    """

class AugmentSpec:
    """
    The augmentation: Keras ImageDataGenerator's parameters and stoker's additions.
    """

    def __init__(self) -> None: ...

    @property
    def height(self) -> int:
        """Output height in pixels (0: the Loader's image_size)."""

    @height.setter
    def height(self, arg: int, /) -> None: ...

    @property
    def width(self) -> int:
        """Output width in pixels (0: the Loader's image_size)."""

    @width.setter
    def width(self, arg: int, /) -> None: ...

    @property
    def channels(self) -> int:
        """Channels of the decoded input and of the output: 1, 3 or 4."""

    @channels.setter
    def channels(self, arg: int, /) -> None: ...

    @property
    def dtype(self) -> str:
        """
        Output dtype: 'uint8', 'float32', 'float16' or 'bfloat16' (the float32 values rounded as they are stored).
        """

    @dtype.setter
    def dtype(self, arg: str, /) -> None: ...

    @property
    def layout(self) -> str:
        """Output layout: 'nhwc' (channels last) or 'nchw' (channels first)."""

    @layout.setter
    def layout(self, arg: str, /) -> None: ...

    @property
    def rotation_range(self) -> float:
        """Keras' rotation_range: degrees, drawn uniformly in [-r, r)."""

    @rotation_range.setter
    def rotation_range(self, arg: float, /) -> None: ...

    @property
    def width_shift_range(self) -> object:
        """
        Keras' width_shift_range: a float (a fraction of the width when < 1, else pixels, uniform in [-r, r)), an int n (whole pixels in (-n, n)), or a list of choices; None or 0: off.
        """

    @width_shift_range.setter
    def width_shift_range(self, value: object | None) -> None: ...

    @property
    def height_shift_range(self) -> object:
        """Keras' height_shift_range, as width_shift_range for the height."""

    @height_shift_range.setter
    def height_shift_range(self, value: object | None) -> None: ...

    @property
    def shear_range(self) -> float:
        """
        Keras' shear_range: degrees (Keras 2 semantics), drawn uniformly in [-s, s).
        """

    @shear_range.setter
    def shear_range(self, arg: float, /) -> None: ...

    @property
    def zoom_range(self) -> tuple[float, float]:
        """
        Keras' zoom_range: a number z means (1 - z, 1 + z), or a pair (lo, hi); x and y zooms drawn independently.
        """

    @zoom_range.setter
    def zoom_range(self, value: object | None) -> None: ...

    @property
    def horizontal_flip(self) -> bool:
        """Keras' horizontal_flip: mirror left-right with probability 1/2."""

    @horizontal_flip.setter
    def horizontal_flip(self, arg: bool, /) -> None: ...

    @property
    def vertical_flip(self) -> bool:
        """Keras' vertical_flip: mirror top-bottom with probability 1/2."""

    @vertical_flip.setter
    def vertical_flip(self, arg: bool, /) -> None: ...

    @property
    def brightness_range(self) -> object:
        """
        Keras' brightness_range: (lo, hi) factor of PIL's ImageEnhance.Brightness; None: off.
        """

    @brightness_range.setter
    def brightness_range(self, value: object | None) -> None: ...

    @property
    def channel_shift_range(self) -> float:
        """
        Keras' channel_shift_range: one value in [-r, r) added to every channel, clipped to the image's range.
        """

    @channel_shift_range.setter
    def channel_shift_range(self, arg: float, /) -> None: ...

    @property
    def fill_mode(self) -> str:
        """
        Keras' fill_mode outside the image: 'constant' (cval), 'nearest' (default), 'reflect' or 'wrap'.
        """

    @fill_mode.setter
    def fill_mode(self, arg: str, /) -> None: ...

    @property
    def cval(self) -> float:
        """Keras' cval: the value outside the image with fill_mode='constant'."""

    @cval.setter
    def cval(self, arg: float, /) -> None: ...

    @property
    def interpolation_order(self) -> int:
        """
        Keras' interpolation_order: 0 nearest, 1 bilinear (the default); higher orders: stoker.keras only.
        """

    @interpolation_order.setter
    def interpolation_order(self, arg: int, /) -> None: ...

    @property
    def rescale(self) -> float | None:
        """
        Keras' rescale: a factor applied to the pixel values (1/255: 0..1); None or 0: off.
        """

    @rescale.setter
    def rescale(self, value: float | None) -> None: ...

    @property
    def featurewise_center(self) -> bool:
        """
        Keras' featurewise_center: subtract the fitted mean (needs featurewise, from fit_featurewise).
        """

    @featurewise_center.setter
    def featurewise_center(self, arg: bool, /) -> None: ...

    @property
    def samplewise_center(self) -> bool:
        """Keras' samplewise_center: subtract each image's own mean."""

    @samplewise_center.setter
    def samplewise_center(self, arg: bool, /) -> None: ...

    @property
    def featurewise_std_normalization(self) -> bool:
        """
        Keras' featurewise_std_normalization: divide by the fitted std (needs featurewise).
        """

    @featurewise_std_normalization.setter
    def featurewise_std_normalization(self, arg: bool, /) -> None: ...

    @property
    def samplewise_std_normalization(self) -> bool:
        """Keras' samplewise_std_normalization: divide by each image's own std."""

    @samplewise_std_normalization.setter
    def samplewise_std_normalization(self, arg: bool, /) -> None: ...

    @property
    def featurewise(self) -> object:
        """
        Featurewise (mean, std) per channel, on rescaled values (from fit_featurewise); None if not fitted.
        """

    @featurewise.setter
    def featurewise(self, value: object | None) -> None: ...

    @property
    def center_crop(self) -> object:
        """
        Central crop before the resize: a side fraction, or (fraction, keep_aspect_ratio).
        """

    @center_crop.setter
    def center_crop(self, value: object | None) -> None: ...

    @property
    def random_resized_crop(self) -> object:
        """
        torchvision's RandomResizedCrop: True (its defaults) or dict(scale=(lo, hi), ratio=(lo, hi)).
        """

    @random_resized_crop.setter
    def random_resized_crop(self, value: object | None) -> None: ...

    @property
    def contrast(self) -> float:
        """
        Contrast factor drawn in [max(0, 1 - c), 1 + c] (torchvision's ColorJitter); 0: off.
        """

    @contrast.setter
    def contrast(self, arg: float, /) -> None: ...

    @property
    def saturation(self) -> float:
        """
        Saturation factor drawn in [max(0, 1 - s), 1 + s] (torchvision's ColorJitter); 0: off.
        """

    @saturation.setter
    def saturation(self, arg: float, /) -> None: ...

    @property
    def hue(self) -> float:
        """
        Hue shift in turns drawn in [-h, h], h <= 0.5 (torchvision's ColorJitter); 0: off.
        """

    @hue.setter
    def hue(self, arg: float, /) -> None: ...

    @property
    def normalization(self) -> object:
        """
        Per-channel (x - mean) / std on the 0..255 scale: 'tf', 'caffe', 'torch' or dict(mean=, std=, bgr=).
        """

    @normalization.setter
    def normalization(self, value: object | None) -> None: ...

    @property
    def training(self) -> bool:
        """False: only the deterministic part (validation)."""

    @training.setter
    def training(self, arg: bool, /) -> None: ...

    @property
    def keras_axis_conventions(self) -> bool:
        """
        True: Keras' exact axis conventions for the geometric transforms (pixel parity with Keras); False: the geometric ones.
        """

    @keras_axis_conventions.setter
    def keras_axis_conventions(self, arg: bool, /) -> None: ...

    def validation(self) -> AugmentSpec:
        """The same spec in validation mode."""

    def __copy__(self) -> AugmentSpec: ...

class Augmenter:
    """The CPU augmentation: Keras' random transforms, stoker's RNG."""

    def __init__(self, spec: AugmentSpec) -> None: ...

    @property
    def spec(self) -> AugmentSpec: ...

    @property
    def output_shape(self) -> list[int]: ...

    def apply_batch(self, images: object, seed: int = 0, epoch: int = 0, sample_ids: Sequence[int] | None = None, threads: int = 0) -> object:
        """
        Augments a uint8 batch (N, H, W, C) or a list of (H, W, C) images on stoker's threads. Sample i draws its parameters from (seed, epoch, sample_ids[i] or i).
        """

    def params(self, seed: int, epoch: int, sample_id: int, src_height: int, src_width: int) -> dict:
        """The parameters apply_batch draws for this sample and source size."""

    def apply_with(self, image: Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], params: dict) -> object:
        """Augments one image with the given parameters (N = 1 in the result)."""

def fit_featurewise(spec: AugmentSpec, images: object) -> tuple[list[float], list[float]]:
    """
    Keras' ImageDataGenerator.fit: per-channel mean and std of the images brought to the output size (deterministic part of the spec) and rescaled.
    """

def loader_settings() -> list:
    """
    The loader's settings as one table describes them (stoker/pipeline/loader_settings.hpp): dicts of name, type, default (text; None: unset), help, choices, min, max, flag (the command's) and differences ({where: (default, why)}: the defaults that differ on purpose).
    """

def resolve_sharding(rank: int | None = None, world_size: int | None = None) -> tuple:
    """
    (rank, world_size) as a loader resolves them: both given, or neither (then the launcher's environment: RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, else 0 of 1).
    """

def default_threads() -> int:
    """
    The decode threads of threads=0: the cores this process may use (affinity mask, cgroup quota).
    """

class Batch:
    """A batch in host memory; its arrays are views of the loader's buffer."""

    @property
    def images(self) -> object:
        """Pixels: (N, H, W, C) or (N, C, H, W), the augmentation's dtype."""

    @property
    def labels(self) -> object:
        """
        Per label_mode: int32 (N,) sparse, float32 (N,) binary, (N, K) categorical
        """

    @property
    def classes(self) -> object:
        """Class index per sample, int32 (-1: unlabelled)"""

    @property
    def sample_ids(self) -> object:
        """Index of each sample in the dataset, int64"""

    @property
    def padding(self) -> object:
        """
        True for a sample that only pads this rank's share to the common count (count it once)
        """

    @property
    def epoch(self) -> int: ...

    @property
    def index(self) -> int:
        """Position of the batch in its epoch"""

    @property
    def paths(self) -> list: ...

    def __len__(self) -> int: ...

    def __repr__(self) -> str: ...

class Loader:
    """The C++ loader (use stoker.Loader)."""

    def __init__(self, dataset: Dataset, settings: dict, copy: bool = False, pin_memory: bool = False) -> None:
        """
        pin_memory: batch buffers in page-locked memory when the build has CUDA and a device is visible (see `pinned`), else pageable memory.
        """

    def begin_epoch(self, epoch: int) -> None: ...

    def next(self) -> Batch | None:
        """
        The next batch of the epoch, or None at its end (waits without the GIL).
        """

    def close(self) -> None:
        """
        Stops decoding and joins the loader's threads; batches still held stay valid. A next() waiting in another thread raises stoker.Error saying the loader was closed, as every later call does.
        """

    def __len__(self) -> int: ...

    @property
    def dataset(self) -> Dataset: ...

    @property
    def threads(self) -> int: ...

    @property
    def buffer_bytes(self) -> int: ...

    @property
    def pinned(self) -> bool:
        """True when the batch buffers are page-locked (pin_memory)"""

    @property
    def sample_shape(self) -> list[int]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def label_width(self) -> int: ...

    @property
    def samples_per_epoch(self) -> int: ...

    @property
    def sharding(self) -> tuple:
        """(rank, world_size) as resolved at construction"""

    def stats(self) -> object: ...

    def reset_stats(self) -> None: ...

    def skipped(self) -> list:
        """(sample_id, path, reason) of each sample skipped in the current epoch"""

    def cache_status(self) -> str: ...

    def state(self) -> str:
        """The state after the batches delivered so far (LoaderState::to_string)"""

    def resume(self, state: str) -> None:
        """Starts the saved epoch at its next batch"""

class DeviceArray:
    """A batch array in device memory, exported through DLPack."""

    def __dlpack__(self, *, stream: int | None = None, max_version: object | None = None, dl_device: object | None = None, copy: bool | None = None) -> CapsuleType: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def data_ptr(self) -> int: ...

class DeviceBatch:
    """A batch in device memory (images, device_labels) with host labels."""

    @property
    def images(self) -> object: ...

    @property
    def labels(self) -> object: ...

    @property
    def sample_ids(self) -> object: ...

    @property
    def padding(self) -> object: ...

    @property
    def device_labels(self) -> object: ...

    @property
    def epoch(self) -> int: ...

    @property
    def index(self) -> int: ...

    def __len__(self) -> int: ...

class GpuFeed:
    """The GPU feed (use stoker.Loader(device='cuda:N'))."""

    def __init__(self, dataset: Dataset, settings: dict, device: int = 0, depth: int = 3, dtype: str = '') -> None: ...

    def begin_epoch(self, epoch: int) -> None: ...

    def next(self) -> DeviceBatch | None: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...

    def describe(self) -> str: ...

    @property
    def sharding(self) -> tuple: ...

    def stats(self) -> object: ...

    def state(self) -> str:
        """The state after the batches delivered so far (LoaderState::to_string)"""

    def resume(self, state: str) -> None:
        """Starts the saved epoch at its next batch"""

def cuda_device_count() -> int:
    """CUDA devices usable here (0 without a GPU or CUDA)"""

def cuda_unavailable_reason() -> str:
    """Why cuda_device_count() is 0 ('' when not)"""

def stream_synchronize(stream: int = 1) -> None:
    """
    The host waits for a CUDA stream (DLPack's numbering: 1 the legacy default stream), for consumers without a CUDA library of their own.
    """

cuda_build: str
