#!/usr/bin/env bash
# From a fresh machine to the default run: installs dependencies, builds, and trains a cats-vs-dogs
# classifier (frozen MobileNetV2 0.35 + Dense(1, sigmoid)) on the bundled sample in data/, printing
# validation accuracy. Extra arguments go to `stoker train` (e.g. --horizontal-flip --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/build_env.sh
configure build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target stoker_cli
# A run from an earlier quick start stays: this one goes to the next free out/catsdogs-N.
out=out/catsdogs n=1
while [[ -e "$out" ]]; do out=out/catsdogs-$((++n)); done
./build/apps/stoker train --data data/catsdogs-sample --validation-split 0.2 \
  --model data/models/mobilenet_v2_0.35_224_3class.h5 --cut-at sequential_9 \
  --image-size 224 --batch-size 32 --epochs 20 --out "$out" "$@"
