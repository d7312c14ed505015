"""What the modules of stoker.keras share: the Keras flavours (the Sequence classes of every Keras
installed), Pillow, Keras' file formats, the thread pool and the uint8 check."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Optional

import numpy as np

# ---------------------------------------------------------------------------------------------
# The Keras flavours. model.fit of each Keras takes only its own Sequence class (tf_keras'
# KerasSequenceAdapter: isinstance(x, tf_keras.utils.Sequence); Keras 3's get_data_adapter:
# isinstance(x, keras.utils.PyDataset)), and tf_keras and Keras 3 are often installed side by side
# (tensorflow's tf.keras is Keras 3, `pip install tf-keras` adds Keras 2). The iterators subclass
# the class of each one installed, so that the Keras the model belongs to takes them, whichever
# that is. Neither class holds state that the other uses: tf_keras' Sequence has no __init__ and
# no attributes; PyDataset's __init__ sets workers, use_multiprocessing and max_queue_size, which
# only Keras 3's fit reads.
_flavours = []  # (name, module, Sequence class)
try:
    import tf_keras as _tf_keras
    from tf_keras.utils import Sequence as _TfKerasSequence

    _flavours.append(("tf_keras", _tf_keras, _TfKerasSequence))
except ImportError:
    pass
try:
    import keras as _keras3

    if hasattr(_keras3.utils, "PyDataset"):  # Keras 3
        _flavours.append(("keras", _keras3, _keras3.utils.PyDataset))
    elif _keras3.utils.Sequence not in [f[2] for f in _flavours]:  # pragma: no cover - Keras 2 (tf.keras <= 2.15)
        _flavours.append(("keras", _keras3, _keras3.utils.Sequence))
except ImportError:
    pass
if not _flavours:
    raise ImportError("stoker.keras needs Keras: install tf-keras (pip install tf-keras) or Keras 3 (pip install keras)")

KERAS_FLAVOURS = tuple(name for name, _, _ in _flavours)
_keras = _flavours[0][1]
_BASES = tuple(base for _, _, base in _flavours)


def _setting(name: str) -> list:
    """The value of a Keras setting ("image_data_format", "floatx") in each Keras installed."""
    out = []
    for _, module, _ in _flavours:
        config = getattr(module, "config", None)
        reader = getattr(config, name, None) or getattr(module.backend, name)
        out.append(reader())
    return out


def _image_data_format() -> str:
    """Keras' image_data_format: "channels_first" when either Keras says so (both read
    ~/.keras/keras.json; a value set in one by set_image_data_format is followed)."""
    return "channels_first" if "channels_first" in _setting("image_data_format") else "channels_last"


def _floatx() -> str:
    """Keras' floatx: the first that is not the default float32 (set in keras.json or in one Keras)."""
    return next((v for v in _setting("floatx") if v != "float32"), "float32")


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

