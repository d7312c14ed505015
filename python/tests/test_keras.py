"""stoker.keras.ImageDataGenerator against the real tf_keras ImageDataGenerator."""

import inspect
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

tf_keras = pytest.importorskip("tf_keras", reason="stoker.keras tests compare against tf_keras: pip install tf-keras")
Image = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
from tf_keras.preprocessing.image import ImageDataGenerator as KerasGen  # noqa: E402

import stoker.keras as sk  # noqa: E402
from stoker.keras import ImageDataGenerator  # noqa: E402

CLASS_MODES = ["categorical", "binary", "sparse", "input", None]


def _smooth(h, w, rng):
    """A smooth random image (so interpolation differences stay interpolation-sized)."""
    yy, xx = np.mgrid[0:h, 0:w]
    a = rng.uniform(0, 3, 3)
    img = np.stack([127 + 120 * np.sin(a[c] * xx / w * 3 + a[(c + 1) % 3] * yy / h * 3 + c) for c in range(3)], -1)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    """3 classes, PNG and JPEG files of various sizes, nested sub-folders, a non-image file and an
    upper-case extension (Keras' listing rules)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    layout = {
        "cat": ["b.jpg", "a.png", "sub/x.png", "sub2/y.png", "sub/z/w.png", "A.PNG", "notes.txt", "sub-1/q.png"],
        "dog": [f"{i}.png" for i in range(7)],
        "bird": [f"im{i}.jpg" for i in range(4)] + [f"im{i}.png" for i in range(4, 12)],
    }
    for cls, files in layout.items():
        for name in files:
            path = root / cls / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".txt"):
                path.write_text("not an image")
                continue
            h, w = (int(v) for v in rng.integers(9, 40, 2))
            img = Image.fromarray(_smooth(h, w, rng) if rng.random() < 0.5 else rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            if name.endswith(".jpg"):
                img.save(path, quality=90)
            else:
                img.save(path)
    return str(root)


def _pairs(k_it, s_it):
    for i in range(len(k_it)):
        yield k_it[i], s_it[i]


def _as_tuple(b):
    return b if isinstance(b, tuple) else (b,)


# ---------------------------------------------------------------------------------------------
def test_signatures_match_keras():
    for name in ["__init__", "flow", "flow_from_directory", "flow_from_dataframe", "fit", "standardize",
                 "get_random_transform", "apply_transform", "random_transform"]:
        ours = inspect.signature(getattr(ImageDataGenerator, name)).parameters
        theirs = inspect.signature(getattr(KerasGen, name)).parameters
        for p in theirs.values():
            if p.kind is p.VAR_KEYWORD:
                continue
            assert p.name in ours, f"{name}: missing argument {p.name}"
            assert ours[p.name].default == p.default, f"{name}({p.name}): default {ours[p.name].default!r} != {p.default!r}"
        assert list(ours)[: len(theirs) - ("kwargs" in theirs)] == [n for n in theirs if n != "kwargs"][: len(ours)], name


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("kind", ["uint8", "float"])
def test_zca_whitening_as_keras(data_format, kind):
    """fit computes Keras' principal components; standardize and the batches apply them (float32)."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (40, 5, 6, 3)).astype(np.float32)
    if kind == "float":
        x = x / 7.0
    if data_format == "channels_first":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    kw = dict(zca_whitening=True, zca_epsilon=1e-2, rescale=1 / 255, data_format=data_format)
    with pytest.warns(UserWarning, match="zca_whitening"):
        s = ImageDataGenerator(**kw)
    k = KerasGen(**kw)
    assert s.featurewise_center and not s.featurewise_std_normalization
    s.fit(x)
    k.fit(x)
    np.testing.assert_allclose(s.mean, k.mean, rtol=1e-5, atol=1e-6)
    scale = np.abs(k.zca_whitening_matrix).max()
    np.testing.assert_allclose(s.zca_whitening_matrix, k.zca_whitening_matrix, atol=2e-4 * scale)
    img = x[3].copy()
    ref = k.standardize(img.copy())
    np.testing.assert_allclose(s.standardize(img.copy()), ref, atol=2e-3 * np.abs(ref).max())
    batch = s.flow(x, batch_size=8, shuffle=False)[0]
    ref = np.stack([k.standardize(v.copy()) for v in x[:8]])
    assert batch.dtype == np.float32 and batch.shape == ref.shape
    np.testing.assert_allclose(batch, ref, atol=2e-3 * np.abs(ref).max())
    with pytest.warns(UserWarning, match="hasn't been fit"):
        ImageDataGenerator(zca_whitening=True, featurewise_center=True).flow(x[:, :, :, :3], batch_size=2)[0]


def test_numpy_fallbacks_on_files_and_fit(folder):
    """Files: the pipeline decodes, the NumPy path augments; fit(augment=True) on float data."""
    for kw in (dict(rotation_range=10, interpolation_order=3), dict(zca_whitening=True, horizontal_flip=True)):
        gen = ImageDataGenerator(rescale=1 / 255, **kw)
        if gen.zca_whitening:
            gen.fit(np.random.default_rng(1).integers(0, 256, (12, 6, 5, 3)))
        it = gen.flow_from_directory(folder, target_size=(6, 5), batch_size=4, seed=1)
        assert it._pipeline_mode() == "decode"
        batches = [it[i][0] for i in range(len(it))]
        assert it.pipelined_batches == len(it) and all(np.isfinite(b).all() for b in batches)
    x = np.random.default_rng(0).random((6, 8, 8, 3)).astype(np.float32) * 300
    s = ImageDataGenerator(featurewise_center=True, featurewise_std_normalization=True, rotation_range=20)
    with pytest.warns(UserWarning, match="not 8-bit"):
        s.fit(x, augment=True, rounds=2, seed=3)
    assert s.mean.shape == (1, 1, 3) and s.std.shape == (1, 1, 3) and np.isfinite(s.std).all()


@pytest.mark.parametrize("order", [2, 3])
def test_interpolation_order_numpy_fallback(order):
    """An interpolation_order stoker's warp lacks: Keras' apply_transform in NumPy/SciPy with the
    parameters stoker draws, one warning per generator."""
    img = _smooth(12, 16, np.random.default_rng(4))
    args = dict(rotation_range=30, zoom_range=0.2, interpolation_order=order, rescale=1 / 255)
    s, k = ImageDataGenerator(**args), KerasGen(**args)
    with pytest.warns(UserWarning, match=f"interpolation_order={order}"):
        batch = s.flow(img[None].repeat(3, 0), batch_size=3, shuffle=False, seed=5)[0]
    for i in range(3):
        params = s._draw(img.shape, s.flow(img[None], seed=5)._aug_seed, 0, i)
        ref = k.standardize(k.apply_transform(img.astype(np.float32), params))
        np.testing.assert_allclose(batch[i], ref, atol=1e-5)
    params = s._draw(img.shape, 1, 0, 0)
    np.testing.assert_allclose(s.apply_transform(img.astype(np.float32), params),
                               k.apply_transform(img.astype(np.float32), params), atol=1e-4)


