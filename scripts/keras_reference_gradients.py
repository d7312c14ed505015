#!/usr/bin/env python3
"""Gradients TensorFlow computes (tf.GradientTape), for checking stoker's backward passes.

Convention for every case: a model m, an input batch x (float32, NHWC), a fixed random upstream
tensor R of the output's shape, and the loss

    L = sum(m(x, training=False) * R)

training=False, so BatchNormalization uses its moving statistics (Keras' fine-tuning semantics:
the base model called with training=False) and Dropout is the identity. Everything is computed in
float32, as Keras does. Recorded: the output, dL/dx ("input_gradient") and dL/dw for every
trainable weight, keyed "<layer name>/<keras weight name>" (kernel, bias, depthwise_kernel,
pointwise_kernel, gamma, beta; the ":0" and any scope prefix stripped).

Writes, under tests/trainer/vectors/gradients/:
  <case>.h5      (small cases only) the model, saved by tf-keras in the legacy HDF5 format
  <case>.json    the index below; every tensor entry is {"shape": [...], "offset": N} where offset
                 counts float32 values into <case>.bin and the values are in C (row-major) order
  <case>.bin     those tensors, little-endian float32, concatenated

<case>.json:
  {"model": "<case>.h5" | "models/keras/mobilenet_v2_0.35_224_3class.h5" (under the shared data),
   "loss": "sum(model(input, training=False) * upstream)",
   "input": T, "upstream": T, "output": T, "input_gradient": T,
   "gradients": {"<layer>/<weight>": T, ...}}

Big weights are sampled: for a weight array with more than 4096 values only 512 entries are
stored, at fixed random flat (C-order) indices; its entry is then
  {"shape": [full shape], "offset": N, "count": 512, "indices": [i0, i1, ...] (sorted),
   "sum_of_squares": sum of the squares of the full array (float64 sum)}
and the blob holds array.ravel()[indices]. Every gradient/delta entry has "sum_of_squares"; only
sampled ones have "indices". The indices of a weight depend only on its key (seeded by its
CRC-32), so "mobilenet_top" and "adam_step" sample the same entries of the same weight.

Cases:
  grad_conv         ZeroPadding2D, Conv2D (strides 2 'same' on odd sizes, 'valid', dilation 2,
                    even kernel 'same' stride (2, 1), with and without bias, fused relu / tanh),
                    DepthwiseConv2D (depth_multiplier 2, stride 2 'same'; 'valid' no bias),
                    SeparableConv2D ('same' relu; stride 2 'valid' depth_multiplier 2 no bias),
                    Concatenate, Add
  grad_bn_act       Conv2D 1x1, BatchNormalization (default, scale=False, center=False),
                    Rescaling (before relu6, and before the activations so that their inputs
                    span about -4..8), ReLU (max_value=6; negative_slope + threshold), LeakyReLU, Add,
                    Activation sigmoid / swish / tanh / softmax / elu / selu / gelu / softplus /
                    hard_sigmoid, Concatenate; a 4-D output
  grad_pool_dense   MaxPooling2D and AveragePooling2D ('same' stride 2: border windows count fewer
                    pixels; 'valid'), Dense on a 4-D input, LayerNormalization (default and
                    scale=False), GlobalAveragePooling2D, GlobalMaxPooling2D, Flatten, Dropout,
                    Dense on a flat input with a fused softmax. No maximum is taken over values
                    that can tie (TF splits a tied reduce_max gradient evenly; MaxPooling2D's
                    windows see the continuous swish output)
  grad_se           squeeze-and-excitation: GlobalAveragePooling2D, Reshape to [1, 1, C], 1x1
                    convs, Multiply([H, W, C] x [1, 1, C]), Add (residual), Reshape to [H*W, C],
                    Dense on it, Reshape back
  mobilenet_top     the shared MobileNetV2 alpha=0.35 backbone (sequential_9: the features after
                    GlobalAveragePooling2D, 1280) unfrozen from block_13_expand (trainable = layers
                    at or after block_13_expand in the backbone's layer order). The input is the
                    output of block_12_add (the tensor feeding block_13_expand, [2, 14, 14, 32])
                    for the two photos ../mobilenet/cat_0.png and ../mobilenet/dog_1.png (the
                    committed 224x224 resizes of catsdogs cat.0.jpg and dog.1.jpg), preprocessed
                    x/127.5-1. The JSON's "image" names those PNGs (the 1.2 MB of floats are not
                    stored again): {"files": [...], "shape": [2, 224, 224, 3],
                    "preprocess": "x/127.5-1"}; "boundary_layer" "block_12_add",
                    "unfrozen_from" "block_13_expand", "feature_layer" "sequential_9".
                    "input_gradient" is dL/d(block_12_add output).
  adam_step         one Keras fine-tuning step: Model(boundary -> backbone top (training=False) ->
                    Dense(1, sigmoid, name "head")), compiled with tf_keras.optimizers.Adam(1e-5)
                    (beta_1 0.9, beta_2 0.999, epsilon 1e-7) and BinaryCrossentropy, one
                    train_on_batch on the block_12_add outputs of 4 photos ("sources"; resized to
                    224x224 bilinearly by PIL, x/127.5-1). Its JSON: "input" (the boundary
                    tensors [4, 14, 14, 32]), "labels" [4, 1] (cat 0, dog 1), "output" (the head's
                    probabilities before the step), "loss" [1] (before the step),
                    "head_kernel_before" / "head_bias_before" / "head_kernel_after" /
                    "head_bias_after" (full), and "deltas": {"<layer>/<weight>": w_after -
                    w_before} for every trainable weight (sampled as above). The optimizer is
                    tf_keras' Adam: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
                    w -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps) -- epsilon is added to the
                    uncorrected sqrt(v).

CI never runs this script; the C++ tests use the committed files (and the shared .h5 by path).

  python scripts/keras_reference_gradients.py [--shared ../shared/data] [--out tests/trainer/vectors/gradients]
"""
import argparse
import json
import os
import zlib
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import tf_keras as keras
from PIL import Image
from tf_keras import layers as L

