"""Keras 3 preprocessing layers as stoker's augmentation (image_dataset_from_directory's augment=):
each layer translated into ImageDataGenerator arguments where its Keras 3 semantics are exactly
stoker's, and the AugmentSpec built from them as ImageDataGenerator builds its own; any other
layer refused with a ValueError naming its class and why.

What makes a translation exact (Keras 3's image_preprocessing layers, TensorFlow's
ImageProjectiveTransformV3 underneath):
- The warps (RandomRotation, RandomTranslation, RandomZoom) map the output pixel (x, y) to the
  source with the image centre at ((w - 1) / 2, (h - 1) / 2), x along the columns: stoker's warp
  with keras_axis_conventions=False (its geometric axes; ImageDataGenerator's own convention
  differs on non-square images). Fill modes 'reflect' (Keras' default: d c b a | a b c d) and
  'nearest' sample as stoker does; 'constant' does not (TensorFlow blends the border pixels with
  fill_value, stoker's scipy-style constant does not blend) nor 'wrap' (TensorFlow's period is the
  size, scipy's and stoker's the size - 1). Interpolation 'bilinear' (stoker rounds the result to
  uint8: within 1 grey level) and 'nearest' (equal, but for a coordinate exactly halfway between
  two pixels, which a continuous draw hits with probability zero).
- Each warp layer draws from a symmetric range, as ImageDataGenerator's ranges are; one warp at
  most (two warp layers resample twice in Keras, stoker warps once).
- RandomFlip('horizontal') and ('vertical') are ImageDataGenerator's flips (probability 1/2);
  'horizontal_and_vertical' flips both axes on one draw (a half turn or nothing), stoker draws
  each axis on its own. A flip commutes with the warp given here (the mirrored warp is the warp of
  the opposite draw, equally likely; reflect and nearest fills are mirror-symmetric), so flips may
  stand anywhere in the list.
- Rescaling(scale, offset): x * scale + offset, stoker's rescale and then (x - mean) / std with
  mean = -offset and std = 1; it commutes with the warps and the flips (their weights sum to 1).

Draws: per sample, keyed by (the dataset's seed, the pass over the files, the file), on stoker's
threads; the layers' own seeds are not used.
"""

from __future__ import annotations

import numbers

import numpy as np

_WARPS = ("RandomRotation", "RandomTranslation", "RandomZoom")
_FILL_REFUSED = {
    "constant": "fill_mode='constant': Keras 3 (TensorFlow's ImageProjectiveTransformV3) blends the pixels within "
                "one pixel of the border with fill_value, stoker's constant fill (scipy's, as ImageDataGenerator's) "
                "does not blend",
    "wrap": "fill_mode='wrap': Keras 3 (TensorFlow) repeats the image with a period of its size, stoker's wrap "
            "(scipy's, as ImageDataGenerator's) with a period of its size - 1",
}
_INTERPOLATION_ORDER = {"nearest": 0, "bilinear": 1}
# Layers with no exact stoker equivalent, and why (any other class is refused as unknown).
_REFUSED = {
    "RandomBrightness": "Keras 3 adds a delta drawn as a fraction of value_range and clips to value_range; stoker's "
                        "brightness_range multiplies (PIL's ImageEnhance.Brightness)",
    "RandomContrast": "Keras 3 scales each channel about its own mean and clips to value_range; stoker's contrast "
                      "blends with the mean grey level (PIL's ImageEnhance.Contrast)",
    "RandomCrop": "a random box of a fixed size (and a resize or centre crop at inference): stoker has no such crop; "
                  "choose image_size (and crop_to_aspect_ratio) instead",
    "CenterCrop": "Keras 3 crops the decoded, resized image (resizing it first when it is smaller); stoker's "
                  "center_crop is a fraction of the source before the resize; use image_size and "
                  "crop_to_aspect_ratio=True",
    "Resizing": "a second resize of the image already brought to image_size; pass the size as image_size "
                "(a Resizing to image_size itself, bilinear or nearest, is accepted: it changes nothing)",
    "RandomShear": "Keras 3's two shear factors (x and y, each drawn on its own) are not stoker's one shear angle "
                   "(ImageDataGenerator's shear_range)",
    "RandomHue": "Keras 3's hue factor and value_range are not stoker's hue (torchvision's ColorJitter)",
    "RandomSaturation": "Keras 3's saturation factor is not stoker's saturation (torchvision's ColorJitter)",
    "RandomColorJitter": "Keras 3's brightness, contrast, saturation and hue are not stoker's (see those layers)",
}