def test_invalid_arguments_as_keras():
    with pytest.raises(ValueError):
        ImageDataGenerator(validation_split=1.5)
    with pytest.raises(ValueError):
        ImageDataGenerator(zoom_range=(1, 2, 3))
    with pytest.raises(ValueError):
        ImageDataGenerator(brightness_range=0.5)
    with pytest.raises(ValueError):
        ImageDataGenerator(data_format="nhwc")


@pytest.mark.parametrize("split", [None, 0.1, 0.25, 0.33, 0.5])
def test_listing_and_split_match_keras(folder, split):
    subsets = [None] if split is None else ["training", "validation"]
    for subset in subsets:
        kw = {} if split is None else {"validation_split": split}
        k = KerasGen(**kw).flow_from_directory(folder, subset=subset, shuffle=False)
        s = ImageDataGenerator(**kw).flow_from_directory(folder, subset=subset, shuffle=False)
        assert s.class_indices == k.class_indices == {"bird": 0, "cat": 1, "dog": 2}
        assert s.filenames == k.filenames
        assert s.filepaths == k.filepaths
        assert s.classes.dtype == k.classes.dtype and np.array_equal(s.classes, k.classes)
        assert np.array_equal(s.labels, k.labels)
        assert (s.samples, s.n, s.num_classes, len(s)) == (k.samples, k.n, k.num_classes, len(k))
        assert s.image_shape == k.image_shape
        assert s.split == k.split


def test_classes_argument_and_follow_links(folder, tmp_path):
    k = KerasGen().flow_from_directory(folder, classes=["dog", "cat"], shuffle=False)
    s = ImageDataGenerator().flow_from_directory(folder, classes=["dog", "cat"], shuffle=False)
    assert s.class_indices == k.class_indices == {"dog": 0, "cat": 1}
    assert s.filenames == k.filenames and np.array_equal(s.classes, k.classes)
    # a symlinked sub-folder is visited only with follow_links=True, as in Keras
    root = tmp_path / "linked"
    (root / "a").mkdir(parents=True)
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "a" / "one.png")
    os.symlink(os.path.join(folder, "dog"), root / "a" / "more")
    for follow in (False, True):
        k = KerasGen().flow_from_directory(str(root), follow_links=follow, shuffle=False)
        s = ImageDataGenerator().flow_from_directory(str(root), follow_links=follow, shuffle=False)
        assert s.filenames == k.filenames
        assert len(s.filenames) == (8 if follow else 1)


@pytest.mark.parametrize("interpolation,tolerance", [("nearest", 0), ("bilinear", 1), ("bicubic", 1), ("box", 1)])
@pytest.mark.parametrize("class_mode", CLASS_MODES)
def test_batches_equal_keras(folder, interpolation, tolerance, class_mode):
    args = dict(target_size=(13, 21), shuffle=False, batch_size=7, class_mode=class_mode, interpolation=interpolation)
    k = KerasGen(rescale=1 / 255).flow_from_directory(folder, **args)
    s = ImageDataGenerator(rescale=1 / 255).flow_from_directory(folder, **args)
    assert len(s) == len(k) == 4
    for kb, sb in _pairs(k, s):
        kb, sb = _as_tuple(kb), _as_tuple(sb)
        assert len(kb) == len(sb)
        for kv, sv in zip(kb, sb):
            assert sv.dtype == kv.dtype and sv.shape == kv.shape
        assert np.abs(kb[0] - sb[0]).max() * 255 <= tolerance + 1e-3
        if class_mode not in ("input", None):
            assert np.array_equal(kb[1], sb[1])


@pytest.mark.parametrize("color_mode", ["grayscale", "rgba"])
def test_color_modes_equal_keras(folder, color_mode):
    args = dict(target_size=(10, 12), shuffle=False, batch_size=32, color_mode=color_mode)
    kx, ky = KerasGen().flow_from_directory(folder, **args)[0]
    sx, sy = ImageDataGenerator().flow_from_directory(folder, **args)[0]
    assert sx.shape == kx.shape == (26, 10, 12, 1 if color_mode == "grayscale" else 4)
    assert np.array_equal(sx, kx) and np.array_equal(sy, ky)


def test_keep_aspect_ratio_and_channels_first(folder):
    args = dict(target_size=(16, 24), shuffle=False, batch_size=32, keep_aspect_ratio=True)
    k = KerasGen(data_format="channels_first").flow_from_directory(folder, **args)
    s = ImageDataGenerator(data_format="channels_first").flow_from_directory(folder, **args)
    assert s.image_shape == k.image_shape == (3, 16, 24)
    (kx, ky), (sx, sy) = k[0], s[0]
    assert sx.shape == kx.shape == (26, 3, 16, 24)
    assert np.array_equal(sx, kx) and np.array_equal(sy, ky)


def test_dtype_argument(folder):
    k = KerasGen(dtype="float64").flow_from_directory(folder, target_size=(8, 8), shuffle=False)
    s = ImageDataGenerator(dtype="float64").flow_from_directory(folder, target_size=(8, 8), shuffle=False)
    (kx, ky), (sx, sy) = k[0], s[0]
    assert sx.dtype == kx.dtype == np.float64 and sy.dtype == ky.dtype
    assert np.array_equal(sx, kx)


AWKWARD_SIZES = ((37, 53), (9, 7), (13, 21), (50, 17), (1, 30), (30, 1), (1, 1), (375, 500))


@pytest.fixture(scope="module")
def awkward_folder(tmp_path_factory):
    # JPEG and PNG files of sizes that upscale, downscale, keep one side, 1xN, Nx1, 1x1 to (13, 21)
    root = tmp_path_factory.mktemp("awkward")
    rng = np.random.default_rng(7)
    for k, (h, w) in enumerate(AWKWARD_SIZES):
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)), (x + y) % 256], -1)
        img = np.where(rng.random((h, w, 1)) < 0.3, rng.integers(0, 256, (h, w, 3)), img).astype(np.uint8)
        for ext in ("png", "jpg"):
            (root / ext).mkdir(exist_ok=True)
            Image.fromarray(img).save(root / ext / f"{k}_{h}x{w}.{ext}", quality=90)
    return str(root)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "lanczos", "box", "hamming"])
