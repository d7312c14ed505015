"""stoker.keras: a drop-in replacement for Keras' ImageDataGenerator.

    from stoker.keras import ImageDataGenerator      # instead of tf_keras.preprocessing.image
    gen = ImageDataGenerator(rescale=1 / 255, rotation_range=30, horizontal_flip=True,
                             validation_split=0.2)
    train = gen.flow_from_directory("data", target_size=(150, 150), subset="training")
    val = gen.flow_from_directory("data", target_size=(150, 150), subset="validation")
    model.fit(train, validation_data=val)

The constructor and the methods (flow, flow_from_directory, flow_from_dataframe, fit,
standardize, get_random_transform, apply_transform, random_transform) take the same arguments
with the same defaults and meaning as tf_keras' ImageDataGenerator. The iterators subclass
tf_keras.utils.Sequence (or Keras 3's keras.utils.PyDataset when only Keras 3 is installed) and
carry Keras' attributes (class_indices, classes, filenames, filepaths, labels, samples, n,
batch_size, num_classes, image_shape, index_array, ...). Class order, file order, the
validation split, the shuffle order of the first epoch (for a given seed), label arrays and batch
dtypes/shapes are Keras'.

How a batch is made
-------------------
1. Decoding (files) -- by default (decoder=None) stoker's C++ Loader decodes whenever it can:
   color_mode='rgb' and any Keras interpolation (nearest, bilinear, bicubic, lanczos, box,
   hamming: Pillow's resize re-implemented in C++, keep_aspect_ratio as Keras' box), with JPEGs
   decoded at full size as PIL does (dct_scaling=False). Otherwise (color_mode 'grayscale' or
   'rgba') Pillow decodes each file exactly as Keras' load_img does, on a thread pool.
   decoder='pil' or decoder='stoker' forces one. The C++ path equals Keras' pixels except where
   Pillow (13.x) runs its resize passes vertical-first while shrinking both ways (a rule stoker
   has not reproduced): there bilinear/box/hamming differ by at most 1 grey level and
   bicubic/lanczos by more; and PNGs/JPEGs whose PIL conversion to RGB differs from OpenCV's/
   TurboJPEG's (16-bit PNGs, CMYK JPEGs) differ too. decoder='pil' is pixel-identical always.
   Arrays given to flow() are used as they are.
2. Augmentation, rescale and standardisation run in C++ (stoker.Augmenter.apply_batch, on
   stoker's threads, GIL released) on the uint8 images: one call per batch, producing the
   float32 batch in the requested data_format. When a preprocessing_function is given, C++
   produces the augmented float images, then preprocessing_function and Keras' standardize
   (rescale, sample-wise, feature-wise) run per image in NumPy, in Keras' order.
   Featurewise statistics that are not per channel (a user-set per-pixel `mean`) are applied in
   NumPy too.
3. Random access: `__getitem__(i)` works in any order (Keras Sequence semantics): batch i of
   the epoch is index_array[i*batch_size:(i+1)*batch_size]; the files of batch i+1 are decoded
   in the background while batch i is used (the exact path: one Loader per batch).
4. In-order access -- it[0], it[1], ... of an epoch, `next(it)` / `for x, y in it`, and
   model.fit(it, shuffle=False) -- is pipelined (file iterators with stoker's decoder): the first
   request of an epoch for batch 0 starts one persistent C++ Loader over the epoch's files in
   index_array order, `prefetch` batches ahead on stoker's threads, and each next batch comes
   from it (the batches in between of up to 8 requests running ahead are held; the last batch
   asked again is served again). Any other request (out of order, behind the pipeline) takes the
   exact path of 3; a new epoch (on_epoch_end, reset, next() wrapping) drops the pipeline, and a
   bad file ends it (the error is raised for its batch, as Keras' load_img would; the rest of the
   epoch takes the exact path). `it.pipelined = False` turns it off, "decode" keeps it to
   decoding; `it.pipelined_batches` counts the batches it served.
   - A deterministic generator (no random transform), a preprocessing_function, or per-pixel
     featurewise statistics: the Loader makes the exact path's uint8 pixels (full-size JPEG decode,
     Pillow-exact resize) and 2. runs on them as on the exact path: the same values as 3., Keras'
     pixels for a deterministic generator.
   - A random augmentation: decode, augmentation, rescale and standardisation are one pass inside
     the Loader (stoker's Augmenter as its transform, float32 out): the warp samples the decoded
     source directly (the output size folded into the affine transform, bilinear with
     interpolation_order=1; keep_aspect_ratio as a centre crop) where Keras first resizes with PIL
     (`interpolation`) and then warps at the target size. Both are legitimate and mean the same
     transforms (Keras' parameter ranges, fractions of the target size); the pixels differ, so a
     batch asked in order and again out of order has the same files, labels and transform
     ranges but not the same pixels. JPEGs are decoded DCT-scaled where that stays above the target
     (the decoder uses only TurboJPEG's fast 1/2, 1/4 and 1/8 scales). Draws are keyed by (seed,
     epoch, position in the epoch): reproducible for a given seed.
   Keras' model.fit asks a Sequence's batches in a random order by default (shuffle=True in
   fit): pass shuffle=False to fit (the iterator shuffles its files each epoch anyway) to get the
   pipelined path.

Random transforms are drawn from stoker's Philox RNG keyed by (seed, epoch, sample index) (the
pipelined fused path: position in the epoch), not from NumPy's global RNG: the same
distributions as Keras (same parameter ranges), not the same draws. The same batch asked twice
within an epoch by the same path gets the same transforms; each epoch (each
on_epoch_end / index-array reset) draws new ones. With seed=None a seed is drawn from NumPy's
global RNG when the iterator is made.

Data that stoker's C++ augmenter cannot take (float arrays whose values are not integers in
0..255, or a channel count other than 1, 3, 4) follows Keras' per-image path in NumPy/SciPy
(parameters still drawn from stoker's RNG). apply_transform uses the binding's
Augmenter.apply_with when it accepts (H, W, C) images (the current binding rejects them), else the
same NumPy/SciPy path, which is Keras' math.

Not implemented (NotImplementedError naming the argument): zca_whitening=True;
interpolation_order other than 0/1; decoder='stoker' with color_mode other than 'rgb';
color_mode='grayscale' on 16/32-bit images (PIL
modes 'I;16'/'I'). Unlike Keras, unknown keyword arguments of flow_from_dataframe raise
TypeError instead of being ignored.

Measured against tf_keras 2.x (python/tests/test_keras.py): file lists, classes, splits and
labels identical; decoder='pil' batches pixel-identical for every interpolation; standardised
values within 2e-5; the C++ batch augmentation against Keras' apply_transform with the same
parameters: 0 for flips, brightness, channel shift and order-0 warps, at most 1.33 grey levels for
bilinear warps.
"""

from __future__ import annotations

import collections
import concurrent.futures
import io
import os
import threading
import warnings
from typing import Optional

import numpy as np

from . import _stoker
from ._loader import Augment

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

__all__ = ["ImageDataGenerator", "DirectoryIterator", "DataFrameIterator", "NumpyArrayIterator", "Iterator"]

_WHITE_LIST_FORMATS = ("png", "jpg", "jpeg", "bmp", "ppm", "tif", "tiff")
_PIL_FILTERS = ("nearest", "bilinear", "bicubic", "hamming", "box", "lanczos")
_STOKER_FILTERS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
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


