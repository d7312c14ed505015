#!/usr/bin/env bash
# The GPU checks (issues 5, 6, 7) on a machine with an NVIDIA GPU, from a build made elsewhere:
# the GpuFeed / conversion / CUDA augmentation tests and benchmark, the trainer's cuDNN backend
# tests and benchmark, PyTorch peers, and the stoker command end to end on the GPU.
#
# 1. Here (CUDA toolkit with cuDNN 9; no GPU needed):
#        scripts/gpu_check.sh prepare [BUILD_DIR]          # default BUILD_DIR: build-gpu
#    builds the GPU test suites, benchmarks and the stoker command, and fills BUILD_DIR/carry/
#    (under the 64 MiB a device run may carry) with them, libstoker, libs.tar.xz (every shared
#    library they load except glibc, libstdc++/libgcc, libcuda and libcudnn, which the GPU machine
#    supplies) and the shared models and images the tests use.
# 2. On the GPU machine, from the repository root, with BUILD_DIR/carry carried along:
#        OUT=/some/dir scripts/gpu_check.sh run [feed] [trainer] [cli]   # default: all three
#    Each part takes up to about 5 minutes; with the device tool, two calls fit one session:
#        run(command="bash scripts/gpu_check.sh run feed", carry=["build-gpu/carry"], timeout_s=560)
#        run(command="bash scripts/gpu_check.sh run trainer cli", carry=["build-gpu/carry"], timeout_s=560)
#    Logs go to $OUT. libcudnn.so.9 comes from the system, else from a Python install of
#    nvidia-cudnn-cu* (the one PyTorch uses), else from $CUDNN_LIB.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-run}
carry=${STOKER_CARRY:-$root/build-gpu/carry}

