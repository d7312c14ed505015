#!/usr/bin/env python3
"""The topology of the issue's model, Keras Applications' InceptionResNetV2 (include_top=False,
pooling='avg'), as tf-keras writes it into a .h5 file's `model_config` attribute, without weights.

Writes tests/trainer/vectors/inception_resnet_v2/model_config.json (781 layers, any input size).
The C++ tests build the graph from it with random weights (the ImageNet weights are 215 MB and
not on PyPI) and check the cuDNN plan and backend against the CPU backend on it. CI never runs
this script; the tests use the committed file.

  python scripts/keras_topology_inception_resnet_v2.py
"""
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_keras as keras

out = Path(__file__).resolve().parent.parent / "tests" / "trainer" / "vectors" / "inception_resnet_v2"
out.mkdir(parents=True, exist_ok=True)
model = keras.applications.InceptionResNetV2(weights=None, include_top=False, pooling="avg",
                                             input_shape=(None, None, 3))
config = json.loads(model.to_json())  # {"class_name": "Functional", "config": {...}}, as in a .h5
(out / "model_config.json").write_text(json.dumps(config, separators=(",", ":")) + "\n")
print(f"wrote {out / 'model_config.json'}: {len(config['config']['layers'])} layers, "
      f"{model.count_params()} parameters, tf-keras {keras.__version__}")