# ---------------------------------------------------------------------------------------------
# Decoding files as Keras' load_img does.
def _load_pil(path: str, color_mode: str, target_size, interpolation: str, keep_aspect_ratio: bool) -> np.ndarray:
    with open(path, "rb") as f:
        img = _PILImage.open(io.BytesIO(f.read()))
    try:
        if color_mode == "grayscale":
            if img.mode in ("I;16", "I"):
                raise NotImplementedError(
                    f"color_mode='grayscale' on a 16/32-bit image ({path}, PIL mode {img.mode}): stoker's "
                    "augmenter takes 8-bit images")
            if img.mode != "L":
                img = img.convert("L")
        elif color_mode == "rgba":
            if img.mode != "RGBA":
                img = img.convert("RGBA")
        else:
            if img.mode != "RGB":
                img = img.convert("RGB")
        if target_size is not None:
            size = (int(target_size[1]), int(target_size[0]))  # PIL: (width, height)
            if img.size != size:
                resample = getattr(_PILImage, "Resampling", _PILImage)
                resample = getattr(resample, interpolation.upper())
                if keep_aspect_ratio:
                    width, height = img.size
                    crop_h = min(height, (width * size[1]) // size[0])
                    crop_w = min(width, (height * size[0]) // size[1])
                    top = (height - crop_h) // 2
                    left = (width - crop_w) // 2
                    img = img.resize(size, resample, box=(left, top, left + crop_w, top + crop_h))
                else:
                    img = img.resize(size, resample)
        a = np.asarray(img, dtype=np.uint8)
    finally:
        img.close()
    if a.ndim == 2:
        a = a[:, :, None]
    return a


class _FileDecoder:
    """uint8 NHWC batches of files at target_size, by Pillow (Keras' load_img) or stoker's Loader."""

    def __init__(self, filepaths, color_mode, target_size, interpolation, keep_aspect_ratio, decoder):
        if decoder is None:  # the C++ decoder whenever it gives Keras' pixels
            decoder = "stoker" if color_mode == "rgb" and interpolation in _STOKER_FILTERS else "pil"
        if decoder not in ("pil", "stoker"):
            raise ValueError(f"decoder must be 'pil' or 'stoker', received {decoder!r}")
        if decoder == "pil":
            if _PILImage is None:
                raise ImportError("stoker.keras decoder='pil' needs Pillow (pip install pillow)")
            if interpolation not in _PIL_FILTERS:
                raise ValueError(f"Invalid interpolation method {interpolation} specified. Supported methods are "
                                 + ", ".join(_PIL_FILTERS))
        else:
            if color_mode != "rgb":
                raise NotImplementedError(
                    f"color_mode={color_mode!r} with decoder='stoker': stoker's decoder gives RGB only; "
                    "use decoder='pil'")
            if interpolation not in _STOKER_FILTERS:
                raise NotImplementedError(
                    f"interpolation={interpolation!r} with decoder='stoker' (it has {', '.join(_STOKER_FILTERS)}); "
                    "use decoder='pil'")
        self.filepaths = filepaths
        self.color_mode = color_mode
        self.target_size = tuple(int(v) for v in target_size)
        self.interpolation = interpolation
        self.keep_aspect_ratio = bool(keep_aspect_ratio)
        self.decoder = decoder
        self.channels = _CHANNELS[color_mode]

    def __call__(self, indices) -> np.ndarray:
        indices = [int(j) for j in indices]
        h, w = self.target_size
        if not indices:
            return np.zeros((0, h, w, self.channels), np.uint8)
        paths = [self.filepaths[j] for j in indices]
        if self.decoder == "stoker":
            ds = _stoker.dataset_from_list(paths, [], [])
            # These exact files, whatever RANK/WORLD_SIZE say: the iterator has chosen them.
            settings = dict(batch_size=len(paths), height=h, width=w, interpolation=self.interpolation,
                            keep_aspect_ratio=self.keep_aspect_ratio, label_mode="none", shuffle=False,
                            prefetch=1, dct_scaling=False, rank=0, world_size=1, threads=_cpu_count())
            loader = _stoker.Loader(ds, settings, copy=True)
            try:
                loader.begin_epoch(0)
                batch = loader.next()
                return np.array(batch.images, copy=True)
            finally:
                loader.close()
        out = np.empty((len(paths), h, w, self.channels), np.uint8)

        def one(i: int) -> None:
            out[i] = _load_pil(paths[i], self.color_mode, self.target_size, self.interpolation,
                               self.keep_aspect_ratio)

        if len(paths) == 1:
            one(0)
        else:
            for f in [_threads().submit(one, i) for i in range(len(paths))]:
                f.result()
        return out


def _array_to_pil(x: np.ndarray, data_format: str):
    """Keras' array_to_img(x, data_format, scale=True)."""
    x = np.asarray(x, dtype=np.float32)
    if data_format == "channels_first":
        x = x.transpose(1, 2, 0)
    x = x - np.min(x)
    top = np.max(x)
    if top != 0:
        x /= top
    x = (x * 255).astype(np.uint8)
    if x.shape[2] == 4:
        return _PILImage.fromarray(x, "RGBA")
    if x.shape[2] == 3:
        return _PILImage.fromarray(x, "RGB")
    if x.shape[2] == 1:
        return _PILImage.fromarray(x[:, :, 0], "L")
    raise ValueError(f"Unsupported channel number: {x.shape[2]}")



# ---------------------------------------------------------------------------------------------
# Keras' apply_transform in NumPy/SciPy, for what stoker's C++ augmenter cannot take.
_apply_with_state: Optional[bool] = None


def _apply_with_works() -> bool:
    """Whether the binding's Augmenter.apply_with accepts a (H, W, C) uint8 image (the current
    binding rejects every 3-D array: it re-reads the image as a list of rows)."""
    global _apply_with_state
    if _apply_with_state is None:
        spec = Augment(height=2, width=2)
        try:
            _stoker.Augmenter(spec).apply_with(np.zeros((2, 2, 3), np.uint8), {})
            _apply_with_state = True
        except _stoker.InvalidArgument:
            _apply_with_state = False
    return _apply_with_state


def _apply_transform_numpy(x, params, fill_mode, cval, order):
    """Keras' apply_transform on an HWC float image: affine (scipy.ndimage), channel shift, flips,
    brightness (Pillow), in Keras' order."""
    get = dict(params).get
    theta, tx, ty = get("theta", 0) or 0, get("tx", 0) or 0, get("ty", 0) or 0
    shear, zx, zy = get("shear", 0) or 0, get("zx", 1), get("zy", 1)
    zx = 1 if zx is None else zx
    zy = 1 if zy is None else zy
    m = np.eye(3)
    if theta:
        t = np.deg2rad(theta)
        m = m @ np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])
    if tx or ty:
        m = m @ np.array([[1, 0, tx], [0, 1, ty], [0, 0, 1]])
    if shear:
        s = np.deg2rad(shear)
        m = m @ np.array([[1, -np.sin(s), 0], [0, np.cos(s), 0], [0, 0, 1]])
    if zx != 1 or zy != 1:
        m = m @ np.array([[zx, 0, 0], [0, zy, 0], [0, 0, 1]])
    if theta or tx or ty or shear or zx != 1 or zy != 1:
        from scipy import ndimage  # Keras' own dependency for transforms

        # Keras centres with (rows, cols) offsets, then swaps the two axes of the matrix before
        # handing it to ndimage (its row axis comes before its column axis in both data formats).
        h, w = x.shape[0], x.shape[1]
        o0, o1 = h / 2 - 0.5, w / 2 - 0.5
        m = np.array([[1, 0, o0], [0, 1, o1], [0, 0, 1]]) @ m @ np.array([[1, 0, -o0], [0, 1, -o1], [0, 0, 1]])
        m[:, [0, 1]] = m[:, [1, 0]]
        m[[0, 1]] = m[[1, 0]]
        x = np.stack([ndimage.affine_transform(x[:, :, c], m[:2, :2], m[:2, 2], order=order, mode=fill_mode,
                                               cval=cval) for c in range(x.shape[2])], axis=2)
    shift = get("channel_shift_intensity")
    if shift is None:
        shift = get("channel_shift")
    if shift is not None:
        x = np.clip(x + shift, np.min(x), np.max(x))
    if get("flip_horizontal", False):
        x = x[:, ::-1]
    if get("flip_vertical", False):
        x = x[::-1]
    brightness = get("brightness")
    if brightness is not None:
        from PIL import ImageEnhance

        lo, hi = np.min(x), np.max(x)
        local_scale = lo < 0 or hi > 255
        img = _array_to_pil(x, "channels_last") if local_scale else _plain_pil(x)
        y = np.asarray(ImageEnhance.Brightness(img).enhance(brightness), dtype=x.dtype)
        if y.ndim == 2:
            y = y[:, :, None]
        x = y / 255 * (hi - lo) + lo if local_scale else y
    return np.ascontiguousarray(x)


