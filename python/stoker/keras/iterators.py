"""Keras' iterators: Iterator (Sequence semantics), the file iterators (DirectoryIterator,
DataFrameIterator) and NumpyArrayIterator."""

from __future__ import annotations

import collections
import os
import random
import threading
import warnings
from typing import Optional

import numpy as np

from ._common import _BASES, _CHANNELS, _WHITE_LIST_FORMATS, _as_u8, _floatx, _image_data_format, _threads
from ._decode import _FileDecoder
from ._transform import _array_to_pil
from .pipeline import _EpochPipeline, _FitOrderPipeline

# ---------------------------------------------------------------------------------------------
# Iterators.
class Iterator(*_BASES):
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
        # Keras' fit(shuffle=True) draws its batch order with random.shuffle just before asking for
        # the first batch of a pass: the state of Python's RNG seen at the previous call here
        # replays that draw (see _watch_fit_order).
        self._rng_state = random.getstate()
        self._fit_order = None  # (epoch, batch order) of the pass Keras is asking for
        self._fit_order_started = None  # the _fit_order whose pipeline has been started

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

    def _watch_fit_order(self):
        """Keras' fit(shuffle=True) (tf_keras' KerasSequenceAdapter and OrderedEnqueuer, Keras 3's
        PyDatasetAdapter) asks for a Sequence's batches in the order random.shuffle(list(range(len)))
        gives with Python's global RNG. When that RNG has moved since the previous call, replay the
        shuffle from its previous state: if it ends in the current state, that was the draw, and its
        order is the one the coming requests follow (kept in _fit_order for the current epoch).
        Anything else that moved the RNG does not end there and changes nothing."""
        state = random.getstate()
        before, self._rng_state = self._rng_state, state
        if before == state or len(self) < 2:
            return
        replay = random.Random()
        replay.setstate(before)
        order = list(range(len(self)))
        replay.shuffle(order)
        if replay.getstate() == state:
            self._fit_order = (self._epoch, order)

    def __getitem__(self, idx):
        if idx >= len(self) or idx < -len(self):
            raise ValueError(f"Asked to retrieve element {idx}, but the Sequence has length {len(self)}")
        if idx < 0:
            idx += len(self)
        with self.lock:
            if self.index_array is None:
                self._set_index_array()
            self._watch_fit_order()
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
            self._rng_state = random.getstate()

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
        if (self.pipelined != "decode" and gen and gen._has_random_transform() and gen._cpp_pipeline_ok()
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
            fit = self._fit_order
            if fit is not None and fit[0] == epoch and fit is not self._fit_order_started:
                # Keras' fit is starting a pass over this epoch in a known order: a pipeline in that order.
                self._fit_order_started = fit
                if pipe is not None:
                    self._end_pipeline(close=True)
                pipe = self._open_pipeline(epoch, fit[1])
            if pipe is not None:
                got = pipe.take(idx)
                if got is not None:
                    self.pipelined_batches += 1
                    return got
                if not pipe.alive and pipe.failed:
                    return None
                if isinstance(pipe, _FitOrderPipeline) and pipe.alive:
                    return None  # a request out of fit's order: the exact path, the pipeline stays
            # A pipeline starts at batch 0 when it opens the epoch's requests (or follows its last
            # batch: another pass); a 0 amid random access in an unknown order does not start one,
            # which would decode batches 1, 2, ... for nothing.
            fresh = previous is None or previous[0] != epoch or previous[1] == len(self) - 1
            if idx != 0 or not fresh:
                return None
            if pipe is not None:  # the epoch again from its start: the same draws
                self._end_pipeline(close=True)
            pipe = self._open_pipeline(epoch, None)
            if pipe is None:
                return None
            got = pipe.take(idx)
            if got is not None:
                self.pipelined_batches += 1
            return got

    def _open_pipeline(self, epoch, batch_order):
        """The epoch's pipeline (in order, or in batch_order), now self._pipe; None when the
        settings take no pipeline or the Loader rejects them (the exact path serves the epoch)."""
        if self._pipe_failed_epoch == epoch:
            return None
        mode = self._pipeline_mode()
        if mode is None:
            return None
        with self.lock:
            if self._epoch != epoch or self.index_array is None:
                return None
            order = np.array(self.index_array, dtype=np.int64, copy=True)
        try:
            if batch_order is None or list(batch_order) == list(range(len(self))):
                pipe = _EpochPipeline(self, epoch, order, mode)
            else:
                pipe = _FitOrderPipeline(self, epoch, order, mode, batch_order)
        except Exception:  # settings the Loader rejects: the exact path serves this epoch
            self._pipe_failed_epoch = epoch
            return None
        self._pipe = pipe
        return pipe

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
            if fused:  # augmented and standardised inside the pipeline's Loader
                gen._warn_unfitted()
                return self._finish(images, index_array)
            return self._finish(self._from_u8(images, index_array, epoch), index_array)
        images = self._decoded(index_array, epoch, idx)
        if following is not None and (epoch, following[0]) not in self._prefetched and (
                self._pipe is None or self._pipe.epoch != epoch or not self._pipe.alive):
            # Decode the next batch in the background (keyed by epoch: a new epoch drops it).
            self._prefetched = {k: v for k, v in self._prefetched.items() if k[0] == epoch}
            self._prefetched[(epoch, following[0])] = _threads().submit(self._decode, following[1])
        return self._finish(self._from_u8(images, index_array, epoch), index_array)

    def _from_u8(self, images, index_array, epoch):
        """The batch from decoded NHWC images (uint8, or float32 for 16/32-bit grayscale), whichever
        decoder made them: the generator's augmentation and standardisation (keyed by seed, epoch,
        sample), or the plain conversion."""
        gen = self.image_data_generator
        if gen and images.dtype != np.uint8:  # 16/32-bit grayscale: Keras' per-image math
            return gen._process_wide(images, self._aug_seed, max(epoch, 0), index_array, self.data_format,
                                     self.dtype)
        if gen:
            return gen._process_u8(images, self._aug_seed, max(epoch, 0), index_array, self.data_format, self.dtype)
        batch_x = images.astype(self.dtype)
        if self.data_format == "channels_first":
            batch_x = np.ascontiguousarray(batch_x.transpose(0, 3, 1, 2))
        return batch_x

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
