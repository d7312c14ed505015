#!/usr/bin/env python3
"""Keras 3 `.keras` files with Keras' own outputs, for the Keras 3 import (trainer/src/import/keras3.cpp).

Writes, under tests/trainer/vectors/keras3/:
  functional.keras   Conv2D + BatchNormalization + ReLU(6) + DepthwiseConv2D + Add + pooling + Dense
  nested.keras       a Sequential holding a Functional backbone (weights under layers/<model>/layers/)
                     and a Dense head
  <case>.json/.bin   the input batch and every layer's output for it (the format of
                     scripts/keras_reference_layers.py)
Random weights from a fixed seed; BatchNormalization gets non-trivial moving statistics. Needs
Keras 3 (pip install keras tensorflow-cpu); CI never runs it, the tests use the committed files.

  python scripts/keras3_reference.py [--out tests/trainer/vectors/keras3]
"""
import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
from keras import layers as L

repo = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "keras3"))
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(4321)
assert keras.__version__.startswith("3."), keras.__version__


def randomise(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            randomise(layer)
            continue
        ws = layer.get_weights()
        if isinstance(layer, L.Normalization):  # adapted statistics: mean, variance > 0, count
            layer.set_weights([rng.normal(0, 1.0, ws[0].shape).astype(np.float32),
                               rng.uniform(0.2, 3.0, ws[1].shape).astype(np.float32), ws[2]])
            layer.finalize_state()  # Keras 3 computes its mean/variance tensors from the weights here
            continue
        if isinstance(layer, L.BatchNormalization):
            ws = [rng.uniform(0.5, 1.5, w.shape) if i == len(ws) - 1 else rng.normal(0, 0.5, w.shape)
                  for i, w in enumerate(ws)]
        else:
            ws = [rng.normal(0, 0.4, w.shape) for w in ws]
        layer.set_weights([w.astype(np.float32) for w in ws])


def flat_layers(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from flat_layers(layer)
        elif not isinstance(layer, L.InputLayer):
            yield layer


def write(name, model, x, extra=None):
    model.save(out / f"{name}.keras")
    blobs, meta = [], {"outputs": {}}
    offset = 0

    def add(a):
        nonlocal offset
        a = np.asarray(a, np.float32)
        blobs.append(a.tobytes())
        entry = {"shape": list(a.shape), "offset": offset}
        offset += a.size
        return entry

    meta["input"] = add(x)
    # Every layer's output, from a model over the flat graph (nested models included).
    probe = keras.Model(model.inputs, [l.output for l in flat_layers(model)]) if isinstance(
        model, keras.Model) and not isinstance(model, keras.Sequential) else None
    if probe is not None:
        for layer, y in zip(flat_layers(model), probe.predict(x, verbose=0)):
            meta["outputs"][layer.name] = add(y)
    for key, value in (extra or {}).items():
        meta["outputs"][key] = add(value)
    meta["outputs"][model.layers[-1].name] = add(model.predict(x, verbose=0))
    (out / f"{name}.bin").write_bytes(b"".join(blobs))
    (out / f"{name}.json").write_text(json.dumps(meta, indent=0))
    print(name, {k: v["shape"] for k, v in meta["outputs"].items()})


x = rng.uniform(-1, 1, (2, 12, 10, 3)).astype(np.float32)
inp = keras.Input((12, 10, 3), name="img")
t = L.Conv2D(6, 3, padding="same", name="conv")(inp)
t = L.BatchNormalization(name="bn")(t)
t = L.ReLU(6.0, name="relu6")(t)
u = L.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw")(t)
u = L.BatchNormalization(center=False, name="bn_no_beta")(u)
t = L.Add(name="add")([t, u])
t = L.Conv2D(4, 1, strides=2, activation="relu", name="pointwise")(t)
t = L.MaxPooling2D(2, name="pool")(t)
t = L.GlobalAveragePooling2D(name="gap")(t)
t = L.Dense(3, activation="softmax", name="dense")(t)
functional = keras.Model(inp, t, name="functional_case")
randomise(functional)
write("functional", functional, x)

bb_in = keras.Input((12, 10, 3), name="bb_in")
b = L.Conv2D(5, 3, strides=2, padding="same", name="bb_conv")(bb_in)
b = L.BatchNormalization(name="bb_bn")(b)
b = L.Activation("swish", name="bb_swish")(b)
b = L.GlobalAveragePooling2D(name="bb_gap")(b)
backbone = keras.Model(bb_in, b, name="backbone")
nested = keras.Sequential([keras.Input((12, 10, 3), name="top_in"), backbone,
                           L.Dense(2, activation="sigmoid", name="head")], name="nested_case")
randomise(nested)
write("nested", nested, x, {"backbone": backbone.predict(x, verbose=0)})

# The layers Keras Applications' newer backbones need, in Keras 3's format (Keras 3's own
# hard_silu, which tf_keras lacks; SeparableConv2D, Normalization and LayerNormalization weights by
# creation order), appended last so the cases above keep their random draws.
x = rng.uniform(-4, 4, (2, 9, 8, 4)).astype(np.float32)
inp = keras.Input((9, 8, 4), name="img")
t = L.Normalization(name="norm")(inp)
a = L.Activation("hard_silu", name="act_hard_silu")(t)
c = L.Conv2D(6, 3, padding="same", activation="hard_swish", name="conv_hard_swish")(a)
s_ = L.SeparableConv2D(6, 3, strides=2, padding="same", depth_multiplier=2, activation="gelu", name="sep")(c)
ln = L.LayerNormalization(center=False, name="ln")(s_)
se = L.GlobalAveragePooling2D(name="se_gap")(ln)
se = L.Reshape((1, 1, 6), name="se_reshape")(se)
se = L.Conv2D(6, 1, activation="sigmoid", name="se_conv")(se)
m = L.Multiply(name="se_mul")([ln, se])
g = L.GlobalMaxPooling2D(name="gmp")(m)
t = L.Dense(3, activation="softmax", name="dense")(g)
newer = keras.Model(inp, t, name="newer_case")
randomise(newer)
write("newer_layers", newer, x)
reloaded = keras.models.load_model(out / "newer_layers.keras")
assert np.allclose(reloaded.predict(x, verbose=0), newer.predict(x, verbose=0), atol=1e-6), "reload differs"

# Keras 3's hard_sigmoid is relu6(x + 3) / 6, not tf_keras' clip(0.2 x + 0.5): stoker refuses it.
inp = keras.Input((4,), name="vec")
hs = keras.Model(inp, L.Activation("hard_sigmoid", name="act_hard_sigmoid")(inp), name="hard_sigmoid_case")
hs.save(out / "hard_sigmoid.keras")