def _known(L):
    """The Keras 3 layer classes this module knows by name."""
    names = _WARPS + ("RandomFlip", "Rescaling") + tuple(_REFUSED)
    return tuple(getattr(L, n) for n in names if hasattr(L, n))


def _keras3():
    try:
        import keras
    except ImportError as e:
        raise ImportError("augment= takes Keras 3 preprocessing layers: install Keras 3 (pip install keras)") from e
    if keras.__version__.startswith("2"):
        raise ImportError(f"augment= takes Keras 3 preprocessing layers; keras {keras.__version__} is installed")
    return keras


def _refuse(layer, why):
    return ValueError(f"stoker.keras.image_dataset_from_directory(augment=...): {type(layer).__name__} is not "
                      f"translated: {why}")


def _layer_list(augment, keras):
    """The layers of augment (a layer, a list or tuple of them, a keras.Sequential), in order."""
    if isinstance(augment, keras.Sequential):
        items = list(augment.layers)
    elif isinstance(augment, (list, tuple)):
        items = list(augment)
    else:
        items = [augment]
    out = []
    for item in items:
        if isinstance(item, keras.Sequential):
            out.extend(_layer_list(item, keras))
        elif isinstance(item, keras.layers.InputLayer):
            continue
        else:
            out.append(item)
    return out


def _scalar(layer, name, value):
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.ndarray, np.generic)):
        raise _refuse(layer, f"{name}={value!r} is not a number")
    v = np.asarray(value)
    if v.size != 1:
        raise _refuse(layer, f"{name} has one value per channel; stoker's rescale is one number")
    return float(v.reshape(()))


def _symmetric(layer, name, lower, upper):
    """f of a range (lower, upper) = (-f, f), else refused."""
    if not np.isclose(float(lower), -float(upper), rtol=0, atol=1e-12):
        raise _refuse(layer, f"{name} draws in ({lower}, {upper}), not symmetric about 0; stoker's "
                             "ImageDataGenerator ranges are (-f, f)")
    return abs(float(upper))


def _warp_settings(layer, data_format):
    if layer.data_format != data_format:
        raise _refuse(layer, f"its data_format is {layer.data_format!r}, the dataset's {data_format!r}")
    if layer.fill_mode in _FILL_REFUSED:
        raise _refuse(layer, _FILL_REFUSED[layer.fill_mode])
    if layer.interpolation not in _INTERPOLATION_ORDER:
        raise _refuse(layer, f"interpolation={layer.interpolation!r}: stoker's warp has 'nearest' and 'bilinear'")
    return dict(fill_mode=str(layer.fill_mode), interpolation_order=_INTERPOLATION_ORDER[layer.interpolation])


