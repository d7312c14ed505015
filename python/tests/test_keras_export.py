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


def test_a_runs_input_rebuilt_from_its_model_folder_alone_predicts_what_stoker_predicts(tmp_path):
    """stoker_model.json names the filter that ran: a loader made from what it records feeds
    model.h5 the pixels `predict --model-dir` feeds the backbone (photos of another size than the
    model's, so the resize matters)."""
    keras = pytest.importorskip("tf_keras")
    import stoker

    cli = stoker_cli()
    data = make_folder(tmp_path / "data", per_class=6, size=64)
    out = tmp_path / "model"
    subprocess.run([cli, "train", "--data", data, "--model", MODEL, "--image-size", "40", "--epochs", "2",
                    "--batch-size", "8", "--device", "cpu", "--out", str(out)], check=True, capture_output=True)
    info = json.loads((out / "stoker_model.json").read_text())
    assert info["interpolation"] == "opencv_linear"
    model = keras.models.load_model(str(out / "model.h5"), compile=False)

    def keras_scores(interpolation):
        with stoker.Loader(data, info["image_size"], batch_size=64, shuffle=False, label_mode="none",
                           interpolation=interpolation, keep_aspect_ratio=info["keep_aspect_ratio"]) as loader:
            paths = list(loader.dataset.paths)
            x = np.concatenate([np.asarray(b.images, np.float32) for b in loader])
        return paths, model.predict(x, verbose=0)[:, 0]

    paths, keras_p = keras_scores(info["interpolation"])
    shown = subprocess.run([cli, "predict", "--model-dir", str(out), "--json", *paths],
                           check=True, capture_output=True, text=True).stdout
    stoker_p = np.array([r["probabilities"]["red"] for r in json.loads(shown[shown.index("["):])])
    np.testing.assert_allclose(keras_p, stoker_p, atol=1e-4)
    # Pillow's bilinear, which the folder recorded before, is another filter: other scores.
    assert np.abs(keras_scores("bilinear")[1] - stoker_p).max() > 1e-3


def test_a_backbone_that_normalises_its_input_itself_is_not_normalised_again(tmp_path):
    """Keras 3's EfficientNet, ConvNeXt and MobileNetV3 begin with their own Rescaling and
    Normalization: train refuses --preprocess tf on such a model (naming its layers) and trains
    with --preprocess none."""
    keras = pytest.importorskip("tf_keras")
    cli = stoker_cli()
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Rescaling(1 / 255, name="own_rescaling")(inputs)
    x = keras.layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.05, 0.05, 0.05], name="own_norm")(x)
    x = keras.layers.Conv2D(4, 3, name="stem")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    model_file = tmp_path / "normalising.h5"
    keras.Model(inputs, x).save(str(model_file))
    data = make_folder(tmp_path / "data", per_class=6, size=32)
    run = [cli, "train", "--data", data, "--model", str(model_file), "--image-size", "32", "--epochs", "1",
           "--batch-size", "4", "--device", "cpu"]
    refused = subprocess.run([*run, "--out", str(tmp_path / "refused")], capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr
    assert "normalises its input itself" in refused.stderr and "'own_rescaling' (Rescaling)" in refused.stderr
    assert "'own_norm' (Normalization)" in refused.stderr and "--preprocess none" in refused.stderr
    subprocess.run([*run, "--preprocess", "none", "--out", str(tmp_path / "trained")], check=True, capture_output=True)
