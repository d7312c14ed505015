"""ImageDataGenerator: tf_keras' constructor and methods; stoker's augmenter does the work."""

from __future__ import annotations

import warnings

import numpy as np

from .. import _stoker
from .._loader import Augment
from ._common import _as_u8, _floatx, _image_data_format
from ._transform import _apply_transform_numpy, _apply_with_works
from .iterators import DataFrameIterator, DirectoryIterator, NumpyArrayIterator

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
        if zca_whitening:
            if not featurewise_center:
                self.featurewise_center = True
                warnings.warn("This ImageDataGenerator specifies `zca_whitening`, which overrides setting of "
                              "`featurewise_center`.")
            if featurewise_std_normalization:
                self.featurewise_std_normalization = False
                warnings.warn("This ImageDataGenerator specifies `zca_whitening` which overrides setting of"
                              "`featurewise_std_normalization`.")
        elif featurewise_std_normalization and not featurewise_center:
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
        self._warned: set = set()
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
                    cval=float(self.cval),
                    # stoker's warp has orders 0 and 1; other orders warp in NumPy/SciPy (_numpy_warp)
                    interpolation_order=int(self.interpolation_order) if self.interpolation_order in (0, 1) else 1)

    def _check_spec(self) -> None:
        """Fails now (naming the argument) on settings stoker's augmenter rejects."""
        self._spec(8, 8, 3, standardise=False)

    def _warn_once(self, what: str) -> None:
        """One warning per generator and kind: a setting stoker's C++ path cannot take, computed
        with Keras' math in NumPy/SciPy instead (correct, slower)."""
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(f"stoker.keras: {what} runs Keras' math in NumPy/SciPy, image by image (correct, "
                          "slower than stoker's C++ path)", stacklevel=3)

    def _numpy_warp(self) -> bool:
        """Whether random transforms warp in NumPy/SciPy (an interpolation_order stoker's warp lacks)."""
        return self.interpolation_order not in (0, 1) and self._has_random_transform()

    def _cpp_pipeline_ok(self) -> bool:
        """Whether the whole of a batch's augmentation and standardisation can run in stoker's
        Loader (the fused pipeline)."""
        return not self._numpy_warp() and not self.zca_whitening

    def _zca(self, batch):
        """Keras' ZCA whitening of a batch in data_format (each image flattened as Keras does), in
        float32."""
        if self.zca_whitening_matrix is None:
            warnings.warn("This ImageDataGenerator specifies `zca_whitening`, but it hasn't been fit on any "
                          "training data. Fit it first by calling `.fit(numpy_data)`.")
            return batch
        flat = np.asarray(batch, dtype=np.float32).reshape(len(batch), -1)
        white = flat @ np.asarray(self.zca_whitening_matrix, dtype=np.float32)
        return white.reshape(np.shape(batch)).astype(batch.dtype, copy=False)

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
        if self._numpy_warp():
            self._warn_once(f"interpolation_order={self.interpolation_order!r}")
            random = self._has_random_transform()
            out = None
            for i in range(n):
                x = images[i].astype(dtype)
                if random:
                    params = self._draw((h, w, c), seed, epoch, ids[i], "channels_last")
                    x = _apply_transform_numpy(x, params, self.fill_mode, self.cval, self.interpolation_order)
                if data_format == "channels_first":
                    x = np.ascontiguousarray(x.transpose(2, 0, 1))
                x = self.standardize(x)
                if out is None:
                    out = np.empty((n,) + x.shape, dtype=dtype)
                out[i] = x
        elif self.preprocessing_function is None and featurewise is not None:
            self._warn_unfitted()
            out = self._augmenter(h, w, c, True, data_format, featurewise).apply_batch(
                images, seed=seed, epoch=epoch, sample_ids=ids)
            out = np.asarray(out)
            if self.zca_whitening:
                out = self._zca(out)
        else:
            raw = np.asarray(self._augmenter(h, w, c, False, data_format).apply_batch(
                images, seed=seed, epoch=epoch, sample_ids=ids))
            shape = raw.shape[1:]
            out = np.empty((n,) + shape, dtype=dtype)
            for i in range(n):
                x = raw[i].astype(dtype, copy=True)
                out[i] = self.standardize(x)
        return out if out.dtype == np.dtype(dtype) else out.astype(dtype)

    def _process_wide(self, images, seed, epoch, sample_ids, data_format, dtype):
        """A batch of float32 NHWC images that are not 8-bit (16/32-bit grayscale files): Keras'
        per-image math in NumPy/SciPy (img_to_array, apply_transform, standardize), parameters
        from stoker's RNG keyed as the C++ path's."""
        self._warn_once("color_mode='grayscale' on 16/32-bit images")
        random = self._has_random_transform()
        out = None
        for i, j in enumerate(sample_ids):
            x = np.array(images[i], dtype=dtype)
            if random:
                params = self._draw(x.shape, seed, epoch, int(j), "channels_last")
                x = _apply_transform_numpy(x, params, self.fill_mode, self.cval, self.interpolation_order)
            if data_format == "channels_first":
                x = np.ascontiguousarray(x.transpose(2, 0, 1))
            x = self.standardize(x)
            if out is None:
                out = np.empty((len(images),) + x.shape, dtype=dtype)
            out[i] = x
        if out is None:
            shape = images.shape[1:] if data_format == "channels_last" else (images.shape[3],) + images.shape[1:3]
            out = np.empty((0,) + tuple(shape), dtype=dtype)
        return out

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
        if self.zca_whitening:
            if self.zca_whitening_matrix is not None:
                flat_x = x.reshape(-1, np.prod(x.shape[-3:]))
                white_x = flat_x @ self.zca_whitening_matrix
                x = np.reshape(white_x, x.shape)
            else:
                warnings.warn("This ImageDataGenerator specifies `zca_whitening`, but it hasn't been fit on any "
                              "training data. Fit it first by calling `.fit(numpy_data)`.")
        return x

    def _hw(self, img_shape):
        return int(img_shape[self.row_axis - 1]), int(img_shape[self.col_axis - 1])

    def get_random_transform(self, img_shape, seed=None):
        """Keras' transform parameters for an image of this shape, drawn from stoker's RNG (keyed by
        seed; seed=None draws one from NumPy's global RNG)."""
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        return self._draw(img_shape, int(seed), 0, 0)

    def _draw(self, img_shape, seed, epoch, sample_id, data_format=None):
        """The parameters stoker's augmenter draws for (seed, epoch, sample_id), with Keras' keys
        (img_shape in data_format, the generator's by default)."""
        if (data_format or self.data_format) == "channels_last":
            h, w = int(img_shape[0]), int(img_shape[1])
        else:
            h, w = int(img_shape[1]), int(img_shape[2])
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
        u8 = (_as_u8(hwc) if hwc.shape[2] in (1, 3, 4) and _apply_with_works() and self.interpolation_order in (0, 1)
              else None)
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
        """Keras' fit: featurewise mean/std per channel on rescaled (optionally augmented) images, and
        the ZCA whitening matrix (Keras' SVD, in NumPy)."""
        x = np.asarray(x)
        if x.ndim != 4:
            raise ValueError(f"Input to `.fit()` should have rank 4. Got array with shape: {x.shape}")
        c = x.shape[self.channel_axis]
        if c not in (1, 3, 4):
            warnings.warn(f'Expected input to be images (as Numpy array) following the data format convention '
                          f'"{self.data_format}" (channels on axis {self.channel_axis}), i.e. expected either 1, 3 '
                          f"or 4 channels on axis {self.channel_axis}. However, it was passed an array with shape "
                          f"{x.shape} ({c} channels).")
        if not (self.featurewise_center or self.featurewise_std_normalization or self.zca_whitening):
            return
        nhwc = x if self.data_format == "channels_last" else x.transpose(0, 2, 3, 1)
        u8 = _as_u8(nhwc) if c in (1, 3, 4) else None
        shape = [1, 1, 1]
        shape[self.channel_axis - 1] = c
        if u8 is not None and not augment and not self.zca_whitening:
            # stoker's C++ statistics (double accumulation) on the rescaled values.
            spec = self._spec(u8.shape[1], u8.shape[2], c, standardise=False)
            spec.training = False
            spec.rescale = float(self.rescale) if self.rescale else None
            mean, std = _stoker.fit_featurewise(spec, np.ascontiguousarray(u8))
            mean = np.asarray(mean[:c], dtype=self.dtype)
            std = np.asarray(std[:c], dtype=self.dtype)
        else:
            if seed is None:
                seed = int(np.random.randint(0, 2**31 - 1))
            if augment and u8 is not None and self.interpolation_order in (0, 1):
                aug = self._augmenter(u8.shape[1], u8.shape[2], c, False, "channels_last")
                data = np.concatenate([np.asarray(aug.apply_batch(np.ascontiguousarray(u8), seed=int(seed), epoch=r))
                                       for r in range(int(rounds))]).astype(self.dtype)
                if self.rescale:
                    data *= self.rescale
            else:
                data = np.array(nhwc, dtype=self.dtype)
                if self.rescale:
                    data *= self.rescale
                if augment:  # Keras' order: rescale, then the random transform of each image
                    self._warn_once(f"fit(augment=True) on {c} channels" if c not in (1, 3, 4)
                                    else "fit(augment=True) on images that are not 8-bit" if u8 is None
                                    else f"fit(augment=True) with interpolation_order={self.interpolation_order!r}")
                    data = np.concatenate([
                        np.stack([_apply_transform_numpy(data[i], self._draw(data.shape[1:], int(seed), r, i,
                                                                             "channels_last"),
                                                         self.fill_mode, self.cval, self.interpolation_order)
                                  for i in range(len(data))]).astype(self.dtype)
                        for r in range(int(rounds))])
            mean = np.mean(data, axis=(0, 1, 2))
            data -= mean
            std = np.std(data, axis=(0, 1, 2))
            if self.zca_whitening:
                # Keras' matrix: the centred (and, when set, normalised) images flattened in data_format.
                if self.featurewise_std_normalization:
                    data /= std + 1e-6
                flat = data if self.data_format == "channels_last" else data.transpose(0, 3, 1, 2)
                flat = flat.reshape(len(flat), -1)
                u, s, _ = np.linalg.svd(flat.T, full_matrices=False)
                s_inv = np.sqrt(len(flat)) / (s + self.zca_epsilon)
                self.zca_whitening_matrix = (u * s_inv).dot(u.T)
        if self.featurewise_center:
            self.mean = np.reshape(np.asarray(mean, dtype=self.dtype), shape)
        if self.featurewise_std_normalization:
            self.std = np.reshape(np.asarray(std, dtype=self.dtype), shape)
        self._augmenters.clear()
