"""What the modules of stoker.keras share: the Keras flavour (tf_keras' Sequence, else Keras 3's
PyDataset), Pillow, Keras' file formats, the thread pool and the uint8 check."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Optional

import numpy as np

# ---------------------------------------------------------------------------------------------
# The Keras flavour: tf_keras first (its Sequence), else Keras 3 (PyDataset).
try:
    import tf_keras as _keras  # noqa: F401
    from tf_keras.utils import Sequence as _Base

    def _image_data_format() -> str:
        return _keras.backend.image_data_format()

    def _floatx() -> str:
        return _keras.backend.floatx()

    KERAS_FLAVOUR = "tf_keras"
except ImportError:  # pragma: no cover - exercised only without tf_keras
    try:
        import keras as _keras
        from keras.utils import PyDataset as _Base

        def _image_data_format() -> str:
            return _keras.config.image_data_format()

        def _floatx() -> str:
            return _keras.config.floatx()

        KERAS_FLAVOUR = "keras"
    except ImportError as e:
        raise ImportError(
            "stoker.keras needs Keras: install tf-keras (pip install tf-keras) or Keras 3 (pip install keras)"
        ) from e

try:
    from PIL import Image as _PILImage
except ImportError:  # pragma: no cover
    _PILImage = None


_WHITE_LIST_FORMATS = ("png", "jpg", "jpeg", "bmp", "ppm", "tif", "tiff")
_CHANNELS = {"rgb": 3, "rgba": 4, "grayscale": 1}

_pool_lock = threading.Lock()
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _threads() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2),
                                                          thread_name_prefix="stoker-keras")
        return _pool


def _as_u8(x: np.ndarray) -> Optional[np.ndarray]:
    """x as uint8 when every value is an integer in 0..255 (what stoker's augmenter takes), else None."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x
    if x.size == 0:
        return x.astype(np.uint8)
    if np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.bool_):
        if x.min() >= 0 and x.max() <= 255:
            return x.astype(np.uint8)
        return None
    if np.issubdtype(x.dtype, np.floating):
        if not np.isfinite(x).all() or x.min() < 0 or x.max() > 255:
            return None
        if np.array_equal(x, np.round(x)):
            return x.astype(np.uint8)
    return None


def _cpu_count() -> int:
    """The cores this process may run on (the loader's threads=0 counts the whole machine)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)

