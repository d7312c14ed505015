#!/usr/bin/env bash
# GPU checks of issue 6 (the trainer's cuDNN backend): its tests and its benchmark next to the
# PyTorch peer, on a machine with an NVIDIA GPU, from a build made elsewhere. (A separate script
# from scripts/gpu_check.sh, which belongs to the GPU feed and ends in a usage error for modes it
# does not know.)
#
# 1. Here (CUDA toolkit + cuDNN 9 headers and library; no GPU needed):
#        scripts/trainer_gpu_check.sh prepare [BUILD_DIR]     # default BUILD_DIR: build-cudnn
#    builds stoker_trainer_tests and trainer_gpu_bench and fills BUILD_DIR/carry/ with them,
#    libstoker, libs.tar.xz (the shared libraries they load except glibc, libstdc++/libgcc,
#    libcuda and libcudnn*, which the GPU machine supplies) and the shared models/images the
#    tests need (Darknet-tiny, MobileNetV2 α=0.35 .h5, bird/sunflower).
# 2. On the GPU machine, from the repository root, with BUILD_DIR/carry carried along:
#        OUT=/some/dir scripts/trainer_gpu_check.sh run [CARRY_DIR]   # default build-cudnn/carry
#    With the device tool:
#        run(command="bash scripts/trainer_gpu_check.sh run", carry=["build-cudnn/carry"], timeout_s=420)
#    libcudnn.so.9 is taken from the system, else from a Python install of nvidia-cudnn-cu* (the
#    one PyTorch uses), else from $CUDNN_LIB.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-run}