def _plain_pil(x):
    """Keras' array_to_img(x, scale=False): values cast to uint8 as they are."""
    a = np.asarray(x).astype(np.uint8)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(a.shape[2])
    if mode is None:
        raise ValueError(f"Unsupported channel number: {a.shape[2]}")
    return _PILImage.fromarray(a[:, :, 0] if mode == "L" else a, mode)

# ---------------------------------------------------------------------------------------------
# Iterators.
class Iterator(_Base):
    """Keras' Iterator semantics: __getitem__ (any order), __len__, on_epoch_end, next()."""

    white_list_formats = _WHITE_LIST_FORMATS

    def __init__(self, n, batch_size, shuffle, seed):
        try:
            super().__init__()
        except TypeError:  # pragma: no cover
            pass
        self.n = int(n)
        self.batch_size = int(batch_size)
        self.seed = seed
        self.shuffle = shuffle
        self.batch_index = 0
        self.total_batches_seen = 0
        self.lock = threading.Lock()
        self.index_array = None
        self.index_generator = self._flow_index()
        # stoker's augmentation key: (seed, epoch, sample index).
        self._aug_seed = int(seed) if seed is not None else int(np.random.randint(0, 2**31 - 1))
        self._epoch = -1
        self._prefetched: dict = {}
        # The pipelined path (file iterators): in-order batches from one Loader per epoch.
        self.pipelined = True  # False: every batch takes the exact (per-batch) path
        self.pipelined_batches = 0  # batches served by the pipeline so far (for tests, profiling)
        self._pipe = None
        self._pipe_lock = threading.RLock()
        self._pipe_failed_epoch = None
        self._previous_request = None  # (epoch, batch index) of the last request

    # ---- the order of an epoch
    def _set_index_array(self):
        self._epoch += 1
        self._prefetched.clear()
        self._end_pipeline()
        if self.shuffle:
            if self.seed is not None:
                rng = np.random.RandomState((int(self.seed) + self.total_batches_seen) % 2**32)
                self.index_array = rng.permutation(self.n)
            else:
                self.index_array = np.random.permutation(self.n)
        else:
            self.index_array = np.arange(self.n)

    def __getitem__(self, idx):
        if idx >= len(self) or idx < -len(self):
            raise ValueError(f"Asked to retrieve element {idx}, but the Sequence has length {len(self)}")
        if idx < 0:
            idx += len(self)
        with self.lock:
            if self.index_array is None:
                self._set_index_array()
            self.total_batches_seen += 1
            index_array = self.index_array[self.batch_size * idx: self.batch_size * (idx + 1)]
            epoch = self._epoch
            following = None
            if idx + 1 < len(self):
                following = (idx + 1, self.index_array[self.batch_size * (idx + 1): self.batch_size * (idx + 2)])
        return self._get_batch(index_array, epoch, idx, following)

    def __len__(self):
        return (self.n + self.batch_size - 1) // self.batch_size

    @property
    def num_batches(self):  # Keras 3 PyDataset
        return len(self)

    def on_epoch_end(self):
        with self.lock:
            self._set_index_array()

    def reset(self):
        self.batch_index = 0

    def _flow_index(self):
        self.reset()
        while True:
            if self.batch_index == 0:
                self._set_index_array()
            current = 0 if self.n == 0 else (self.batch_index * self.batch_size) % self.n
            if self.n > current + self.batch_size:
                self.batch_index += 1
            else:
                self.batch_index = 0
            self.total_batches_seen += 1
            yield self.index_array[current: current + self.batch_size], self._epoch, current // max(self.batch_size, 1)

    def __iter__(self):
        return self

    def __next__(self, *args, **kwargs):
        return self.next(*args, **kwargs)

    def next(self):
        with self.lock:
            index_array, epoch, idx = next(self.index_generator)
        return self._get_batch(index_array, epoch, idx, None)

    def _get_batches_of_transformed_samples(self, index_array):
        """Keras' hook: the batch of these sample indices (augmented with the current epoch's draws)."""
        if self.index_array is None:
            self._set_index_array()
        return self._get_batch(np.asarray(index_array), self._epoch, None, None)

    def _get_batch(self, index_array, epoch, idx, following):
        raise NotImplementedError

    def _end_pipeline(self, close=False):
        pass


class _FileIterator(Iterator):
    """What DirectoryIterator and DataFrameIterator share: files -> batches, labels per class_mode."""

    def _set_processing_attrs(self, image_data_generator, target_size, color_mode, data_format, save_to_dir,
                              save_prefix, save_format, subset, interpolation, keep_aspect_ratio, decoder):
        self.image_data_generator = image_data_generator
        self.target_size = tuple(target_size)
        self.keep_aspect_ratio = keep_aspect_ratio
        if color_mode not in _CHANNELS:
            raise ValueError("Invalid color mode:", color_mode, '; expected "rgb", "rgba", or "grayscale".')
        self.color_mode = color_mode
        self.data_format = data_format
        c = _CHANNELS[color_mode]
        self.image_shape = self.target_size + (c,) if data_format == "channels_last" else (c,) + self.target_size
        self.save_to_dir = save_to_dir
        self.save_prefix = save_prefix
        self.save_format = save_format
        self.interpolation = interpolation
        self.decoder = decoder
        if subset is not None:
            vs = image_data_generator._validation_split
            if subset == "validation":
                split = (0, vs)
            elif subset == "training":
                split = (vs, 1)
            else:
                raise ValueError(f'Invalid subset name: {subset};expected "training" or "validation"')
        else:
            split = None
        self.split = split
        self.subset = subset

    def _make_decoder(self):
        self._decode = _FileDecoder(self.filepaths, self.color_mode, self.target_size, self.interpolation,
                                    self.keep_aspect_ratio, self.decoder)

    def _decoded(self, index_array, epoch, idx):
        key = (epoch, idx)
        future = self._prefetched.pop(key, None) if idx is not None else None
        if future is not None:
            return future.result()
        return self._decode(index_array)

    # ---- the pipelined path: one persistent Loader per epoch for in-order batches
    def _pipeline_mode(self) -> Optional[str]:
        """'fused' (decode + augmentation + standardisation inside stoker's Loader), 'decode' (the
        Loader decodes as the exact path does; augmentation/standardisation as the exact path) or
        None (no pipeline: Pillow decodes, or the iterator's `pipelined` is False)."""
        if not self.pipelined or self._decode.decoder != "stoker" or self.n == 0:
            return None
        gen = self.image_data_generator
        if (self.pipelined != "decode" and gen and gen._has_random_transform()
                and gen.preprocessing_function is None and gen._feature_channels(3) is not None):
            return "fused"
        return "decode"

    def _end_pipeline(self, close=False):
        """Drops the epoch's pipeline. Without close (a new epoch, possibly while another thread
        waits in the pipeline) the last reference going frees its Loader; close=True (under
        _pipe_lock, so no thread is inside it) stops it now."""
        pipe = getattr(self, "_pipe", None)
        self._pipe = None
        if pipe is not None and close:
            pipe.close()

    def _from_pipeline(self, idx, epoch, index_array):
        """(images, index_array, fused) of batch idx from the epoch's pipeline, or None when the
        pipeline does not serve this request (the exact path does)."""
        if idx is None or epoch < 0:
            return None
        with self._pipe_lock:
            previous = self._previous_request
            self._previous_request = (epoch, idx)
            pipe = self._pipe
            if pipe is not None and pipe.epoch != epoch:
                self._end_pipeline(close=True)
                pipe = None
            if pipe is not None:
                got = pipe.take(idx)
                if got is not None:
                    self.pipelined_batches += 1
                    return got
                if not pipe.alive and pipe.failed:
                    return None
            # A pipeline starts at batch 0 when it opens the epoch's requests (or follows its last
            # batch: another pass); a 0 amid random access (Keras' fit(shuffle=True) order) does not
            # start one, which would decode batches 1, 2, ... for nothing.
            fresh = previous is None or previous[0] != epoch or previous[1] == len(self) - 1
            if idx != 0 or not fresh or self._pipe_failed_epoch == epoch:
                return None
            mode = self._pipeline_mode()
            if mode is None:
                return None
            with self.lock:
                if self._epoch != epoch or self.index_array is None:
                    return None
                order = np.array(self.index_array, dtype=np.int64, copy=True)
            if pipe is not None:  # the epoch again from its start: the same draws
                self._end_pipeline(close=True)
            try:
                pipe = _EpochPipeline(self, epoch, order, mode)
            except Exception:  # settings the Loader rejects: the exact path serves this epoch
                self._pipe_failed_epoch = epoch
                return None
            self._pipe = pipe
            got = pipe.take(idx)
            if got is not None:
                self.pipelined_batches += 1
            return got

    def _get_batch(self, index_array, epoch, idx, following):
        index_array = np.asarray(index_array, dtype=np.int64)
        gen = self.image_data_generator
        try:
            served = self._from_pipeline(idx, epoch, index_array)
        except Exception:
            self._pipe_failed_epoch = epoch  # a bad file: the rest of this epoch takes the exact path
            with self._pipe_lock:
                self._end_pipeline(close=True)
            raise
        if served is not None:
            images, index_array, fused = served
            if fused:
                gen._warn_unfitted()
                batch_x = images
            elif gen:
                batch_x = gen._process_u8(images, self._aug_seed, max(epoch, 0), index_array, self.data_format,
                                          self.dtype)
            else:
                batch_x = images.astype(self.dtype)
                if self.data_format == "channels_first":
                    batch_x = np.ascontiguousarray(batch_x.transpose(0, 3, 1, 2))
            return self._finish(batch_x, index_array)
        images = self._decoded(index_array, epoch, idx)
        if following is not None and (epoch, following[0]) not in self._prefetched and (
                self._pipe is None or self._pipe.epoch != epoch or not self._pipe.alive):
            # Decode the next batch in the background (keyed by epoch: a new epoch drops it).
            self._prefetched = {k: v for k, v in self._prefetched.items() if k[0] == epoch}
            self._prefetched[(epoch, following[0])] = _threads().submit(self._decode, following[1])
        if gen:
            batch_x = gen._process_u8(images, self._aug_seed, max(epoch, 0), index_array, self.data_format,
                                      self.dtype)
        else:
            batch_x = images.astype(self.dtype)
            if self.data_format == "channels_first":
                batch_x = np.ascontiguousarray(batch_x.transpose(0, 3, 1, 2))
        return self._finish(batch_x, index_array)

    def _finish(self, batch_x, index_array):
        """save_to_dir and the labels of a batch, as Keras."""
        if self.save_to_dir:
            for i, j in enumerate(index_array):
                img = _array_to_pil(batch_x[i], self.data_format)
                fname = f"{self.save_prefix}_{j}_{np.random.randint(1e7)}.{self.save_format}"
                img.save(os.path.join(self.save_to_dir, fname))
        mode = self.class_mode
        classes = self.classes if mode in ("binary", "sparse", "categorical") else None
        if mode == "input":
            batch_y = batch_x.copy()
        elif mode in ("binary", "sparse"):
            if isinstance(classes, np.ndarray):
                batch_y = classes[index_array].astype(self.dtype)
            else:
                batch_y = np.empty(len(batch_x), dtype=self.dtype)
                for i, j in enumerate(index_array):
                    batch_y[i] = classes[j]
        elif mode == "categorical":
            batch_y = np.zeros((len(batch_x), len(self.class_indices)), dtype=self.dtype)
            if isinstance(classes, np.ndarray) and classes.ndim == 1:
                batch_y[np.arange(len(index_array)), classes[index_array]] = 1.0
            else:
                for i, j in enumerate(index_array):
                    batch_y[i, classes[j]] = 1.0
        elif mode == "multi_output":
            batch_y = [output[index_array] for output in self.labels]
        elif mode == "raw":
            batch_y = self.labels[index_array]
        else:
            return batch_x
        if self.sample_weight is None:
            return batch_x, batch_y
        return batch_x, batch_y, self.sample_weight[index_array]

    @property
    def filepaths(self):
        return self._filepaths


