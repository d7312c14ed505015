#!/usr/bin/env python3
"""Reference outputs of the shared MobileNetV2 alpha=0.35 Teachable-Machine model, from Keras itself.

Loads ../shared/data/models/keras/mobilenet_v2_0.35_224_3class.h5 with tensorflow-cpu + tf-keras,
runs a few 224x224 RGB images through it and writes, under tests/trainer/vectors/mobilenet/:
  <name>.png            the exact uint8 RGB input of the photos, already resized to 224x224 (lossless);
                        bird and sunflower are read from the shared images/*.rgb instead (the test
                        needs the shared model anyway), so they are not duplicated here
  reference.json        the images in batch order (".rgb": under the shared data folder), and where the outputs lie in reference.bin:
                        "features" [N, 1280] (backbone after GlobalAveragePooling2D) and "head" [N, 3]
                        (softmax); "offset" counts float32 values
  reference.bin         those two tensors, little-endian float32
Preprocessing is the model's: x / 127.5 - 1 in float32, NHWC.
CI never runs this script; it runs the C++ test against the committed files.

  python scripts/keras_reference_mobilenet.py [--shared ../shared/data] [--out tests/trainer/vectors/mobilenet]
"""
import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from PIL import Image
import tf_keras as keras

repo = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("--shared", default=str(repo.parent / "shared" / "data"))
ap.add_argument("--out", default=str(repo / "tests" / "trainer" / "vectors" / "mobilenet"))
args = ap.parse_args()
shared = Path(args.shared)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)


def raw_rgb(path):
    return np.fromfile(path, dtype=np.uint8).reshape(224, 224, 3)


def photo(path):
    # Full image resized bilinearly to 224x224 (PIL); the resized uint8 pixels are what we commit.
    return np.asarray(Image.open(path).convert("RGB").resize((224, 224), Image.BILINEAR), dtype=np.uint8)


images = {
    "bird": raw_rgb(shared / "images" / "bird.rgb"),
    "sunflower": raw_rgb(shared / "images" / "sunflower.rgb"),
    "cat_0": photo(shared / "catsdogs" / "cat" / "cat.0.jpg"),
    "dog_1": photo(shared / "catsdogs" / "dog" / "dog.1.jpg"),
}

model = keras.models.load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5", compile=False)
backbone = model.layers[0]  # Sequential[ MobileNetV2 cut at out_relu, GlobalAveragePooling2D ]
names = list(images)
x = np.stack([images[n] for n in names]).astype(np.float32) / np.float32(127.5) - np.float32(1.0)
features = backbone.predict(x, batch_size=len(names), verbose=0)
head = model.predict(x, batch_size=len(names), verbose=0)
assert features.shape == (len(names), 1280) and head.shape == (len(names), 3)

ref = {"model": "models/keras/mobilenet_v2_0.35_224_3class.h5", "preprocess": "x/127.5-1",
       "feature_layer": backbone.name,
       "images": [f"images/{n}.rgb" if n in ("bird", "sunflower") else f"{n}.png" for n in names],
       "features": {"shape": list(features.shape), "offset": 0},
       "head": {"shape": list(head.shape), "offset": int(features.size)}}
for i, n in enumerate(names):
    if n not in ("bird", "sunflower"):
        Image.fromarray(images[n]).save(out / f"{n}.png", optimize=True)
    print(n, "head", head[i], "argmax", int(np.argmax(head[i])))
np.concatenate([features.ravel(), head.ravel()]).astype("<f4").tofile(out / "reference.bin")
(out / "reference.json").write_text(json.dumps(ref, indent=1))
print("wrote", out)
