"""stoker.keras under Keras 3 alone (no tf_keras): its iterators are keras.utils.PyDataset and
model.fit takes them unchanged, on each Keras 3 backend installed (tensorflow, jax, torch).

Each case runs in its own interpreter: tf_keras is hidden (sys.modules['tf_keras'] = None makes
its import fail) and KERAS_BACKEND chooses the backend before keras is imported."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

if importlib.util.find_spec("keras") is None:
    pytest.skip("Keras 3 is not installed", allow_module_level=True)

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["tf_keras"] = None  # only Keras 3
    import keras
    from stoker.keras import ImageDataGenerator
    gen = ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10, validation_split=0.25)
    train = gen.flow_from_directory(sys.argv[1], target_size=(24, 24), batch_size=4, class_mode="binary",
                                    subset="training", seed=1)
    val = gen.flow_from_directory(sys.argv[1], target_size=(24, 24), batch_size=4, class_mode="binary",
                                  subset="validation", seed=1)
    assert isinstance(train, keras.utils.PyDataset), type(train).__mro__
    assert keras.__version__.startswith("3")
    model = keras.Sequential([keras.Input((24, 24, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(train, validation_data=val, epochs=2, steps_per_epoch=len(train), verbose=0)
    assert len(history.history["loss"]) == 2 and "val_accuracy" in history.history
    print("backend", keras.backend.backend(), "samples", train.samples, val.samples)
""")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    Image = pytest.importorskip("PIL.Image")
    root = tmp_path_factory.mktemp("k3")
    rng = np.random.default_rng(0)
    for c, name in enumerate(["blue", "red"]):
        (root / name).mkdir()
        for i in range(8):
            px = rng.integers(0, 60, (30, 30, 3), dtype=np.uint8)
            px[..., 2 - 2 * c] += 150
            Image.fromarray(px).save(root / name / f"{i}.png")
    return root


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_model_fit_on_keras3_takes_stoker_iterators(folder, backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"the {backend} backend is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(folder)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert f"backend {backend} samples 12 4" in run.stdout


FIT_ORDER_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["tf_keras"] = None  # only Keras 3
    import random
    import keras
    from stoker.keras import ImageDataGenerator
    keras.utils.set_random_seed(0)
    gen = ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10)
    train = gen.flow_from_directory(sys.argv[1], target_size=(24, 24), batch_size=4, class_mode="binary", seed=1)
    assert isinstance(train, keras.utils.PyDataset)
    # The batches of an epoch as the iterator serves them in order (the same draws in any order).
    reference = [train[i] for i in range(len(train))]
    served = train.pipelined_batches
    asked = []
    original = type(train).__getitem__

    def recording(self, i):
        asked.append(i)
        return original(self, i)

    type(train).__getitem__ = recording
    model = keras.Sequential([keras.Input((24, 24, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    history = model.fit(train, epochs=2, verbose=0)  # fit's default shuffle=True: a random batch order
    type(train).__getitem__ = original
    n = len(train)
    assert len(history.history["loss"]) == 2
    # The two passes are the last 2n requests (a backend may ask a batch first to learn its spec).
    passes = [asked[-2 * n:-n], asked[-n:]]
    assert all(sorted(p) == list(range(n)) for p in passes), asked
    assert any(p != list(range(n)) for p in passes), asked
    # Every batch of both passes came from the pipeline, in the order fit asked for them.
    assert train.pipelined_batches - served >= 2 * n, (train.pipelined_batches, served, n)
    print("backend", keras.backend.backend(), "fit order pipelined", train.pipelined_batches - served, "of", 2 * n)
""")


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_model_fit_shuffled_order_is_pipelined_on_keras3(folder, backend):
    """Keras 3's fit(shuffle=True) asks a PyDataset's batches in random.shuffle's order: stoker
    replays that draw and serves the pass from its pipeline (pipelined_batches counts them)."""
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"the {backend} backend is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", FIT_ORDER_SCRIPT, str(folder)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert f"backend {backend} fit order pipelined" in run.stdout


DATASET_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["tf_keras"] = None  # only Keras 3
    import keras
    from stoker.keras import image_dataset_from_directory
    train, val = image_dataset_from_directory(sys.argv[1], image_size=(24, 24), batch_size=4, seed=1,
                                              validation_split=0.25, subset="both", label_mode="binary")
    model = keras.Sequential([keras.Input((24, 24, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.RandomFlip("horizontal"), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(train, validation_data=val, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and "val_accuracy" in history.history
    print("backend", keras.backend.backend(), "files", len(train.file_paths), len(val.file_paths), train.class_names)
""")


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_model_fit_on_keras3_takes_image_dataset_from_directory(folder, backend):
    """stoker.keras.image_dataset_from_directory's tf.data.Dataset, as Keras' own, feeds model.fit on
    each Keras 3 backend installed."""
    if importlib.util.find_spec(backend) is None or importlib.util.find_spec("tensorflow") is None:
        pytest.skip(f"the {backend} backend (or TensorFlow, for tf.data) is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", DATASET_SCRIPT, str(folder)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert f"backend {backend} files 12 4 ['blue', 'red']" in run.stdout
