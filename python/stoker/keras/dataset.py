"""image_dataset_from_directory: Keras 3's loader (keras.utils.image_dataset_from_directory) with its
arguments, file order, split and labels, decoding and resizing with stoker's thread-pooled C++
Loader, returning a tf.data.Dataset as Keras does.

How it follows Keras
--------------------
- Listing: the class folders sorted (hidden ones skipped; `class_names` keeps the given order),
  each folder walked as os.walk, roots sorted and files sorted within a root, Keras' extensions
  (.bmp .gif .jpeg .jpg .png, any case); labels='inferred', a list/tuple of integers in that file
  order, or None.
- Order and split: with shuffle=True, Keras shuffles the list once with NumPy
  (RandomState(seed).shuffle on the paths and, separately, on the labels), splits it
  (validation_split: the last int(split * n) files are the validation subset), then tf.data
  shuffles the training elements at each pass (buffer batch_size * 8, or 1024 unbatched, with
  `seed`; the validation subset of subset='both' is not shuffled). Here the same list, the same
  split, and each pass's order drawn by the same tf.data shuffle over the positions 0..n-1 (a
  shuffle's permutation depends on its seed, buffer and length, not on the elements), so the k-th
  pass over this dataset yields the files of the k-th pass over Keras'. seed=None draws
  np.random.randint(1e6) as Keras does.
- Labels: int32 (label_mode='int'), float32 of shape (1,) ('binary'), float32 one-hot
  ('categorical'), none (label_mode=None or labels=None). Attributes `class_names` and
  `file_paths` as Keras sets them.
- Pixels: float32 in 0..255 (uint8 with interpolation='nearest', as tf.image.resize gives), shape
  image_size + (3,) (channels_last) or channels first as data_format says. Keras decodes with
  tf.image.decode_image and resizes with tf.image.resize (no antialiasing). stoker decodes with its
  C++ Loader and resizes with the same sampling rules: interpolation='bilinear' is OpenCV's
  INTER_LINEAR (half-pixel centres, no antialiasing: tf.image.resize's bilinear), computed on uint8
  with 11-bit weights and rounded to uint8, so a pixel of a PNG or BMP is within 1 grey level of
  Keras' float value; interpolation='nearest' samples floor((x + 0.5) * in / out) as
  tf.image.resize's nearest does (equal values). JPEGs differ by a few grey levels more: TensorFlow
  decodes them with libjpeg's fast integer IDCT, stoker with the accurate one (as Pillow).
  crop_to_aspect_ratio crops the centred box of Keras' smart_resize first.
- Everything else follows Keras' own function (keras.utils.image_dataset_from_directory, or
  tf_keras' when Keras 3 is absent), called with the same arguments, with one warning saying why:
  color_mode 'grayscale'/'rgba' (TensorFlow's channel conversions), the other interpolations
  (area, bicubic, lanczos3/5, gaussian, mitchellcubic), pad_to_aspect_ratio, format='grain', and
  folders holding GIFs.

The batches are prepared ahead on stoker's threads (one Loader per pass over the files in that
pass's order), handed to tf.data by Dataset.from_generator, converted to float32 by a parallel
map and prefetched (tf.data.AUTOTUNE). The dataset's cardinality is set, so len() works as on
Keras' dataset.

Augmentation: Keras' preprocessing layers apply unchanged on top, in the model or with
dataset.map, as with Keras' own dataset. Or, stoker's own keyword `augment=` (not Keras'): a list
or a keras.Sequential of Keras 3 preprocessing layers, translated into stoker's augmentation (its
AugmentSpec, built as ImageDataGenerator builds its own) and applied to the decoded images on
stoker's threads, where the translation is exact (stoker.keras._layers says why each is):
RandomFlip('horizontal' / 'vertical'); RandomRotation, RandomTranslation with symmetric factors,
RandomZoom with width_factor equal to height_factor (two independent draws, as Keras then does),
each with fill_mode 'reflect' (Keras' default) or 'nearest' and interpolation 'bilinear' or
'nearest', one of the three at most; Rescaling(scale, offset). Every other layer or form raises a
ValueError naming the layer's class and the reason (RandomContrast, RandomBrightness, crops,
Resizing to another size, 'horizontal_and_vertical', asymmetric factors, fill_mode 'constant' or
'wrap', ...), before any file is read. The images are then float32. stoker draws each sample's
parameters on its own, keyed by (seed, the pass over the files, the file), so each pass draws
anew; Keras 3's layers also draw per sample in a batch, but a layer called on a batch may draw
once for the batch on some backends and versions, and their own seeds are not used here. The
validation part of subset='both' is not augmented (a model's augmentation layers are inactive at
inference); a setting served by Keras' own function (see above) cannot take augment=.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .. import _stoker
from ._common import _cpu_count
from ._decode import open_loader
from ._layers import augment_spec

ALLOWLIST_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic")
# Keras' interpolation -> the Loader's resize with tf.image.resize's sampling rule.
_NATIVE_RESIZE = {"bilinear": "opencv_linear", "nearest": "centre_nearest"}
_CHANNELS = {"rgb": 3, "rgba": 4, "grayscale": 1}


def _tf():
    try:
        import tensorflow as tf
    except ImportError as e:  # pragma: no cover - the tests run with TensorFlow
        raise ImportError("stoker.keras.image_dataset_from_directory returns a tf.data.Dataset, as Keras' does: "
                          "install TensorFlow (pip install tensorflow-cpu)") from e
    return tf


def _iter_valid_files(directory, follow_links):
    walk = os.walk(directory, followlinks=bool(follow_links))
    for root, _, files in sorted(walk, key=lambda t: t[0]):
        for fname in sorted(files):
            if fname.lower().endswith(ALLOWLIST_FORMATS):
                yield root, fname


def _index_directory(directory, labels, class_names, shuffle, seed, follow_links):
    """Keras' dataset_utils.index_directory: (file_paths, labels, class_names)."""
    if labels == "inferred":
        subdirs = [d for d in sorted(os.listdir(directory))
                   if os.path.isdir(os.path.join(directory, d)) and not d.startswith(".")]
        if class_names is not None:
            if not set(class_names).issubset(set(subdirs)):
                raise ValueError("The `class_names` passed did not match the names of the subdirectories of the "
                                 f"target directory. Expected: {subdirs} (or a subset of it), but received: "
                                 f"class_names={class_names}")
            subdirs = list(class_names)
    else:
        subdirs = [""]
        if class_names is not None:
            if labels is None:
                raise ValueError("When `labels=None` (no labels), argument `class_names` cannot be specified.")
            raise ValueError("When argument `labels` is specified, argument `class_names` cannot be specified "
                             "(the `class_names` will be the sorted list of labels).")
    class_names = subdirs
    filenames, found = [], []
    for index, subdir in enumerate(subdirs):
        folder = os.path.join(directory, subdir)
        dirname = os.path.basename(folder)
        for root, fname in _iter_valid_files(folder, follow_links):
            filenames.append(os.path.join(dirname, os.path.relpath(os.path.join(root, fname), folder)))
            found.append(index)
    if labels == "inferred":
        labels = np.asarray(found, dtype="int32").reshape(len(filenames))
    elif labels is None:
        class_names = None
    else:
        if len(labels) != len(filenames):
            raise ValueError("Expected the lengths of `labels` to match the number of files in the target directory. "
                             f"len(labels) is {len(labels)} while we found {len(filenames)} files in directory "
                             f"{directory}.")
        class_names = [str(label) for label in sorted(set(labels))]
        labels = list(labels)
    file_paths = [os.path.join(directory, f) for f in filenames]
    if shuffle:
        np.random.RandomState(seed).shuffle(file_paths)
        if labels is not None:
            np.random.RandomState(seed).shuffle(labels)
    return file_paths, labels, class_names