repo = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("--shared", default=str(repo.parent / "shared" / "data"))
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "gradients"))
args = ap.parse_args()
shared = Path(args.shared)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(4321)
tf.random.set_seed(4321)
keras.utils.set_random_seed(4321)

SAMPLE_ABOVE = 4096
SAMPLE_COUNT = 512
SHARED_MODEL = "models/keras/mobilenet_v2_0.35_224_3class.h5"


def randomise(model):
    """Random weights, BatchNormalization with non-trivial moving statistics (as keras_reference_layers.py)."""
    for layer in model.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        if isinstance(layer, L.BatchNormalization):
            new = []
            for w, n in zip(ws, [v.name for v in layer.weights]):
                if "moving_variance" in n:
                    new.append(rng.uniform(0.5, 2.0, w.shape).astype(np.float32))
                elif "gamma" in n:
                    new.append(rng.uniform(0.5, 1.5, w.shape).astype(np.float32))
                else:
                    new.append(rng.normal(0, 0.3, w.shape).astype(np.float32))
            layer.set_weights(new)
        else:
            layer.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32) for w in ws])


def weight_key(layer, var):
    short = var.name.split("/")[-1].split(":")[0]
    return f"{layer.name}/{short}"


def trainable_keys(model):
    """[(key, variable)] for every trainable weight of the model's leaf layers, in layer order."""
    out_, seen = [], set()

    def walk(m):
        for layer in m.layers:
            if isinstance(layer, keras.Model):
                walk(layer)
                continue
            for v in layer.trainable_weights:
                if id(v) not in seen:
                    seen.add(id(v))
                    out_.append((weight_key(layer, v), v))

    walk(model)
    keys = [k for k, _ in out_]
    assert len(keys) == len(set(keys)), "duplicate weight keys"
    return out_


