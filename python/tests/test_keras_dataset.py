"""stoker.keras.image_dataset_from_directory against Keras' own (Keras 3's
keras.utils.image_dataset_from_directory, and tf_keras') on generated folder trees: the same file
paths, class names, element specs, lengths, and per pass the same files in the same order with the
same labels.

Pixel tolerance: Keras resizes with tf.image.resize (no antialiasing) in float32. stoker's
Loader samples with the same rule (bilinear: half-pixel centres, OpenCV's INTER_LINEAR with 11-bit
fixed-point weights, rounded to uint8; nearest: floor((x + 0.5) * in / out)), so bilinear pixels
are within 1 grey level of Keras' values (the uint8 rounding, at most 0.5, plus the fixed-point
weights) and nearest pixels are equal, for lossless files (PNG, BMP). JPEGs differ more:
TensorFlow's decode_image uses libjpeg's fast integer IDCT (dct_method INTEGER_FAST), stoker's
decoder the accurate one (as Pillow, so tf_keras' ImageDataGenerator); on these noisy test images
that is up to about 8 grey levels, below 1.5 on average. The comparison allows that to JPEG files
only: per pass, no more images than there are JPEGs exceed the tight tolerance."""

import inspect
import os
import shutil
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
tf = pytest.importorskip("tensorflow", reason="image_dataset_from_directory returns a tf.data.Dataset")
keras = pytest.importorskip("keras", reason="compared against Keras 3's image_dataset_from_directory")
if not keras.__version__.startswith("3"):
    pytest.skip("compared against Keras 3's image_dataset_from_directory", allow_module_level=True)

import stoker.keras as sk  # noqa: E402


def _image(h, w, rng):
    """Smooth gradients with noise: resize differences stay resize-sized."""
    yy, xx = np.mgrid[0:h, 0:w]
    a = rng.uniform(0.5, 3, 3)
    img = np.stack([127 + 100 * np.sin(a[c] * xx / w * 3 + a[(c + 1) % 3] * yy / h * 2 + c) for c in range(3)], -1)
    img = img + rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_signature_is_kerass():
    ours = inspect.signature(sk.image_dataset_from_directory).parameters
    theirs = inspect.signature(keras.utils.image_dataset_from_directory).parameters
    assert list(ours) == list(theirs) + ["augment"]  # Keras' arguments, then stoker's keyword-only augment=
    assert ours["augment"].kind == inspect.Parameter.KEYWORD_ONLY and ours["augment"].default is None
    assert [ours[name].default for name in theirs] == [p.default for p in theirs.values()]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """3 classes; PNG, BMP and JPEG files from 9 to 90 pixels a side (enlarged and shrunk, also
    by more than 2); nested folders, an upper-case extension, a hidden folder, a text file."""
    root = tmp_path_factory.mktemp("ids")
    rng = np.random.default_rng(7)
    layout = {
        "cats": ["a.png", "b.jpg", "sub/c.png", "sub/deeper/d.bmp", "E.PNG", "notes.txt"]
        + [f"k{i}.png" for i in range(6)],
        "dogs": [f"{i:02d}.png" for i in range(9)] + ["x.jpeg", "y.bmp"],
        "owls": [f"o{i}.jpg" for i in range(3)] + [f"p{i}.png" for i in range(5)],
        ".hidden": ["h.png"],
    }
    for cls, files in layout.items():
        for name in files:
            path = root / cls / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".txt"):
                path.write_text("not an image")
                continue
            h, w = (int(v) for v in rng.integers(9, 90, 2))
            img = Image.fromarray(_image(h, w, rng))
            img.save(path, quality=92) if name.endswith((".jpg", ".jpeg")) else img.save(path)
    return str(root)


def _passes(ds, count=2):
    return [list(ds.as_numpy_iterator()) for _ in range(count)]


def _assert_same(k_ds, s_ds, tolerance, passes=2):
    assert s_ds.file_paths == k_ds.file_paths
    assert s_ds.class_names == k_ds.class_names
    assert s_ds.element_spec == k_ds.element_spec
    assert len(s_ds) == len(k_ds)
    jpegs = sum(p.lower().endswith((".jpg", ".jpeg")) for p in k_ds.file_paths)
    batched = s_ds.element_spec[0].shape[0] is None if isinstance(s_ds.element_spec, tuple) else \
        s_ds.element_spec.shape[0] is None
    for k_pass, s_pass in zip(_passes(k_ds, passes), _passes(s_ds, passes)):
        assert len(s_pass) == len(k_pass)
        loose = 0
        for k_el, s_el in zip(k_pass, s_pass):
            k_el = k_el if isinstance(k_el, tuple) else (k_el,)
            s_el = s_el if isinstance(s_el, tuple) else (s_el,)
            assert s_el[0].dtype == k_el[0].dtype and s_el[0].shape == k_el[0].shape
            diff = np.abs(s_el[0].astype(np.float64) - k_el[0].astype(np.float64))
            for d in (diff if batched else diff[None]):
                if d.max() > tolerance:  # a JPEG (fast IDCT in TensorFlow, accurate in stoker)
                    assert d.max() <= 10 and d.mean() <= 1.5, (d.max(), d.mean())
                    loose += 1
            for k_lab, s_lab in zip(k_el[1:], s_el[1:]):
                assert s_lab.dtype == k_lab.dtype and np.array_equal(s_lab, k_lab)
        assert loose <= jpegs, (loose, jpegs)