prepare() {
  local build=${1:-$root/build-gpu}
  set -e
  cmake -S "$root" -B "$build" -DSTOKER_CUDNN=ON -DSTOKER_MODULES="pipeline;augment;cache;trainer" >/dev/null
  cmake --build "$build" -j2 --target stoker_gpu_tests gpu_bench stoker_trainer_tests trainer_gpu_bench stoker_cli
  local carry=$build/carry
  mkdir -p "$carry/bin"
  cp -fL "$build/tests/gpu/stoker_gpu_tests" "$build/bench/gpu_bench" "$build/tests/trainer/stoker_trainer_tests" \
    "$build/bench/trainer_gpu_bench" "$build/apps/stoker" "$build/libstoker.so.0" "$carry/bin/"
  # Shared libraries to carry (resolved here), minus what the GPU machine must supply itself.
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
  local mib
  mib=$(du -sm "$carry" | cut -f1)
  if (( mib > 63 )); then echo "warning: the carry is ${mib} MiB, over what a device run may carry (64 MiB)"; fi
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

# Libraries, cuDNN and the shared data for the carried binaries.
setup() {
  if [[ ! -x $carry/bin/stoker_gpu_tests ]]; then
    echo "no build in $carry: run 'scripts/gpu_check.sh prepare' on the build machine and carry build-gpu/carry"
    return 1
  fi
  nvidia-smi >"$out/nvidia_smi.log" 2>&1 || echo "nvidia-smi failed (see nvidia_smi.log)"
  head -15 "$out/nvidia_smi.log"
  export LD_LIBRARY_PATH="$carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found" | grep -qv libcudnn; then
    local libs=/tmp/stoker_carried_libs
    mkdir -p "$libs" && tar -C "$libs" -xJf "$carry/libs.tar.xz"
    export LD_LIBRARY_PATH="$carry/bin:$libs:$LD_LIBRARY_PATH"
    echo "unpacked the carried libraries into $libs"
  fi
  local cudnn_dir
  cudnn_dir=$(find_cudnn)
  if [[ -n $cudnn_dir ]]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir"; echo "libcudnn from $cudnn_dir"; fi
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found"; then echo "libraries still missing (above)"; fi
  [[ -d $carry/shared_data ]] && export STOKER_SHARED_DATA=$carry/shared_data
  return 0
}

# Issue 5: GpuFeed, conversion, CUDA augmentation.
run_feed() {
  echo "== GPU tests"
  (cd "$out" && timeout 200 "$carry/bin/stoker_gpu_tests" --gtest_output="xml:$out/gpu_tests.xml") \
    >"$out/gpu_tests.log" 2>&1
  local tests_rc=$?
  grep -E "^\[ *(PASSED|FAILED|SKIPPED) *\]|overlapping|after 100 batches|Failure|Expected|actual" "$out/gpu_tests.log" | head -60
  echo "gpu tests exit code: $tests_rc"
  if grep -q "no CUDA device:" "$out/gpu_tests.log"; then
    echo "WARNING: the GPU tests skipped, the binaries could not use a GPU here:"
    grep -m1 "no CUDA device:" "$out/gpu_tests.log"
    tests_rc=3
  fi

  echo "== GPU benchmark"
  timeout 200 "$carry/bin/gpu_bench" --dir /tmp/stoker_gpu_bench >"$out/gpu_bench.log" 2>&1
  local bench_rc=$?
  cat "$out/gpu_bench.log"
  echo "gpu_bench exit code: $bench_rc"

  echo "== PyTorch peer"
  local py="" cand
  for cand in ${TORCH_PYTHON:-} python3 /work/venv-ref/bin/python /opt/conda/bin/python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1; then py=$cand; break; fi
  done
  if [[ -n $py ]]; then
    PYTHONUNBUFFERED=1 timeout 90 "$py" "$root/bench/torch_augment_peer.py" >"$out/torch_peer.log" 2>&1
  else
    echo "torch_peer skipped: no python with torch (set TORCH_PYTHON)" >"$out/torch_peer.log"
  fi
  cat "$out/torch_peer.log"

  if command -v compute-sanitizer >/dev/null 2>&1; then
    echo "== compute-sanitizer memcheck (kernels, feed order, shutdown)"
    (cd "$out" && timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$carry/bin/stoker_gpu_tests" \
      --gtest_filter='GpuKernels.*:GpuFeedTest.BatchesEqualTheCpuLoaders:GpuFeedTest.ShutdownMidEpochLeavesNoPendingWork:GpuFeedTest.AugmentStageMatchesCpuExecutor') \
      >"$out/sanitizer.log" 2>&1
    echo "compute-sanitizer exit code: $? (log: sanitizer.log)"
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer.log" | head -10
  fi


  echo "== summary"
  local ours peer
  ours=$(awk -F'|' '/^\| 1\. augmentation kernel/ {gsub(/[^0-9.]/, "", $3); print $3}' "$out/gpu_bench.log")
  peer=$(awk '/^torch_peer img\/s:/ {print $3}' "$out/torch_peer.log")
  echo "augmentation kernel: ${ours:-?} img/s; PyTorch peer: ${peer:-not measured} img/s"
  if [[ -n ${ours:-} && -n ${peer:-} ]]; then
    awk -v a="$ours" -v b="$peer" 'BEGIN {printf "ratio stoker / PyTorch: %.2f (goal >= 3)\n", a / b}'
  fi
  grep -E "^\| [23]" "$out/gpu_bench.log" || true
  [[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
}

# Issue 6: the trainer's cuDNN backend.
run_trainer() {
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

# Issue 7: the command end to end on the GPU (train with augmentation, predict, bench's gpu suite).
run_cli() {
  local s=$carry/bin/stoker rc=0
  echo "== stoker train --device cuda"
  timeout 150 "$s" train --device cuda --data "$root/data/catsdogs-sample" --validation-split 0.2 \
    --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$out/train_gpu" >"$out/cli_train.log" 2>&1 || rc=1
  tail -12 "$out/cli_train.log"
  timeout 60 "$s" predict --device cuda --model-dir "$out/train_gpu" "$root"/data/catsdogs-sample/dog/dog.1.jpg || rc=1
  echo "== stoker bench --suite gpu"
  timeout 120 "$s" bench --suite gpu --data "$root/data/catsdogs-sample" --image-size 224 --repeat 3 || rc=1
  echo "cli exit code: $rc"
  [[ $rc -eq 0 ]]
}

run() {
  out=${OUT:-$root/out}
  mkdir -p "$out"
  exec > >(tee -a "$out/gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
  setup || return 1
  local parts=("$@") status=0 part
  ((${#parts[@]})) || parts=(feed trainer cli)
  for part in "${parts[@]}"; do
    case $part in
      feed) run_feed || status=1 ;;
      trainer) run_trainer || status=1 ;;
      cli) run_cli || status=1 ;;
      *) echo "unknown part '$part' (feed, trainer, cli)"; status=2 ;;
    esac
  done
  return $status
}

case $mode in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD_DIR] | run [feed] [trainer] [cli]" >&2; exit 2 ;;
esac
