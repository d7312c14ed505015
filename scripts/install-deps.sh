#!/usr/bin/env bash
# Installs every build and test dependency of stoker from Debian's packages.
# Idempotent: skips apt entirely when everything is already present.
set -euo pipefail
packages=(
  build-essential cmake pkg-config ninja-build ccache  # ccache: see scripts/build_env.sh
  libopencv-dev libturbojpeg0-dev libjpeg62-turbo-dev libtbb-dev
  libgtest-dev libgmock-dev
  libhdf5-dev libzip-dev nlohmann-json3-dev libcli11-dev
  clang-format  # the format check (tests: format.clang_format; Debian 12: version 14)
  clang libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz; its runtime), run briefly by test.sh --sanitize
  python3-dev python3-venv  # the Python package (scripts/test_python.sh builds it with pip)
  python3-torch python3-torchvision  # its PyTorch tests (PyPI's torch wheels carry CUDA: gigabytes)
  libopenmpi-dev openmpi-bin  # data-parallel training across processes (STOKER_DISTRIBUTED, docs/distributed.md)
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: all Debian packages present"
fi
