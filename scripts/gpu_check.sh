#!/usr/bin/env bash
# The GPU checks (issues 5, 6, 7) on a machine with an NVIDIA GPU, from a build made elsewhere:
# the GpuFeed / conversion / CUDA augmentation tests and benchmark, the trainer's cuDNN backend
# tests and benchmark, PyTorch peers, the Python package's device batches into torch (issue 14),
# and the stoker command end to end on the GPU.
#
# 1. Here (CUDA toolkit with cuDNN 9; no GPU needed):
#        scripts/gpu_check.sh prepare [BUILD_DIR]          # default BUILD_DIR: build-gpu
#    builds the GPU test suites, benchmarks and the stoker command, and fills BUILD_DIR/carry/
#    with them, the stoker libraries (libstoker_*.so), libs.tar.xz (the shared libraries they load that an Ubuntu 24.04 CUDA
#    image lacks) and the shared model and images the tests use. The carry and the repository
#    together must stay under the 64 MiB a device run may take along; prepare checks that.
# 2. On the GPU machine, from the repository root, with BUILD_DIR/carry carried along, in ONE call
#    (a session has about 15 device minutes, the machine's start included):
#        run(command="bash scripts/gpu_check.sh run", carry=["build-gpu/carry"], timeout_s=540)
#    The parts run in priority order (feed, trainer, cli, bench) under one deadline
#    (STOKER_GPU_DEADLINE seconds, default 450): a part that would not fit is skipped and said so.
#    `run feed trainer` runs only those parts. What comes back under $OUT: gpu_check.log (the
#    summary, also printed) and logs.tar.gz (every log, JSON and chart), refreshed after each part.
#    libcudnn.so.9 comes from the system, else PyTorch's nvidia-cudnn wheel, else $CUDNN_LIB.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-run}
carry=${STOKER_CARRY:-$root/build-gpu/carry}