@pytest.mark.parametrize("keep_aspect_ratio", [False, True])
def test_stoker_decoder_pixels_equal_keras(awkward_folder, interpolation, keep_aspect_ratio):
    # The default decoder (stoker's C++ one, full-size JPEG decode) against Keras' load_img.
    args = dict(target_size=(13, 21), shuffle=False, batch_size=64, interpolation=interpolation,
                keep_aspect_ratio=keep_aspect_ratio)
    k = KerasGen().flow_from_directory(awkward_folder, **args)
    s = ImageDataGenerator().flow_from_directory(awkward_folder, **args)
    assert s._decode.decoder == "stoker" and s.filenames == k.filenames
    (kx, _), (sx, _) = k[0], s[0]
    for name, a, b in zip(k.filenames, kx, sx):
        h, w = (int(v) for v in name.split("_")[1].split(".")[0].split("x"))
        diff = int(np.abs(a.astype(int) - b.astype(int)).max())
        if interpolation != "nearest" and h > 13 and w > 21:
            # Pillow 13 sometimes runs the vertical pass first when shrinking both ways (resample.cpp)
            assert diff <= (1 if interpolation in ("bilinear", "box", "hamming") else 40), name
        else:
            assert diff == 0, name


def test_stoker_decoder(folder, tmp_path):
    # same listing and labels; exact pixels where no resize happens
    for name, size in (("a", (12, 20)), ("b", (12, 20))):
        (tmp_path / "one" / name).mkdir(parents=True)
        rng = np.random.default_rng(len(name))
        Image.fromarray(rng.integers(0, 256, size + (3,), dtype=np.uint8)).save(tmp_path / "one" / name / "i.png")
    k = KerasGen().flow_from_directory(str(tmp_path / "one"), target_size=(12, 20), shuffle=False)
    s = ImageDataGenerator().flow_from_directory(str(tmp_path / "one"), target_size=(12, 20), shuffle=False,
                                                 decoder="stoker")
    (kx, ky), (sx, sy) = k[0], s[0]
    assert np.array_equal(sx, kx) and np.array_equal(sy, ky)
    s = ImageDataGenerator().flow_from_directory(folder, target_size=(13, 21), batch_size=5, decoder="stoker")
    x, y = s[len(s) - 1]
    assert x.shape == (1, 13, 21, 3) and y.shape == (1, 3) and x.dtype == np.float32
    with pytest.raises(NotImplementedError, match="color_mode"):
        ImageDataGenerator().flow_from_directory(folder, color_mode="grayscale", decoder="stoker")
    with pytest.raises(NotImplementedError, match="interpolation"):
        ImageDataGenerator().flow_from_directory(folder, interpolation="area", decoder="stoker")


def test_shuffle_order_and_random_access(folder):
    k = KerasGen().flow_from_directory(folder, target_size=(8, 8), batch_size=5, seed=3)
    s = ImageDataGenerator().flow_from_directory(folder, target_size=(8, 8), batch_size=5, seed=3)
    k[0], s[0]
    assert np.array_equal(k.index_array, s.index_array)  # Keras' first-epoch order for a seed
    assert not np.array_equal(s.index_array, np.arange(s.n))
    # any access order gives the same batches within an epoch, augmentation included, on the exact
    # path (pipelined=False; the pipelined path keeps files and labels, see test_pipeline_*)
    a = ImageDataGenerator(rotation_range=30, horizontal_flip=True).flow_from_directory(
        folder, target_size=(10, 10), batch_size=4, seed=1)
    a.pipelined = False
    forward = [a[i] for i in range(len(a))]
    backward = [a[i] for i in reversed(range(len(a)))][::-1]
    for (fx, fy), (bx, by) in zip(forward, backward):
        assert np.array_equal(fx, bx) and np.array_equal(fy, by)
    order = a.index_array.copy()
    a.on_epoch_end()
    assert not np.array_equal(order, a.index_array)
    again = a[0]
    # a new epoch: new order and new draws
    assert not np.array_equal(again[0], forward[0][0])
    # same epoch content as Keras: every sample once
    seen = np.concatenate([np.argmax(a[i][1], 1) for i in range(len(a))])
    assert np.array_equal(np.bincount(seen), np.bincount(a.classes))
    with pytest.raises(ValueError):
        a[len(a)]


def test_next_and_iter_like_keras(folder):
    k = KerasGen().flow_from_directory(folder, target_size=(8, 8), batch_size=10, shuffle=False)
    s = ImageDataGenerator().flow_from_directory(folder, target_size=(8, 8), batch_size=10, shuffle=False)
    assert iter(s) is s
    for _ in range(5):  # wraps around after 3 batches (10, 10, 6)
        (kx, ky), (sx, sy) = next(k), next(s)
        assert np.array_equal(kx, sx) and np.array_equal(ky, sy)
    s.reset()
    assert s.batch_index == 0


def test_flow_arrays_equal_keras():
    rng = np.random.default_rng(1)
    x8 = rng.integers(0, 256, (11, 9, 13, 3), dtype=np.uint8)
    y = np.arange(11) % 3
    w = rng.random(11)
    misc = rng.random((11, 2))
    for x in (x8, x8.astype(np.float32), x8 / 255.0):  # uint8, integer-valued float, other float
        for kw in ({}, {"rescale": 1 / 255}, {"samplewise_center": True, "samplewise_std_normalization": True}):
            k = KerasGen(**kw).flow((x, misc), y, batch_size=4, shuffle=False, sample_weight=w)
            s = ImageDataGenerator(**kw).flow((x, misc), y, batch_size=4, shuffle=False, sample_weight=w)
            assert len(s) == len(k) == 3
            for kb, sb in _pairs(k, s):
                assert len(sb) == 3 and isinstance(sb[0], list) and len(sb[0]) == 2
                assert sb[0][0].dtype == kb[0][0].dtype == np.float32 and sb[0][0].shape == kb[0][0].shape
                np.testing.assert_allclose(sb[0][0], kb[0][0], rtol=0, atol=2e-6)
                assert np.array_equal(sb[0][1], kb[0][1])
                assert np.array_equal(sb[1], kb[1]) and np.array_equal(sb[2], kb[2])
    # images only, subsets, channels_first
    k = KerasGen(validation_split=0.33).flow(x8, y, subset="validation", shuffle=False, batch_size=20)
    s = ImageDataGenerator(validation_split=0.33).flow(x8, y, subset="validation", shuffle=False, batch_size=20)
    assert s.n == k.n == 3 and np.array_equal(s[0][0], k[0][0]) and np.array_equal(s[0][1], k[0][1])
    assert np.array_equal(ImageDataGenerator().flow(x8, shuffle=False, batch_size=20)[0], x8.astype(np.float32))
    xc = x8.transpose(0, 3, 1, 2)
    k = KerasGen(data_format="channels_first").flow(xc, shuffle=False, batch_size=20)[0]
    s = ImageDataGenerator(data_format="channels_first").flow(xc, shuffle=False, batch_size=20)[0]
    assert s.shape == k.shape == (11, 3, 9, 13) and np.array_equal(s, k)
    with pytest.raises(ValueError):
        ImageDataGenerator(validation_split=0.5).flow(x8, np.sort(y), subset="training")


