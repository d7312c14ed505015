#!/usr/bin/env python3
"""Keras' fit() options that change a Dense head's loss: class_weight and label_smoothing.

Writes tests/trainer/vectors/fit_options.json: for a few fixed feature vectors, labels and initial
weights, what tf-keras 2.x computes with Adam(learning_rate=0.01):
  steps:  train_on_batch(x, y, class_weight=...) twice: the loss it reports and the kernel/bias after
  fit:    one fit() epoch in batches of 4 (shuffle=False): history's loss and the weights after
  evaluate: model.evaluate() loss after the steps (class weights do not apply; smoothing does)
and, for the callbacks, ReduceLROnPlateau's rate and EarlyStopping's stop on a fixed sequence of
epoch metrics, and CosineDecay's rates per step.
Plain JSON numbers (float32 values printed as doubles). CI never runs this; the C++ tests
(Head.ClassWeightAndLabelSmoothingMatchKeras, Schedules.*) read the committed file.

  /work/main/.venv-dev/bin/python scripts/keras_reference_fit_options.py [--out FILE]
"""
import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import tf_keras as keras

repo = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "fit_options.json"))
args = ap.parse_args()
rng = np.random.default_rng(19)

cases = []
# The last case is an imbalanced set (8 of 10 in class 0) with sklearn's balanced weights, what
# `--class-weight auto` computes: n / (classes * count) = {0: 0.625, 1: 2.5}.
imbalanced = np.array([0, 0, 1, 0, 0, 0, 0, 1, 0, 0])
for name, units, class_weight, smoothing, labels in (
    ("sigmoid_class_weight", 1, {0: 0.5, 1: 2.0}, 0.0, [0, 1, 1, 0, 1, 0]),
    ("sigmoid_label_smoothing", 1, None, 0.2, [0, 1, 1, 0, 1, 0]),
    ("softmax_class_weight_and_smoothing", 3, {0: 1.0, 1: 3.0, 2: 0.25}, 0.1, [0, 1, 2, 2, 1, 0]),
    ("sigmoid_balanced_weights_on_an_imbalanced_set", 1,
     {c: len(imbalanced) / (2 * np.sum(imbalanced == c)) for c in (0, 1)}, 0.0, imbalanced.tolist()),
):
    y = np.array(labels)
    d, n = 3, len(y)
    x = rng.normal(0, 1, (n, d)).astype(np.float32)
    k0 = rng.normal(0, 0.5, (d, units)).astype(np.float32)
    b0 = rng.normal(0, 0.1, (units,)).astype(np.float32)
    target = y.reshape(n, 1).astype(np.float32) if units == 1 else np.eye(units, dtype=np.float32)[y]
    loss = (keras.losses.BinaryCrossentropy(label_smoothing=smoothing) if units == 1
            else keras.losses.CategoricalCrossentropy(label_smoothing=smoothing))

    def fresh():
        m = keras.Sequential([keras.Input((d,)), keras.layers.Dense(units, activation="sigmoid" if units == 1
                                                                   else "softmax")])
        m.layers[0].set_weights([k0, b0])
        m.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss=loss)
        return m

    case = {"name": name, "units": units, "x": x.tolist(), "y": y.tolist(), "kernel0": k0.tolist(),
            "bias0": b0.tolist(), "label_smoothing": smoothing,
            "class_weight": [class_weight[c] for c in range(max(units, 2))] if class_weight else [], "steps": []}
    m = fresh()
    for _ in range(2):
        l = m.train_on_batch(x, target, class_weight=class_weight)
        k, b = m.layers[0].get_weights()
        case["steps"].append({"loss": float(l), "kernel": k.tolist(), "bias": b.tolist()})
    case["evaluate_loss"] = float(m.evaluate(x, target, verbose=0))
    m = fresh()
    h = m.fit(x, target, batch_size=4, epochs=1, shuffle=False, class_weight=class_weight, verbose=0)
    k, b = m.layers[0].get_weights()
    case["fit"] = {"batch_size": 4, "loss": float(h.history["loss"][0]), "kernel": k.tolist(), "bias": b.tolist()}
    cases.append(case)

    # What the reported loss is, by hand from the same starting weights (printed, for the record).
    p = fresh().predict(x, verbose=0)
    t = target * (1 - smoothing) + (0.5 if units == 1 else 1.0 / units) * smoothing
    per = (-(t * np.log(p) + (1 - t) * np.log(1 - p)).sum(1) if units == 1 else -(t * np.log(p)).sum(1))
    w = np.array([class_weight[c] for c in y]) if class_weight else np.ones(n)
    print(f"{name}: keras step-1 loss {case['steps'][0]['loss']:.7f}; sum(w*l)/batch {np.sum(w * per) / n:.7f}; "
          f"sum(w*l)/sum(w) {np.sum(w * per) / np.sum(w):.7f}")

# The callbacks on a made-up sequence of epoch metrics: the learning rate ReduceLROnPlateau(factor
# 0.5, patience 2) leaves after each epoch, the epoch EarlyStopping(patience 3) stops at, for
# val_loss ('min') and val_accuracy ('max'); and CosineDecay(0.01, 10) at steps 0..12.
callbacks = []
for monitor, values in (("val_loss", [1.0, 0.9, 0.95, 0.91, 0.92, 0.85, 0.84995, 0.86, 0.87, 0.88, 0.8, 0.81]),
                        ("val_accuracy", [0.5, 0.6, 0.6, 0.65, 0.64, 0.63, 0.65005, 0.62, 0.7, 0.69, 0.68, 0.67])):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    plateau = keras.callbacks.ReduceLROnPlateau(monitor=monitor, factor=0.5, patience=2)
    stopping = keras.callbacks.EarlyStopping(monitor=monitor, patience=3)
    for cb in (plateau, stopping):
        cb.set_model(model)
        cb.on_train_begin()
    lrs, stopped = [], None
    for epoch, v in enumerate(values):
        plateau.on_epoch_end(epoch, {monitor: v})
        lrs.append(float(keras.backend.get_value(model.optimizer.learning_rate)))
        if stopped is None:
            stopping.on_epoch_end(epoch, {monitor: v})
            if model.stop_training:
                stopped = epoch
    callbacks.append({"monitor": monitor, "values": values, "learning_rate_after": lrs, "stopped_after": stopped})
schedule = keras.optimizers.schedules.CosineDecay(0.01, 10)
cosine = [float(schedule(step)) for step in range(13)]

Path(args.out).write_text(json.dumps({"generator": "scripts/keras_reference_fit_options.py",
                                      "tf_keras": keras.__version__, "tensorflow": tf.__version__,
                                      "cases": cases, "callbacks": callbacks, "cosine_decay_0.01_10": cosine},
                                     indent=1) + "\n")
print("wrote", args.out)
