"""Decoding files for the file iterators, one way per decoder: Pillow as Keras' load_img, or
stoker's C++ Loader (open_loader), which both the exact per-batch path and the epoch pipeline use."""

from __future__ import annotations

import io

import numpy as np

from .. import _stoker
from ._common import _CHANNELS, _PILImage, _cpu_count, _threads

_PIL_FILTERS = ("nearest", "bilinear", "bicubic", "hamming", "box", "lanczos")
_STOKER_FILTERS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")

# ---------------------------------------------------------------------------------------------
# Decoding files as Keras' load_img does.
def _load_pil(path: str, color_mode: str, target_size, interpolation: str, keep_aspect_ratio: bool) -> np.ndarray:
    with open(path, "rb") as f:
        img = _PILImage.open(io.BytesIO(f.read()))
    try:
        if color_mode == "grayscale":
            # Keras keeps 16- and 32-bit grayscale images as they are (their values, as float32) and
            # converts every other mode ('F' included) to 8-bit 'L'.
            if img.mode not in ("L", "I;16", "I"):
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
        a = np.asarray(img, dtype=np.float32 if img.mode in ("I;16", "I") else np.uint8)
    finally:
        img.close()
    if a.ndim == 2:
        a = a[:, :, None]
    return a


class _FileDecoder:
    """NHWC batches of files at target_size, by Pillow (Keras' load_img) or stoker's Loader: uint8,
    or float32 (the images' own values, as Keras' img_to_array) when a batch holds a 16/32-bit
    grayscale image."""

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
            loader = open_loader(paths, self.target_size, self.interpolation, self.keep_aspect_ratio,
                                 batch_size=len(paths), prefetch=1, copy=True)
            try:
                loader.begin_epoch(0)
                batch = loader.next()
                return np.array(batch.images, copy=True)
            finally:
                loader.close()
        images = [None] * len(paths)

        def one(i: int) -> None:
            images[i] = _load_pil(paths[i], self.color_mode, self.target_size, self.interpolation,
                                  self.keep_aspect_ratio)

        if len(paths) == 1:
            one(0)
        else:
            for f in [_threads().submit(one, i) for i in range(len(paths))]:
                f.result()
        wide = any(a.dtype != np.uint8 for a in images)
        return np.stack(images).astype(np.float32 if wide else np.uint8, copy=False)


def open_loader(paths, target_size, interpolation, keep_aspect_ratio, batch_size, prefetch, augment=None, seed=0,
                copy=False, threads=None):
    """stoker's Loader over these files in this order, as every C++ decode of stoker.keras makes it:
    no labels, no shuffle, these exact files whatever RANK/WORLD_SIZE say (the iterator has chosen
    them), a bad file fails its batch, all the cores this process may use (or `threads`). Without `augment` the
    pixels are Keras' load_img's (full-size JPEG decode, Pillow's filters, uint8); with it (an
    AugmentSpec) decode, augmentation and standardisation are one pass, JPEGs DCT-scaled."""
    h, w = (int(v) for v in target_size)
    settings = dict(batch_size=int(batch_size), image_size=(h, w), interpolation=interpolation,
                    keep_aspect_ratio=bool(keep_aspect_ratio), label_mode="none", shuffle=False, seed=int(seed),
                    drop_last=False, threads=int(threads or _cpu_count()), prefetch=int(prefetch), on_bad_sample="fail",
                    rank=0, world_size=1, augment=augment, dct_scaling=augment is not None)
    return _stoker.Loader(_stoker.dataset_from_list(list(paths), [], []), settings, copy=copy)
