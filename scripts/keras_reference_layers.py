#!/usr/bin/env python3
"""Tiny generated Keras models that exercise every layer type stoker imports, with Keras' own outputs.

Writes, under tests/trainer/vectors/layers/:
  <case>.h5      the model, saved by tf-keras in the legacy HDF5 format (topology JSON + weights)
  <case>.json    {"input": {shape, offset}, "outputs": {layer name: {shape, offset}}}: the input batch
                 and the output of every layer for it; offset counts float32 values into <case>.bin
  <case>.bin     those tensors, little-endian float32, concatenated
Random weights come from a fixed seed; BatchNormalization gets non-trivial moving statistics.
CI never runs this script; the C++ tests use the committed files.

  python scripts/keras_reference_layers.py [--out tests/trainer/vectors/layers]
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
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "layers"))
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(1234)


def randomise(model):
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
        elif isinstance(layer, L.Normalization):  # adapted statistics: mean, variance > 0, count
            mean, var, count = ws
            layer.set_weights([rng.normal(0, 1.0, mean.shape).astype(np.float32),
                               rng.uniform(0.2, 3.0, var.shape).astype(np.float32), count])
        else:
            layer.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32) for w in ws])


def dump(name, model, x):
    randomise(model)
    model.save(out / f"{name}.h5", save_format="h5", include_optimizer=False)
    probe = keras.Model(model.inputs, [l.output for l in model.layers if not isinstance(l, L.InputLayer)])
    ys = probe.predict(x, verbose=0)
    if not isinstance(ys, list):
        ys = [ys]
    names = [l.name for l in model.layers if not isinstance(l, L.InputLayer)]
    write_vectors(name, x, dict(zip(names, ys)))


def write_vectors(name, x, outputs):
    blobs, index, offset = [], {}, 0
    def add(a):
        nonlocal offset
        a = np.ascontiguousarray(a, dtype="<f4")
        entry = {"shape": list(a.shape), "offset": offset}
        blobs.append(a.ravel())
        offset += a.size
        return entry
    meta = {"input": add(x), "outputs": {k: add(v) for k, v in outputs.items()}}
    np.concatenate(blobs).astype("<f4").tofile(out / f"{name}.bin")
    (out / f"{name}.json").write_text(json.dumps(meta, indent=0))
    print(name, {k: v["shape"] for k, v in meta["outputs"].items()})


# 1. Convolutions, padding (asymmetric 'same' at stride 2 on even sizes), BN, activations, pooling.
inp = keras.Input((12, 10, 3), name="input")
z = L.ZeroPadding2D(((1, 2), (0, 1)), name="zpad")(inp)                                     # 15x11
c1 = L.Conv2D(6, 3, strides=2, padding="same", activation="relu", name="conv_same_s2_odd")(inp)   # 12x10 -> 6x5 (pad 0/1, 0/1)
c2 = L.Conv2D(5, 3, strides=2, padding="same", use_bias=False, name="conv_same_s2")(z)           # 15x11 -> 8x6
c3 = L.Conv2D(4, (3, 2), strides=(1, 2), padding="valid", dilation_rate=1, name="conv_valid")(z)  # 13x5
c4 = L.Conv2D(4, 3, padding="same", dilation_rate=2, activation="swish", name="conv_dilated")(inp)
dw = L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, name="dw_same_s2")(c1)  # 3x3x12
dw1 = L.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw_m1")(c4)
bn = L.BatchNormalization(epsilon=1e-3, name="bn")(dw1)
r6 = L.ReLU(max_value=6.0, name="relu6")(bn)
rl = L.ReLU(negative_slope=0.1, threshold=0.2, name="relu_leaky_thr")(bn)
lk = L.LeakyReLU(alpha=0.2, name="leaky")(bn)
add = L.Add(name="add")([r6, rl, lk])
cat = L.Concatenate(name="concat")([add, c4])
sg = L.Activation("sigmoid", name="act_sigmoid")(cat)
sw = L.Activation("swish", name="act_swish")(cat)
rr = L.Activation("relu", name="act_relu")(cat)
ln = L.Activation("linear", name="act_linear")(cat)
mp = L.MaxPooling2D(3, strides=2, padding="same", name="maxpool_same")(sw)                  # 6x5
mp2 = L.MaxPooling2D(2, name="maxpool_valid")(rr)
ap1 = L.AveragePooling2D(3, strides=2, padding="same", name="avgpool_same")(sg)              # excludes padding
ap2 = L.AveragePooling2D((2, 3), strides=(2, 1), padding="valid", name="avgpool_valid")(ln)
gap = L.GlobalAveragePooling2D(name="gap")(mp)
fl = L.Flatten(name="flatten")(ap2)
gap2 = L.GlobalAveragePooling2D(name="gap_c2")(c2)
gap3 = L.GlobalAveragePooling2D(name="gap_c3")(c3)
gap4 = L.GlobalAveragePooling2D(name="gap_dw")(dw)
gap5 = L.GlobalAveragePooling2D(name="gap_ap1")(ap1)
gap6 = L.GlobalAveragePooling2D(name="gap_mp2")(mp2)
feats = L.Concatenate(name="concat_feats")([gap, gap2, gap3, gap4, gap5, gap6])
d1 = L.Dense(7, activation="relu", name="dense_relu")(fl)
dr = L.Dropout(0.5, name="dropout")(d1)
d2 = L.Dense(3, activation="softmax", name="dense_softmax")(L.Concatenate(name="concat_head")([dr, feats]))
d3 = L.Dense(1, activation="sigmoid", name="dense_sigmoid")(dr)
act_softmax = L.Activation("softmax", name="act_softmax")(d1)
model = keras.Model(inp, [d2, d3, act_softmax], name="layers_functional")
x = rng.normal(0, 1, (1, 12, 10, 3)).astype(np.float32)
dump("layers_functional", model, x)

# 2. Nested: Sequential[ Functional[conv, bn, relu], GAP ] then Sequential head, as Teachable Machine nests.
inner_in = keras.Input((8, 8, 2), name="inner_input")
t = L.ZeroPadding2D(((0, 1), (0, 1)), name="inner_pad")(inner_in)
t = L.Conv2D(4, 3, strides=2, padding="valid", use_bias=False, name="inner_conv")(t)
t = L.BatchNormalization(name="inner_bn")(t)
t = L.ReLU(6.0, name="inner_relu")(t)
inner = keras.Model(inner_in, t, name="inner_model")
backbone = keras.Sequential([keras.Input((8, 8, 2), name="bb_input"), inner, L.GlobalAveragePooling2D(name="bb_gap")], name="backbone")
head = keras.Sequential([keras.Input((4,), name="head_input"), L.Dense(3, activation="relu", name="head_dense"),
                         L.Dense(2, activation="softmax", use_bias=False, name="head_out")], name="head")
nested = keras.Sequential([keras.Input((8, 8, 2), name="top_input"), backbone, head], name="nested")
for m in (inner, head):
    randomise(m)
xs = rng.normal(0, 1, (3, 8, 8, 2)).astype(np.float32)
nested.save(out / "nested.h5", save_format="h5", include_optimizer=False)
outs = {"backbone": backbone.predict(xs, verbose=0), "nested": nested.predict(xs, verbose=0),
        "inner_model": inner.predict(xs, verbose=0)}
write_vectors("nested", xs, outs)

# 3. Adam on a Dense head, as Keras trains it: a few train_on_batch steps from known weights.
#    adam_<kind>.json/.bin: input x, labels y (as float), initial kernel/bias, then per step the loss
#    and the kernel/bias after the step.
import tensorflow as tf  # noqa: E402

for kind, units in (("sigmoid", 1), ("softmax", 3)):
    d, n = 5, 8
    x = rng.normal(0, 1, (n, d)).astype(np.float32)
    y = rng.integers(0, 2 if units == 1 else units, n)
    head = keras.Sequential([keras.Input((d,)), L.Dense(units, activation=kind, name="head")])
    k0 = rng.normal(0, 0.5, (d, units)).astype(np.float32)
    b0 = rng.normal(0, 0.1, (units,)).astype(np.float32)
    head.layers[0].set_weights([k0, b0])
    loss = "binary_crossentropy" if units == 1 else "categorical_crossentropy"
    head.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss=loss)
    target = y.reshape(n, 1).astype(np.float32) if units == 1 else np.eye(units, dtype=np.float32)[y]
    outs = {"labels": y.astype(np.float32), "kernel0": k0, "bias0": b0}
    for step in range(3):
        l = head.train_on_batch(x, target)
        k, b = head.layers[0].get_weights()
        outs[f"loss{step + 1}"] = np.array([l], dtype=np.float32)
        outs[f"kernel{step + 1}"] = k
        outs[f"bias{step + 1}"] = b
    write_vectors(f"adam_{kind}", x, outs)

# 4. An Inception-ResNet block as Keras Applications' InceptionResNetV2 builds it (the issue's
#    user model): Conv2D without bias + BatchNormalization(scale=False) + relu branches,
#    Concatenate, a 1x1 Conv2D with bias, CustomScaleLayer (x + up * scale), relu; and its stem's
#    pooling (MaxPooling2D 3/2 'valid', AveragePooling2D 3/1 'same').
from tf_keras.src.applications.inception_resnet_v2 import CustomScaleLayer  # noqa: E402


def conv_bn(t, filters, k, name, strides=1, padding="same"):
    t = L.Conv2D(filters, k, strides=strides, padding=padding, use_bias=False, name=name)(t)
    t = L.BatchNormalization(axis=3, scale=False, name=name + "_bn")(t)
    return L.Activation("relu", name=name + "_ac")(t)


inp = keras.Input((11, 11, 4), name="ir_input")
stem = conv_bn(inp, 8, 3, "stem_conv", strides=1, padding="valid")                # 9x9x8
pool = L.MaxPooling2D(3, strides=2, name="stem_maxpool")(stem)                     # 4x4x8
b0 = conv_bn(pool, 4, 1, "b0")
b1 = conv_bn(conv_bn(pool, 4, 1, "b1a"), 6, 3, "b1b")
b2 = L.AveragePooling2D(3, strides=1, padding="same", name="b2_avgpool")(pool)
mixed = L.Concatenate(axis=3, name="block35_1_mixed")([b0, b1, b2])
up = L.Conv2D(8, 1, use_bias=True, name="block35_1_conv")(mixed)
res = CustomScaleLayer(0.17, name="block35_1")([pool, up])
act = L.Activation("relu", name="block35_1_ac")(res)
gap = L.GlobalAveragePooling2D(name="avg_pool")(act)
model = keras.Model(inp, gap, name="inception_resnet_block")
x = rng.normal(0, 1, (2, 11, 11, 4)).astype(np.float32)
dump("inception_resnet_block", model, x)

# 5. The activations Keras Applications' newer backbones use (layers_activations): each as an
#    Activation layer and fused into a Conv2D / Dense, on inputs wide enough to reach hard_sigmoid's
#    clipped ends and softplus' tails. Appended last, so the cases above keep their random draws.
inp = keras.Input((6, 5, 3), name="act_input")
names = ["elu", "selu", "gelu", "softplus", "hard_sigmoid"]
feats = []
for a in names:
    t = L.Activation(a, name=f"act_{a}")(inp)
    t = L.Conv2D(4, 3, padding="same", activation=a, name=f"conv_{a}")(t)
    feats.append(L.GlobalAveragePooling2D(name=f"gap_{a}")(t))
elu_layer = L.ELU(name="elu_layer")(inp)
feats.append(L.GlobalAveragePooling2D(name="gap_elu_layer")(elu_layer))
cat = L.Concatenate(name="act_concat")(feats)
outs = [L.Dense(3, activation=a, name=f"dense_{a}")(cat) for a in names]
model = keras.Model(inp, outs, name="layers_activations")
x = (3.0 * rng.normal(0, 1, (2, 6, 5, 3))).astype(np.float32)
dump("layers_activations", model, x)

# 6. Squeeze-and-excitation as EfficientNet builds it (layers_se): GlobalAveragePooling2D, Reshape to
#    [1, 1, C], two 1x1 convs, Multiply([x, se]) (and the other order), Multiply of equal shapes,
#    GlobalMaxPooling2D (keepdims too), Reshape to rows [H*W, C] before a Dense.
inp = keras.Input((7, 6, 8), name="se_input")
x0 = L.Conv2D(8, 3, padding="same", activation="swish", name="se_conv")(inp)
se = L.GlobalAveragePooling2D(name="se_squeeze")(x0)
se = L.Reshape((1, 1, 8), name="se_reshape")(se)
se = L.Conv2D(3, 1, activation="swish", name="se_reduce")(se)
se = L.Conv2D(8, 1, activation="sigmoid", name="se_expand")(se)
ex = L.Multiply(name="se_excite")([x0, se])
ex2 = L.Multiply(name="se_excite_swapped")([se, inp])
sq = L.Multiply(name="mul_equal")([ex, ex2])
gm = L.GlobalMaxPooling2D(name="gmp")(sq)
gk = L.GlobalMaxPooling2D(keepdims=True, name="gmp_keepdims")(ex2)
rows = L.Reshape((-1, 8), name="reshape_rows")(sq)
dr = L.Dense(3, activation="gelu", name="dense_rows")(rows)
fl = L.Reshape((42 * 3,), name="reshape_flat")(dr)
head = L.Dense(2, activation="softmax", name="se_head")(L.Concatenate(name="se_concat")([gm, fl]))
model = keras.Model(inp, [head, gk], name="layers_se")
x = rng.normal(0, 1, (2, 7, 6, 8)).astype(np.float32)
dump("layers_se", model, x)

# 7. SeparableConv2D (Xception's), Normalization (EfficientNet's adapted mean/variance) and
#    LayerNormalization (ConvNeXt's, over the channels) (layers_norm_separable).
inp = keras.Input((9, 8, 4), name="ns_input")
nm = L.Normalization(axis=-1, name="normalization")(inp)
s1 = L.SeparableConv2D(6, 3, padding="same", activation="relu", name="sep_same")(nm)
s2 = L.SeparableConv2D(5, 3, strides=2, padding="same", depth_multiplier=2, use_bias=False, name="sep_s2_dm2")(s1)
bn = L.BatchNormalization(name="sep_bn")(s2)
s3 = L.SeparableConv2D(4, (3, 2), padding="valid", dilation_rate=2, activation="swish", name="sep_dilated")(nm)
ln = L.LayerNormalization(epsilon=1e-6, name="layer_norm")(s1)
ln2 = L.LayerNormalization(center=False, name="layer_norm_no_beta")(bn)
ln3 = L.LayerNormalization(scale=False, axis=[3], name="layer_norm_no_gamma")(s3)
g = L.Concatenate(name="ns_concat")([L.GlobalAveragePooling2D(name="ns_gap1")(ln), L.GlobalAveragePooling2D(name="ns_gap2")(ln2),
                                     L.GlobalAveragePooling2D(name="ns_gap3")(ln3)])
d = L.Dense(6, name="ns_dense")(g)
ld = L.LayerNormalization(name="layer_norm_dense")(d)
nd = L.Normalization(name="normalization_dense")(ld)
model = keras.Model(inp, [nd, s2], name="layers_norm_separable")
x = (2.0 * rng.normal(0, 1, (2, 9, 8, 4)) + 0.5).astype(np.float32)
dump("layers_norm_separable", model, x)

# 8. Keras Applications' own EfficientNet builder, shrunk (width and depth 0.1, 32x32): the whole
#    backbone as Keras builds it (Rescaling, adapted Normalization, ZeroPadding2D, depthwise convs,
#    squeeze-and-excitation with Reshape and Multiply, swish, residual Adds) with random weights and
#    statistics (efficientnet_tiny); only a few layers' outputs are stored, to keep the file small.
from tf_keras.src.applications.efficientnet import EfficientNet  # noqa: E402

model = EfficientNet(0.1, 0.1, 32, 0.2, model_name="efficientnet_tiny", weights=None, include_top=False,
                     input_shape=(32, 32, 3), pooling="avg")
randomise(model)
model.save(out / "efficientnet_tiny.h5", save_format="h5", include_optimizer=False)
keep = ["normalization", "stem_activation", "block1a_se_squeeze", "block1a_se_reshape", "block1a_se_excite",
        "block2a_project_bn", "top_activation", model.layers[-1].name]
probe = keras.Model(model.inputs, [model.get_layer(k).output for k in keep])
x = rng.uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
write_vectors("efficientnet_tiny", x, dict(zip(keep, probe.predict(x, verbose=0))))