class Blob:
    def __init__(self):
        self.parts, self.offset = [], 0

    def add(self, a):
        a = np.ascontiguousarray(a, dtype="<f4")
        entry = {"shape": list(a.shape), "offset": self.offset}
        self.parts.append(a.ravel())
        self.offset += a.size
        return entry

    def add_weight(self, key, a):
        """A gradient or delta: full when small, else SAMPLE_COUNT entries at indices seeded by the key."""
        a = np.asarray(a, dtype=np.float32)
        ssq = float(np.sum(np.square(a.astype(np.float64))))
        if a.size <= SAMPLE_ABOVE:
            entry = self.add(a)
        else:
            idx = np.sort(np.random.default_rng(zlib.crc32(key.encode())).choice(a.size, SAMPLE_COUNT, replace=False))
            entry = self.add(a.ravel()[idx])
            entry.update({"shape": list(a.shape), "count": SAMPLE_COUNT, "indices": [int(i) for i in idx]})
        entry["sum_of_squares"] = ssq
        return entry

    def write(self, name, meta):
        np.concatenate(self.parts).astype("<f4").tofile(out / f"{name}.bin")
        (out / f"{name}.json").write_text(json.dumps(meta, indent=0))
        print(name, self.offset * 4, "bytes")


def gradients(model, x, R):
    """(output, dL/dx, {key: dL/dw}) for L = sum(model(x, training=False) * R)."""
    keys = trainable_keys(model)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt, training=False)
        loss = tf.reduce_sum(y * tf.constant(R))
    grads = tape.gradient(loss, [xt] + [v for _, v in keys])
    assert all(g is not None for g in grads), [k for (k, _), g in zip(keys, grads[1:]) if g is None]
    return y.numpy(), grads[0].numpy(), {k: tf.convert_to_tensor(g).numpy() for (k, _), g in zip(keys, grads[1:])}


def dump_small(name, model, x):
    randomise(model)
    model.save(out / f"{name}.h5", save_format="h5", include_optimizer=False)
    # Gradients from the reloaded file, so they belong to exactly what the C++ test loads.
    model = keras.models.load_model(out / f"{name}.h5", compile=False)
    R = rng.normal(0, 1, model.output_shape[:0] + (x.shape[0],) + tuple(model.output_shape[1:])).astype(np.float32)
    y, gx, gw = gradients(model, x, R)
    assert np.allclose(y, model.predict(x, verbose=0), atol=1e-5)
    b = Blob()
    meta = {"model": f"{name}.h5", "loss": "sum(model(input, training=False) * upstream)",
            "input": b.add(x), "upstream": b.add(R), "output": b.add(y), "input_gradient": b.add(gx),
            "gradients": {k: b.add_weight(k, g) for k, g in gw.items()}}
    b.write(name, meta)
    print("  ", list(gw))


# ---------------------------------------------------------------------------------------------
# a) small models, together every layer type stoker imports.

# grad_conv: convolutions and padding.