prepare() {
  local build=${1:-$root/build-gpu}
  set -e
  # sm_90 machine code only: the H200's, and the carry stays small.
  cmake -S "$root" -B "$build" -DSTOKER_CUDNN=ON -DCMAKE_CUDA_ARCHITECTURES=90-real >/dev/null
  cmake --build "$build" -j2 --target stoker_gpu_tests gpu_bench stoker_trainer_tests trainer_gpu_bench stoker_cli \
    stoker_apps_tests stoker_training_tests cpu_backend_bench fine_tune_bench
  local carry=$build/carry
  prepare_python "$build" "$carry"
  # Libraries with these sonames come with any Ubuntu 24.04 image that has apt, grep and Python 3.12
  # (the GPU machine's): not carried, to stay under the size limit. The rest (OpenCV's closure,
  # oneTBB, TurboJPEG, HDF5, Kerberos, ...) is.
  local ubuntu_has='libz|liblzma|libzstd|libbz2|libexpat|libffi|libuuid|libcrypto|libssl|libsqlite3|libgnutls|libnettle|libhogweed|libgmp|libp11-kit|libtasn1|libidn2|libpcre2-8|liblz4|libxxhash|libudev|libselinux'
  rm -rf "$carry/bin" "$carry/shared_data"
  mkdir -p "$carry/bin"
  cp -fL "$build/tests/gpu/stoker_gpu_tests" "$build/bench/gpu_bench" "$build/tests/trainer/stoker_trainer_tests" \
    "$build/bench/trainer_gpu_bench" "$build/bench/cpu_backend_bench" "$build/bench/fine_tune_bench" "$build/apps/stoker" \
    "$build/tests/apps/stoker_apps_tests" "$build/tests/training/stoker_training_tests" \
    "$build"/{core,cache,pipeline,augment,trainer,trainer/training}/libstoker_*.so.0 \
    "$carry/bin/"
  # Shared libraries to carry (resolved here), minus what the GPU machine must supply itself.
  ldd "$carry"/bin/* 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^/]*)\.so|/libstdc\+\+\.so|/libgcc_s\.so|/libcuda\.so|/libcudnn|/libstoker_[a-z]*\.so' |
    grep -vE "/($ubuntu_has)\.so" >"$carry/libs.txt.new"
  if [[ -f $carry/libs.tar.xz ]] && cmp -s "$carry/libs.txt.new" "$carry/libs.txt"; then
    echo "libs.tar.xz is up to date ($(wc -l <"$carry/libs.txt") libraries)"
  else
    local tmp
    tmp=$(mktemp -d)
    while read -r lib; do cp -L "$lib" "$tmp/"; done <"$carry/libs.txt.new"
    tar -C "$tmp" -cf - . | xz -T2 -9e >"$carry/libs.tar.xz"
    rm -rf "$tmp"
    echo "packed $(wc -l <"$carry/libs.txt.new") libraries"
  fi
  mv "$carry/libs.txt.new" "$carry/libs.txt"
  local shared=${STOKER_SHARED_DATA:-$root/../shared/data}
  if [[ -d $shared/models ]]; then
    # The Keras MobileNetV2 is data/models/ in the repository (the same file): linked in at run time.
    mkdir -p "$carry/shared_data/models/tfjs" "$carry/shared_data/images"
    cp -r "$shared/models/tfjs/darknet_tiny_imagenet" "$carry/shared_data/models/tfjs/"
    cp "$shared"/images/*.rgb "$carry/shared_data/images/"
  else
    echo "warning: no shared data at $shared: the model tests will skip on the GPU machine"
  fi
  # What travels: the repository's tracked and untracked-not-ignored files plus the carry.
  local tree carried
  tree=$(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 stat -L -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}')
  carried=$(du -sb "$carry" | cut -f1)
  awk -v t="$tree" -v c="$carried" 'BEGIN {
    printf "travels: repository %.1f MiB + carry %.1f MiB = %.1f MiB (limit 64 MiB)\n", t / 1048576, c / 1048576, (t + c) / 1048576
    if (t + c > 64 * 1048576) { print "ERROR: over the limit: the device run would refuse it"; exit 1 } }'
  echo "carry: ${carry#"$root"/}"
}

# The Python extension for the GPU machine's Python 3.12 (built with pyenv's 3.12 here),
# linked against the carried stage libraries, with the package's .py files: carry/python/stoker.
prepare_python() {
  local build=$1 carry=$2 py312=${STOKER_PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
  rm -rf "$carry/python"
  if [[ ! -x $py312 ]]; then
    echo "warning: no Python 3.12 at $py312 (STOKER_PY312): the Python part will skip on the GPU machine"
    return 0
  fi
  [[ -x $build/py312/bin/python ]] || "$py312" -m venv "$build/py312"
  "$build/py312/bin/python" -m pip install -q nanobind
  cmake -S "$root" -B "$build" -DSTOKER_PYTHON=ON -DPython_EXECUTABLE="$build/py312/bin/python" >/dev/null
  cmake --build "$build" -j2 --target _stoker
  mkdir -p "$carry/python/stoker"
  cp "$root"/python/stoker/*.py "$carry/python/stoker/"
  cp -L "$build"/python/_stoker*.so "$carry/python/stoker/"
}

find_cudnn() {
  # Prints a directory holding libcudnn.so.9 when the loader does not find it by itself.
  if ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then return 0; fi
  if [[ -n ${CUDNN_LIB:-} && -e $CUDNN_LIB/libcudnn.so.9 ]]; then echo "$CUDNN_LIB"; return 0; fi
  local cand
  for cand in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib; do
    [[ -e $cand/libcudnn.so.9 ]] && { echo "$cand"; return 0; }
  done
  local py
  for py in ${TORCH_PYTHON:-} python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    cand=$("$py" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) || cand=""
    if [[ -n $cand && -e $cand/libcudnn.so.9 ]]; then echo "$cand"; return 0; fi
  done
  cand=$(find /usr /opt -name 'libcudnn.so.9' 2>/dev/null | head -1)
  [[ -n $cand ]] && dirname "$cand"
}

# ---- time: one deadline for the whole call -------------------------------------------------------
remaining() { echo $((deadline - SECONDS)); }
# step SECONDS NAME CMD...: runs CMD with at most SECONDS (less if the deadline is nearer), its output
# to $work/NAME.log; skipped (status 125) when under 20 s are left.
step() {
  local want=$1 name=$2 left
  shift 2
  left=$(($(remaining) - 5))
  if ((left < 20)); then
    echo "SKIPPED $name: the deadline is near ($((left + 5)) s left)" | tee "$work/$name.log"
    return 125
  fi
  ((want > left)) && want=$left
  local t0=$SECONDS rc=0
  # Line-buffered: a step killed at its limit (a hang) still leaves the lines up to the hang.
  local unbuffer=()
  command -v stdbuf >/dev/null 2>&1 && unbuffer=(stdbuf -oL -eL)
  timeout -k 5 "$want" "${unbuffer[@]}" "$@" >"$work/$name.log" 2>&1 || rc=$?
  echo "-- $name: exit $rc after $((SECONDS - t0)) s$( ((rc == 124)) && echo " (TIMED OUT at ${want} s)")"
  return $rc
}
# gtest NAME SECONDS BINARY FILTER: runs a GoogleTest binary as `step` does. A test that crashes
# the process or hangs would hide every test after it: the binary is run again (twice at most)
# without the test that was running, and each run keeps its own log (NAME.log, NAME.rerun1.log, ...).
# A device fault (an illegal address, a failed launch) surfaces at the next synchronisation, far
# from the kernel that caused it: the tests that failed with one run once more with
# CUDA_LAUNCH_BLOCKING=1, whose error names the kernel (NAME.blocking.log).
gtest() {
  local rc=0
  gtest_runs "$@" || rc=$?
  local name=$1 bin=$3 failed
  if grep -qiE "illegal (memory access|address|instruction)|launch failure|misaligned address|an exception occurred on the device" \
    "$work/$name"*.log 2>/dev/null; then
    failed=$(awk '/^\[  FAILED  \] [A-Za-z_0-9]+\.[A-Za-z_0-9]+/ {print $4}' "$work/$name"*.log | sort -u | paste -sd: -)
    if [[ -n $failed ]]; then
      echo "!! a device fault: running $failed again with CUDA_LAUNCH_BLOCKING=1 ($name.blocking.log)"
      (export CUDA_LAUNCH_BLOCKING=1 && cd "$work" && step 60 "$name.blocking" "$bin" --gtest_filter="$failed") || true
      grep -m5 -iE "illegal|launch|misaligned|kernel" "$work/$name.blocking.log"
    fi
  fi
  return $rc
}
gtest_runs() {
  local name=$1 limit=$2 bin=$3 filter=$4 excluded="" rc=0 run log
  for run in 0 1 2; do
    log=$name$( ((run)) && echo ".rerun$run")
    rc=0
    (cd "$work" && step "$limit" "$log" "$bin" --gtest_filter="$filter${excluded:+-$excluded}" \
      --gtest_output="xml:$work/$log.xml") || rc=$?
    if grep -qE "^\[==========\] .* ran\." "$work/$log.log"; then  # the binary finished
      [[ -n $excluded ]] && return 1  # a test crashed or hung on the way
      return $rc
    fi
    ((rc == 125)) && return $rc                                       # skipped: no time left
    local crashed
    crashed=$(awk '/^\[ RUN +\]/ {t = $NF} /^\[ +(OK|FAILED|SKIPPED) +\]/ {t = ""} END {print t}' "$work/$log.log")
    [[ -z $crashed ]] && return $rc
    echo "!! $crashed crashed or hung (exit $rc): running the rest again without it"
    excluded=${excluded:+$excluded:}$crashed
  done
  return 1
}

# Refreshes what comes back: the summary is tee'd already; every log goes into one archive.
pack() { tar -C "$work" -czf "$out/logs.tar.gz.new" . 2>/dev/null && mv "$out/logs.tar.gz.new" "$out/logs.tar.gz"; }

torch_python() {
  local cand
  for cand in ${TORCH_PYTHON:-} python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch, torchvision" >/dev/null 2>&1; then
      echo "$cand"
      return 0
    fi
  done
  return 1
}

# Libraries, cuDNN and the shared data for the carried binaries.
setup() {
  if [[ ! -x $carry/bin/stoker_gpu_tests ]]; then
    echo "no build in $carry: run 'scripts/gpu_check.sh prepare' on the build machine and carry build-gpu/carry"
    return 1
  fi
  nvidia-smi >"$work/nvidia_smi.log" 2>&1 || echo "nvidia-smi failed (see nvidia_smi.log)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
  export LD_LIBRARY_PATH="$carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local libs=/tmp/stoker_carried_libs
  rm -rf "$libs" && mkdir -p "$libs" && tar -C "$libs" -xJf "$carry/libs.tar.xz"
  # Only what this machine lacks: a carried copy of a library the system has would shadow it for
  # every process started from here, PyTorch's (the peers) included.
  local system_libs f kept=0 dropped=0
  system_libs=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for f in "$libs"/*; do
    if grep -qxF "$(basename "$f")" <<<"$system_libs"; then rm -f "$f"; ((++dropped)); else ((++kept)); fi
  done
  echo "carried libraries: $kept used, $dropped left to the system's own copies"
  export LD_LIBRARY_PATH="$carry/bin:$libs:$LD_LIBRARY_PATH"
  local cudnn_dir
  cudnn_dir=$(find_cudnn)
  if [[ -n $cudnn_dir ]]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir"; echo "libcudnn from $cudnn_dir"; fi
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found" | sort -u; then echo "libraries still missing (above)"; fi
  export STOKER_SOURCE_DIR=$root  # the tests' committed vectors, here rather than where they were built
  if [[ -d $carry/shared_data ]]; then
    mkdir -p "$carry/shared_data/models/keras"
    ln -sf "$root/data/models/mobilenet_v2_0.35_224_3class.h5" "$carry/shared_data/models/keras/"
    export STOKER_SHARED_DATA=$carry/shared_data
  fi
  return 0
}

# The GPU machine cannot be used by the binaries: the tests would all have skipped.
skipped_for_lack_of_gpu() {
  if grep -q "no CUDA device:" "$1"; then
    echo "WARNING: the GPU tests skipped, the binaries could not use a GPU here:"
    grep -m1 "no CUDA device:" "$1"
    return 0
  fi
  return 1
}

# Issue 5: GpuFeed, conversion, CUDA augmentation.
run_feed() {
  echo "== GPU feed and augmentation tests"
  local tests_rc=0 bench_rc=0
  gtest gpu_tests 150 "$carry/bin/stoker_gpu_tests" '*' || tests_rc=$?
  grep -h -E "^\[ *(PASSED|FAILED|SKIPPED) *\]|overlapping|after 100 batches|Failure|Expected|actual" "$work"/gpu_tests*.log | head -40
  skipped_for_lack_of_gpu "$work/gpu_tests.log" && tests_rc=3

  echo "== GPU benchmark"
  step 150 gpu_bench "$carry/bin/gpu_bench" --dir /tmp/stoker_gpu_bench || bench_rc=$?
  cat "$work/gpu_bench.log"

  echo "== PyTorch augmentation peer"
  local py
  if py=$(torch_python); then
    step 90 torch_augment_peer "$py" "$root/bench/torch_augment_peer.py"
    cat "$work/torch_augment_peer.log"
  else
    echo "skipped: no python with torch + torchvision (set TORCH_PYTHON)"
  fi

  local ours peer
  ours=$(awk -F'|' '/^\| 1\. augmentation kernel/ {gsub(/[^0-9.]/, "", $3); print $3}' "$work/gpu_bench.log")
  peer=$(awk '/^torch_peer img\/s:/ {print $3}' "$work/torch_augment_peer.log" 2>/dev/null)
  summary+=("augmentation kernel 299x299 bf16 NCHW: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(
    [[ -n ${ours:-} && -n ${peer:-} ]] && awk -v a="$ours" -v b="$peer" 'BEGIN {printf ", ratio %.2f (goal >= 3)", a / b}')")
  while IFS= read -r line; do summary+=("$line"); done < <(grep -E "^\| [23]\." "$work/gpu_bench.log")
  summary+=("feed tests exit $tests_rc, gpu_bench exit $bench_rc")
  [[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
}

# Issues 6 and 16: the trainer's cuDNN backend and the GPU fine-tuning trainer.
run_trainer() {
  echo "== cuDNN backend and GPU fine-tuning tests"
  local tests_rc=0 bench_rc=0
  gtest trainer_gpu_tests 180 "$carry/bin/stoker_trainer_tests" 'CudnnBackend.*:CudnnPlan.*:GpuFineTune.*' || tests_rc=$?
  grep -h -E "^\[ *(PASSED|FAILED|SKIPPED|  FAILED) *\]|^gpu |darknet|mobilenet|inception|device free|Failure|Expected|actual|Which is|error" \
    "$work"/trainer_gpu_tests*.log | head -60
  skipped_for_lack_of_gpu "$work/trainer_gpu_tests.log" && tests_rc=3

  echo "== cuDNN backend benchmark"
  step 120 trainer_gpu_bench "$carry/bin/trainer_gpu_bench" --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" \
    --batch 256 --iters 30 || bench_rc=$?
  grep -vE "^(Conv|Pad|Affine|Concat|MaxPool|AvgPool|Gap) " "$work/trainer_gpu_bench.log"

  echo "== PyTorch MobileNetV2 peer"
  local py
  if py=$(torch_python); then
    step 120 torch_mobilenet_peer "$py" "$root/bench/torch_mobilenet_peer.py" --batch 256 --iters 30
    cat "$work/torch_mobilenet_peer.log"
  else
    echo "skipped: no python with torch + torchvision (set TORCH_PYTHON)"
  fi

  echo "== GPU fine-tuning benchmark (MobileNetV2 0.35 from block_13_expand, batch 32, 224) and its PyTorch peer"
  step 90 fine_tune_bench_gpu "$carry/bin/fine_tune_bench" --device cuda --batch 32 --steps 20 || bench_rc=$?
  cat "$work/fine_tune_bench_gpu.log"
  if py=$(torch_python); then
    step 90 fine_tune_peer_gpu "$py" "$root/bench/fine_tune_peers.py" --device cuda --batch 32 --steps 20
    cat "$work/fine_tune_peer_gpu.log"
  fi
  local tuned tuned_peer
  tuned=$(awk '/^fine_tune_bench img\/s:/ {print $3}' "$work/fine_tune_bench_gpu.log")
  tuned_peer=$(grep -o '"images_per_second": [0-9.]*' "$work/fine_tune_peer_gpu.log" 2>/dev/null | awk '{print $2}')
  summary+=("fine-tuning step on the GPU, batch 32: stoker ${tuned:-?} img/s, PyTorch bf16 ${tuned_peer:-?} img/s$(
    [[ -n ${tuned:-} && -n ${tuned_peer:-} ]] && awk -v a="$tuned" -v b="$tuned_peer" 'BEGIN {printf ", ratio %.2f", a / b}')")
  summary+=("$(grep -E "^on the GPU:" "$work/fine_tune_bench_gpu.log" | head -1)")

  local ours peer
  ours=$(awk '/^trainer_gpu_bench img\/s \(BF16\):/ {print $4}' "$work/trainer_gpu_bench.log")
  peer=$(awk '/^torch_mobilenet_peer img\/s:/ {print $3}' "$work/torch_mobilenet_peer.log" 2>/dev/null)
  summary+=("MobileNetV2 0.35 forward, batch 256, 224, bf16: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(
    [[ -n ${ours:-} && -n ${peer:-} ]] && awk -v a="$ours" -v b="$peer" 'BEGIN {printf ", ratio %.2f", a / b}')")
  summary+=("cuDNN tests exit $tests_rc, trainer_gpu_bench exit $bench_rc")
  [[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
}

# Issue 7: the command end to end on the GPU (train with augmentation, predict, bench's gpu suite).
run_cli() {
  local s=$carry/bin/stoker rc=0
  echo "== stoker train --device cuda"
  step 150 cli_train "$s" train --device cuda --data "$root/data/catsdogs-sample" --validation-split 0.2 \
    --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$work/train_gpu" || rc=1
  tail -12 "$work/cli_train.log"
  step 60 cli_predict "$s" predict --device cuda --model-dir "$work/train_gpu" "$root"/data/catsdogs-sample/dog/dog.1.jpg \
    "$root"/data/catsdogs-sample/cat/cat.1.jpg || rc=1
  cat "$work/cli_predict.log"
  echo "== Cli.DeviceCuda, Cli.DeviceAuto, Cli.FineTuneOnTheDevice: train and fine-tune on the GPU, GPU vs CPU predictions"
  STOKER_CLI=$s gtest cli_device_test 150 "$carry/bin/stoker_apps_tests" \
    'Cli.DeviceCuda:Cli.DeviceAuto:Cli.FineTuneOnTheDevice' || rc=1
  grep -E "^\[ *(OK|PASSED|FAILED|SKIPPED) *\]|Failure|Expected|Which is" "$work/cli_device_test.log" | head -20
  echo "== TrainRun.*: the training library (stoker::training) on the GPU"
  gtest training_gpu_test 90 "$carry/bin/stoker_training_tests" 'TrainRun.*' || rc=1
  grep -E "^\[ *(OK|PASSED|FAILED|SKIPPED) *\]|Failure|Expected|Which is" "$work/training_gpu_test.log" | head -20
  echo "== stoker bench --suite gpu"
  step 120 cli_bench_gpu "$s" bench --suite gpu --data "$root/data/catsdogs-sample" --image-size 299 --repeat 3 \
    --json "$work/bench_gpu.json" || rc=1
  cat "$work/cli_bench_gpu.log"
  summary+=("stoker train/predict/bench --suite gpu: $([[ $rc -eq 0 ]] && echo ok || echo FAILED)")
  summary+=("$(grep -E "^best epoch" "$work/cli_train.log" | tail -1)")
  summary+=("$(grep -iE "waited for data|limited by" "$work/cli_train.log" | tail -1)")
  [[ $rc -eq 0 ]]
}

# Issue 14: the Python package on the GPU: device batches into torch through DLPack (the stream
# protocol), the CUDA augmentation from Python, and the test suite's GPU tests.
run_python() {
  local py rc=0
  echo "== Python: stoker.Loader(device='cuda') into torch"
  if [[ ! -d $carry/python/stoker ]]; then
    echo "skipped: no Python 3.12 build in the carry"
    summary+=("python: skipped (no build)")
    return 0
  fi
  py=$(torch_python) || { echo "skipped: no python with torch"; summary+=("python: skipped (no torch)"); return 0; }
  PYTHONPATH=$carry/python step 120 python_gpu "$py" "$root/scripts/gpu_check_python.py" \
    --data "$root/data/catsdogs-sample" || rc=1
  cat "$work/python_gpu.log"
  if "$py" -c "import pytest" 2>/dev/null; then
    PYTHONPATH=$carry/python step 120 python_gpu_tests "$py" -m pytest -q -p no:cacheprovider -k "cuda or gpu or device" \
      "$root/python/tests" || rc=1
    tail -15 "$work/python_gpu_tests.log"
  else
    echo "python GPU tests skipped: no pytest in $py (the check script above ran)"
  fi
  summary+=("$(grep -E "^python_gpu" "$work/python_gpu.log" | tr '\n' ';')")
  summary+=("python GPU checks: $([[ $rc -eq 0 ]] && echo ok || echo FAILED)")
  [[ $rc -eq 0 ]]
}

# Issue 7: the loader benchmark users quote, on 16 cores, with the seed's augmentation at 299 and
# the PyTorch DataLoader peer (no Keras there: that row says skipped).
run_bench() {
  local py rc=0
  py=$(torch_python) || py=python3
  echo "== stoker bench (loader, cache, augment, peers) at 299"
  step 200 cli_bench "$carry/bin/stoker" bench --data "$root/data/catsdogs-sample" --image-size 299 --repeat 3 \
    --min-time 0.5 --threads-list 1 4 "$(nproc)" --suite loader cache augment peers --torch-python "$py" \
    --json "$work/bench_h200.json" --chart "$work/bench_h200.png" || rc=1
  cat "$work/cli_bench.log"
  summary+=("stoker bench at 299: $([[ $rc -eq 0 ]] && echo ok || echo FAILED) (bench_h200.json in logs.tar.gz)")

  echo "== the CPU backend on all cores, next to PyTorch on the CPU"
  local model=$root/data/models/mobilenet_v2_0.35_224_3class.h5
  step 40 cpu_backend_bench "$carry/bin/cpu_backend_bench" --model "$model" --cut sequential_9 --batch 64 \
    --min-time 0.5 || rc=1
  cat "$work/cpu_backend_bench.log"
  if torch_python >/dev/null; then
    step 60 torch_cpu_peer "$py" "$root/bench/torch_mobilenet_peer.py" --device cpu --batch 64 --iters 5 --reps 3
    cat "$work/torch_cpu_peer.log"
  fi
  summary+=("$(grep -h -E "^(cpu_backend_bench|torch_mobilenet_peer_cpu) img/s" "$work/cpu_backend_bench.log" \
    "$work/torch_cpu_peer.log" 2>/dev/null | tr '\n' ';')")
  [[ $rc -eq 0 ]]
}

run() {
  out=${OUT:-$root/out}
  work=/tmp/stoker_gpu_check
  deadline=$((SECONDS + ${STOKER_GPU_DEADLINE:-450}))
  rm -rf "$work" && mkdir -p "$out" "$work"
  exec > >(tee -a "$out/gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, deadline in $(remaining) s"
  summary=()
  export PYTHONUNBUFFERED=1
  setup || { pack; return 1; }
  local parts=("$@") status=0 part
  ((${#parts[@]})) || parts=(feed trainer python cli bench)
  for part in "${parts[@]}"; do
    case $part in
      feed) run_feed || status=1 ;;
      trainer) run_trainer || status=1 ;;
      python) run_python || status=1 ;;
      cli) run_cli || status=1 ;;
      bench) run_bench || status=1 ;;
      *) echo "unknown part '$part' (feed, trainer, python, cli, bench)"; status=2 ;;
    esac
    pack
  done
  echo "== summary ($((SECONDS)) s)"
  printf '%s\n' "${summary[@]}"
  pack
  return $status
}

case $mode in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD_DIR] | run [feed] [trainer] [python] [cli] [bench]" >&2; exit 2 ;;
esac
