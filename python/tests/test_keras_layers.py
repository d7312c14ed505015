"""image_dataset_from_directory(augment=...): Keras 3 preprocessing layers translated into stoker's
augmentation, checked against the Keras 3 layers themselves: the AugmentSpec each translated layer
gives; the pixels of stoker's warp for a fixed parameter against the layer's output for that
parameter (a degenerate factor pins Keras' draw); the distribution of the drawn parameters against
the layer's own draws; the layers refused, by name; and the dataset with augment= in fit.

Pixel tolerance: Keras 3 warps in float32; stoker samples with fixed-point coordinates and weights
and rounds to uint8, so bilinear pixels are within 1 grey level; nearest pixels are equal (the
parameters avoid a coordinate exactly halfway between two pixels, where the two round apart)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
tf = pytest.importorskip("tensorflow", reason="image_dataset_from_directory returns a tf.data.Dataset")
keras = pytest.importorskip("keras", reason="augment= takes Keras 3's preprocessing layers")
if not keras.__version__.startswith("3"):
    pytest.skip("augment= takes Keras 3's preprocessing layers", allow_module_level=True)

import stoker.keras as sk  # noqa: E402
from stoker import _stoker  # noqa: E402
from stoker.keras._layers import augment_spec  # noqa: E402
from support import make_folder  # noqa: E402

L = keras.layers
H, W = 24, 32  # not square: the axes cannot be confused


def _image(seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([127 + 100 * np.sin(xx / 5 + yy / 7 + c) for c in range(3)], -1) + rng.normal(0, 10, (H, W, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _spec(layers, data_format="channels_last"):
    return augment_spec(layers, (H, W), data_format)


def _stoker_with(layers, img, **fixed):
    """stoker's augmentation of the layers applied to img with the given drawn parameters."""
    aug = _stoker.Augmenter(_spec(layers))
    params = dict(aug.params(0, 0, 0, H, W), theta=0.0, tx=0.0, ty=0.0, zx=1.0, zy=1.0, flip_horizontal=False,
                  flip_vertical=False)
    params.update(fixed)
    return np.asarray(aug.apply_with(img, params))[0]


def _keras(layer, img):
    return np.asarray(layer(img[None].astype(np.float32), training=True))[0]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("layers"), per_class=6, size=20, ext="png")


# ---- (a) the AugmentSpec of each translated layer
SPECS = [
    (L.RandomFlip("horizontal"), dict(horizontal_flip=True, vertical_flip=False, training=True)),
    (L.RandomFlip("vertical"), dict(horizontal_flip=False, vertical_flip=True)),
    ([L.RandomFlip("horizontal"), L.RandomFlip("vertical")], dict(horizontal_flip=True, vertical_flip=True)),
    (L.RandomRotation(0.1), dict(rotation_range=pytest.approx(36.0), fill_mode="reflect", interpolation_order=1)),
    (L.RandomRotation((-0.25, 0.25), fill_mode="nearest", interpolation="nearest"),
     dict(rotation_range=pytest.approx(90.0), fill_mode="nearest", interpolation_order=0)),
    (L.RandomTranslation(0.1, 0.2), dict(height_shift_range=pytest.approx(0.1), width_shift_range=pytest.approx(0.2),
                                         fill_mode="reflect", interpolation_order=1)),
    (L.RandomTranslation((-0.3, 0.3), 0.0, fill_mode="nearest"),
     dict(height_shift_range=pytest.approx(0.3), width_shift_range=0.0, fill_mode="nearest")),
    (L.RandomZoom(0.2, 0.2), dict(zoom_range=pytest.approx((0.8, 1.2)), fill_mode="reflect")),
    (L.RandomZoom((-0.2, 0.3), (-0.2, 0.3)), dict(zoom_range=pytest.approx((0.8, 1.3)))),
    (L.RandomZoom((0.25, 0.25)), dict(zoom_range=pytest.approx((1.25, 1.25)))),
    (L.Rescaling(1 / 255), dict(rescale=pytest.approx(1 / 255), normalization=None, training=False)),
    (L.Rescaling(1 / 127.5, offset=-1), dict(rescale=pytest.approx(1 / 127.5),
                                             normalization=dict(mean=[1.0] * 4, std=[1.0] * 4, bgr=False))),
    ([L.Rescaling(2.0, offset=1.0), L.Rescaling(0.5, offset=3.0)],
     dict(rescale=pytest.approx(1.0), normalization=dict(mean=[-3.5] * 4, std=[1.0] * 4, bgr=False))),
    (L.Resizing(H, W), dict(training=False, rescale=None)),
    (keras.Sequential([keras.Input((H, W, 3)), L.RandomFlip("horizontal"), L.RandomRotation(0.05)]),
     dict(horizontal_flip=True, rotation_range=pytest.approx(18.0))),
]