prepare() {
  local build=${1:-$root/build-cudnn}
  set -e
  cmake -S "$root" -B "$build" -DSTOKER_CUDNN=ON >/dev/null
  cmake --build "$build" -j2 --target stoker_trainer_tests trainer_gpu_bench
  local carry=$build/carry
  mkdir -p "$carry/bin"
  cp -fL "$build/tests/trainer/stoker_trainer_tests" "$build/bench/trainer_gpu_bench" "$build/libstoker.so.0" "$carry/bin/"
  ldd "$carry"/bin/* 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^/]*)\.so|/libstdc\+\+\.so|/libgcc_s\.so|/libcuda\.so|/libcudnn|/libstoker\.so' \
      >"$carry/libs.txt.new"
  if [[ -f $carry/libs.tar.xz ]] && cmp -s "$carry/libs.txt.new" "$carry/libs.txt"; then
    echo "libs.tar.xz is up to date ($(wc -l <"$carry/libs.txt") libraries)"
  else
    local tmp
    tmp=$(mktemp -d)
    while read -r lib; do cp -L "$lib" "$tmp/"; done <"$carry/libs.txt.new"
    tar -C "$tmp" -cf - . | xz -T2 -6 >"$carry/libs.tar.xz"
    rm -rf "$tmp"
    echo "packed $(wc -l <"$carry/libs.txt.new") libraries"
  fi
  mv "$carry/libs.txt.new" "$carry/libs.txt"
  local shared=${STOKER_SHARED_DATA:-$root/../shared/data}
  if [[ -d $shared/models ]]; then
    mkdir -p "$carry/shared_data/models/tfjs" "$carry/shared_data/models/keras" "$carry/shared_data/images"
    cp -r "$shared/models/tfjs/darknet_tiny_imagenet" "$carry/shared_data/models/tfjs/"
    cp "$shared/models/keras/mobilenet_v2_0.35_224_3class.h5" "$carry/shared_data/models/keras/"
    cp "$shared"/images/*.rgb "$carry/shared_data/images/"
  else
    echo "warning: no shared data at $shared: the model tests will skip on the GPU machine"
  fi
  du -sh "$carry"
  echo "carry: ${carry#"$root"/}"
}

find_cudnn() {
  # Prints a directory holding libcudnn.so.9 when the loader does not find it by itself.
  if ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then return 0; fi
  if [[ -n ${CUDNN_LIB:-} && -e $CUDNN_LIB/libcudnn.so.9 ]]; then echo "$CUDNN_LIB"; return 0; fi
  local py cand
  for py in ${TORCH_PYTHON:-} python3 /work/venv-ref/bin/python /opt/conda/bin/python; do
    command -v "$py" >/dev/null 2>&1 || continue
    cand=$("$py" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) || cand=""
    if [[ -n $cand && -e $cand/libcudnn.so.9 ]]; then echo "$cand"; return 0; fi
  done
  cand=$(find /usr /opt /usr/local -name 'libcudnn.so.9' 2>/dev/null | head -1)
  [[ -n $cand ]] && dirname "$cand"
}

run() {
  local carry=${1:-$root/build-cudnn/carry}
  local out=${OUT:-$root/out}
  mkdir -p "$out"
  exec > >(tee "$out/trainer_gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
  if [[ ! -x $carry/bin/stoker_trainer_tests ]]; then
    echo "no build in $carry: run 'scripts/trainer_gpu_check.sh prepare' on the build machine and carry build-cudnn/carry"
    return 1
  fi
  nvidia-smi 2>&1 | head -15
  export LD_LIBRARY_PATH="$carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found" | grep -qv libcudnn; then
    local libs=/tmp/stoker_trainer_carried_libs
    mkdir -p "$libs" && tar -C "$libs" -xJf "$carry/libs.tar.xz"
    export LD_LIBRARY_PATH="$carry/bin:$libs:$LD_LIBRARY_PATH"
    echo "unpacked the carried libraries into $libs"
  fi
  local cudnn_dir
  cudnn_dir=$(find_cudnn)
  if [[ -n $cudnn_dir ]]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir"; echo "libcudnn from $cudnn_dir"; fi
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found"; then echo "libraries still missing (above)"; fi
  [[ -d $carry/shared_data ]] && export STOKER_SHARED_DATA=$carry/shared_data

  echo "== cuDNN backend tests"
  (cd "$out" && timeout 240 "$carry/bin/stoker_trainer_tests" --gtest_filter='CudnnBackend.*:CudnnPlan.*' \
    --gtest_output="xml:$out/trainer_gpu_tests.xml") >"$out/trainer_gpu_tests.log" 2>&1
  local tests_rc=$?
  grep -E "^\[ *(PASSED|FAILED|SKIPPED|  FAILED) *\]|^gpu |darknet|mobilenet|device free|Failure|Expected|actual|Which is|error" \
    "$out/trainer_gpu_tests.log" | head -80
  echo "trainer gpu tests exit code: $tests_rc"
  if grep -q "no CUDA device:" "$out/trainer_gpu_tests.log"; then
    echo "WARNING: the GPU tests skipped, the binaries could not use a GPU here:"
    grep -m1 "no CUDA device:" "$out/trainer_gpu_tests.log"
    tests_rc=3
  fi

  if command -v compute-sanitizer >/dev/null 2>&1; then
    echo "== compute-sanitizer memcheck (every layer kind, padding)"
    (cd "$out" && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$carry/bin/stoker_trainer_tests" \
      --gtest_filter='CudnnBackend.EveryLayerKindMatchesCpuBackend:CudnnBackend.AsymmetricSamePaddingStride2') \
      >"$out/trainer_sanitizer.log" 2>&1
    echo "compute-sanitizer exit code: $? (log: trainer_sanitizer.log)"
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/trainer_sanitizer.log" | head -10
  fi

  echo "== cuDNN backend benchmark"
  local model=${STOKER_SHARED_DATA:-$root/../shared/data}/models/keras/mobilenet_v2_0.35_224_3class.h5
  timeout 180 "$carry/bin/trainer_gpu_bench" --model "$model" --batch 256 --iters 30 >"$out/trainer_gpu_bench.log" 2>&1
  local bench_rc=$?
  grep -vE "^(Conv|Pad|Affine|Concat|MaxPool|AvgPool|Gap) " "$out/trainer_gpu_bench.log"
  echo "trainer_gpu_bench exit code: $bench_rc (the per-op plan is in trainer_gpu_bench.log)"

  echo "== PyTorch peer"
  local py="" cand
  for cand in ${TORCH_PYTHON:-} python3 /work/venv-ref/bin/python /opt/conda/bin/python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch, torchvision" >/dev/null 2>&1; then py=$cand; break; fi
  done
  if [[ -n $py ]]; then
    PYTHONUNBUFFERED=1 timeout 150 "$py" "$root/bench/torch_mobilenet_peer.py" --batch 256 --iters 30 \
      >"$out/torch_mobilenet_peer.log" 2>&1
  else
    echo "torch_mobilenet_peer skipped: no python with torch + torchvision (set TORCH_PYTHON)" >"$out/torch_mobilenet_peer.log"
  fi
  cat "$out/torch_mobilenet_peer.log"

  echo "== summary"
  local ours peer
  ours=$(awk '/^trainer_gpu_bench img\/s \(BF16\):/ {print $4}' "$out/trainer_gpu_bench.log")
  peer=$(awk '/^torch_mobilenet_peer img\/s:/ {print $3}' "$out/torch_mobilenet_peer.log")
  grep -E "^trainer_gpu_bench img/s" "$out/trainer_gpu_bench.log"
  echo "MobileNetV2 0.35 forward, batch 256, bf16: stoker ${ours:-?} img/s; PyTorch ${peer:-not measured} img/s"
  if [[ -n ${ours:-} && -n ${peer:-} ]]; then
    awk -v a="$ours" -v b="$peer" 'BEGIN {printf "ratio stoker / PyTorch: %.2f\n", a / b}'
  fi
  [[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
}

case $mode in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD_DIR] | run [CARRY_DIR]" >&2; exit 2 ;;
esac