def _cpu_count() -> int:
    """The cores this process may run on (the loader's threads=0 counts the whole machine)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _EpochPipeline:
    """One epoch of a file iterator served in order by one persistent stoker Loader.

    The Loader runs over the epoch's files in index_array order (shuffle=False), `prefetch`
    batches ahead on stoker's threads. Mode 'fused': the generator's augmentation, rescale and
    standardisation are the Loader's transform (one pass from the decoded source, float32 out,
    JPEGs DCT-scaled); draws keyed by (iterator seed, epoch, position in the epoch). Mode
    'decode': the Loader makes the exact path's uint8 pixels (Pillow-exact resize, full-size
    JPEG decode) and the iterator finishes them as the exact path does."""

    # Batches a request may run ahead of the next one (concurrent in-order callers, e.g. Keras'
    # OrderedEnqueuer threads): the ones in between are held until asked for.
    window = 8

    def __init__(self, it, epoch, order, mode):
        self.epoch = epoch
        self.order = order
        self.mode = mode
        self.batch_size = it.batch_size
        self.batches = (len(order) + it.batch_size - 1) // it.batch_size
        self.next_idx = 0
        self.held: dict = {}
        self.last = None  # (idx, images, index_array) of the last batch served, for a repeat
        self.alive = True
        self.failed = False
        self.dtype = np.dtype(it.dtype)
        h, w = (int(v) for v in it.target_size)
        paths = [it.filepaths[int(j)] for j in order]
        ds = _stoker.dataset_from_list(paths, [], [])
        settings = dict(batch_size=it.batch_size, height=h, width=w, interpolation=it.interpolation,
                        keep_aspect_ratio=bool(it.keep_aspect_ratio), label_mode="none", shuffle=False,
                        seed=int(it._aug_seed), drop_last=False, threads=_cpu_count(), on_bad_sample="fail",
                        rank=0, world_size=1)
        if mode == "fused":
            gen = it.image_data_generator
            spec = gen._spec(h, w, 3, True, it.data_format, gen._feature_channels(3))
            if it.keep_aspect_ratio:
                spec.center_crop = (1.0, True)
            settings.update(augment=spec, dct_scaling=True)
            sample_bytes = h * w * 3 * 4
        else:
            settings.update(augment=None, dct_scaling=False)
            sample_bytes = h * w * 3
        # Batches decoded ahead: up to 4, within about 256 MB of batch buffers.
        settings["prefetch"] = int(min(4, max(2, (256 << 20) // max(1, sample_bytes * it.batch_size))))
        self.loader = _stoker.Loader(ds, settings, copy=False)
        self.loader.begin_epoch(max(int(epoch), 0))

    def close(self):
        self.alive = False
        self.held.clear()
        loader, self.loader = self.loader, None
        if loader is not None:
            loader.close()

    def _pull(self):
        """The loader's next batch as (images, index_array), copied out of its pooled buffer."""
        try:
            batch = self.loader.next()
        except Exception:
            self.failed = True
            self.close()
            raise
        if batch is None:  # pragma: no cover - the count says there is one
            raise RuntimeError("stoker.keras: the epoch's loader ended early")
        view = batch.images
        if self.mode == "fused" and view.dtype != self.dtype:
            images = view.astype(self.dtype)
        else:
            images = np.array(view, copy=True)
        positions = np.asarray(batch.sample_ids, dtype=np.int64)
        del view, batch  # the buffer goes back to the loader's pool
        idx = self.next_idx
        self.next_idx += 1
        if self.next_idx >= self.batches:  # every batch made: free the buffers and the threads now
            self.alive = False
            loader, self.loader = self.loader, None
            loader.close()
        return idx, images, self.order[positions]

    def take(self, idx):
        """(images, index_array, fused) of batch idx, or None when it is not in this pipeline's
        reach (behind it, too far ahead, or the pipeline closed)."""
        got = self.held.pop(idx, None)
        if got is None and self.last is not None and self.last[0] == idx:
            got = (self.last[1].copy(), self.last[2])  # the same batch asked twice: the same pixels
            return got + (self.mode == "fused",)
        if got is None:
            if not self.alive or not self.next_idx <= idx < self.next_idx + self.window:
                return None
            while True:
                k, images, index_array = self._pull()
                if k == idx:
                    got = (images, index_array)
                    break
                self.held[k] = (images, index_array)
        self.last = (idx, got[0], got[1])
        return got + (self.mode == "fused",)