def generator_arguments(augment, image_size, data_format):
    """(ImageDataGenerator keyword arguments, offset) equivalent to the layers, or a ValueError
    naming the first layer that has no exact equivalent."""
    keras = _keras3()
    L = keras.layers
    args = dict(horizontal_flip=False, vertical_flip=False)
    scale, offset = 1.0, 0.0
    warp = None
    for layer in _layer_list(augment, keras):
        kind = type(layer)
        name = kind.__name__
        if not isinstance(layer, L.Layer):
            raise ValueError(f"stoker.keras.image_dataset_from_directory(augment=...): {name} is not a Keras 3 "
                             "layer; augment= takes Keras 3 preprocessing layers (a list or a keras.Sequential)")
        if name in _WARPS and kind is getattr(L, name):
            if warp is not None:
                raise _refuse(layer, f"it follows {warp}: Keras resamples the image once per warp layer, stoker "
                                     "warps once; keep one of RandomRotation, RandomTranslation, RandomZoom")
            warp = name
            args.update(_warp_settings(layer, data_format))
            if kind is L.RandomRotation:
                # angle uniform in factor * 360 degrees; the direction does not matter on a symmetric range
                f = _symmetric(layer, "factor", *layer.factor)
                args["rotation_range"] = f * 360.0
            elif kind is L.RandomTranslation:
                for axis in ("height", "width"):
                    f = _symmetric(layer, f"{axis}_factor", getattr(layer, f"{axis}_lower"),
                                   getattr(layer, f"{axis}_upper"))
                    if f >= 1.0:
                        raise _refuse(layer, f"{axis}_factor={f}: stoker reads a shift range of 1 or more as pixels "
                                             "(ImageDataGenerator's rule), Keras as a fraction of the size")
                    args[f"{axis}_shift_range"] = f
            else:
                lo, hi = float(layer.height_lower), float(layer.height_upper)
                if layer.width_factor is None:
                    if lo != hi:
                        raise _refuse(layer, "width_factor=None zooms both axes by one draw (keeping the aspect "
                                             "ratio); stoker draws the two zooms independently (ImageDataGenerator's "
                                             "zoom_range); give width_factor equal to height_factor for independent "
                                             "draws")
                elif (float(layer.width_lower), float(layer.width_upper)) != (lo, hi):
                    raise _refuse(layer, f"height_factor draws in ({lo}, {hi}), width_factor in "
                                         f"({layer.width_lower}, {layer.width_upper}); stoker draws both zooms in "
                                         "one range (ImageDataGenerator's zoom_range)")
                # Keras: zoom uniform in (1 + lower, 1 + upper) per axis, > 1 shows more of the image, as
                # ImageDataGenerator's zoom_range
                args["zoom_range"] = [1.0 + lo, 1.0 + hi]
        elif kind is L.RandomFlip:
            if layer.data_format != data_format:
                raise _refuse(layer, f"its data_format is {layer.data_format!r}, the dataset's {data_format!r}")
            if layer.mode == "horizontal":
                args["horizontal_flip"] = True  # two independent fair flips of one axis are one fair flip
            elif layer.mode == "vertical":
                args["vertical_flip"] = True
            else:
                raise _refuse(layer, f"mode={layer.mode!r} flips both axes on one draw (a half turn or nothing); "
                                     "stoker draws each axis on its own: use RandomFlip('horizontal') and "
                                     "RandomFlip('vertical') for that")
        elif kind is L.Rescaling:
            s = _scalar(layer, "scale", layer.scale)
            o = _scalar(layer, "offset", layer.offset)
            if s == 0.0:
                raise _refuse(layer, "scale=0: stoker reads a rescale of 0 as no rescale (ImageDataGenerator's rule)")
            scale, offset = scale * s, offset * s + o
        elif kind is L.Resizing and (int(layer.height), int(layer.width)) == tuple(image_size) \
                and layer.interpolation in ("bilinear", "nearest") and not layer.pad_to_aspect_ratio:
            continue  # the images are already that size: tf.image.resize to the same size changes nothing
        elif name in _REFUSED and kind is getattr(L, name, None):
            raise _refuse(layer, _REFUSED[name])
        elif any(isinstance(layer, known) for known in _known(L)):
            base = next(known for known in _known(L) if isinstance(layer, known)).__name__
            raise _refuse(layer, f"a subclass of Keras' {base} (its transform may differ from Keras')")
        else:
            raise _refuse(layer, "no exact equivalent in stoker's augmentation")
    if scale != 1.0 or offset != 0.0:
        args["rescale"] = scale
    return args, offset


def augment_spec(augment, image_size, data_format):
    """The AugmentSpec of the layers for images of image_size, channels last, float32 (the
    ImageDataGenerator path: its _spec from the translated arguments)."""
    from .generator import ImageDataGenerator

    args, offset = generator_arguments(augment, image_size, data_format)
    rescale = args.pop("rescale", None)
    gen = ImageDataGenerator(data_format="channels_last", dtype="float32", rescale=rescale, **args)
    h, w = image_size
    spec = gen._spec(h, w, 3, True, "channels_last")
    spec.keras_axis_conventions = False  # Keras 3's layers: the geometric axes (x along the columns)
    if offset != 0.0:
        spec.normalization = dict(mean=[-offset] * 3, std=[1.0] * 3)
    return spec