CASES = [
    dict(),
    dict(batch_size=None),
    dict(label_mode="categorical", batch_size=5),
    dict(label_mode=None, shuffle=False),
    dict(shuffle=False, batch_size=7),
    dict(interpolation="nearest", image_size=(40, 52)),
    dict(crop_to_aspect_ratio=True, image_size=(20, 36)),
    dict(crop_to_aspect_ratio=True, interpolation="nearest", image_size=(33, 17)),
    dict(validation_split=0.3, subset="training", seed=11),
    dict(validation_split=0.3, subset="validation", seed=11, batch_size=4),
    dict(class_names=["owls", "cats"], label_mode="binary"),
    dict(data_format="channels_first", image_size=(16, 12)),
    dict(image_size=64, seed=123, batch_size=3),
]


@pytest.mark.parametrize("case", CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "defaults" for c in CASES])
def test_equals_keras3(tree, case):
    args = dict(image_size=(24, 28), batch_size=6, seed=5, verbose=False)
    args.update(case)
    tolerance = 0 if args.get("interpolation") == "nearest" else 1.0
    k_ds = keras.utils.image_dataset_from_directory(tree, **args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the native path: no fallback warning
        s_ds = sk.image_dataset_from_directory(tree, **args)
    _assert_same(k_ds, s_ds, tolerance)


def test_subset_both_and_labels_list(tree):
    args = dict(image_size=(20, 20), batch_size=4, seed=3, validation_split=0.25, subset="both", verbose=False)
    k_train, k_val = keras.utils.image_dataset_from_directory(tree, **args)
    s_train, s_val = sk.image_dataset_from_directory(tree, **args)
    _assert_same(k_train, s_train, 1.0)
    _assert_same(k_val, s_val, 1.0)
    assert not set(s_train.file_paths) & set(s_val.file_paths)
    # labels given as a list in Keras' file order (os.walk order from the top folder)
    n = len(keras.utils.image_dataset_from_directory(tree, labels=None, shuffle=False, verbose=False).file_paths)
    labels = [i % 4 for i in range(n)]
    for mode in ("int", "categorical"):
        args = dict(label_mode=mode, image_size=(16, 16), batch_size=5, seed=9, verbose=False)
        # Keras shuffles the list it is given in place: each call gets its own copy.
        k_ds = keras.utils.image_dataset_from_directory(tree, labels=list(labels), **args)
        given = list(labels)
        s_ds = sk.image_dataset_from_directory(tree, labels=given, **args)
        assert given == labels and s_ds.class_names == ["0", "1", "2", "3"]
        _assert_same(k_ds, s_ds, 1.0)


def test_follow_links(tree, tmp_path):
    root = tmp_path / "linked"
    root.mkdir()
    os.symlink(os.path.join(tree, "dogs"), root / "dogs")
    (root / "cats").mkdir()
    os.symlink(os.path.join(tree, "cats", "sub"), root / "cats" / "sub")
    Image.fromarray(_image(12, 14, np.random.default_rng(1))).save(root / "cats" / "z.png")
    for follow in (False, True):
        args = dict(image_size=(10, 10), batch_size=4, seed=2, follow_links=follow, verbose=False)
        k_ds = keras.utils.image_dataset_from_directory(str(root), **args)
        s_ds = sk.image_dataset_from_directory(str(root), **args)
        _assert_same(k_ds, s_ds, 1.0, passes=1)
    assert len(s_ds.file_paths) > len(sk.image_dataset_from_directory(str(root), follow_links=False, seed=2,
                                                                     verbose=False).file_paths)


def test_equals_tf_keras(tree):
    tf_keras = pytest.importorskip("tf_keras")
    for args in (dict(image_size=(24, 28), batch_size=6, seed=5), dict(batch_size=None, seed=1, shuffle=True),
                 dict(validation_split=0.2, subset="validation", seed=4, label_mode="categorical")):
        k_ds = tf_keras.utils.image_dataset_from_directory(tree, **args)
        s_ds = sk.image_dataset_from_directory(tree, **args)
        _assert_same(k_ds, s_ds, 1.0)


@pytest.fixture(scope="module")
def png_tree(tmp_path_factory):
    """PNGs only (every colour mode decodes them), in two classes; a GIF in a copy of it."""
    root = tmp_path_factory.mktemp("pngs")
    rng = np.random.default_rng(3)
    for cls in ("a", "b"):
        (root / cls).mkdir()
        for i in range(6):
            h, w = (int(v) for v in rng.integers(10, 50, 2))
            Image.fromarray(_image(h, w, rng)).save(root / cls / f"{i}.png")
    return str(root)


def test_keras_math_fallbacks(png_tree, tmp_path):
    """What stoker's loader does not decode natively is served by Keras' own function, with a
    warning naming the setting: the same dataset as Keras'."""
    for case in (dict(color_mode="grayscale"), dict(color_mode="rgba", shuffle=False),
                 dict(interpolation="bicubic"), dict(interpolation="area"), dict(pad_to_aspect_ratio=True)):
        args = dict(image_size=(18, 22), batch_size=8, seed=6, verbose=False)
        args.update(case)
        k_ds = keras.utils.image_dataset_from_directory(png_tree, **args)
        what = next(iter(case))
        with pytest.warns(UserWarning, match=f"{what}.*Keras' own"):
            s_ds = sk.image_dataset_from_directory(png_tree, **args)
        _assert_same(k_ds, s_ds, 0, passes=1)
    with_gif = tmp_path / "gif"
    shutil.copytree(png_tree, with_gif)
    Image.fromarray(_image(20, 20, np.random.default_rng(0))).save(with_gif / "a" / "g.gif")
    args = dict(image_size=(18, 22), batch_size=8, seed=6, verbose=False)
    with pytest.warns(UserWarning, match="GIF files.*Keras' own"):
        s_ds = sk.image_dataset_from_directory(str(with_gif), **args)
    _assert_same(keras.utils.image_dataset_from_directory(str(with_gif), **args), s_ds, 0, passes=1)


def test_model_fit_takes_it(tree):
    train, val = sk.image_dataset_from_directory(tree, image_size=(20, 20), batch_size=8, seed=1,
                                                 validation_split=0.25, subset="both", verbose=False)
    model = keras.Sequential([keras.Input((20, 20, 3)), keras.layers.RandomFlip("horizontal"),
                              keras.layers.Rescaling(1 / 255), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = model.fit(train, validation_data=val, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and len(history.history["val_loss"]) == 2


@pytest.mark.parametrize("kwargs,match", [
    (dict(labels="folders"), "labels"),
    (dict(label_mode="sparse"), "label_mode"),
    (dict(color_mode="hsv"), "color_mode"),
    (dict(image_size=(10, 10, 3)), "image_size"),
    (dict(image_size=(0, 10)), "image_size"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=2.5), "batch_size"),
    (dict(interpolation="cubic"), "interpolation"),
    (dict(validation_split=1.5, subset="training", seed=1), "validation_split"),
    (dict(validation_split=0.2), "subset"),
    (dict(validation_split=0.2, subset="test", seed=1), "subset"),
    (dict(validation_split=0.2, subset="training"), "seed"),
    (dict(crop_to_aspect_ratio=True, pad_to_aspect_ratio=True), "pad_to_aspect_ratio"),
    (dict(label_mode="binary"), "binary"),
    (dict(class_names=["cats", "lions"]), "class_names"),
    (dict(data_format="NHWC"), "data_format"),
    (dict(format="torch"), "format"),
])
def test_bad_arguments_say_what_was_received(tree, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sk.image_dataset_from_directory(tree, verbose=False, **kwargs)


def test_bad_file_and_empty_folder(tmp_path):
    """A file that does not decode fails the pass naming the file (Keras' pipeline fails too); a
    folder without images is refused as Keras refuses it."""
    root = tmp_path / "bad"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(_image(12, 12, rng)).save(root / "a" / f"{i}.png")
        Image.fromarray(_image(12, 12, rng)).save(root / "b" / f"{i}.png")
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    ds = sk.image_dataset_from_directory(str(root), image_size=(8, 8), batch_size=2, shuffle=False, verbose=False)
    with pytest.raises(tf.errors.OpError, match="broken.png"):
        list(ds.as_numpy_iterator())
    with pytest.raises(tf.errors.OpError):
        list(keras.utils.image_dataset_from_directory(str(root), image_size=(8, 8), batch_size=2, shuffle=False,
                                                      verbose=False).as_numpy_iterator())
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="No images found"):
        sk.image_dataset_from_directory(str(tmp_path / "empty"), verbose=False)


TF_KERAS_ONLY = """
import sys
sys.modules["keras"] = None  # tf_keras alone, as in a TensorFlow 2.15 environment
import warnings
import numpy as np
import tf_keras
import stoker.keras as sk
for args in (dict(), dict(color_mode="grayscale")):
    args.update(image_size=(12, 14), batch_size=5, seed=2)
    theirs = tf_keras.utils.image_dataset_from_directory(sys.argv[1], **args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = sk.image_dataset_from_directory(sys.argv[1], **args)
    assert ours.file_paths == theirs.file_paths and ours.element_spec == theirs.element_spec
    assert (len(caught) == 1) == ("color_mode" in str(args)), [str(w.message) for w in caught]
    for (kx, ky), (sx, sy) in zip(theirs.as_numpy_iterator(), ours.as_numpy_iterator()):
        assert np.abs(kx - sx).max() <= 1.0 and np.array_equal(ky, sy)
print("tf_keras only: ok")
"""


def test_with_tf_keras_alone(png_tree):
    """Without Keras 3 the native path still works and the fallback is tf_keras' own function."""
    pytest.importorskip("tf_keras")
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", TF_KERAS_ONLY, png_tree], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "tf_keras only: ok" in run.stdout