def test_flow_augments_uint8_and_float():
    x = np.zeros((64, 8, 8, 1), np.uint8)
    x[:, :, :4] = 200  # left half bright: a horizontal flip moves it right
    for data in (x, x / 255.0):
        it = ImageDataGenerator(horizontal_flip=True).flow(data, batch_size=64, seed=5, shuffle=False)
        b = it[0]
        flipped = b[:, 0, 0, 0] < b[:, 0, 7, 0]
        assert 10 < flipped.sum() < 54  # about half
        assert np.array_equal(it[0], b)  # same batch, same epoch -> same draws


def test_fit_and_standardize_against_keras():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (20, 10, 12, 3)).astype(np.float32)
    x[..., 1] = np.floor(x[..., 1] * 0.5)
    kw = dict(featurewise_center=True, featurewise_std_normalization=True, rescale=1 / 255)
    k, s = KerasGen(**kw), ImageDataGenerator(**kw)
    k.fit(x)
    s.fit(x)
    assert s.mean.shape == k.mean.shape == (1, 1, 3) and s.std.shape == k.std.shape
    np.testing.assert_allclose(s.mean, k.mean, rtol=0, atol=1e-5)
    np.testing.assert_allclose(s.std, k.std, rtol=0, atol=1e-5)
    kb = k.flow(x, batch_size=20, shuffle=False)[0]
    sb = s.flow(x, batch_size=20, shuffle=False)[0]
    # the outputs (about -2..2) carry the statistics' float32 rounding, amplified by 1/std (~7):
    # measured max difference 1.03e-5
    np.testing.assert_allclose(sb, kb, rtol=0, atol=2e-5)
    np.testing.assert_allclose(s.standardize(x[0].copy()), k.standardize(x[0].copy()), rtol=0, atol=2e-5)
    # not rescaled, centre only: values on the 0..255 scale
    k, s = KerasGen(featurewise_center=True), ImageDataGenerator(featurewise_center=True)
    k.fit(x)
    s.fit(x)
    assert s.std is None and k.std is None
    np.testing.assert_allclose(s.mean, k.mean, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(s.flow(x, batch_size=20, shuffle=False)[0],
                               k.flow(x, batch_size=20, shuffle=False)[0], rtol=0, atol=1e-4)
    # non-integer floats: fitted in NumPy
    k, s = KerasGen(**kw), ImageDataGenerator(**kw)
    k.fit(x + 0.25)
    s.fit(x + 0.25)
    np.testing.assert_allclose(s.mean, k.mean, rtol=0, atol=1e-5)
    np.testing.assert_allclose(s.std, k.std, rtol=0, atol=1e-5)
    # augment=True with flips only: the statistics cannot change
    s2 = ImageDataGenerator(horizontal_flip=True, vertical_flip=True, **kw)
    s2.fit(x.astype(np.uint8), augment=True, rounds=2, seed=0)
    np.testing.assert_allclose(s2.mean, k.mean - 0.25 / 255, rtol=0, atol=1e-5)
    np.testing.assert_allclose(s2.std, k.std, rtol=0, atol=1e-5)


# tf_keras' own test of fit(augment=True): channels_first on an array of shape (32, 10, 10, 3).
KERAS_FIT_TEST = dict(featurewise_center=True, samplewise_center=True, featurewise_std_normalization=True,
                      samplewise_std_normalization=True, zca_whitening=True, rotation_range=90.0,
                      width_shift_range=0.1, height_shift_range=0.1, shear_range=0.5, zoom_range=(0.2, 0.2),
                      channel_shift_range=0.0, brightness_range=(1, 5), fill_mode="nearest", cval=0.5,
                      horizontal_flip=True, vertical_flip=True, interpolation_order=1, data_format="channels_first")


def test_fit_augment_ten_channels_as_keras():
    """fit(augment=True) on ten channels (channels_first, shape (32, 10, 10, 3)): Keras transforms
    each sample in NumPy and its brightness shift casts values in [0, 1) to 8 bits as they are,
    so every augmented value is 0 whatever the draws: the mean and the ZCA matrix are Keras'."""
    x = np.random.default_rng(0).random((32, 10, 10, 3))
    k, s = KerasGen(**KERAS_FIT_TEST), ImageDataGenerator(**KERAS_FIT_TEST)
    k.fit(x, augment=True, seed=0)
    with pytest.warns(UserWarning, match="10 channels"):
        s.fit(x, augment=True, seed=0)
    assert s.mean.shape == k.mean.shape == (10, 1, 1) and s.std is None and k.std is None
    np.testing.assert_array_equal(s.mean, k.mean)
    np.testing.assert_allclose(s.zca_whitening_matrix, k.zca_whitening_matrix, rtol=1e-6, atol=0)


def test_fit_and_flow_ten_channels_brightness_as_keras():
    """A brightness factor fixed at 2 (a deterministic augmentation) on ten channels of values on
    the 0..255 scale: Pillow's enhancement of each channel is Keras' (which sees each
    channels_first sample as a 3-channel image), so fit's statistics and flow's batches equal
    Keras'."""
    x = np.random.default_rng(1).uniform(0, 200, (32, 10, 10, 3)).astype(np.float32)
    args = dict(featurewise_center=True, featurewise_std_normalization=True, brightness_range=(2, 2),
                data_format="channels_first")
    k, s = KerasGen(**args), ImageDataGenerator(**args)
    k.fit(x, augment=True, rounds=2)
    s.fit(x, augment=True, rounds=2)
    assert s.mean.shape == k.mean.shape == (10, 1, 1) and s.std.shape == k.std.shape
    assert float(k.mean.max()) > 100  # the brightened values, not a degenerate case
    np.testing.assert_allclose(s.mean, k.mean, rtol=1e-5, atol=0)
    np.testing.assert_allclose(s.std, k.std, rtol=1e-5, atol=0)
    kb = k.flow(x, batch_size=8, shuffle=False)[0]
    sb = s.flow(x, batch_size=8, shuffle=False)[0]
    assert sb.shape == kb.shape == (8, 10, 10, 3)
    np.testing.assert_allclose(sb, kb, rtol=0, atol=1e-4)


def test_samplewise_standardize_against_keras(folder):
    kw = dict(samplewise_center=True, samplewise_std_normalization=True)
    k = KerasGen(**kw).flow_from_directory(folder, target_size=(11, 11), shuffle=False, batch_size=32)
    s = ImageDataGenerator(**kw).flow_from_directory(folder, target_size=(11, 11), shuffle=False, batch_size=32)
    kx, sx = k[0][0], s[0][0]
    np.testing.assert_allclose(sx, kx, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sx.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    x = np.random.default_rng(4).random((6, 5, 3)).astype(np.float32) * 255
    np.testing.assert_allclose(ImageDataGenerator(**kw).standardize(x.copy()), KerasGen(**kw).standardize(x.copy()),
                               rtol=0, atol=1e-5)


def test_unfitted_featurewise_warns_like_keras(folder):
    s = ImageDataGenerator(featurewise_center=True).flow_from_directory(folder, target_size=(8, 8), shuffle=False)
    with pytest.warns(UserWarning, match="fit"):
        x, _ = s[0]
    k = KerasGen(featurewise_center=True).flow_from_directory(folder, target_size=(8, 8), shuffle=False)
    with pytest.warns(UserWarning):
        kx, _ = k[0]
    assert np.array_equal(x, kx)


def test_get_random_transform_keys_and_ranges():
    args = dict(rotation_range=20, width_shift_range=0.2, height_shift_range=3, shear_range=15, zoom_range=0.2,
                horizontal_flip=True, vertical_flip=False, brightness_range=(0.5, 1.5), channel_shift_range=10)
    s, k = ImageDataGenerator(**args), KerasGen(**args)
    shape = (20, 40, 3)
    assert set(s.get_random_transform(shape, seed=1)) == set(k.get_random_transform(shape, seed=1))
    draws = [s.get_random_transform(shape, seed=i) for i in range(300)]
    assert s.get_random_transform(shape, seed=7) == draws[7]
    col = {key: np.array([d[key] for d in draws], dtype=float) for key in draws[0]}
    assert np.all(np.abs(col["theta"]) <= 20) and col["theta"].std() > 5
    assert np.all(np.abs(col["tx"]) <= 2) and np.all(col["tx"] == np.round(col["tx"]))  # int: choice(3) * +-1
    assert np.all(np.abs(col["ty"]) <= 0.2 * 40) and col["ty"].std() > 1
    assert np.all(np.abs(col["shear"]) <= 15)
    assert np.all((col["zx"] >= 0.8) & (col["zx"] <= 1.2)) and not np.array_equal(col["zx"], col["zy"])
    assert 0.35 < col["flip_horizontal"].mean() < 0.65 and col["flip_vertical"].sum() == 0
    assert np.all((col["brightness"] >= 0.5) & (col["brightness"] <= 1.5))
    assert np.all(np.abs(col["channel_shift_intensity"]) <= 10)
    plain = ImageDataGenerator().get_random_transform(shape, seed=0)
    assert plain["channel_shift_intensity"] is None and plain["brightness"] is None and plain["theta"] == 0


FIXED = [dict(flip_horizontal=True), dict(flip_vertical=True), dict(theta=10), dict(theta=-7, zx=1.1, zy=0.9),
         dict(tx=2, ty=-3), dict(shear=12), dict(brightness=1.3), dict(channel_shift_intensity=20),
         dict(theta=5, flip_horizontal=True, brightness=0.7)]


@pytest.mark.parametrize("params", FIXED)
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_apply_transform_against_keras(params, data_format):
    img = _smooth(18, 26, np.random.default_rng(5)).astype(np.float32)
    if data_format == "channels_first":
        img = img.transpose(2, 0, 1)
    for fill in ("nearest", "constant"):
        s = ImageDataGenerator(data_format=data_format, fill_mode=fill, cval=9)
        k = KerasGen(data_format=data_format, fill_mode=fill, cval=9)
        out = s.apply_transform(img.copy(), params)
        if data_format == "channels_first" and "brightness" in params:
            # Keras' own brightness shift fails on channels_first images (array_to_img is called
            # without the data_format): compare with its channels_last result instead
            ref = KerasGen(fill_mode=fill, cval=9).apply_transform(img.transpose(1, 2, 0).copy(), params)
            ref = ref.transpose(2, 0, 1)
        else:
            ref = k.apply_transform(img.copy(), params)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        # the NumPy path (used while the binding's apply_with rejects 3-D images) is Keras' math;
        # the C++ one is allowed stoker's warp difference
        tol = 1e-3 if not sk._apply_with_works() else 1.5
        assert np.abs(out - ref).max() <= tol
    assert np.array_equal(s.random_transform(img.copy(), seed=3), s.random_transform(img.copy(), seed=3))


WARPS = [dict(horizontal_flip=True, vertical_flip=True), dict(rotation_range=15), dict(width_shift_range=0.2,
         height_shift_range=0.2), dict(zoom_range=0.25), dict(shear_range=10), dict(brightness_range=(0.5, 1.5)),
         dict(channel_shift_range=30), dict(rotation_range=30, interpolation_order=0),
         dict(rotation_range=30, fill_mode="constant", cval=7), dict(rotation_range=30, fill_mode="reflect"),
         dict(rotation_range=30, fill_mode="wrap")]


@pytest.mark.parametrize("args", WARPS)
def test_cpp_batch_augmentation_against_keras(args):
    """The batch path (C++ Augmenter.apply_batch) against Keras' apply_transform with the very
    parameters stoker drew for that sample. Measured max difference: 0 for flips, brightness,
    channel shift and order-0 warps; about 1.3 grey levels for bilinear warps."""
    img = _smooth(24, 32, np.random.default_rng(6))
    s, k = ImageDataGenerator(**args), KerasGen(**args)
    exact = not any(key in args for key in ("rotation_range", "width_shift_range", "zoom_range", "shear_range")) \
        or args.get("interpolation_order") == 0
    for seed in range(4):
        params = s._draw(img.shape, seed, 0, 0)
        ours = s.flow(img[None], batch_size=1, seed=seed, shuffle=False)[0][0]
        ref = k.apply_transform(img.astype(np.float32), params)
        assert np.abs(ours - ref).max() <= (0 if exact else 1.5)


def test_preprocessing_function_order(folder):
    calls = []

    def invert(x):
        calls.append((x.shape, x.dtype, float(x.max())))
        return 255.0 - x

    args = dict(target_size=(9, 9), shuffle=False, batch_size=32)
    k = KerasGen(preprocessing_function=invert, rescale=1 / 255).flow_from_directory(folder, **args)
    s = ImageDataGenerator(preprocessing_function=invert, rescale=1 / 255).flow_from_directory(folder, **args)
    kx, sx = k[0][0], s[0][0]
    assert np.array_equal(sx, kx)  # after augmentation, before rescale
    assert calls[-1][0] == (9, 9, 3) and calls[-1][1] == np.float32 and calls[-1][2] > 1
    assert len(calls) == 2 * 26
    x = np.random.default_rng(7).integers(0, 256, (5, 6, 7, 3)).astype(np.float32)
    sb = ImageDataGenerator(preprocessing_function=invert).flow(x, batch_size=5, shuffle=False)[0]
    assert np.array_equal(sb, 255 - x)


@pytest.fixture()
def frame(folder):
    pd = pytest.importorskip("pandas")
    k = KerasGen().flow_from_directory(folder, shuffle=False)
    rng = np.random.default_rng(8)
    df = pd.DataFrame({
        "filename": k.filenames + ["missing.png", "cat/notes.txt"],
        "class": [["bird", "cat", "dog"][c] for c in k.classes] + ["cat", "cat"],
        "weight": rng.random(len(k.filenames) + 2),
        "a": rng.random(len(k.filenames) + 2),
        "b": rng.integers(0, 5, len(k.filenames) + 2),
    })
    return df.sample(frac=1.0, random_state=0).reset_index(drop=True)


@pytest.mark.parametrize("class_mode", ["categorical", "binary", "sparse", "raw", "multi_output", "input", None])
def test_flow_from_dataframe_against_keras(folder, frame, class_mode):
    df = frame
    kw = dict(directory=folder, target_size=(10, 14), shuffle=False, batch_size=8, weight_col="weight",
              class_mode=class_mode)
    if class_mode == "binary":
        df = df[df["class"] != "bird"]
    if class_mode == "raw":
        kw["y_col"] = "a"
    if class_mode == "multi_output":
        kw["y_col"] = ["a", "b"]
    with pytest.warns(UserWarning, match="invalid image filename"):
        k = KerasGen(validation_split=0.25).flow_from_dataframe(df, subset="training", **kw)
    with pytest.warns(UserWarning, match="invalid image filename"):
        s = ImageDataGenerator(validation_split=0.25).flow_from_dataframe(df, subset="training", **kw)
    assert s.filenames == k.filenames and s.filepaths == k.filepaths and s.samples == k.samples
    if class_mode not in ("raw", "multi_output", "input", None):
        assert s.class_indices == k.class_indices and s.classes == k.classes
    for kb, sb in _pairs(k, s):
        kb, sb = _as_tuple(kb), _as_tuple(sb)
        assert len(kb) == len(sb)
        assert np.array_equal(kb[0], sb[0]) and kb[0].dtype == sb[0].dtype
        for kv, sv in zip(kb[1:], sb[1:]):
            if isinstance(kv, list):
                assert all(np.array_equal(a, b) for a, b in zip(kv, sv))
            else:
                assert np.array_equal(kv, sv) and kv.dtype == sv.dtype


def test_flow_from_dataframe_arguments(folder, frame):
    df = frame[frame["filename"].str.endswith((".png", ".jpg", ".PNG"))]
    k = KerasGen().flow_from_dataframe(df, folder, classes=["dog", "cat"], target_size=(8, 8), shuffle=False)
    s = ImageDataGenerator().flow_from_dataframe(df, folder, classes=["dog", "cat"], target_size=(8, 8), shuffle=False)
    assert s.class_indices == k.class_indices and s.filenames == k.filenames
    # multi-label categorical (list-valued class column)
    df2 = df.copy()
    df2["class"] = [[c, "other"] if i % 2 else [c] for i, c in enumerate(df2["class"])]
    k = KerasGen().flow_from_dataframe(df2, folder, target_size=(8, 8), shuffle=False, batch_size=64)
    s = ImageDataGenerator().flow_from_dataframe(df2, folder, target_size=(8, 8), shuffle=False, batch_size=64)
    assert np.array_equal(k[0][1], s[0][1]) and s[0][1].sum() > len(df2)
    # validate_filenames=False keeps every row; class_mode "other" is "raw" (deprecated)
    s = ImageDataGenerator().flow_from_dataframe(df, folder, validate_filenames=False, class_mode=None)
    assert s.samples == len(df)
    with pytest.warns(DeprecationWarning):
        s = ImageDataGenerator().flow_from_dataframe(df, folder, y_col="a", class_mode="other")
    assert s.class_mode == "raw"
    with pytest.warns(DeprecationWarning):
        ImageDataGenerator().flow_from_dataframe(df, folder, drop_duplicates=True)
    with pytest.raises(TypeError, match="unexpected"):
        ImageDataGenerator().flow_from_dataframe(df, folder, typo_argument=1)
    with pytest.raises(ValueError, match="2 classes"):
        ImageDataGenerator().flow_from_dataframe(df, folder, class_mode="binary")


def test_save_to_dir(folder, tmp_path):
    it = ImageDataGenerator(rescale=1 / 255).flow_from_directory(folder, target_size=(8, 8), batch_size=4,
                                                                 save_to_dir=str(tmp_path), save_prefix="aug",
                                                                 save_format="jpeg")
    it[0]
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 4 and all(f.startswith("aug_") and f.endswith(".jpeg") for f in files)


def test_iterators_are_keras_sequences(folder):
    it = ImageDataGenerator().flow_from_directory(folder, target_size=(8, 8))
    assert isinstance(it, tf_keras.utils.Sequence)
    assert isinstance(ImageDataGenerator().flow(np.zeros((2, 4, 4, 3))), tf_keras.utils.Sequence)


def test_model_fit(folder):
    tf_keras.utils.set_random_seed(0)
    gen = ImageDataGenerator(rescale=1 / 255, validation_split=0.25, horizontal_flip=True, rotation_range=10)
    train = gen.flow_from_directory(folder, target_size=(16, 16), batch_size=4, subset="training", seed=0)
    val = gen.flow_from_directory(folder, target_size=(16, 16), batch_size=4, subset="validation", shuffle=False)
    model = tf_keras.Sequential([
        tf_keras.layers.Input((16, 16, 3)),
        tf_keras.layers.Conv2D(4, 3, activation="relu"),
        tf_keras.layers.GlobalAveragePooling2D(),
        tf_keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(train, validation_data=val, steps_per_epoch=len(train), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["val_loss"]).all()
    assert model.predict(val, verbose=0).shape == (val.samples, 3)


# ---------------------------------------------------------------------------------------------
# The pipelined path: in-order batches from one stoker Loader per epoch.
@pytest.fixture(scope="module")
def solid_folder(tmp_path_factory):
    """2 classes of solid-colour images, one colour per file: any resampling or warp with
    fill_mode='nearest' keeps the colour, so a batch's colours name its files."""
    root = tmp_path_factory.mktemp("solid")
    rng = np.random.default_rng(5)
    colours = {}
    k = 0
    for cls, count in (("a", 9), ("b", 8)):
        (root / cls).mkdir()
        for i in range(count):
            colour = (20 + 10 * k, 250 - 12 * k, (37 * k) % 200 + 30)
            h, w = (int(v) for v in rng.integers(12, 40, 2))
            name = f"{i}.png" if i % 2 else f"{i}.jpg"
            img = Image.fromarray(np.full((h, w, 3), colour, np.uint8))
            img.save(root / cls / name, **({"quality": 100} if name.endswith(".jpg") else {}))
            colours[os.path.join(cls, name)] = np.asarray(img)[h // 2, w // 2].astype(np.float32)
            k += 1
    return str(root), colours


_SOLID_AUG = dict(rotation_range=30, horizontal_flip=True, zoom_range=0.2, width_shift_range=0.2, rescale=1 / 255)


def _colours(batch_x):
    return batch_x.reshape(len(batch_x), -1, 3).mean(1) * 255


def _expected_colours(it, colours, i):
    files = [it.filenames[j] for j in it.index_array[i * it.batch_size:(i + 1) * it.batch_size]]
    return np.stack([colours[f] for f in files])


def test_pipeline_serves_in_order_batches(solid_folder):
    root, colours = solid_folder
    it = ImageDataGenerator(**_SOLID_AUG).flow_from_directory(root, target_size=(12, 14), batch_size=4, seed=2,
                                                              class_mode="sparse")
    assert it._pipeline_mode() == "fused"
    batches = [it[i] for i in range(len(it))]
    assert it.pipelined_batches == len(it) == 5
    assert [len(x) for x, _ in batches] == [4, 4, 4, 4, 1]  # the last, partial batch
    for i, (x, y) in enumerate(batches):
        assert x.shape[1:] == (12, 14, 3) and x.dtype == np.float32 and y.dtype == np.float32
        np.testing.assert_allclose(_colours(x), _expected_colours(it, colours, i), atol=1.5)
        assert np.array_equal(y, it.classes[it.index_array[i * 4:(i + 1) * 4]])
    # random access (the exact path) in another order: the same files and labels in the same order
    back = {i: it[i] for i in reversed(range(len(it) - 1))}
    assert it.pipelined_batches == len(it)
    for i, (x, y) in back.items():
        np.testing.assert_allclose(_colours(x), _colours(batches[i][0]), atol=1.5)
        assert np.array_equal(y, batches[i][1])
    # the same batch asked twice in a row: the same pixels
    it2 = ImageDataGenerator(**_SOLID_AUG).flow_from_directory(root, target_size=(12, 14), batch_size=4, seed=2)
    first = it2[0][0]
    assert np.array_equal(first, it2[0][0]) and np.array_equal(it2[1][0], it2[1][0])
    assert it2.pipelined_batches == 4
    # reproducible for a seed (Keras' order, stoker's draws keyed by seed, epoch, position)
    it3 = ImageDataGenerator(**_SOLID_AUG).flow_from_directory(root, target_size=(12, 14), batch_size=4, seed=2)
    assert np.array_equal(it3[0][0], first)


def test_pipeline_epochs_reset_and_next(solid_folder):
    root, colours = solid_folder
    gen = ImageDataGenerator(**_SOLID_AUG)
    it = gen.flow_from_directory(root, target_size=(12, 12), batch_size=5, seed=7)
    one = [it[i] for i in range(len(it))]
    order = it.index_array.copy()
    it.on_epoch_end()
    two = [it[i] for i in range(len(it))]
    assert it.pipelined_batches == 2 * len(it)
    assert not np.array_equal(order, it.index_array)
    assert not np.array_equal(one[0][0], two[0][0])
    for i, (x, _) in enumerate(two):
        np.testing.assert_allclose(_colours(x), _expected_colours(it, colours, i), atol=1.5)
    # next() wraps around epochs as Keras' does, in order: the pipeline serves it
    nx = gen.flow_from_directory(root, target_size=(12, 12), batch_size=5, seed=7)
    sizes = [len(next(nx)[0]) for _ in range(2 * len(nx))]
    assert sizes == [5, 5, 5, 2] * 2 and nx.pipelined_batches == 2 * len(nx)
    nx.reset()
    assert len(next(nx)[0]) == 5 and nx.pipelined_batches == 2 * len(nx) + 1
    # for x, y in it (next()) and it[i] of a fresh epoch from its start
    it.on_epoch_end()
    it[0], it[1]
    assert it.pipelined_batches == 2 * len(it) + 2
    # pipelined=False: never
    off = gen.flow_from_directory(root, target_size=(12, 12), batch_size=5, seed=7)
    off.pipelined = False
    [off[i] for i in range(len(off))]
    assert off.pipelined_batches == 0


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_pipeline_deterministic_equals_keras(folder, interpolation):
    kw = dict(target_size=(13, 11), batch_size=5, seed=4, interpolation=interpolation)
    k = KerasGen(rescale=1 / 255).flow_from_directory(folder, **kw)
    s = ImageDataGenerator(rescale=1 / 255).flow_from_directory(folder, **kw)
    assert s._pipeline_mode() == "decode"
    for i in range(len(s)):
        (kx, ky), (sx, sy) = k[i], s[i]
        assert np.array_equal(ky, sy)
        np.testing.assert_allclose(sx, kx, atol=1e-6 if interpolation == "nearest" else 1 / 255 + 1e-6)
    assert s.pipelined_batches == len(s)


def test_pipeline_bad_file(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(5):
            Image.fromarray(np.full((9, 9, 3), 40 * i, np.uint8)).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "b" / "1.png").write_bytes(b"not a png")
    it = ImageDataGenerator(horizontal_flip=True).flow_from_directory(str(tmp_path), target_size=(8, 8),
                                                                     batch_size=2, shuffle=False)
    bad = 6 // 2  # b/1.png is the 7th file
    for i in range(bad):
        it[i]
    assert it.pipelined_batches == bad
    with pytest.raises(Exception, match="1.png"):
        it[bad]
    assert len(it[bad + 1][0]) == 2  # the rest of the epoch: the exact path
    assert it.pipelined_batches == bad
    with pytest.raises(Exception, match="1.png"):
        it[bad]
    it.on_epoch_end()
    assert len(it[0][0]) == 2 and it.pipelined_batches == bad + 1  # a new epoch pipelines again


@pytest.mark.parametrize("aug", [_SOLID_AUG, dict(rescale=1 / 255)], ids=["fused", "decode"])
def test_pipeline_serves_fit_shuffled_order(solid_folder, aug):
    """Keras' fit(shuffle=True) order (random.shuffle of the batch indices just before the pass) is
    served by the pipeline, with the batches in-order access gives."""
    import random
    from stoker.keras.pipeline import _FitOrderPipeline
    root, _ = solid_folder
    kw = dict(target_size=(12, 14), batch_size=2, seed=3, class_mode="sparse")
    ref = ImageDataGenerator(**aug).flow_from_directory(root, **kw)
    it = ImageDataGenerator(**aug).flow_from_directory(root, **kw)
    for epoch in range(2):
        expected = [ref[i] for i in range(len(ref))]
        assert ref.pipelined_batches == (epoch + 1) * len(ref)
        served = it.pipelined_batches
        order = list(range(len(it)))
        random.shuffle(order)
        got = {i: it[i] for i in order}
        assert isinstance(it._pipe, _FitOrderPipeline)
        assert it.pipelined_batches - served == len(it)
        for i in range(len(it)):
            assert np.array_equal(got[i][1], expected[i][1])
            np.testing.assert_array_equal(got[i][0], expected[i][0])
        ref.on_epoch_end()
        it.on_epoch_end()
    # requests that leave the order take the exact path (the same files and labels)
    random.shuffle(order)
    x, y = it[order[1]]
    assert np.array_equal(y, it.classes[it.index_array[order[1] * 2:order[1] * 2 + 2]])
    assert it.pipelined_batches == 2 * len(it)


def test_model_fit_shuffled_uses_pipeline(folder):
    tf_keras.utils.set_random_seed(0)
    gen = ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10)
    train = gen.flow_from_directory(folder, target_size=(16, 16), batch_size=4, seed=0)
    model = tf_keras.Sequential([
        tf_keras.layers.Input((16, 16, 3)),
        tf_keras.layers.Conv2D(4, 3, activation="relu"),
        tf_keras.layers.GlobalAveragePooling2D(),
        tf_keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    history = model.fit(train, epochs=3, verbose=0)  # fit's default shuffle=True
    assert np.isfinite(history.history["loss"]).all()
    assert train.pipelined_batches >= 3 * len(train)


def test_model_fit_in_order_uses_pipeline(folder):
    tf_keras.utils.set_random_seed(0)
    gen = ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10)
    train = gen.flow_from_directory(folder, target_size=(16, 16), batch_size=4, seed=0)
    model = tf_keras.Sequential([
        tf_keras.layers.Input((16, 16, 3)),
        tf_keras.layers.Conv2D(4, 3, activation="relu"),
        tf_keras.layers.GlobalAveragePooling2D(),
        tf_keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    # Keras' fit shuffles the batch order of a Sequence unless shuffle=False (the iterator shuffles
    # its files itself): in order, the pipeline serves every batch.
    history = model.fit(train, epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert train.pipelined_batches >= 2 * len(train)


@pytest.fixture(scope="module")
def wide_folder(tmp_path_factory):
    """Grayscale images that are not 8-bit, as Keras meets them: 16-bit PNGs (PIL mode 'I;16'),
    32-bit integer TIFFs ('I', values past 2**16 and negative) and float TIFFs ('F', which Keras
    converts to 8-bit 'L'), in two classes, with an 8-bit PNG amid them."""
    root = tmp_path_factory.mktemp("wide")
    rng = np.random.default_rng(5)
    (root / "deep").mkdir()
    (root / "float").mkdir()
    for i in range(5):
        h, w = (int(v) for v in rng.integers(7, 30, 2))
        Image.fromarray(rng.integers(0, 65536, (h, w)).astype(np.uint16)).save(root / "deep" / f"p{i}.png")
        Image.fromarray(rng.integers(-70000, 300000, (h, w)).astype(np.int32)).save(root / "deep" / f"t{i}.tif")
        Image.fromarray((rng.random((h, w)) * 300 - 20).astype(np.float32)).save(root / "float" / f"f{i}.tiff")
    Image.fromarray(rng.integers(0, 256, (9, 11), dtype=np.uint8)).save(root / "float" / "byte.png")
    modes = sorted({Image.open(p).mode for p in root.glob("*/*")})
    assert {"F", "L", "I"} <= set(modes) and ({"I;16"} & set(modes) or modes.count("I")), modes
    return str(root)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("gen_args", [{}, dict(rescale=1 / 65535), dict(samplewise_center=True,
                                                                       samplewise_std_normalization=True)])
def test_grayscale_16_and_32_bit_equal_keras(wide_folder, interpolation, gen_args):
    """color_mode='grayscale' on 16/32-bit images: Keras keeps their values (float32), stoker too."""
    args = dict(target_size=(10, 12), shuffle=False, batch_size=4, color_mode="grayscale",
                interpolation=interpolation)
    k_it = KerasGen(**gen_args).flow_from_directory(wide_folder, **args)
    s_it = ImageDataGenerator(**gen_args).flow_from_directory(wide_folder, **args)
    assert s_it.filenames == k_it.filenames and len(s_it) == len(k_it) == 4
    for (kx, ky), (sx, sy) in _pairs(k_it, s_it):
        assert sx.dtype == kx.dtype == np.float32 and sx.shape == kx.shape
        np.testing.assert_allclose(sx, kx, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(kx).max()))
        assert np.array_equal(sy, ky)
    assert np.abs(k_it[0][0]).max() > 255 or gen_args  # the values are the images' own, not 8-bit


def test_grayscale_16_bit_augmented_as_keras(wide_folder):
    """With random transforms, each image is Keras' apply_transform of Keras' decoded image with
    the parameters stoker draws for it (one warning: Keras' per-image math)."""
    aug = dict(rotation_range=20, horizontal_flip=True, zoom_range=0.2, width_shift_range=0.1)
    args = dict(target_size=(12, 12), shuffle=False, batch_size=16, color_mode="grayscale", seed=3)
    plain = KerasGen().flow_from_directory(wide_folder, **args)[0][0]
    k = KerasGen(**aug)
    s = ImageDataGenerator(**aug)
    it = s.flow_from_directory(wide_folder, **args)
    with pytest.warns(UserWarning, match="16/32-bit"):
        x, _ = it[0]
    moved = 0
    for i, j in enumerate(it.index_array[:16]):
        params = s._draw((12, 12, 1), it._aug_seed, 0, int(j), "channels_last")
        ref = k.apply_transform(plain[i].copy(), params)
        np.testing.assert_allclose(x[i], ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))
        moved += not np.array_equal(ref, plain[i])
    assert moved >= 12