def _split(samples, labels, validation_split, subset):
    """Keras' get_training_or_validation_split."""
    if not validation_split:
        return samples, labels
    num_val = int(validation_split * len(samples))
    if subset == "training":
        print(f"Using {len(samples) - num_val} files for training.")
        return samples[:-num_val], (labels[:-num_val] if labels is not None else None)
    print(f"Using {num_val} files for validation.")
    return samples[-num_val:], (labels[-num_val:] if labels is not None else None)


def _label_array(labels, label_mode, num_classes):
    """The labels as Keras' labels_to_dataset makes them, one row per file."""
    y = np.asarray(labels, dtype=np.int32).reshape(-1)
    if label_mode == "binary":
        return y.astype(np.float32)[:, None]
    if label_mode == "categorical":
        out = np.zeros((len(y), num_classes), np.float32)
        inside = (y >= 0) & (y < num_classes)
        out[np.flatnonzero(inside), y[inside]] = 1.0
        return out
    return y


class _Passes:
    """The generator of one dataset: each call is one pass over the files, in the order the
    position shuffle gives for that pass, decoded `chunk` files at a time by one stoker Loader."""

    def __init__(self, paths, y, image_size, resize, crop, chunk, batched, order_ds, threads, augmenter=None, seed=0):
        self.paths = paths
        self.y = y
        self.image_size = image_size
        self.resize = resize
        self.crop = crop
        self.chunk = chunk
        self.batched = batched
        self.order_ds = order_ds
        self.threads = threads
        self.augmenter = augmenter  # augment=: applied to the decoded batches on stoker's threads
        self.seed = int(seed)
        self.passes = 0

    def order(self):
        n = len(self.paths)
        if self.order_ds is None:
            return np.arange(n, dtype=np.int64)
        return np.fromiter(self.order_ds.as_numpy_iterator(), dtype=np.int64, count=n)

    def __call__(self):
        order = self.order()
        epoch = self.passes  # the augmentation's draws: (seed, pass, file)
        self.passes += 1
        prefetch = int(min(4, max(2, (256 << 20) // max(1, self.chunk * self.image_size[0] * self.image_size[1] * 3))))
        loader = open_loader([self.paths[j] for j in order], self.image_size, self.resize, self.crop, self.chunk,
                             prefetch, threads=self.threads)
        try:
            loader.begin_epoch(0)
            while True:
                batch = loader.next()
                if batch is None:
                    break
                index = order[np.asarray(batch.sample_ids, dtype=np.int64)]
                if self.augmenter is not None:  # a new float32 array, each file's draws keyed by its index
                    images = self.augmenter.apply_batch(batch.images, seed=self.seed, epoch=epoch,
                                                        sample_ids=[int(j) for j in index], threads=self.threads)
                else:  # out of the loader's pooled buffer: tf.data may keep what it is given
                    images = np.array(batch.images, copy=True)
                if self.batched:
                    yield (images, self.y[index]) if self.y is not None else images
                else:
                    for k, j in enumerate(index):
                        yield (images[k], self.y[j]) if self.y is not None else images[k]
                del batch
        finally:
            loader.close()


def _native_dataset(paths, labels, label_mode, num_classes, image_size, interpolation, data_format, crop, shuffle,
                    shuffle_buffer, seed, batch_size, spec=None):
    tf = _tf()
    h, w = image_size
    y = _label_array(labels, label_mode, num_classes) if label_mode else None
    order_ds = tf.data.Dataset.range(len(paths)).shuffle(shuffle_buffer, seed=seed) if shuffle else None
    batched = batch_size is not None
    chunk = int(batch_size) if batched else 32
    image_spec = tf.TensorSpec((None, h, w, 3) if batched else (h, w, 3), tf.uint8 if spec is None else tf.float32)
    if y is not None:
        label_spec = tf.TensorSpec(((None,) if batched else ()) + y.shape[1:], tf.as_dtype(y.dtype))
        signature = (image_spec, label_spec)
    else:
        signature = image_spec
    augmenter = _stoker.Augmenter(spec) if spec is not None else None
    passes = _Passes(list(paths), y, (h, w), _NATIVE_RESIZE[interpolation], crop, chunk, batched, order_ds,
                     _cpu_count(), augmenter, seed)
    ds = tf.data.Dataset.from_generator(passes, output_signature=signature)
    channels_first = data_format == "channels_first"

    def to_float(images):
        if interpolation != "nearest" and spec is None:  # tf.image.resize gives float32, except nearest: uint8
            images = tf.cast(images, tf.float32)
        if channels_first:
            images = tf.transpose(images, (0, 3, 1, 2) if batched else (2, 0, 1))
        return images

    if y is not None:
        ds = ds.map(lambda images, labels: (to_float(images), labels), num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    count = -(-len(paths) // chunk) if batched else len(paths)
    ds = ds.apply(tf.data.experimental.assert_cardinality(count))
    return ds.prefetch(tf.data.AUTOTUNE)


def _data_format(data_format):
    if data_format is None:
        try:
            import keras

            return keras.config.image_data_format()
        except (ImportError, AttributeError):
            from ._common import _image_data_format

            return _image_data_format()
    data_format = str(data_format).lower()
    if data_format not in ("channels_first", "channels_last"):
        raise ValueError("The `data_format` argument must be one of {'channels_first', 'channels_last'}. "
                         f"Received: data_format={data_format}")
    return data_format


def _fallback_reason(paths, color_mode, interpolation, pad_to_aspect_ratio, format):
    if format != "tf":
        return f"format={format!r}"
    if color_mode != "rgb":
        return f"color_mode={color_mode!r}"
    if interpolation not in _NATIVE_RESIZE:
        return f"interpolation={interpolation!r}"
    if pad_to_aspect_ratio:
        return "pad_to_aspect_ratio=True"
    if any(p.lower().endswith(".gif") for p in paths):
        return "GIF files"
    return None


def _keras_own(directory, **kwargs):
    """Keras' own image_dataset_from_directory (Keras 3's, else tf_keras' with the arguments it has)."""
    try:
        import keras

        if not keras.__version__.startswith("2"):
            return keras.utils.image_dataset_from_directory(directory, **kwargs)
    except ImportError:
        pass
    import tf_keras

    for name, neutral in (("pad_to_aspect_ratio", False), ("data_format", None), ("format", "tf"), ("verbose", True)):
        value = kwargs.pop(name)
        if value != neutral and not (name == "data_format" and value == "channels_last"):
            raise ValueError(f"{name}={value!r} needs Keras 3's image_dataset_from_directory (pip install keras)")
    return tf_keras.utils.image_dataset_from_directory(directory, **kwargs)


def image_dataset_from_directory(directory, labels="inferred", label_mode="int", class_names=None, color_mode="rgb",
                                 batch_size=32, image_size=(256, 256), shuffle=True, seed=None, validation_split=None,
                                 subset=None, interpolation="bilinear", follow_links=False, crop_to_aspect_ratio=False,
                                 pad_to_aspect_ratio=False, data_format=None, format="tf", verbose=True, *,
                                 augment=None):
    """keras.utils.image_dataset_from_directory's arguments and result (a tf.data.Dataset with
    `class_names` and `file_paths`; a list of two for subset='both'), decoded by stoker's C++
    Loader. See the module's docstring for what follows Keras exactly and what falls back to
    Keras' own function.

    augment (keyword only, stoker's own): None, or Keras 3 preprocessing layers (a list, a
    keras.Sequential or one layer) applied to each image on stoker's threads as stoker's
    augmentation, per sample: RandomFlip('horizontal' / 'vertical'), one of RandomRotation and
    RandomTranslation (symmetric factors) and RandomZoom (width_factor equal to height_factor),
    fill_mode 'reflect' or 'nearest', interpolation 'bilinear' or 'nearest', and Rescaling. Any
    other layer or form raises a ValueError naming the layer's class and why; see the module's
    docstring."""
    call = dict(labels=labels, label_mode=label_mode, class_names=class_names, color_mode=color_mode,
                batch_size=batch_size, image_size=image_size, shuffle=shuffle, seed=seed,
                validation_split=validation_split, subset=subset, interpolation=interpolation,
                follow_links=follow_links, crop_to_aspect_ratio=crop_to_aspect_ratio,
                pad_to_aspect_ratio=pad_to_aspect_ratio, data_format=data_format, format=format, verbose=verbose)
    if labels not in ("inferred", None):
        if not isinstance(labels, (list, tuple)):
            raise ValueError("`labels` argument should be a list/tuple of integer labels, of the same size as the "
                             "number of image files in the target directory. If you wish to infer the labels from "
                             'the subdirectory names in the target directory, pass `labels="inferred"`. If you wish '
                             f"to get a dataset that only contains images (no labels), pass `labels=None`. Received: "
                             f"labels={labels}")
        if class_names:
            raise ValueError(f'You can only pass `class_names` if `labels="inferred"`. Received: labels={labels}, '
                             f"and class_names={class_names}")
    if label_mode not in {"int", "categorical", "binary", None}:
        raise ValueError('`label_mode` argument must be one of "int", "categorical", "binary", or None. '
                         f"Received: label_mode={label_mode}")
    if labels is None or label_mode is None:
        labels = None
        label_mode = None
    if color_mode not in _CHANNELS:
        raise ValueError('`color_mode` must be one of {"rgb", "rgba", "grayscale"}. '
                         f"Received: color_mode={color_mode}")
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    elif not isinstance(image_size, (list, tuple)) or not len(image_size) == 2:
        raise ValueError("Invalid `image_size` value. Expected a tuple of 2 integers. "
                         f"Received: image_size={image_size}")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in image_size):
        raise ValueError(f"`image_size` must be two positive integers. Received: image_size={image_size}")
    image_size = (int(image_size[0]), int(image_size[1]))
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                   or batch_size < 1):
        raise ValueError(f"`batch_size` must be a positive integer or None. Received: batch_size={batch_size!r}")
    if not isinstance(interpolation, str):
        raise ValueError(f"Argument `interpolation` should be one of {_INTERPOLATIONS}. "
                         f"Received: interpolation={interpolation!r}")
    interpolation = interpolation.lower()
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"Argument `interpolation` should be one of {_INTERPOLATIONS}. "
                         f"Received: interpolation={interpolation}")
    if format not in ("tf", "grain"):
        raise ValueError(f'`format` should be either "tf" or "grain". Received: format={format}')
    if pad_to_aspect_ratio and crop_to_aspect_ratio:
        raise ValueError("Only one of `pad_to_aspect_ratio`, `crop_to_aspect_ratio` can be set to `True`.")
    if validation_split and not 0 < validation_split < 1:
        raise ValueError(f"`validation_split` must be between 0 and 1, received: {validation_split}")
    if (validation_split or subset) and not (validation_split and subset):
        raise ValueError("If `subset` is set, `validation_split` must be set, and inversely.")
    if subset not in ("training", "validation", "both", None):
        raise ValueError(f'`subset` must be either "training", "validation" or "both", received: {subset}')
    if validation_split and shuffle and seed is None:
        raise ValueError("If using `validation_split` and shuffling the data, you must provide a `seed` argument, "
                         "to make sure that there is no overlap between the training and validation subset.")
    data_format = _data_format(data_format)
    spec = augment_spec(augment, image_size, data_format) if augment is not None else None
    if seed is None:
        seed = np.random.randint(1e6)
    image_paths, labels, class_names = _index_directory(directory, labels, class_names, shuffle, seed, follow_links)
    reason = _fallback_reason(image_paths, color_mode, interpolation, pad_to_aspect_ratio, format)
    if reason is not None:
        if spec is not None:
            raise ValueError(f"stoker.keras.image_dataset_from_directory: augment= needs stoker's loader, and {reason} "
                             "is served by Keras' own image_dataset_from_directory; apply the layers there with "
                             "dataset.map(lambda x, y: (layers(x, training=True), y))")
        warnings.warn(f"stoker.keras.image_dataset_from_directory: {reason} is served by Keras' own "
                      "image_dataset_from_directory (TensorFlow decodes), not by stoker's loader", stacklevel=2)
        return _keras_own(directory, **dict(call, seed=seed))
    if verbose:
        if labels is None:
            print(f"Found {len(image_paths)} files.")
        else:
            print(f"Found {len(image_paths)} files belonging to {len(class_names)} classes.")
    if label_mode == "binary" and len(class_names) != 2:
        raise ValueError('When passing `label_mode="binary"`, there must be exactly 2 class_names. Received: '
                         f"class_names={class_names}")
    shuffle_buffer = batch_size * 8 if batch_size is not None else 1024
    num_classes = len(class_names) if class_names else 0
    args = dict(label_mode=label_mode, num_classes=num_classes, image_size=image_size, interpolation=interpolation,
                data_format=data_format, crop=bool(crop_to_aspect_ratio), batch_size=batch_size)
    subsets = ["training", "validation"] if subset == "both" else [subset]
    out = []
    for part in subsets:
        paths, part_labels = _split(image_paths, labels, validation_split, part)
        if not paths:
            what = {"training": "training images", "validation": "validation images"}.get(part, "images")
            raise ValueError(f"No {what} found in directory {directory}. Allowed formats: {ALLOWLIST_FORMATS}")
        # subset='both': Keras shuffles the training part only.
        part_shuffle = shuffle and not (subset == "both" and part == "validation")
        # augment=: not on the validation part of subset='both' (as a model's augmentation layers at inference)
        part_spec = None if subset == "both" and part == "validation" else spec
        ds = _native_dataset(paths, part_labels, shuffle=part_shuffle, shuffle_buffer=shuffle_buffer, seed=seed,
                             spec=part_spec, **args)
        ds.class_names = class_names
        ds.file_paths = paths
        out.append(ds)
    return out if subset == "both" else out[0]