def build_conv():
    inp = keras.Input((9, 11, 3), name="input")
    zp = L.ZeroPadding2D(((1, 0), (2, 1)), name="zpad")(inp)                                        # 10x14
    c1 = L.Conv2D(6, 3, strides=2, padding="same", activation="relu", name="conv_same_s2")(inp)      # 5x6x6
    c2 = L.Conv2D(5, 3, strides=2, padding="valid", use_bias=False, name="conv_valid_s2_nobias")(zp) # 4x6x5
    c3 = L.Conv2D(4, 3, padding="same", dilation_rate=2, activation="tanh", name="conv_dilated")(inp)  # 9x11x4
    c4 = L.Conv2D(3, (2, 3), strides=(2, 1), padding="same", name="conv_even_same")(inp)             # 5x11x3
    dw = L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, name="dw_s2_dm2")(c3)   # 5x6x8
    dw2 = L.DepthwiseConv2D(3, padding="valid", use_bias=False, name="dw_valid_nobias")(c4)          # 3x9x3
    sp = L.SeparableConv2D(6, 3, padding="same", activation="relu", name="sep_same")(c3)             # 9x11x6
    sp2 = L.SeparableConv2D(5, 3, strides=2, padding="valid", depth_multiplier=2, use_bias=False,
                            name="sep_s2_dm2")(sp)                                                   # 4x5x5
    cat = L.Concatenate(name="concat")([c1, dw])                                                     # 5x6x14
    mix = L.Conv2D(5, 2, padding="valid", name="conv_mix")(cat)                                      # 4x5x5
    c2b = L.Conv2D(5, (1, 2), padding="valid", name="conv_c2")(c2)                                   # 4x5x5
    dwb = L.Conv2D(5, (1, 5), strides=(1, 1), padding="valid", name="conv_dw2")(dw2)                 # 3x5x5
    dwb = L.ZeroPadding2D(((1, 0), (0, 0)), name="zpad_dw2")(dwb)                                    # 4x5x5
    add = L.Add(name="add")([mix, sp2, c2b, dwb])
    return keras.Model(inp, add, name="grad_conv")


x = rng.normal(0, 1, (2, 9, 11, 3)).astype(np.float32)
dump_small("grad_conv", build_conv(), x)

# grad_bn_act: batch norms, relus, every Activation.
inp = keras.Input((9, 11, 3), name="input")
c = L.Conv2D(8, 1, name="conv1x1")(inp)
bn = L.BatchNormalization(epsilon=1e-3, name="bn")(c)
bn_ns = L.BatchNormalization(scale=False, name="bn_no_gamma")(c)
bn_nc = L.BatchNormalization(center=False, name="bn_no_beta")(c)
r6 = L.ReLU(max_value=6.0, name="relu6")(L.Rescaling(3.0, offset=0.5, name="rescale")(bn))   # reaches the clip
rl = L.ReLU(negative_slope=0.1, threshold=0.2, name="relu_leaky_thr")(bn_ns)
lk = L.LeakyReLU(alpha=0.2, name="leaky")(bn_nc)
s = L.Add(name="add")([r6, rl, lk])
s = L.Rescaling(0.5, offset=-3.0, name="rescale_acts")(s)  # both tails of hard_sigmoid, softplus, elu
acts = [L.Activation(a, name=f"act_{a}")(s) for a in
        ("sigmoid", "swish", "tanh", "softmax", "elu", "selu", "gelu", "softplus", "hard_sigmoid")]
model = keras.Model(inp, L.Concatenate(name="concat")(acts), name="grad_bn_act")
x = (2.0 * rng.normal(0, 1, (2, 9, 11, 3))).astype(np.float32)
dump_small("grad_bn_act", model, x)

# grad_pool_dense: pooling, Dense on 4-D and flat, LayerNormalization, Flatten, Dropout.
inp = keras.Input((9, 11, 3), name="input")
c = L.Conv2D(6, 3, padding="same", activation="swish", name="conv")(inp)          # 9x11x6, no ties for max
mp = L.MaxPooling2D(3, strides=2, padding="same", name="maxpool_same")(c)          # 5x6
apl = L.AveragePooling2D(3, strides=2, padding="same", name="avgpool_same")(c)     # 5x6, border windows smaller
ap2 = L.AveragePooling2D(2, name="avgpool_valid")(c)                               # 4x5
mp2 = L.MaxPooling2D((2, 3), strides=(2, 2), name="maxpool_valid")(c)              # 4x5
cat = L.Concatenate(name="concat")([mp, apl])                                      # 5x6x12
d4 = L.Dense(5, activation="tanh", name="dense_4d")(cat)                           # 5x6x5
ln = L.LayerNormalization(epsilon=1e-3, name="layer_norm")(d4)
ln2 = L.LayerNormalization(scale=False, name="layer_norm_no_gamma")(mp2)
gap = L.GlobalAveragePooling2D(name="gap")(ln)
gmp = L.GlobalMaxPooling2D(name="gmp")(d4)  # not on the max pool's output: its repeats would tie
fl = L.Flatten(name="flatten")(ap2)                                                # 120
fl2 = L.Flatten(name="flatten_ln2")(ln2)                                           # 120
dr = L.Dropout(0.3, name="dropout")(L.Concatenate(name="concat_flat")([fl, fl2]))
feats = L.Concatenate(name="concat_feats")([gap, gmp, dr])
model = keras.Model(inp, L.Dense(4, activation="softmax", name="dense_softmax")(feats), name="grad_pool_dense")
x = rng.normal(0, 1, (2, 9, 11, 3)).astype(np.float32)
dump_small("grad_pool_dense", model, x)

