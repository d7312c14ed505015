#!/usr/bin/env python3
"""The backbones a user brings from Keras Applications, as tf-keras builds them.

For each backbone (weights=None, include_top=False, pooling='avg', a small input) it writes
tests/trainer/vectors/backbones/<name>.json:
  {"name", "application", "input_size", "total_params", "layer_params": {leaf layer: count},
   "model_config": the topology tf-keras writes into a .h5 file's `model_config` attribute}
Initializer, regularizer and constraint configs are dropped from the topology (the importer never
reads them; they are half its size). The C++ tests (tests/trainer/backbones_test.cpp) import each
topology, give it weights and compare the parameter counts with Keras'.

Each file also holds "seeded": Keras' output for one image when every weight and the input come
from seeded_values() below, a generator the C++ test (Backbones.SeededOutputsMatchKeras)
implements too, so CI compares stoker's forward pass with Keras' without committing the weights.

With --models DIR it also saves each model with random weights (BatchNormalization statistics,
Normalization, LayerScale included; fixed seed) as DIR/<name>.h5 with a fixed input batch
DIR/<name>.input.bin and Keras' output DIR/<name>.output.bin (float32; shapes in
DIR/<name>.shapes.json). Not committed: STOKER_BACKBONES_DIR=DIR runs the BackbonesOutputs test,
which compares stoker's forward pass with them. CI never runs this script.

  python scripts/keras_reference_backbones.py [--out tests/trainer/vectors/backbones] [--models /tmp/backbones]
"""
import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tf_keras as keras
from tf_keras import layers as L

repo = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "backbones"))
ap.add_argument("--models", default=None, help="also write .h5 models, inputs and Keras' outputs here")
ap.add_argument("--only", nargs="*", default=None)
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

A = keras.applications
# name -> (constructor, input size, whether the model preprocesses raw [0, 255] pixels itself)
BACKBONES = {
    "EfficientNetB0": (A.EfficientNetB0, 96, True),
    "Xception": (A.Xception, 96, False),
    "MobileNetV3Small": (A.MobileNetV3Small, 96, True),
    "MobileNetV3Large": (A.MobileNetV3Large, 96, True),
    "ResNet50V2": (A.ResNet50V2, 96, False),
    "DenseNet121": (A.DenseNet121, 96, False),
    "InceptionV3": (A.InceptionV3, 96, False),
    "VGG16": (A.VGG16, 96, False),
    "ConvNeXtTiny": (A.ConvNeXtTiny, 96, True),
    "NASNetMobile": (A.NASNetMobile, 96, False),
}