@pytest.mark.parametrize("layers,expected", SPECS, ids=lambda v: None if isinstance(v, dict) else repr(v)[:40])
def test_translated_layers_give_the_spec(layers, expected):
    spec = _spec(layers)
    assert (spec.height, spec.width, spec.channels, spec.dtype, spec.layout) == (H, W, 3, "float32", "nhwc")
    assert spec.keras_axis_conventions is False  # Keras 3's geometric axes, not ImageDataGenerator's
    for name, value in expected.items():
        got = getattr(spec, name)
        if name == "normalization" and value is not None:
            value = dict(value, mean=pytest.approx(value["mean"]))
        assert got == value, (name, got, value)


# ---- (b) pixels for a fixed parameter against the Keras layer with that parameter
WARPS = [(fill, interp) for fill in ("reflect", "nearest") for interp in ("bilinear", "nearest")]


def _close(ours, theirs, interp):
    diff = np.abs(ours.astype(np.float64) - theirs)
    assert diff.max() <= (1.0 if interp == "bilinear" else 0.0), diff.max()


@pytest.mark.parametrize("fill,interp", WARPS)
def test_rotation_pixels_are_kerass(fill, interp):
    img = _image()
    for a in (0.05, -0.11):
        theirs = _keras(L.RandomRotation((a, a), fill_mode=fill, interpolation=interp), img)
        ours = _stoker_with(L.RandomRotation(abs(a), fill_mode=fill, interpolation=interp), img, theta=a * 360)
        _close(ours, theirs, interp)


@pytest.mark.parametrize("fill,interp", WARPS)
def test_translation_pixels_are_kerass(fill, interp):
    img = _image(1)
    fh, fw = 0.1, -0.23
    theirs = _keras(L.RandomTranslation((fh, fh), (fw, fw), fill_mode=fill, interpolation=interp), img)
    ours = _stoker_with(L.RandomTranslation(0.3, 0.3, fill_mode=fill, interpolation=interp), img,
                        tx=-fw * W, ty=-fh * H)
    _close(ours, theirs, interp)


@pytest.mark.parametrize("fill,interp", WARPS)
def test_zoom_pixels_are_kerass(fill, interp):
    img = _image(2)
    zh, zw = 0.3, -0.13
    theirs = _keras(L.RandomZoom((zh, zh), (zw, zw), fill_mode=fill, interpolation=interp), img)
    ours = _stoker_with(L.RandomZoom(0.4, 0.4, fill_mode=fill, interpolation=interp), img, zx=1 + zw, zy=1 + zh)
    _close(ours, theirs, interp)


def test_flip_pixels_are_kerass():
    img = _image(3)
    assert np.array_equal(_stoker_with(L.RandomFlip("horizontal"), img, flip_horizontal=True), img[:, ::-1])
    assert np.array_equal(_stoker_with(L.RandomFlip("vertical"), img, flip_vertical=True), img[::-1])


def test_resizing_to_the_image_size_changes_nothing():
    img = _image(5)
    for interpolation in ("bilinear", "nearest"):
        layer = L.Resizing(H, W, interpolation=interpolation)
        assert _spec(layer).training is False
        np.testing.assert_array_equal(_keras(layer, img), img)


def test_rescaling_pixels_are_kerass():
    img = _image(4)
    for layer in (L.Rescaling(1 / 255), L.Rescaling(1 / 127.5, offset=-1), L.Rescaling(-2.0, offset=0.25)):
        ours = _stoker.Augmenter(_spec(layer)).apply_batch(img[None])[0]
        np.testing.assert_allclose(ours, _keras(layer, img), rtol=0, atol=1e-5)