# grad_se: squeeze-and-excitation, Reshape, Multiply.
inp = keras.Input((9, 11, 4), name="input")
x0 = L.Conv2D(8, 3, padding="same", activation="swish", name="se_conv")(inp)
se = L.GlobalAveragePooling2D(name="se_squeeze")(x0)
se = L.Reshape((1, 1, 8), name="se_reshape")(se)
se = L.Conv2D(3, 1, activation="swish", name="se_reduce")(se)
se = L.Conv2D(8, 1, activation="sigmoid", name="se_expand")(se)
ex = L.Multiply(name="se_excite")([x0, se])
res = L.Add(name="residual")([ex, x0])
rows = L.Reshape((99, 8), name="reshape_rows")(res)
dr = L.Dense(3, activation="gelu", name="dense_rows")(rows)
model = keras.Model(inp, L.Reshape((9, 11, 3), name="reshape_back")(dr), name="grad_se")
x = rng.normal(0, 1, (2, 9, 11, 4)).astype(np.float32)
dump_small("grad_se", model, x)

# ---------------------------------------------------------------------------------------------
# b) mobilenet_top, c) adam_step: the shared backbone unfrozen from block_13_expand.
full = keras.models.load_model(shared / SHARED_MODEL, compile=False)
backbone = full.layers[0]            # sequential_9: Sequential[ MobileNetV2 (model3) cut at out_relu, GAP ]
mnet, gap_layer = backbone.layers
names = [l.name for l in mnet.layers]
first = names.index("block_13_expand")
for i, layer in enumerate(mnet.layers):
    layer.trainable = i >= first
boundary_name = mnet.layers[first].inbound_nodes[0].inbound_layers.name
assert boundary_name == "block_12_add", boundary_name
lower = keras.Model(mnet.input, mnet.get_layer(boundary_name).output, name="lower")

# The top as its own model on a new input: re-apply the backbone's layers from block_13_expand on.
top_in = keras.Input(tuple(mnet.get_layer(boundary_name).output.shape[1:]), name="boundary")
tensors = {id(mnet.get_layer(boundary_name).output): top_in}
for layer in mnet.layers[first:]:
    node = layer.inbound_nodes[0]
    ins = node.input_tensors
    args_ = [tensors[id(t)] for t in ins] if isinstance(ins, list) else tensors[id(ins)]
    tensors[id(layer.output)] = layer(args_)
top = keras.Model(top_in, gap_layer(tensors[id(mnet.layers[-1].output)]), name="top")


def png(path):
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8)


def photo(path):
    return np.asarray(Image.open(path).convert("RGB").resize((224, 224), Image.BILINEAR), dtype=np.uint8)


def preprocess(images):
    return np.stack(images).astype(np.float32) / np.float32(127.5) - np.float32(1.0)


