"""The Keras migration table of docs/python.md ("### Migrating from Keras") kept true: each
function's rows are exactly the arguments of Keras' function (tf_keras' ImageDataGenerator and its
methods, Keras 3's image_dataset_from_directory), stoker's function takes each of them, every row
says native / Keras' math / Keras' own, and each setting the table says falls back does; the table
of Keras 3 preprocessing layers (image_dataset_from_directory's augment=) lists what augment=
translates and refuses."""

import inspect
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

tf_keras = pytest.importorskip("tf_keras", reason="the table is checked against tf_keras")
keras = pytest.importorskip("keras", reason="the table is checked against Keras 3")
from tf_keras.preprocessing.image import ImageDataGenerator as KerasGen  # noqa: E402

import stoker.keras as sk  # noqa: E402
from stoker.keras.dataset import _fallback_reason  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")
STATUSES = ("native", "Keras' math", "Keras' own", "as in")


def _rows():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("### Migrating from Keras", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \| `(\w+)` \| (.+) \|$", line)
        if m:
            rows.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
    return rows


ROWS = _rows()


def _keras_function(name):
    if name == "image_dataset_from_directory":
        return keras.utils.image_dataset_from_directory
    return KerasGen.__init__ if name == "ImageDataGenerator" else getattr(KerasGen, name)


def _stoker_function(name):
    if name == "image_dataset_from_directory":
        return sk.image_dataset_from_directory
    gen = sk.ImageDataGenerator
    return gen.__init__ if name == "ImageDataGenerator" else getattr(gen, name)


def _params(f):
    return [p for p in inspect.signature(f).parameters if p != "self"]


def test_the_table_lists_every_function():
    assert set(ROWS) == {"ImageDataGenerator", "flow", "flow_from_directory", "flow_from_dataframe", "fit",
                         "standardize", "random_transform", "get_random_transform", "apply_transform",
                         "image_dataset_from_directory"}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_rows_are_kerass_arguments_and_stoker_takes_them(name):
    documented = list(ROWS[name])
    assert documented == _params(_keras_function(name))  # every argument, in Keras' order
    ours = inspect.signature(_stoker_function(name)).parameters
    for arg in documented:
        assert arg in ours or any(p.kind == p.VAR_KEYWORD for p in ours.values()), arg
    for arg, text in ROWS[name].items():
        assert text.startswith(STATUSES), (name, arg, text)


def _settings(text, status):
    """The `name=value` settings a cell says take `status`."""
    if status not in text:
        return []
    part = text.split(status, 1)[1]
    return [(m.group(1), eval(m.group(2))) for m in re.finditer(r"`(\w+)=([^`]+)`", part)]


def test_the_generator_settings_said_to_fall_back_do():
    found = 0
    for arg, text in ROWS["ImageDataGenerator"].items():
        for name, value in _settings(text, "Keras' math:"):
            assert name == arg
            gen = sk.ImageDataGenerator(rotation_range=10, **{name: value})
            assert not gen._cpp_pipeline_ok(), (name, value)
            found += 1
    native = sk.ImageDataGenerator(rotation_range=10, interpolation_order=1)
    assert native._cpp_pipeline_ok()
    assert found == 2


def test_the_dataset_settings_said_to_fall_back_do():
    found = 0
    defaults = dict(color_mode="rgb", interpolation="bilinear", pad_to_aspect_ratio=False, format="tf")
    for arg, text in ROWS["image_dataset_from_directory"].items():
        for name, value in _settings(text, "Keras' own:"):
            assert name == arg
            reason = _fallback_reason(["a.png"], **dict(defaults, **{name: value}))
            assert reason is not None and name in reason, (name, value)
            found += 1
        if arg in defaults:
            assert text.startswith("native") or text.startswith("Keras' own")
    assert _fallback_reason(["a.png", "b.jpg"], **defaults) is None
    assert _fallback_reason(["a.gif"], **defaults) == "GIF files"
    assert found == 10
    for value in ("nearest", "bilinear"):
        assert _fallback_reason(["a.png"], **dict(defaults, interpolation=value)) is None
    every = {"bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic"}
    said = {v for _, v in _settings(ROWS["image_dataset_from_directory"]["interpolation"], "Keras' own:")}
    assert said == every - {"bilinear", "nearest"}


# ---- the Keras 3 preprocessing layers of image_dataset_from_directory(augment=...)
def _layer_rows():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("#### Keras 3 preprocessing layers (`augment=`)", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \| (translated|refused)(.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2) + m.group(3)
    return rows


def _layer_examples():
    """(translated form or None, refused form or None) of each layer of the table, at 16x16."""
    L = keras.layers
    return {
        "RandomFlip": (L.RandomFlip("horizontal"), L.RandomFlip("horizontal_and_vertical")),
        "RandomRotation": (L.RandomRotation(0.1), L.RandomRotation((-0.1, 0.2))),
        "RandomTranslation": (L.RandomTranslation(0.1, 0.2), L.RandomTranslation(1.0, 0.2)),
        "RandomZoom": (L.RandomZoom(0.2, 0.2), L.RandomZoom(0.2)),
        "Rescaling": (L.Rescaling(1 / 127.5, offset=-1), L.Rescaling(0.0)),
        "Resizing": (L.Resizing(16, 16), L.Resizing(8, 8)),
        "RandomContrast": (None, L.RandomContrast(0.2)),
        "RandomBrightness": (None, L.RandomBrightness(0.2)),
        "RandomCrop": (None, L.RandomCrop(8, 8)),
        "CenterCrop": (None, L.CenterCrop(8, 8)),
        "RandomShear": (None, L.RandomShear(0.2)),
        "RandomHue": (None, L.RandomHue(0.2)),
        "RandomSaturation": (None, L.RandomSaturation(0.2)),
        "RandomColorJitter": (None, L.RandomColorJitter(brightness_factor=0.2)),
    }


def test_the_layer_table_is_what_augment_does():
    if keras.__version__.startswith("2"):
        pytest.skip("augment= takes Keras 3's layers")
    from stoker.keras._layers import _REFUSED, augment_spec

    rows = _layer_rows()
    examples = _layer_examples()
    assert set(rows) == set(examples)
    assert set(_REFUSED) <= {name for name, text in rows.items() if "refused" in text}
    for name, text in rows.items():
        translated, refused = examples[name]
        assert (translated is not None) == text.startswith("translated"), name
        if translated is not None:
            augment_spec([translated], (16, 16), "channels_last")
        assert (refused is not None) == ("refused" in text), name
        if refused is not None:
            with pytest.raises(ValueError, match=name):
                augment_spec([refused], (16, 16), "channels_last")
    L = keras.layers
    warps = (lambda **kw: L.RandomRotation(0.1, **kw), lambda **kw: L.RandomTranslation(0.1, 0.1, **kw),
             lambda **kw: L.RandomZoom(0.1, 0.1, **kw))
    for make in warps:  # the fill modes and interpolations the paragraph under the table names
        for fill in ("reflect", "nearest"):
            for interpolation in ("bilinear", "nearest"):
                augment_spec([make(fill_mode=fill, interpolation=interpolation)], (16, 16), "channels_last")
        for fill in ("constant", "wrap"):
            with pytest.raises(ValueError, match=f"fill_mode='{fill}'"):
                augment_spec([make(fill_mode=fill)], (16, 16), "channels_last")
