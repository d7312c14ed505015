"""`stoker train` writes model.h5, the whole classifier, which tf_keras itself loads and which
predicts what `stoker predict` predicts. Runs the command named by $STOKER_CLI
(scripts/test_python.sh sets it to build/apps/stoker)."""

import json
import os
import subprocess

import numpy as np
import pytest

from support import make_folder

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "data", "models", "mobilenet_v2_0.35_224_3class.h5")


def stoker_cli():
    cli = os.environ.get("STOKER_CLI", "")
    if not cli or not os.access(cli, os.X_OK):
        pytest.skip("STOKER_CLI does not name the stoker command")
    return cli


@pytest.mark.parametrize("preprocess, standardise", [
    ("tf", []), ("caffe", []), ("torch", []),
    ("none", ["--rescale", "1/255", "--featurewise-center", "--featurewise-std-normalization"]),
    # A fine-tuned backbone: model.h5 holds its trained weights.
    ("tf", ["--fine-tune-from", "block_16_expand", "--fine-tune-epochs", "2", "--fine-tune-learning-rate", "1e-3"])])
def test_model_h5_loads_in_tf_keras_and_predicts_what_stoker_predicts(tmp_path, preprocess, standardise):
    keras = pytest.importorskip("tf_keras")
    from PIL import Image

    cli = stoker_cli()
    data = make_folder(tmp_path / "data", per_class=10, size=64)
    out = tmp_path / "model"
    subprocess.run([cli, "train", "--data", data, "--model", MODEL, "--image-size", "64", "--epochs", "5", "--learning-rate", "0.01",
                    "--batch-size", "8", "--device", "cpu", "--preprocess", preprocess, "--horizontal-flip",
                    *standardise, "--out", str(out)], check=True, capture_output=True)
    assert (out / "model.h5").exists()
    # Images at the model's size: stoker's resize is then the identity and both see the same pixels.
    images = sorted(str(p) for p in (tmp_path / "data").rglob("*.jpg"))[::3]
    shown = subprocess.run([cli, "predict", "--model-dir", str(out), "--json", *images],
                           check=True, capture_output=True, text=True).stdout
    rows = json.loads(shown[shown.index("["):])
    stoker_p = np.array([r["probabilities"]["red"] for r in rows])

    model = keras.models.load_model(str(out / "model.h5"), compile=False)
    assert model.layers[1].name == "preprocess"  # the standardisation, folded into one 1x1 convolution
    assert model.layers[-1].name == "classifier" and model.output_shape == (None, 1)
    x = np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) for p in images])
    keras_p = model.predict(x, verbose=0)[:, 0]
    np.testing.assert_allclose(keras_p, stoker_p, atol=1e-4)
    # The head learned the two colours: the file holds the trained weights, not the initial ones.
    labels = np.array(["red" in os.path.basename(os.path.dirname(p)) for p in images])
    assert ((keras_p > 0.5) == labels).mean() >= 0.8
    # predict --model on the exported file gives what the folder gives (the file normalises itself).
    shown = subprocess.run([cli, "predict", "--model", str(out / "model.h5"), "--json", *images],
                           check=True, capture_output=True, text=True).stdout
    file_p = np.array([r["probabilities"]["1"] for r in json.loads(shown[shown.index("["):])])
    np.testing.assert_allclose(file_p, stoker_p, atol=1e-4)
    if (out / "backbone.h5").exists():
        # A fine-tuned run's backbone predicts in Keras: the features model.h5 feeds its head.
        backbone = keras.models.load_model(str(out / "backbone.h5"), compile=False)
        standardised = keras.Model(model.input, model.layers[1].output).predict(x, verbose=0)
        features = keras.Model(model.input, model.layers[-1].input).predict(x, verbose=0)
        np.testing.assert_allclose(backbone.predict(standardised, verbose=0), features, atol=1e-4)


@pytest.mark.parametrize("fine_tune", [[], ["--fine-tune-from", "block_16_expand", "--fine-tune-epochs", "1"]])
def test_exported_files_predict_in_keras_3(tmp_path, fine_tune):
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3."):
        pytest.skip("Keras 3 is not installed")
    from PIL import Image

    cli = stoker_cli()
    data = make_folder(tmp_path / "data", per_class=6, size=64)
    out = tmp_path / "model"
    subprocess.run([cli, "train", "--data", data, "--model", MODEL, "--image-size", "64", "--epochs", "2",
                    "--batch-size", "8", "--device", "cpu", *fine_tune, "--out", str(out)], check=True,
                   capture_output=True)
    images = sorted(str(p) for p in (tmp_path / "data").rglob("*.jpg"))[::2]
    shown = subprocess.run([cli, "predict", "--model-dir", str(out), "--json", *images],
                           check=True, capture_output=True, text=True).stdout
    stoker_p = np.array([r["probabilities"]["red"] for r in json.loads(shown[shown.index("["):])])
    x = np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) for p in images])
    model = keras.models.load_model(str(out / "model.h5"), compile=False)
    np.testing.assert_allclose(np.asarray(model.predict(x, verbose=0))[:, 0], stoker_p, atol=1e-4)
    if (out / "backbone.h5").exists():  # a fine-tuning epoch was the best
        backbone = keras.models.load_model(str(out / "backbone.h5"), compile=False)
        standardised = np.asarray(keras.Model(model.inputs, model.layers[1].output).predict(x, verbose=0))
        features = np.asarray(keras.Model(model.inputs, model.layers[-1].input).predict(x, verbose=0))
        np.testing.assert_allclose(np.asarray(backbone.predict(standardised, verbose=0)), features, atol=1e-4)
