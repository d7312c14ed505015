#!/usr/bin/env bash
# From a fresh machine to the default run: installs dependencies, builds, runs the default job on the
# bundled sample in data/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target stoker_cli
./build/apps/stoker load --data data/catsdogs-sample --image-size 224 --batch-size 32 --epochs 2