def test_dataset_rescaling_is_kerass(folder):
    """End to end: the dataset with augment=Rescaling against Keras' dataset mapped by the layer."""
    layer = L.Rescaling(1 / 127.5, offset=-1)
    for data_format in ("channels_last", "channels_first"):
        ours = sk.image_dataset_from_directory(folder, image_size=(16, 16), batch_size=5, seed=3, verbose=False,
                                               data_format=data_format, augment=[layer])
        theirs = keras.utils.image_dataset_from_directory(folder, image_size=(16, 16), batch_size=5, seed=3,
                                                          verbose=False, data_format=data_format)
        for (x, y), (kx, ky) in zip(ours, theirs):
            assert x.dtype == tf.float32 and x.shape == kx.shape
            np.testing.assert_allclose(x.numpy(), layer(kx).numpy(), rtol=0, atol=1.01 / 127.5)
            assert np.array_equal(y.numpy(), ky.numpy())


def test_dataset_flips_each_image_or_not(folder):
    """Per sample: each image is the plain one or its mirror, both happen, and the draws change
    from pass to pass; the validation part of subset='both' is not augmented."""
    args = dict(image_size=(16, 16), batch_size=4, shuffle=False, verbose=False)
    plain = np.concatenate([x.numpy() for x, _ in sk.image_dataset_from_directory(folder, **args)])
    ds = sk.image_dataset_from_directory(folder, augment=L.RandomFlip("horizontal"), **args)
    passes = []
    for _ in range(3):
        got = np.concatenate([x.numpy() for x, _ in ds])
        same = [np.array_equal(a, b) for a, b in zip(got, plain)]
        mirrored = [np.array_equal(a, b[:, ::-1]) for a, b in zip(got, plain)]
        assert all(s or m for s, m in zip(same, mirrored))
        passes.append(mirrored)
    flat = np.array(passes, bool)
    assert 0 < flat.sum() < flat.size
    assert any(p != passes[0] for p in passes[1:])
    train, val = sk.image_dataset_from_directory(folder, validation_split=0.5, subset="both",
                                                 augment=L.RandomFlip("horizontal"), **args)
    _, k_val = keras.utils.image_dataset_from_directory(folder, validation_split=0.5, subset="both", **args)
    for (x, _), (kx, _) in zip(val, k_val):
        np.testing.assert_allclose(x.numpy(), kx.numpy(), rtol=0, atol=1.0)


# ---- (c) the drawn parameters against the layer's own draws
N = 2000