def _walk_files(directory, follow_links):
    """Keras' file order in a class folder: os.walk roots sorted, files sorted within each root."""
    for root, _, files in sorted(os.walk(directory, followlinks=follow_links), key=lambda t: t[0]):
        for fname in sorted(files):
            if fname.lower().endswith(".tiff"):
                warnings.warn('Using ".tiff" files with multiple bands will cause distortion. '
                              "Please verify your output.")
            if fname.lower().endswith(_WHITE_LIST_FORMATS):
                yield root, fname


class DirectoryIterator(_FileIterator):
    """Keras' DirectoryIterator: one sub-folder per class."""

    allowed_class_modes = {"categorical", "binary", "sparse", "input", None}

    def __init__(self, directory, image_data_generator, target_size=(256, 256), color_mode="rgb", classes=None,
                 class_mode="categorical", batch_size=32, shuffle=True, seed=None, data_format=None,
                 save_to_dir=None, save_prefix="", save_format="png", follow_links=False, subset=None,
                 interpolation="nearest", keep_aspect_ratio=False, dtype=None, decoder=None):
        data_format = data_format or _image_data_format()
        dtype = dtype or _floatx()
        self._set_processing_attrs(image_data_generator, target_size, color_mode, data_format, save_to_dir,
                                   save_prefix, save_format, subset, interpolation, keep_aspect_ratio, decoder)
        self.directory = directory
        if class_mode not in self.allowed_class_modes:
            raise ValueError(f"Invalid class_mode: {class_mode}; expected one of: {self.allowed_class_modes}")
        self.class_mode = class_mode
        self.dtype = dtype
        if not classes:
            classes = [d for d in sorted(os.listdir(directory)) if os.path.isdir(os.path.join(directory, d))]
        classes = list(classes)
        self.num_classes = len(classes)
        self.class_indices = dict(zip(classes, range(len(classes))))
        # The file list is built here rather than by stoker's C++ folder source, whose order inside
        # nested sub-folders differs from Keras' (it sorts whole relative paths; Keras sorts os.walk
        # roots, then the files of each root).
        self.filenames = []
        labels = []
        for name in classes:
            folder = os.path.join(directory, name)
            files = list(_walk_files(folder, follow_links))
            if self.split:
                files = files[int(self.split[0] * len(files)): int(self.split[1] * len(files))]
            for root, fname in files:
                self.filenames.append(os.path.join(name, os.path.relpath(os.path.join(root, fname), folder)))
                labels.append(self.class_indices[name])
        self.samples = len(self.filenames)
        self.classes = np.asarray(labels, dtype="int32").reshape(self.samples)
        print(f"Found {self.samples} images belonging to {self.num_classes} classes.")
        self._filepaths = [os.path.join(directory, f) for f in self.filenames]
        self._make_decoder()
        super().__init__(self.samples, batch_size, shuffle, seed)

    @property
    def labels(self):
        return self.classes

    @property
    def sample_weight(self):
        return None


class DataFrameIterator(_FileIterator):
    """Keras' DataFrameIterator: file names (and labels) from a pandas DataFrame."""

    allowed_class_modes = {"binary", "categorical", "input", "multi_output", "raw", "sparse", None}

    def __init__(self, dataframe, directory=None, image_data_generator=None, x_col="filename", y_col="class",
                 weight_col=None, target_size=(256, 256), color_mode="rgb", classes=None, class_mode="categorical",
                 batch_size=32, shuffle=True, seed=None, data_format="channels_last", save_to_dir=None,
                 save_prefix="", save_format="png", subset=None, interpolation="nearest", keep_aspect_ratio=False,
                 dtype="float32", validate_filenames=True, decoder=None):
        self._set_processing_attrs(image_data_generator, target_size, color_mode, data_format, save_to_dir,
                                   save_prefix, save_format, subset, interpolation, keep_aspect_ratio, decoder)
        df = dataframe.copy()
        self.directory = directory or ""
        self.class_mode = class_mode
        self.dtype = dtype
        self._check_params(df, x_col, y_col, weight_col, classes)
        if validate_filenames:
            full = df[x_col].map(lambda f: os.path.join(self.directory, f))
            keep = full.map(lambda p: p.lower().endswith(_WHITE_LIST_FORMATS) and os.path.isfile(p))
            bad = int((~keep).sum())
            if bad:
                warnings.warn(f'Found {bad} invalid image filename(s) in x_col="{x_col}". '
                              "These filename(s) will be ignored.")
            df = df[keep]
        if class_mode not in ("input", "multi_output", "raw", None):
            df, classes = self._filter_classes(df, y_col, classes)
            num_classes = len(classes)
            self.class_indices = dict(zip(classes, range(len(classes))))
        if self.split:
            n = len(df)
            df = df.iloc[int(self.split[0] * n): int(self.split[1] * n), :]
        if class_mode not in ("input", "multi_output", "raw", None):
            self.classes = [[self.class_indices[v] for v in lab] if isinstance(lab, (list, tuple))
                            else self.class_indices[lab] for lab in df[y_col]]
        self.filenames = df[x_col].tolist()
        self._sample_weight = df[weight_col].values if weight_col else None
        if class_mode == "multi_output":
            self._targets = [np.array(df[col].tolist()) for col in y_col]
        if class_mode == "raw":
            self._targets = df[y_col].values
        self.samples = len(self.filenames)
        validated = "validated" if validate_filenames else "non-validated"
        if class_mode in ("input", "multi_output", "raw", None):
            print(f"Found {self.samples} {validated} image filenames.")
        else:
            print(f"Found {self.samples} {validated} image filenames belonging to {num_classes} classes.")
        self._filepaths = [os.path.join(self.directory, f) for f in self.filenames]
        self._make_decoder()
        super().__init__(self.samples, batch_size, shuffle, seed)

    def _check_params(self, df, x_col, y_col, weight_col, classes):
        mode = self.class_mode
        if mode not in self.allowed_class_modes:
            raise ValueError(f"Invalid class_mode: {mode}; expected one of: {self.allowed_class_modes}")
        if mode == "multi_output" and not isinstance(y_col, list):
            raise TypeError(f'If class_mode="{mode}", y_col must be a list. Received {type(y_col).__name__}.')
        if not all(isinstance(v, str) for v in df[x_col]):
            raise TypeError(f"All values in column x_col={x_col} must be strings.")
        if mode in ("binary", "sparse") and not all(isinstance(v, str) for v in df[y_col]):
            raise TypeError(f'If class_mode="{mode}", y_col="{y_col}" column values must be strings.')
        if mode == "binary":
            count = len(set(classes)) if classes else df[y_col].nunique()
            if count != 2:
                raise ValueError(f'If class_mode="binary" there must be 2 classes. Found {count} classes.')
        if mode == "categorical" and not all(isinstance(v, (str, list, tuple)) for v in df[y_col]):
            raise TypeError(f'If class_mode="{mode}", y_col="{y_col}" column values must be type string, '
                            "list or tuple.")
        if classes and mode in ("input", "multi_output", "raw", None):
            warnings.warn(f'`classes` will be ignored given the class_mode="{mode}"')
        if weight_col and not issubclass(df[weight_col].dtype.type, np.number):
            raise TypeError(f"Column weight_col={weight_col} must be numeric.")

    @staticmethod
    def _filter_classes(df, y_col, classes):
        df = df.copy()
        if classes:
            classes = list(collections.OrderedDict.fromkeys(classes).keys())
            wanted = set(classes)

            def keep(lab):
                if isinstance(lab, (list, tuple)):
                    return [c for c in lab if c in wanted] or None
                if isinstance(lab, str):
                    return lab if lab in wanted else None
                raise TypeError(f"Expect string, list or tuple but found {type(lab)} in {y_col} column ")

            df[y_col] = df[y_col].apply(keep)
        else:
            found = set()
            for v in df[y_col]:
                found.update(v) if isinstance(v, (list, tuple)) else found.add(v)
            classes = sorted(found)
        return df.dropna(subset=[y_col]), classes

    @property
    def labels(self):
        if self.class_mode in ("multi_output", "raw"):
            return self._targets
        return self.classes

    @property
    def sample_weight(self):
        return self._sample_weight