def leaf_layers(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from leaf_layers(layer)
        elif not isinstance(layer, L.InputLayer):
            yield layer


def strip(v):
    """The topology without initializer/regularizer/constraint configs."""
    if isinstance(v, dict):
        return {k: strip(e) for k, e in v.items()
                if not k.endswith(("_initializer", "_regularizer", "_constraint"))}
    if isinstance(v, list):
        return [strip(e) for e in v]
    return v


def randomise(model, rng):
    """Random weights that keep a deep net's activations in range: He-scaled kernels, BN statistics
    near the identity, LayerScale near 1 (its 1e-6 init would hide the residual branches)."""
    for layer in leaf_layers(model):
        new = []
        for w in layer.weights:
            n, shape = w.name.split("/")[-1].split(":")[0], tuple(w.shape)
            if n in ("kernel", "depthwise_kernel", "pointwise_kernel"):
                fan_in = int(np.prod(shape[:-1])) if n != "depthwise_kernel" else int(np.prod(shape[:2]))
                v = rng.normal(0, np.sqrt(2.0 / fan_in), shape)
            elif n in ("moving_variance", "variance"):
                v = rng.uniform(0.5, 1.5, shape)
            elif n == "gamma":
                v = rng.uniform(0.5, 1.5, shape)
            elif n == "count":
                v = np.asarray(w.numpy())
            else:  # bias, beta, moving_mean, mean
                v = rng.normal(0, 0.1, shape)
            new.append(np.asarray(v, np.float32).reshape(shape))
        if new:
            layer.set_weights(new)


M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def fnv1a(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def seeded_values(name, count, lo, hi):
    """float32(lo + (hi - lo) * u_i), u_i = splitmix64(fnv1a(name) + (i + 1) * golden) >> 11 / 2^53."""
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a(name)) + (np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return (lo + (hi - lo) * u).astype(np.float32)


def seeded_range(key, shape):
    """The uniform range of a weight: He-uniform kernels, variances and gammas in [0.5, 1.5]."""
    if key in ("kernel", "pointwise_kernel", "depthwise_kernel"):
        fan_in = int(np.prod(shape[:2])) if key == "depthwise_kernel" else int(np.prod(shape[:-1]))
        return -np.sqrt(6.0 / fan_in), np.sqrt(6.0 / fan_in)
    if key in ("moving_variance", "variance", "gamma"):
        return 0.5, 1.5
    return -0.1, 0.1  # bias, beta, moving_mean, mean


def seed_weights(model):
    for layer in leaf_layers(model):
        new = []
        for w in layer.weights:
            key, shape = w.name.split("/")[-1].split(":")[0], tuple(w.shape)
            if key == "count":
                new.append(np.asarray(w.numpy()))
                continue
            lo, hi = seeded_range(key, shape)
            new.append(seeded_values(layer.name + "/" + key, int(np.prod(shape)), lo, hi).reshape(shape))
        if new:
            layer.set_weights(new)


for name, (make, size, raw_pixels) in BACKBONES.items():
    if args.only and name not in args.only:
        continue
    rng = np.random.default_rng(17)
    model = make(weights=None, include_top=False, pooling="avg", input_shape=(size, size, 3))
    config = strip(json.loads(model.to_json()))
    layer_params = {l.name: int(l.count_params()) for l in leaf_layers(model)}
    entry = {"name": name, "application": make.__name__, "input_size": [size, size, 3],
             "total_params": int(model.count_params()), "layer_params": layer_params,
             "output_shape": list(model.output_shape[1:]), "tf_keras": keras.__version__,
             "model_config": config}
    # Keras' output for the seeded weights and input (before randomise() below changes them).
    seed_weights(model)
    lo, hi = (0.0, 255.0) if raw_pixels else (-1.0, 1.0)
    xs = seeded_values("input", size * size * 3, lo, hi).reshape(1, size, size, 3)
    ys = model.predict(xs, verbose=0).astype(np.float32)[0]
    entry["seeded"] = {"input_range": [lo, hi], "output": [float(v) for v in ys]}
    (out / f"{name}.json").write_text(json.dumps(entry, separators=(",", ":")) + "\n")
    print(f"{name}: {len(layer_params)} layers, {entry['total_params']} parameters, "
          f"{(out / f'{name}.json').stat().st_size} bytes", flush=True)
    if args.models:
        models = Path(args.models)
        models.mkdir(parents=True, exist_ok=True)
        randomise(model, rng)
        model.save(models / f"{name}.h5", save_format="h5", include_optimizer=False)
        x = (rng.uniform(0, 255, (2, size, size, 3)) if raw_pixels else rng.uniform(-1, 1, (2, size, size, 3)))
        x = x.astype(np.float32)
        y = model.predict(x, verbose=0).astype(np.float32)
        x.astype("<f4").tofile(models / f"{name}.input.bin")
        y.astype("<f4").tofile(models / f"{name}.output.bin")
        (models / f"{name}.shapes.json").write_text(json.dumps({"input": list(x.shape), "output": list(y.shape)}))
        print(f"  output {y.shape}, max |y| {np.abs(y).max():.3g}, mean |y| {np.abs(y).mean():.3g}", flush=True)