def _our_draws(layers, key):
    aug = _stoker.Augmenter(_spec(layers))
    return np.array([aug.params(11, epoch, i, H, W)[key] for epoch in range(2) for i in range(N // 2)], np.float64)


def _their_draws(layer):
    return layer.get_random_transformation(np.zeros((N, H, W, 3), np.float32), training=True)


def _same_distribution(ours, theirs):
    from scipy.stats import ks_2samp

    assert ks_2samp(ours, theirs).pvalue > 1e-4, (np.percentile(ours, [0, 50, 100]),
                                                   np.percentile(theirs, [0, 50, 100]))


def test_flip_frequency():
    for mode, key in (("horizontal", "flip_horizontal"), ("vertical", "flip_vertical")):
        ours = _our_draws(L.RandomFlip(mode), key).mean()
        theirs = np.asarray(_their_draws(L.RandomFlip(mode))["flips"], np.float64).mean()
        assert abs(ours - 0.5) < 0.05 and abs(theirs - 0.5) < 0.05


def test_rotation_angles_spread_as_kerass():
    layer = L.RandomRotation(0.1)
    ours = _our_draws(layer, "theta")
    assert -36.0 <= ours.min() < -34.0 and 34.0 < ours.max() <= 36.0
    _same_distribution(ours, np.asarray(_their_draws(layer)["angle"], np.float64))


def test_translations_spread_as_kerass():
    layer = L.RandomTranslation(0.25, 0.125)
    theirs = np.asarray(_their_draws(layer)["translations"], np.float64)  # (width px, height px)
    for key, column, limit in (("tx", 0, 0.125 * W), ("ty", 1, 0.25 * H)):
        ours = _our_draws(layer, key)
        assert np.abs(ours).max() <= limit + 1e-4 and np.abs(ours).max() > 0.95 * limit
        _same_distribution(ours, theirs[:, column])


def test_zooms_spread_as_kerass_and_independently():
    layer = L.RandomZoom((-0.2, 0.3), (-0.2, 0.3))
    theirs = _their_draws(layer)
    zx, zy = _our_draws(layer, "zx"), _our_draws(layer, "zy")
    _same_distribution(zx, np.asarray(theirs["width_zoom"], np.float64).ravel())
    _same_distribution(zy, np.asarray(theirs["height_zoom"], np.float64).ravel())
    assert abs(np.corrcoef(zx, zy)[0, 1]) < 0.1  # drawn independently, as Keras does with width_factor given


# ---- (d) the layers refused, by name
class _MyFlip(L.RandomFlip):
    pass


REFUSED = [
    (L.RandomContrast(0.2), "RandomContrast"),
    (L.RandomBrightness(0.2), "RandomBrightness"),
    (L.RandomCrop(8, 8), "RandomCrop"),
    (L.CenterCrop(8, 8), "CenterCrop"),
    (L.Resizing(8, 8), "Resizing"),
    (L.RandomShear(0.2), "RandomShear"),
    (L.RandomHue(0.2), "RandomHue"),
    (L.Dense(3), "Dense"),
    (_MyFlip("horizontal"), "_MyFlip is not translated: a subclass of Keras. RandomFlip"),
    (L.RandomFlip("horizontal_and_vertical"), "RandomFlip"),
    (L.RandomFlip("horizontal", data_format="channels_first"), "RandomFlip"),
    (L.RandomRotation((-0.1, 0.2)), "RandomRotation"),
    (L.RandomRotation(0.1, fill_mode="constant"), "RandomRotation"),
    (L.RandomRotation(0.1, fill_mode="wrap"), "RandomRotation"),
    (L.RandomTranslation(0.1, (0.0, 0.2)), "RandomTranslation"),
    (L.RandomTranslation(1.0, 0.1), "RandomTranslation"),
    (L.RandomTranslation(0.1, 0.1, fill_mode="constant", fill_value=3.0), "RandomTranslation"),
    (L.RandomZoom(0.2), "RandomZoom"),
    (L.RandomZoom(0.2, 0.1), "RandomZoom"),
    ([L.RandomRotation(0.1), L.RandomZoom(0.1, 0.1)], "RandomZoom"),
    (L.Rescaling(0.0), "Rescaling"),
    (L.Rescaling([1.0, 2.0, 3.0]), "Rescaling"),
    (lambda x: x, "function"),
]


@pytest.mark.parametrize("layers,name", REFUSED, ids=[f"{n.split()[0]}-{i}" for i, (_, n) in enumerate(REFUSED)])
def test_refused_layers_name_their_class(layers, name):
    with pytest.raises(ValueError, match=name):
        _spec(layers)


def test_refusal_comes_before_reading_the_folder(tmp_path):
    with pytest.raises(ValueError, match="RandomContrast"):
        sk.image_dataset_from_directory(str(tmp_path / "missing"), augment=[L.RandomContrast(0.1)])


def test_augment_with_a_keras_fallback_is_refused(folder):
    with pytest.raises(ValueError, match="augment= needs stoker's loader"):
        sk.image_dataset_from_directory(folder, color_mode="grayscale", augment=[L.RandomFlip("horizontal")],
                                        verbose=False)


# ---- (e) fit takes the dataset
def test_fit_with_augment(folder):
    ds = sk.image_dataset_from_directory(folder, image_size=(16, 16), batch_size=4, seed=1, verbose=False,
                                         augment=[L.RandomFlip("horizontal"), L.RandomRotation(0.05),
                                                  L.Rescaling(1 / 255)])
    model = keras.Sequential([keras.Input((16, 16, 3)), L.GlobalAveragePooling2D(), L.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