mdir = repo / "tests" / "trainer" / "vectors" / "mobilenet"
img = preprocess([png(mdir / "cat_0.png"), png(mdir / "dog_1.png")])
xb = lower.predict(img, verbose=0)
feat_full = backbone.predict(img, verbose=0)
R = rng.normal(0, 1, feat_full.shape).astype(np.float32)
y, gx, gw = gradients(top, xb, R)
print("top vs backbone max diff", float(np.abs(y - feat_full).max()))
assert np.allclose(y, feat_full, atol=1e-4)
# Every trainable weight of the backbone, and only those.
assert sorted(gw) == sorted(weight_key(l, v) for l in mnet.layers[first:] for v in l.trainable_weights)
b = Blob()
meta = {"model": SHARED_MODEL, "loss": "sum(model(input, training=False) * upstream)",
        "feature_layer": backbone.name, "backbone_model": mnet.name, "unfrozen_from": "block_13_expand",
        "boundary_layer": boundary_name,
        "image": {"files": ["../mobilenet/cat_0.png", "../mobilenet/dog_1.png"], "shape": list(img.shape),
                  "preprocess": "x/127.5-1", "sources": ["catsdogs/cat/cat.0.jpg", "catsdogs/dog/dog.1.jpg"]},
        "input": b.add(xb), "upstream": b.add(R), "output": b.add(y), "input_gradient": b.add(gx),
        "gradients": {k: b.add_weight(k, g) for k, g in gw.items()}}
b.write("mobilenet_top", meta)
print("  ", len(gw), "weights,", sum(int(np.prod(g.shape)) for g in gw.values()), "values")

# c) adam_step
sources = ["catsdogs/cat/cat.1.jpg", "catsdogs/dog/dog.0.jpg", "catsdogs/cat/cat.2.jpg", "catsdogs/dog/dog.2.jpg"]
labels = np.array([[0], [1], [0], [1]], dtype=np.float32)
xa = lower.predict(preprocess([photo(shared / s) for s in sources]), verbose=0)
inp = keras.Input(top_in.shape[1:], name="adam_input")
feats = top(inp, training=False)
head = L.Dense(1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=7),
               name="head")
model = keras.Model(inp, head(feats), name="adam_step")
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-5), loss=keras.losses.BinaryCrossentropy())
keys = trainable_keys(model)
assert len(keys) == len(gw) + 2, (len(keys), len(gw))
before = {k: v.numpy().copy() for k, v in keys}
stats_before = [v.numpy().copy() for v in mnet.non_trainable_weights]
p_before = model(xa, training=False).numpy()
loss_before = float(keras.losses.BinaryCrossentropy()(labels, p_before).numpy())
loss_step = float(model.train_on_batch(xa, labels))
print("adam loss before", loss_before, "train_on_batch", loss_step)
assert abs(loss_before - loss_step) < 1e-5 * max(1.0, abs(loss_before))
after = {k: v.numpy().copy() for k, v in keys}
assert all(np.array_equal(a, v.numpy()) for a, v in zip(stats_before, mnet.non_trainable_weights)), "BN stats moved"
b = Blob()
meta = {"model": SHARED_MODEL, "feature_layer": backbone.name, "backbone_model": mnet.name,
        "unfrozen_from": "block_13_expand", "boundary_layer": boundary_name,
        "sources": sources, "preprocess": "resize 224x224 PIL bilinear, x/127.5-1",
        "optimizer": {"class": "Adam", "learning_rate": 1e-5, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7},
        "loss_function": "BinaryCrossentropy (from sigmoid probabilities)",
        "input": b.add(xa), "labels": b.add(labels), "output": b.add(p_before),
        "loss": b.add(np.array([loss_step], np.float32)),
        "head_kernel_before": b.add(before["head/kernel"]), "head_bias_before": b.add(before["head/bias"]),
        "head_kernel_after": b.add(after["head/kernel"]), "head_bias_after": b.add(after["head/bias"]),
        "deltas": {k: b.add_weight(k, (after[k].astype(np.float64) - before[k].astype(np.float64)).astype(np.float32))
                   for k, _ in keys}}
b.write("adam_step", meta)
