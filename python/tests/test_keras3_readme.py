"""The README's Keras example on both Kerases. test_readme.py runs it as written (`import keras`:
Keras 3); here it runs with `import tf_keras as keras` (Keras 2), and the backbone it rebuilds
under Keras 3 from the Keras 2.4 file (keras.applications.MobileNetV2, the file's weights read in
order) computes the features that tf_keras' load_model of that file computes."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from test_readme import ROOT, snippets

for _name in ("keras", "tf_keras"):
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"{_name} is not installed (the README's Keras example is checked on both)",
                    allow_module_level=True)

FEATURES = textwrap.dedent("""
    import numpy as np
    import keras
    import tf_keras
    from stoker.keras import ImageDataGenerator

    H5 = "data/models/mobilenet_v2_0.35_224_3class.h5"
    images = ImageDataGenerator(rescale=1 / 127.5).flow_from_directory(
        "data/catsdogs-sample", target_size=(224, 224), batch_size=8, shuffle=False)[0][0] - 1.0
    backbone = keras.applications.MobileNetV2((224, 224, 3), alpha=0.35, include_top=False, weights=None,
                                              pooling="avg")
    keras.Sequential([keras.Input((224, 224, 3)), backbone, keras.Sequential([
        keras.layers.Dense(100, activation="relu"), keras.layers.Dense(3, activation="softmax", use_bias=False)])
    ]).load_weights(H5)
    ours = np.asarray(backbone.predict(images, verbose=0))
    theirs = np.asarray(tf_keras.models.load_model(H5, compile=False).layers[0].predict(images, verbose=0))
    assert ours.shape == theirs.shape == (8, 1280), (ours.shape, theirs.shape)
    difference = float(np.abs(ours - theirs).max())
    print("features max", float(np.abs(theirs).max()), "difference", difference)
    assert difference <= 1e-4, difference
""")


def _run(source):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    return subprocess.run([sys.executable, "-c", source], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_keras3_backbone_computes_the_keras2_files_features():
    run = _run(FEATURES)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "difference" in run.stdout


def test_readme_keras_example_runs_on_tf_keras():
    first, rest = snippets()["keras"].split("\n", 1)
    assert first.startswith("import keras "), first
    run = _run("import tf_keras as keras\n" + rest)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