class NumpyArrayIterator(Iterator):
    """Keras' NumpyArrayIterator: batches of an array of images (and labels, extra inputs, weights)."""

    def __init__(self, x, y, image_data_generator, batch_size=32, shuffle=False, sample_weight=None, seed=None,
                 data_format=None, save_to_dir=None, save_prefix="", save_format="png", subset=None,
                 ignore_class_split=False, dtype=None):
        data_format = data_format or _image_data_format()
        self.dtype = dtype or _floatx()
        if isinstance(x, (tuple, list)):
            x_misc = [np.asarray(x[1])] if not isinstance(x[1], list) else [np.asarray(v) for v in x[1]]
            x = x[0]
            for v in x_misc:
                if len(x) != len(v):
                    raise ValueError("All of the arrays in `x` should have the same length. Found a pair with: "
                                     f"len(x[0]) = {len(x)}, len(x[?]) = {len(v)}")
        else:
            x_misc = []
        if y is not None and len(x) != len(y):
            raise ValueError("`x` (images tensor) and `y` (labels) should have the same length. "
                             f"Found: x.shape = {np.asarray(x).shape}, y.shape = {np.asarray(y).shape}")
        if sample_weight is not None and len(x) != len(sample_weight):
            raise ValueError("`x` (images tensor) and `sample_weight` should have the same length. Found: "
                             f"x.shape = {np.asarray(x).shape}, sample_weight.shape = {np.asarray(sample_weight).shape}")
        if subset is not None:
            if subset not in ("training", "validation"):
                raise ValueError("Invalid subset name:", subset, '; expected "training" or "validation".')
            cut = int(len(x) * image_data_generator._validation_split)
            if (y is not None and not ignore_class_split
                    and not np.array_equal(np.unique(y[:cut]), np.unique(y[cut:]))):
                raise ValueError("Training and validation subsets have different number of classes after the "
                                 "split. If your numpy arrays are sorted by the label, you might want to shuffle them.")
            part = slice(None, cut) if subset == "validation" else slice(cut, None)
            x = x[part]
            x_misc = [np.asarray(v[part]) for v in x_misc]
            if y is not None:
                y = y[part]
        x = np.asarray(x)
        if x.ndim != 4:
            raise ValueError("Input data in `NumpyArrayIterator` should have rank 4. You passed an array with shape",
                             x.shape)
        channels_axis = 3 if data_format == "channels_last" else 1
        if x.shape[channels_axis] not in (1, 3, 4):
            warnings.warn(f'NumpyArrayIterator is set to use the data format convention "{data_format}" (channels '
                          f"on axis {channels_axis}), i.e. expected either 1, 3, or 4 channels on axis "
                          f"{channels_axis}. However, it was passed an array with shape {x.shape} "
                          f"({x.shape[channels_axis]} channels).")
        # stoker's augmenter takes uint8 NHWC; keep that form when the values allow it.
        u8 = _as_u8(x) if x.shape[channels_axis] in (1, 3, 4) else None
        if u8 is not None:
            self._u8 = u8 if data_format == "channels_last" else u8.transpose(0, 2, 3, 1)
            self._x = None
        else:
            self._u8 = None
            self._x = np.asarray(x, dtype=self.dtype)
        self._x_source = x
        self.x_misc = x_misc
        self.y = np.asarray(y) if y is not None else None
        self.sample_weight = np.asarray(sample_weight) if sample_weight is not None else None
        self.image_data_generator = image_data_generator
        self.data_format = data_format
        self.save_to_dir = save_to_dir
        self.save_prefix = save_prefix
        self.save_format = save_format
        super().__init__(x.shape[0], batch_size, shuffle, seed)

    @property
    def x(self):
        """The images as Keras holds them (the iterator's dtype); made on first use."""
        if self._x is None:
            self._x = np.asarray(self._x_source, dtype=self.dtype)
        return self._x

    def _get_batch(self, index_array, epoch, idx, following):
        index_array = np.asarray(index_array, dtype=np.int64)
        gen = self.image_data_generator
        if self._u8 is not None:
            batch_x = gen._process_u8(self._u8[index_array], self._aug_seed, max(epoch, 0), index_array,
                                      self.data_format, self.dtype)
        else:
            # Not 8-bit data: Keras' per-image path in NumPy/SciPy, parameters from stoker's RNG.
            shape = self.x.shape[1:]
            batch_x = np.zeros((len(index_array),) + shape, dtype=self.dtype)
            random = gen._has_random_transform()
            for i, j in enumerate(index_array):
                x = np.array(self.x[j], dtype=self.dtype)
                if random:
                    params = gen._draw(shape, self._aug_seed, max(epoch, 0), int(j))
                    x = gen.apply_transform(x, params)
                batch_x[i] = gen.standardize(x)
            batch_x = batch_x.astype(self.dtype, copy=False)
        if self.save_to_dir:
            for i, j in enumerate(index_array):
                img = _array_to_pil(batch_x[i], self.data_format)
                img.save(os.path.join(self.save_to_dir,
                                      f"{self.save_prefix}_{j}_{np.random.randint(1e4)}.{self.save_format}"))
        miscs = [v[index_array] for v in self.x_misc]
        first = batch_x if not miscs else [batch_x] + miscs
        if self.y is None:
            return first
        out = (first, self.y[index_array])
        if self.sample_weight is not None:
            out += (self.sample_weight[index_array],)
        return out


