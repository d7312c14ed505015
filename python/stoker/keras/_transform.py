"""Keras' apply_transform in NumPy/SciPy (for what stoker's C++ augmenter cannot take) and Keras'
array_to_img."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _stoker
from .._loader import Augment
from ._common import _PILImage

def _scaled_u8(x: np.ndarray) -> np.ndarray:
    """Keras' array_to_img(scale=True) values: x shifted and scaled to 0..255 (over the whole
    array), as uint8."""
    x = np.asarray(x, dtype=np.float32)
    x = x - np.min(x)
    top = np.max(x)
    if top != 0:
        x /= top
    return (x * 255).astype(np.uint8)


def _array_to_pil(x: np.ndarray, data_format: str):
    """Keras' array_to_img(x, data_format, scale=True)."""
    x = np.asarray(x)
    if data_format == "channels_first":
        x = x.transpose(1, 2, 0)
    x = _scaled_u8(x)
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
        x = _brightness_shift(x, brightness)
    return np.ascontiguousarray(x)


def _brightness_shift(x, brightness):
    """Keras' apply_brightness_shift(x, brightness, scale=False) on an HWC float image: Pillow's
    ImageEnhance.Brightness on the image made 8-bit (the values cast as they are, or scaled to
    0..255 first when they leave that range, and scaled back after). Pillow's images have 1, 3 or 4
    channels; the enhancement scales each channel on its own (a blend with black), so other channel
    counts are enhanced one channel at a time, as 'L' images: the values Keras gives wherever its
    PIL image takes the array."""
    from PIL import ImageEnhance

    lo, hi = np.min(x), np.max(x)
    local_scale = lo < 0 or hi > 255
    if x.shape[2] in (1, 3, 4):
        img = _array_to_pil(x, "channels_last") if local_scale else _plain_pil(x)
        y = np.asarray(ImageEnhance.Brightness(img).enhance(brightness), dtype=x.dtype)
        if y.ndim == 2:
            y = y[:, :, None]
    else:
        u8 = _scaled_u8(x) if local_scale else np.asarray(x).astype(np.uint8)
        planes = [_PILImage.fromarray(np.ascontiguousarray(u8[:, :, k]), "L") for k in range(u8.shape[2])]
        y = np.stack([np.asarray(ImageEnhance.Brightness(p).enhance(brightness)) for p in planes], axis=2)
        y = y.astype(x.dtype)
    return y / 255 * (hi - lo) + lo if local_scale else y


def _plain_pil(x):
    """Keras' array_to_img(x, scale=False): values cast to uint8 as they are."""
    a = np.asarray(x).astype(np.uint8)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(a.shape[2])
    if mode is None:
        raise ValueError(f"Unsupported channel number: {a.shape[2]}")
    return _PILImage.fromarray(a[:, :, 0] if mode == "L" else a, mode)
