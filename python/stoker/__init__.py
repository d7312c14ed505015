"""stoker: the C++ image pipeline that keeps a GPU fed, from Python.

    import stoker
    loader = stoker.Loader("data/train", image_size=224, batch_size=64,
                           augment=stoker.Augment(rotation_range=30, horizontal_flip=True))
    for batch in loader:          # one epoch; the next `for` is the next epoch
        batch.images              # NumPy uint8 (64, 224, 224, 3), a view of stoker's buffer
        batch.labels              # int32 class indices

Framework adapters import their framework only when used: stoker.keras (ImageDataGenerator),
stoker.torch (DataLoader), stoker.jax (batches of jax.Array).
"""

from ._stoker import (
    AugmentSpec,
    Augmenter,
    BadAlloc,
    CudaError,
    Dataset,
    DatasetError,
    DecodeError,
    Error,
    InvalidArgument,
    IoError,
    cuda_build,
    cuda_device_count,
    cuda_unavailable_reason,
    fit_featurewise,
)
from ._loader import Augment, Loader, SkippedSample, dataset
from ._targets import Labelled, LabelledBatch

__version__ = "0.1.0"

__all__ = [
    "Augment",
    "AugmentSpec",
    "Augmenter",
    "BadAlloc",
    "CudaError",
    "Dataset",
    "DatasetError",
    "DecodeError",
    "Error",
    "InvalidArgument",
    "IoError",
    "Labelled",
    "LabelledBatch",
    "Loader",
    "SkippedSample",
    "cuda_build",
    "cuda_device_count",
    "cuda_unavailable_reason",
    "dataset",
    "fit_featurewise",
]