# ---------------------------------------------------------------------------------------------
class ImageDataGenerator:
    """Keras' ImageDataGenerator (same constructor and methods); stoker does the work.

    Extra keyword (not in Keras) on flow_from_directory / flow_from_dataframe:
    decoder=None (default: stoker's C++ decoder when color_mode is 'rgb', else Pillow), 'pil'
    (Keras' load_img itself) or 'stoker'."""

    def __init__(self, featurewise_center=False, samplewise_center=False, featurewise_std_normalization=False,
                 samplewise_std_normalization=False, zca_whitening=False, zca_epsilon=1e-6, rotation_range=0,
                 width_shift_range=0.0, height_shift_range=0.0, brightness_range=None, shear_range=0.0,
                 zoom_range=0.0, channel_shift_range=0.0, fill_mode="nearest", cval=0.0, horizontal_flip=False,
                 vertical_flip=False, rescale=None, preprocessing_function=None, data_format=None,
                 validation_split=0.0, interpolation_order=1, dtype=None):
        if zca_whitening:
            raise NotImplementedError("zca_whitening=True is not implemented by stoker.keras")
        data_format = data_format or _image_data_format()
        dtype = dtype or _floatx()
        self.featurewise_center = featurewise_center
        self.samplewise_center = samplewise_center
        self.featurewise_std_normalization = featurewise_std_normalization
        self.samplewise_std_normalization = samplewise_std_normalization
        self.zca_whitening = zca_whitening
        self.zca_epsilon = zca_epsilon
        self.rotation_range = rotation_range
        self.width_shift_range = width_shift_range
        self.height_shift_range = height_shift_range
        self.shear_range = shear_range
        self.channel_shift_range = channel_shift_range
        self.fill_mode = fill_mode
        self.cval = cval
        self.horizontal_flip = horizontal_flip
        self.vertical_flip = vertical_flip
        self.rescale = rescale
        self.preprocessing_function = preprocessing_function
        self.dtype = dtype
        self.interpolation_order = interpolation_order
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError('`data_format` should be `"channels_last"` (channel after row and column) or '
                             f'`"channels_first"` (channel before row and column). Received: {data_format}')
        self.data_format = data_format
        if data_format == "channels_first":
            self.channel_axis, self.row_axis, self.col_axis = 1, 2, 3
        else:
            self.channel_axis, self.row_axis, self.col_axis = 3, 1, 2
        if validation_split and not 0 < validation_split < 1:
            raise ValueError(f"`validation_split` must be strictly between 0 and 1.  Received: {validation_split}")
        self._validation_split = validation_split
        self.mean = None
        self.std = None
        self.zca_whitening_matrix = None
        if isinstance(zoom_range, (float, int)):
            self.zoom_range = [1 - zoom_range, 1 + zoom_range]
        elif len(zoom_range) == 2 and all(isinstance(v, (float, int)) for v in zoom_range):
            self.zoom_range = [zoom_range[0], zoom_range[1]]
        else:
            raise ValueError(f"`zoom_range` should be a float or a tuple or list of two floats. Received: {zoom_range}")
        if featurewise_std_normalization and not featurewise_center:
            self.featurewise_center = True
            warnings.warn("This ImageDataGenerator specifies `featurewise_std_normalization`, which overrides "
                          "setting of `featurewise_center`.")
        if samplewise_std_normalization and not samplewise_center:
            self.samplewise_center = True
            warnings.warn("This ImageDataGenerator specifies `samplewise_std_normalization`, which overrides "
                          "setting of `samplewise_center`.")
        if brightness_range is not None:
            if not isinstance(brightness_range, (tuple, list)) or len(brightness_range) != 2:
                raise ValueError(f"`brightness_range should be tuple or list of two floats. Received: {brightness_range}")
        self.brightness_range = brightness_range
        self._augmenters: dict = {}
        self._check_spec()

    # ---- iterators
    def flow(self, x, y=None, batch_size=32, shuffle=True, sample_weight=None, seed=None, save_to_dir=None,
             save_prefix="", save_format="png", ignore_class_split=False, subset=None):
        return NumpyArrayIterator(x, y, self, batch_size=batch_size, shuffle=shuffle, sample_weight=sample_weight,
                                  seed=seed, data_format=self.data_format, save_to_dir=save_to_dir,
                                  save_prefix=save_prefix, save_format=save_format,
                                  ignore_class_split=ignore_class_split, subset=subset, dtype=self.dtype)

    def flow_from_directory(self, directory, target_size=(256, 256), color_mode="rgb", classes=None,
                            class_mode="categorical", batch_size=32, shuffle=True, seed=None, save_to_dir=None,
                            save_prefix="", save_format="png", follow_links=False, subset=None,
                            interpolation="nearest", keep_aspect_ratio=False, *, decoder=None):
        return DirectoryIterator(directory, self, target_size=target_size, color_mode=color_mode,
                                 keep_aspect_ratio=keep_aspect_ratio, classes=classes, class_mode=class_mode,
                                 data_format=self.data_format, batch_size=batch_size, shuffle=shuffle, seed=seed,
                                 save_to_dir=save_to_dir, save_prefix=save_prefix, save_format=save_format,
                                 follow_links=follow_links, subset=subset, interpolation=interpolation,
                                 dtype=self.dtype, decoder=decoder)

    def flow_from_dataframe(self, dataframe, directory=None, x_col="filename", y_col="class", weight_col=None,
                            target_size=(256, 256), color_mode="rgb", classes=None, class_mode="categorical",
                            batch_size=32, shuffle=True, seed=None, save_to_dir=None, save_prefix="",
                            save_format="png", subset=None, interpolation="nearest", validate_filenames=True,
                            keep_aspect_ratio=False, decoder=None, **kwargs):
        for name, message in (("has_ext", "has_ext is deprecated, filenames in the dataframe have to match the "
                                          "exact filenames in disk."),
                              ("sort", "sort is deprecated, batches will be created in the same order than the "
                                       "filenames provided if shuffle is set to False."),
                              ("drop_duplicates", "drop_duplicates is deprecated, you can drop duplicates by using "
                                                  "the pandas.DataFrame.drop_duplicates method.")):
            if name in kwargs:
                kwargs.pop(name)
                warnings.warn(message, DeprecationWarning)
        if kwargs:
            raise TypeError(f"flow_from_dataframe() got unexpected keyword arguments {sorted(kwargs)}")
        if class_mode == "other":
            warnings.warn('`class_mode` "other" is deprecated, please use `class_mode` "raw".', DeprecationWarning)
            class_mode = "raw"
        return DataFrameIterator(dataframe, directory, self, x_col=x_col, y_col=y_col, weight_col=weight_col,
                                 target_size=target_size, color_mode=color_mode, classes=classes,
                                 class_mode=class_mode, data_format=self.data_format, batch_size=batch_size,
                                 shuffle=shuffle, seed=seed, save_to_dir=save_to_dir, save_prefix=save_prefix,
                                 save_format=save_format, subset=subset, interpolation=interpolation,
                                 keep_aspect_ratio=keep_aspect_ratio, validate_filenames=validate_filenames,
                                 dtype=self.dtype, decoder=decoder)

    # ---- stoker's spec from the current attributes (users may change them after construction)
    def _has_random_transform(self) -> bool:
        return bool(self.rotation_range or self.width_shift_range is not None and np.any(self.width_shift_range)
                    or self.height_shift_range is not None and np.any(self.height_shift_range)
                    or self.shear_range or tuple(self.zoom_range) != (1, 1) or self.horizontal_flip
                    or self.vertical_flip or self.brightness_range is not None or self.channel_shift_range)

    @staticmethod
    def _shift(v):
        if v is None or (np.isscalar(v) and not v):
            return 0.0
        if isinstance(v, (bool, int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return float(v)
        return [float(t) for t in np.asarray(v).ravel()]

    def _random_settings(self) -> dict:
        return dict(rotation_range=float(self.rotation_range or 0), width_shift_range=self._shift(self.width_shift_range),
                    height_shift_range=self._shift(self.height_shift_range), shear_range=float(self.shear_range or 0),
                    zoom_range=(float(self.zoom_range[0]), float(self.zoom_range[1])),
                    horizontal_flip=bool(self.horizontal_flip), vertical_flip=bool(self.vertical_flip),
                    brightness_range=None if self.brightness_range is None else tuple(map(float, self.brightness_range)),
                    channel_shift_range=float(self.channel_shift_range or 0), fill_mode=str(self.fill_mode),
                    cval=float(self.cval), interpolation_order=int(self.interpolation_order))

    def _check_spec(self) -> None:
        """Fails now (naming the argument) on settings stoker's augmenter rejects."""
        if self.interpolation_order not in (0, 1):
            raise NotImplementedError(f"interpolation_order={self.interpolation_order!r}: stoker implements 0 "
                                      "(nearest) and 1 (bilinear)")
        self._spec(8, 8, 3, standardise=False)

    def _feature_channels(self, c: int):
        """(mean, std) per channel for the spec, or None when the statistics are not per channel."""
        out = []
        for on, value in ((self.featurewise_center, self.mean), (self.featurewise_std_normalization, self.std)):
            if not on or value is None:
                out.append(None)
                continue
            v = np.asarray(value, dtype=np.float64)
            if v.size == 1:
                v = np.repeat(v.ravel(), c)
            elif v.size == c and (v.ndim == 1 or sorted(v.shape)[:-1] == [1] * (v.ndim - 1)):
                v = v.ravel()
            else:
                return None
            out.append([float(t) for t in v])
        return out

    def _spec(self, h, w, c, standardise=True, data_format="channels_last", featurewise=None):
        settings = self._random_settings()
        if settings["brightness_range"] is None:
            del settings["brightness_range"]  # the binding's setter does not take None (its default)
        spec = Augment(**settings)
        spec.height, spec.width, spec.channels = int(h), int(w), int(c)
        spec.dtype = "float32"
        spec.layout = "nchw" if data_format == "channels_first" else "nhwc"
        spec.training = self._has_random_transform()
        if standardise:
            spec.rescale = float(self.rescale) if self.rescale else None
            spec.samplewise_center = bool(self.samplewise_center)
            spec.samplewise_std_normalization = bool(self.samplewise_std_normalization)
            if featurewise is not None:
                mean, std = featurewise
                if mean is not None or std is not None:
                    spec.featurewise = (mean if mean is not None else [0.0] * c, std if std is not None else [1.0] * c)
                    spec.featurewise_center = mean is not None
                    spec.featurewise_std_normalization = std is not None
        return spec

    def _augmenter(self, h, w, c, standardise, data_format, featurewise=None):
        fw = None if featurewise is None else tuple(None if v is None else tuple(v) for v in featurewise)
        key = (h, w, c, standardise, data_format, fw, repr(sorted(self._random_settings().items())),
               self.rescale, self.samplewise_center, self.samplewise_std_normalization)
        aug = self._augmenters.get(key)
        if aug is None:
            aug = _stoker.Augmenter(self._spec(h, w, c, standardise, data_format, featurewise))
            if len(self._augmenters) > 16:
                self._augmenters.clear()
            self._augmenters[key] = aug
        return aug

    def _warn_unfitted(self):
        if self.featurewise_center and self.mean is None:
            warnings.warn("This ImageDataGenerator specifies `featurewise_center`, but it hasn't been fit on any "
                          "training data. Fit it first by calling `.fit(numpy_data)`.")
        if self.featurewise_std_normalization and self.std is None:
            warnings.warn("This ImageDataGenerator specifies `featurewise_std_normalization`, but it hasn't been "
                          "fit on any training data. Fit it first by calling `.fit(numpy_data)`.")

    def _process_u8(self, images, seed, epoch, sample_ids, data_format, dtype):
        """A batch: uint8 NHWC images -> augmented, standardised batch in data_format and dtype."""
        images = np.ascontiguousarray(images)
        n, h, w, c = images.shape
        ids = [int(j) for j in sample_ids]
        featurewise = self._feature_channels(c)
        if self.preprocessing_function is None and featurewise is not None:
            self._warn_unfitted()
            out = self._augmenter(h, w, c, True, data_format, featurewise).apply_batch(
                images, seed=seed, epoch=epoch, sample_ids=ids)
            out = np.asarray(out)
        else:
            raw = np.asarray(self._augmenter(h, w, c, False, data_format).apply_batch(
                images, seed=seed, epoch=epoch, sample_ids=ids))
            shape = raw.shape[1:]
            out = np.empty((n,) + shape, dtype=dtype)
            for i in range(n):
                x = raw[i].astype(dtype, copy=True)
                out[i] = self.standardize(x)
        return out if out.dtype == np.dtype(dtype) else out.astype(dtype)

    # ---- Keras' per-image API
    def standardize(self, x):
        """Keras' standardize: preprocessing_function, rescale, sample-wise, feature-wise (in place on
        float arrays, as Keras)."""
        if self.preprocessing_function:
            x = self.preprocessing_function(x)
        if self.rescale:
            x *= self.rescale
        if self.samplewise_center:
            x -= np.mean(x, keepdims=True)
        if self.samplewise_std_normalization:
            x /= np.std(x, keepdims=True) + 1e-6
        if self.featurewise_center:
            if self.mean is not None:
                x -= self.mean
            else:
                warnings.warn("This ImageDataGenerator specifies `featurewise_center`, but it hasn't been fit on "
                              "any training data. Fit it first by calling `.fit(numpy_data)`.")
        if self.featurewise_std_normalization:
            if self.std is not None:
                x /= self.std + 1e-6
            else:
                warnings.warn("This ImageDataGenerator specifies `featurewise_std_normalization`, but it hasn't "
                              "been fit on any training data. Fit it first by calling `.fit(numpy_data)`.")
        return x

    def _hw(self, img_shape):
        return int(img_shape[self.row_axis - 1]), int(img_shape[self.col_axis - 1])

    def get_random_transform(self, img_shape, seed=None):
        """Keras' transform parameters for an image of this shape, drawn from stoker's RNG (keyed by
        seed; seed=None draws one from NumPy's global RNG)."""
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        return self._draw(img_shape, int(seed), 0, 0)

    def _draw(self, img_shape, seed, epoch, sample_id):
        """The parameters stoker's augmenter draws for (seed, epoch, sample_id), with Keras' keys."""
        h, w = self._hw(img_shape)
        spec = self._spec(h, w, 3, standardise=False)
        spec.training = True
        p = _stoker.Augmenter(spec).params(int(seed), int(epoch), int(sample_id), h, w)
        return {"theta": p["theta"], "tx": p["tx"], "ty": p["ty"], "shear": p["shear"], "zx": p["zx"],
                "zy": p["zy"], "flip_horizontal": bool(p["flip_horizontal"]),
                "flip_vertical": bool(p["flip_vertical"]), "channel_shift_intensity": p["channel_shift"],
                "brightness": p["brightness"]}

    def apply_transform(self, x, transform_parameters):
        """Keras' apply_transform on one image (rows, cols, channels in data_format).

        Images of 8-bit values go through stoker's augmenter (Augmenter.apply_with) when the
        binding accepts them; otherwise (float data, or the binding's apply_with rejecting 3-D
        images, see _apply_with_works) the same transform is computed in NumPy/SciPy."""
        x = np.asarray(x)
        if x.ndim != 3:
            raise ValueError("Input arrays must be multi-channel 2D images.")
        hwc = x if self.data_format == "channels_last" else x.transpose(1, 2, 0)
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(self.dtype)
        u8 = _as_u8(hwc) if hwc.shape[2] in (1, 3, 4) and _apply_with_works() else None
        if u8 is None:
            out = _apply_transform_numpy(hwc.astype(dtype), transform_parameters, self.fill_mode, self.cval,
                                         self.interpolation_order)
        else:
            h, w, c = u8.shape
            spec = self._spec(h, w, c, standardise=False)
            spec.training = True
            params = {k: v for k, v in dict(transform_parameters).items() if v is not None}
            if "channel_shift_intensity" in params:
                params["channel_shift"] = params.pop("channel_shift_intensity")
            out = np.asarray(_stoker.Augmenter(spec).apply_with(np.ascontiguousarray(u8), params))[0]
        if self.data_format == "channels_first":
            out = out.transpose(2, 0, 1)
        return np.ascontiguousarray(out, dtype=dtype)

    def random_transform(self, x, seed=None):
        return self.apply_transform(x, self.get_random_transform(np.shape(x), seed))

    def fit(self, x, augment=False, rounds=1, seed=None):
        """Keras' fit: featurewise mean/std per channel on rescaled (optionally augmented) images."""
        if self.zca_whitening:
            raise NotImplementedError("zca_whitening=True is not implemented by stoker.keras")
        x = np.asarray(x)
        if x.ndim != 4:
            raise ValueError(f"Input to `.fit()` should have rank 4. Got array with shape: {x.shape}")
        c = x.shape[self.channel_axis]
        if c not in (1, 3, 4):
            warnings.warn(f'Expected input to be images (as Numpy array) following the data format convention '
                          f'"{self.data_format}" (channels on axis {self.channel_axis}), i.e. expected either 1, 3 '
                          f"or 4 channels on axis {self.channel_axis}. However, it was passed an array with shape "
                          f"{x.shape} ({c} channels).")
        if not (self.featurewise_center or self.featurewise_std_normalization):
            return
        nhwc = x if self.data_format == "channels_last" else x.transpose(0, 2, 3, 1)
        u8 = _as_u8(nhwc) if c in (1, 3, 4) else None
        shape = [1, 1, 1]
        shape[self.channel_axis - 1] = c
        if u8 is not None and not augment:
            # stoker's C++ statistics (double accumulation) on the rescaled values.
            spec = self._spec(u8.shape[1], u8.shape[2], c, standardise=False)
            spec.training = False
            spec.rescale = float(self.rescale) if self.rescale else None
            mean, std = _stoker.fit_featurewise(spec, np.ascontiguousarray(u8))
            mean = np.asarray(mean[:c], dtype=self.dtype)
            std = np.asarray(std[:c], dtype=self.dtype)
        else:
            if augment:
                if u8 is None:
                    raise NotImplementedError(
                        "fit(augment=True) on images whose values are not integers in 0..255: stoker's augmenter "
                        "takes 8-bit images")
                if seed is None:
                    seed = int(np.random.randint(0, 2**31 - 1))
                aug = self._augmenter(u8.shape[1], u8.shape[2], c, False, "channels_last")
                data = np.concatenate([np.asarray(aug.apply_batch(np.ascontiguousarray(u8), seed=int(seed), epoch=r))
                                       for r in range(int(rounds))]).astype(self.dtype)
            else:
                data = np.array(nhwc, dtype=self.dtype)
            if self.rescale:
                data *= self.rescale
            mean = np.mean(data, axis=(0, 1, 2))
            data -= mean
            std = np.std(data, axis=(0, 1, 2))
        if self.featurewise_center:
            self.mean = np.reshape(np.asarray(mean, dtype=self.dtype), shape)
        if self.featurewise_std_normalization:
            self.std = np.reshape(np.asarray(std, dtype=self.dtype), shape)
        self._augmenters.clear()
