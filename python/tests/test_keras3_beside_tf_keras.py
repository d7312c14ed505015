"""stoker.keras where Keras 3 and tf_keras are both installed (as `pip install stoker[keras]` leaves
them: tensorflow's tf.keras is Keras 3, tf-keras is Keras 2): the Keras the model belongs to takes
the iterators, whichever that is. One process builds a Keras 3 model and a tf_keras model and runs
model.fit, evaluate and predict of each on the iterators of flow_from_directory,
flow_from_dataframe (with pandas) and flow; a data format set in either Keras is the generators'.

Each case runs in its own interpreter, KERAS_BACKEND choosing Keras 3's backend before keras is
imported (tf_keras always runs on TensorFlow)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from support import make_folder

for _name in ("keras", "tf_keras"):
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"{_name} is not installed (these tests need Keras 3 and tf_keras side by side)",
                    allow_module_level=True)

SCRIPT = textwrap.dedent("""
    import os
    import sys
    import numpy as np
    import keras
    import tf_keras
    from stoker.keras import KERAS_FLAVOURS, ImageDataGenerator

    assert keras.__version__.startswith("3") and tf_keras.__version__.startswith("2")
    assert KERAS_FLAVOURS == ("tf_keras", "keras"), KERAS_FLAVOURS
    folder = sys.argv[1]
    gen = ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10, validation_split=0.25)
    flow = dict(target_size=(24, 24), batch_size=4, class_mode="binary")
    iterators = {"directory": (gen.flow_from_directory(folder, subset="training", seed=1, **flow),
                               gen.flow_from_directory(folder, subset="validation", shuffle=False, **flow))}
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        files = sorted(os.path.join(c, f) for c in os.listdir(folder) for f in os.listdir(os.path.join(folder, c)))
        frame = pd.DataFrame({"filename": files, "class": [f.split(os.sep)[0] for f in files]})
        iterators["dataframe"] = (gen.flow_from_dataframe(frame, folder, subset="training", seed=1, **flow),
                                  gen.flow_from_dataframe(frame, folder, subset="validation", shuffle=False, **flow))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (24, 24, 24, 3)).astype(np.uint8)
    y = (x[..., 0].mean(axis=(1, 2)) > 127).astype("float32")
    iterators["arrays"] = (gen.flow(x, y, batch_size=4, subset="training", seed=1, ignore_class_split=True),
                           gen.flow(x, y, batch_size=4, subset="validation", shuffle=False, ignore_class_split=True))

    for name, (train, val) in iterators.items():
        assert isinstance(train, keras.utils.PyDataset) and isinstance(train, tf_keras.utils.Sequence), name
        n_val = val.n
        for K in (keras, tf_keras):
            K.utils.set_random_seed(0)
            model = K.Sequential([K.Input((24, 24, 3)), K.layers.Conv2D(4, 3, activation="relu"),
                                  K.layers.GlobalAveragePooling2D(), K.layers.Dense(1, activation="sigmoid")])
            model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
            history = model.fit(train, validation_data=val, epochs=2, verbose=0)
            assert len(history.history["loss"]) == 2 and np.isfinite(history.history["val_loss"]).all(), name
            loss, accuracy = model.evaluate(val, verbose=0)
            assert np.isfinite(loss) and 0 <= accuracy <= 1, (name, loss, accuracy)
            predicted = model.predict(val, verbose=0)
            assert predicted.shape == (n_val, 1), (name, predicted.shape)
            print(K.__name__, name, "fit evaluate predict", len(train), n_val)
    # A setting made in either Keras is followed (both read ~/.keras/keras.json by default).
    for K, set_format in ((keras, keras.config.set_image_data_format),
                          (tf_keras, tf_keras.backend.set_image_data_format)):
        set_format("channels_first")
        assert ImageDataGenerator().data_format == "channels_first", K.__name__
        set_format("channels_last")
    assert ImageDataGenerator().data_format == "channels_last"
    print("backend", keras.backend.backend())
""")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
    return make_folder(tmp_path_factory.mktemp("beside") / "images", per_class=8, size=24)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_fit_evaluate_predict_on_keras3_and_tf_keras(folder, backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"the {backend} backend is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", SCRIPT, folder], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    kinds = ["directory", "arrays"] + (["dataframe"] if importlib.util.find_spec("pandas") else [])
    for name in ("keras", "tf_keras"):
        for kind in kinds:
            assert f"{name} {kind} fit evaluate predict" in run.stdout, run.stdout
    assert f"backend {backend}" in run.stdout
