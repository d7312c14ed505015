#!/usr/bin/env bash
# The GPU check: everything GPU-side of stoker, run on a machine with an NVIDIA GPU from a build
# made on another machine (with the CUDA toolkit and cuDNN 9; it needs no GPU).
#
# 1. On the build machine:
#        bash scripts/gpu_check.sh prepare [BUILD_DIR]     # default BUILD_DIR: build-gpu
#    builds the GPU test suites, benchmarks, the stoker command and the Python extension (for the
#    GPU machine's Python 3.12, STOKER_PY312), and fills BUILD_DIR/carry/ with them, the stoker
#    libraries, libs.tar.xz (the shared libraries they load that an Ubuntu 24.04 CUDA image lacks)
#    and the shared model and images the tests use. Copy the repository and BUILD_DIR/carry to the
#    GPU machine (the same relative place).
# 2. On the GPU machine, from the repository root:
#        STOKER_GPU_CHECK_OUT=/some/folder bash scripts/gpu_check.sh run [PART...]
#    The parts, in this order: env (driver, runtime and cuDNN versions, the libraries cuDNN loads,
#    free memory, cuDNN's support of small channel counts), feed (GpuFeed, conversion and CUDA
#    augmentation tests), cudnn (the cuDNN backend's tests), trainer (GPU fine-tuning and the
#    training loop on the GPU), python (device batches into torch), cli (the command end to end;
#    two ranks on one GPU where the bundle has MPI and the machine mpirun),
#    memcheck (compute-sanitizer over a few GPU tests), then bench (benchmarks against PyTorch on
#    the same GPU) and large (InceptionResNetV2 at 299 in two precisions). The correctness parts
#    fit in about five minutes; all parts share one deadline (STOKER_GPU_DEADLINE seconds, default
#    480): a step that would not fit is skipped and says so. `bash scripts/gpu_check.sh plan`
#    prints each step's time limit.
#    Results go to $STOKER_GPU_CHECK_OUT (default build-gpu/check): gpu_check.log (the summary,
#    also printed) and logs.tar.gz (every log, JSON and chart), refreshed after each part.
#    libcudnn.so.9 comes from the system, else PyTorch's nvidia-cudnn wheel, else $CUDNN_LIB; the
#    wheel's other NVIDIA libraries (NVRTC, cuBLAS), which cuDNN's engines load, are found beside it.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-run}
bundle=${STOKER_BUNDLE:-$root/build-gpu/carry}

prepare() {
  local build=${1:-$root/build-gpu}
  set -e
  source "$root/scripts/build_env.sh"
  # sm_90 machine code only (Hopper) keeps the bundle small; other GPUs: set CMAKE_CUDA_ARCHITECTURES.
  # No MPI by default: a GPU machine need not have Open MPI, and the bundle stays self-contained.
  # STOKER_GPU_MPI=AUTO links it, for the cli part's two ranks on one GPU where the GPU machine has
  # Open MPI's mpirun (the same major version).
  cmake -S "$root" -B "$build" -DSTOKER_CUDNN=ON -DCMAKE_CUDA_ARCHITECTURES="${STOKER_GPU_ARCH:-90-real}" \
    -DSTOKER_DISTRIBUTED="${STOKER_GPU_MPI:-OFF}" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target stoker_gpu_tests gpu_bench stoker_trainer_tests trainer_gpu_bench \
    stoker_cli stoker_apps_tests stoker_training_tests cpu_backend_bench fine_tune_bench
  local bundle=$build/carry
  prepare_python "$build" "$bundle"
  # Libraries with these sonames come with any Ubuntu 24.04 image that has apt, grep and Python 3.12:
  # not bundled. The rest (OpenCV's closure, oneTBB, TurboJPEG, HDF5, Kerberos, ...) is.
  local ubuntu_has='libz|liblzma|libzstd|libbz2|libexpat|libffi|libuuid|libcrypto|libssl|libsqlite3|libgnutls|libnettle|libhogweed|libgmp|libp11-kit|libtasn1|libidn2|libpcre2-8|liblz4|libxxhash|libudev|libselinux'
  rm -rf "$bundle/bin" "$bundle/shared_data"
  mkdir -p "$bundle/bin"
  cp -fL "$build/tests/gpu/stoker_gpu_tests" "$build/bench/gpu_bench" "$build/tests/trainer/stoker_trainer_tests" \
    "$build/bench/trainer_gpu_bench" "$build/bench/cpu_backend_bench" "$build/bench/fine_tune_bench" "$build/apps/stoker" \
    "$build/tests/apps/stoker_apps_tests" "$build/tests/training/stoker_training_tests" \
    "$build"/{core,cache,pipeline,augment,trainer,training}/libstoker_*.so.0 \
    "$bundle/bin/"
  gdal_stand_in "$bundle/bin"
  # Shared libraries for the bundle (resolved here, the stand-in first), minus what the GPU machine must
  # supply itself.
  LD_LIBRARY_PATH="$bundle/bin" ldd "$bundle"/bin/* 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
    grep -vF "$bundle/bin/" |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^/]*)\.so|/libstdc\+\+\.so|/libgcc_s\.so|/libcuda\.so|/libcudnn|/libstoker_[a-z]*\.so' |
    grep -vE "/($ubuntu_has)\.so" >"$bundle/libs.txt.new"
  if [[ -f $bundle/libs.tar.xz ]] && cmp -s "$bundle/libs.txt.new" "$bundle/libs.txt"; then
    echo "libs.tar.xz is up to date ($(wc -l <"$bundle/libs.txt") libraries)"
  else
    local tmp
    tmp=$(mktemp -d)
    while read -r lib; do cp -L "$lib" "$tmp/"; done <"$bundle/libs.txt.new"
    tar -C "$tmp" -cf - . | xz -T2 -9e >"$bundle/libs.tar.xz"
    rm -rf "$tmp"
    echo "packed $(wc -l <"$bundle/libs.txt.new") libraries"
  fi
  mv "$bundle/libs.txt.new" "$bundle/libs.txt"
  local shared=${STOKER_SHARED_DATA:-$root/../shared/data}
  if [[ -d $shared/models ]]; then
    # The Keras MobileNetV2 is data/models/ in the repository (the same file): linked in at run time.
    mkdir -p "$bundle/shared_data/models/tfjs" "$bundle/shared_data/images"
    cp -r "$shared/models/tfjs/darknet_tiny_imagenet" "$bundle/shared_data/models/tfjs/"
    cp "$shared"/images/*.rgb "$bundle/shared_data/images/"
  else
    echo "warning: no shared data at $shared: the model tests will skip on the GPU machine"
  fi
  echo "bundle: ${bundle#"$root"/} ($(du -sh "$bundle" | cut -f1)); the steps and their time limits:"
  plan
}

# OpenCV's image codecs link GDAL, and through it ICU, PROJ, Poppler, SpatiaLite and more: about
# half of the libraries to bundle, for formats stoker never reads. A stand-in library with GDAL's
# soname defines the functions OpenCV imports from it, each stopping the process with a message if
# it is ever called; the real GDAL and its dependencies stay behind.
gdal_stand_in() {
  local dir=$1 imgcodecs gdal soname
  imgcodecs=$(ldd "$dir/stoker" | awk '/libopencv_imgcodecs/ {print $3}')
  gdal=$(ldd "$imgcodecs" 2>/dev/null | awk '/libgdal\.so/ {print $3}')
  [[ -n $gdal ]] || return 0
  soname=$(objdump -p "$gdal" | awk '/SONAME/ {print $2}')
  comm -12 <(nm -D --undefined-only "$imgcodecs" | awk '{print $2}' | sort -u) \
    <(nm -D --defined-only "$gdal" | awk '{print $3}' | sort -u) |
    awk 'BEGIN {
           print "#include <stdio.h>\n#include <stdlib.h>"
           print "static void absent(const char* f) { fprintf(stderr, \"%s: GDAL is not bundled\\n\", f); abort(); }"
         }
         {printf "void stand_in_%d(void) __asm__(\"%s\");\nvoid stand_in_%d(void) { absent(\"%s\"); }\n", NR, $1, NR, $1}' \
      >"$dir/../gdal_stand_in.c"
  cc -shared -fPIC -o "$dir/$soname" -Wl,-soname,"$soname" "$dir/../gdal_stand_in.c"
  rm -f "$dir/../gdal_stand_in.c"
  echo "GDAL replaced by a stand-in ($soname, $(nm -D --defined-only "$dir/$soname" | grep -c ' T ') functions)"
}

# The Python extension for the GPU machine's Python 3.12 (built with a Python 3.12 here), linked
# against the bundled stage libraries, with the package's .py files: bundle/python/stoker.
prepare_python() {
  local build=$1 bundle=$2 py312=${STOKER_PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
  rm -rf "$bundle/python"
  if [[ ! -x $py312 ]]; then
    echo "warning: no Python 3.12 at $py312 (STOKER_PY312): the python part will skip on the GPU machine"
    return 0
  fi
  [[ -x $build/py312/bin/python ]] || "$py312" -m venv "$build/py312"
  "$build/py312/bin/python" -m pip install -q nanobind
  cmake -S "$root" -B "$build" -DSTOKER_PYTHON=ON -DPython_EXECUTABLE="$build/py312/bin/python" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target _stoker
  mkdir -p "$bundle/python"
  cp -r "$root/python/stoker" "$bundle/python/"
  find "$bundle/python" -name __pycache__ -prune -exec rm -rf {} +
  cp -L "$build"/python/_stoker*.so "$bundle/python/stoker/"
}

# ---- the steps: name, time limit (s) and what runs --------------------------------------------------
# Device-only test filters: the host-only suites (CudaExecutorHostPath, ConvertMath, DeviceStages,
# Ops' host twins, Lowering, the GpuFineTune host twins, the CPU training tests) run in CI on every
# change and are left out here.
feed_filter='*-CudaExecutorHostPath.*:ConvertMath.*:DeviceStages.*:GpuFeedWithoutGpu.*'
cudnn_filter='CudnnEnvironment.*:CudnnBackend.*-CudnnBackend.InceptionResNetV2MatchesCpuBackend'
trainer_filter='GpuFineTune.RunsOnTheDevice:GpuFineTune.MobileNetTopOnTheDevice:Ops.BackwardOnTheGpuMatchesTheCpu'
training_filter='TrainRun.OnTheGpuWhenThereIsOne'
cli_filter='Cli.DeviceCuda:Cli.DeviceAuto:Cli.FineTuneOnTheDevice'
memcheck_filter='GpuKernels.AugmentationMatchesCpuExecutor:GpuKernels.ConversionMatchesHostReference:GpuFeedTest.*'
# Limits: a hung step costs its limit once. The correctness parts (env .. memcheck) add up to
# about five minutes when nothing hangs; bench and large take what is left.
declare -A limit=(
  [env]=40 [feed]=60 [cudnn]=75 [trainer]=45 [training]=30 [python]=60 [cli_train]=40 [cli_predict]=15 [cli_two_ranks]=60
  [cli_tests]=50 [memcheck]=45 [gpu_bench]=60 [torch_augment_peer]=60 [trainer_gpu_bench]=45
  [torch_mobilenet_peer]=45 [fine_tune_bench]=40 [fine_tune_peer]=40 [cli_bench_gpu]=60 [python_pinned]=60 [large]=120
)
plan() {
  local part steps total=0 sum
  for part in "env:env" "feed:feed" "cudnn:cudnn" "trainer:trainer training" "python:python" \
    "cli:cli_train cli_predict cli_two_ranks cli_tests" "memcheck:memcheck" \
    "bench:gpu_bench torch_augment_peer trainer_gpu_bench torch_mobilenet_peer fine_tune_bench fine_tune_peer cli_bench_gpu python_pinned" \
    "large:large"; do
    sum=0
    for steps in ${part#*:}; do sum=$((sum + limit[$steps])); done
    total=$((total + sum))
    printf '  %-9s at most %4d s (running total %4d s): %s\n' "${part%%:*}" "$sum" "$total" "${part#*:}"
  done
  echo "  a hang costs one re-run of the rest of that binary; the deadline (STOKER_GPU_DEADLINE, default 480 s) cuts the tail"
}

# ---- time: one deadline for the whole call ------------------------------------------------------------
remaining() { echo $((deadline - SECONDS)); }
# step NAME CMD...: runs CMD with at most its limit (less if the deadline is nearer), its output to
# $work/NAME.log; skipped (status 125) when under 15 s are left.
step() {
  local name=$1 want=${limit[${1%%.*}]:-60} left
  shift
  left=$(($(remaining) - 5))
  if ((left < 15)); then
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

# gtest NAME BINARY FILTER: a GoogleTest binary as `step` runs it. A test that crashes the process
# or hangs would hide every test after it: the rest runs once more without it (NAME.rerun.log).
# Failed tests then run again for a better message: with CUDA_LAUNCH_BLOCKING=1 after a device
# fault (its error names the kernel), with cuDNN's error log after a cuDNN failure.
gtest() {
  local name=$1 bin=$2 filter=$3 rc=0 crashed
  (cd "$work" && step "$name" "$bin" --gtest_filter="$filter" --gtest_output="xml:$work/$name.xml") || rc=$?
  if ! grep -qE "^\[==========\] .* ran\." "$work/$name.log" && ((rc != 125)); then
    crashed=$(awk '/^\[ RUN +\]/ {t = $NF} /^\[ +(OK|FAILED|SKIPPED) +\]/ {t = ""} END {print t}' "$work/$name.log")
    if [[ -n $crashed ]]; then
      echo "!! $crashed crashed or hung (exit $rc): the rest runs once more without it"
      local rest=$filter
      [[ $rest == *-* ]] && rest=$rest:$crashed || rest=$rest-$crashed
      (cd "$work" && step "$name.rerun" "$bin" --gtest_filter="$rest") || true
    fi
    rc=1
  fi
  local failed
  failed=$(awk '/^\[  FAILED  \] [A-Za-z_0-9]+\.[A-Za-z_0-9]+/ {print $4}' "$work/$name"*.log | sort -u | paste -sd: -)
  if [[ -n $failed ]]; then
    if grep -qiE "illegal (memory access|address|instruction)|launch failure|misaligned address|an exception occurred on the device" \
      "$work/$name"*.log; then
      echo "!! a device fault: $failed again with CUDA_LAUNCH_BLOCKING=1 ($name.blocking.log)"
      (export CUDA_LAUNCH_BLOCKING=1 && cd "$work" && step "$name.blocking" "$bin" --gtest_filter="$failed") || true
      grep -m5 -iE "illegal|launch|misaligned|kernel" "$work/$name.blocking.log"
    fi
    if grep -qE "CUDNN_STATUS|cudnn[A-Z][A-Za-z]+ failed" "$work/$name"*.log; then
      echo "!! a cuDNN failure: $failed again with cuDNN's error log ($name.cudnnlog.log)"
      (export CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr && cd "$work" &&
        step "$name.cudnnlog" "$bin" --gtest_filter="$failed") || true
      grep -m10 -E "CUDNN_STATUS|E! " "$work/$name.cudnnlog.log"
    fi
    rc=1
  fi
  grep -h -E "^\[ *(PASSED|FAILED|SKIPPED) *\]|Failure|Expected|Which is|actual" "$work/$name"*.log | head -30
  if grep -q "no CUDA device:" "$work/$name.log"; then
    echo "WARNING: the GPU tests skipped, the binaries could not use a GPU here: $(grep -m1 "no CUDA device:" "$work/$name.log")"
    rc=3
  fi
  return $rc
}

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

find_cudnn() {
  # Prints a directory holding libcudnn.so.9 when the loader does not find it by itself.
  if ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then return 0; fi
  if [[ -n ${CUDNN_LIB:-} && -e $CUDNN_LIB/libcudnn.so.9 ]]; then echo "$CUDNN_LIB"; return 0; fi
  local cand py
  for py in ${TORCH_PYTHON:-} python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    cand=$("$py" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) || cand=""
    if [[ -n $cand && -e $cand/libcudnn.so.9 ]]; then echo "$cand"; return 0; fi
  done
  cand=$(find /usr /opt -name 'libcudnn.so.9' 2>/dev/null | head -1)
  [[ -n $cand ]] && dirname "$cand"
}

# The library folders of PyTorch's NVIDIA wheels (cuBLAS, NVRTC, ...), which cuDNN's engines load.
nvidia_wheel_libs() {
  local py site
  py=$(torch_python) || return 0
  site=$("$py" -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null) || return 0
  find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | paste -sd: -
}

# The library paths: stoker's binaries get the bundled libraries, cuDNN and the NVIDIA wheels'
# folders; steps that run PyTorch keep their own path, with the bundle after it (a bundled CUDA
# runtime must not shadow the one PyTorch was built with).
setup() {
  if [[ ! -x $bundle/bin/stoker_gpu_tests ]]; then
    echo "no build in $bundle: run 'scripts/gpu_check.sh prepare' on the build machine and copy build-gpu/carry here"
    return 1
  fi
  local libs=/tmp/stoker_bundled_libs
  rm -rf "$libs" && mkdir -p "$libs" && tar -C "$libs" -xJf "$bundle/libs.tar.xz"
  # Only what this machine lacks: a bundled copy of a library the system has would shadow it.
  local system_libs f kept=0 dropped=0
  system_libs=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for f in "$libs"/*; do
    if grep -qxF "$(basename "$f")" <<<"$system_libs"; then rm -f "$f"; ((++dropped)); else ((++kept)); fi
  done
  echo "bundled libraries: $kept used, $dropped left to the system's own copies"
  cudnn_dir=$(find_cudnn)
  wheel_libs=$(nvidia_wheel_libs)
  torch_ld_path="${LD_LIBRARY_PATH:-}"
  stoker_ld_path="$bundle/bin:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}${cudnn_dir:+:$cudnn_dir}${wheel_libs:+:$wheel_libs}"
  python_ld_path="$bundle/bin${torch_ld_path:+:$torch_ld_path}:$libs${cudnn_dir:+:$cudnn_dir}"
  export LD_LIBRARY_PATH=$stoker_ld_path
  export STOKER_SOURCE_DIR=$root  # the tests' committed vectors
  if [[ -d $bundle/shared_data ]]; then
    mkdir -p "$bundle/shared_data/models/keras"
    ln -sf "$root/data/models/mobilenet_v2_0.35_224_3class.h5" "$bundle/shared_data/models/keras/"
    export STOKER_SHARED_DATA=$bundle/shared_data
  fi
  return 0
}
# with_torch_path CMD...: CMD with PyTorch's library path (and stoker's extension on PYTHONPATH).
with_torch_path() { LD_LIBRARY_PATH=$python_ld_path PYTHONPATH=$bundle/python "$@"; }

# ---- the parts ------------------------------------------------------------------------------------
run_env() {
  echo "== environment"
  {
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free,clocks.max.sm --format=csv
    echo "libcudnn from: ${cudnn_dir:-the library path (ldconfig)}"
    echo "NVIDIA wheel libraries: ${wheel_libs:-none}"
    local lib dir=$cudnn_dir
    [[ -z $dir ]] && dir=$(dirname "$(ldconfig -p | awk '/libcudnn.so.9 / {print $NF; exit}')")
    for lib in "$dir"/libcudnn*.so.9; do
      echo "-- ldd $lib"
      ldd "$lib" | grep -E "not found|cudart|cublas|nvrtc|libz"
    done
    ldd "$bundle"/bin/* 2>/dev/null | grep "not found" | sort -u | sed 's/^/MISSING /'
    if command -v compute-sanitizer >/dev/null 2>&1; then
      echo "compute-sanitizer: $(compute-sanitizer --version | tail -1)"
    else
      echo "compute-sanitizer: not installed"
    fi
  } >"$work/env_report.log" 2>&1
  grep -E "Driver Version|^NVIDIA|^name|H200|H100|A100|libcudnn from|not found|MISSING|compute-sanitizer" "$work/env_report.log" | head -20
  local rc=0
  gtest env "$bundle/bin/stoker_trainer_tests" 'CudnnEnvironment.*' || rc=$?
  grep -E "^cuDNN |^NVIDIA|sm_|^bfloat16 |^float16 " "$work/env.log" | head -40
  summary+=("environment: $(grep -m1 -E "sm_[0-9]+" "$work/env.log"); $(grep -m1 "^cuDNN " "$work/env.log")")
  summary+=("cuDNN small-channel probe (bf16): $(grep -c "^bfloat16 .*forward ok.*backward-data ok.*backward-filter ok" "$work/env.log") of $(grep -c "^bfloat16 " "$work/env.log") configurations run fully; see env.log")
  return $rc
}

run_feed() {
  echo "== GPU feed, conversion and CUDA augmentation"
  local rc=0
  gtest feed "$bundle/bin/stoker_gpu_tests" "$feed_filter" || rc=$?
  summary+=("feed tests: $(result feed $rc)")
  return $rc
}

run_cudnn() {
  echo "== cuDNN backend"
  local rc=0
  gtest cudnn "$bundle/bin/stoker_trainer_tests" "$cudnn_filter" || rc=$?
  grep -h -E "^gpu |darknet|mobilenet|device free" "$work"/cudnn*.log | head -20
  summary+=("cuDNN backend tests: $(result cudnn $rc)")
  return $rc
}

run_trainer() {
  echo "== GPU fine-tuning and the training loop on the GPU"
  local rc=0
  gtest trainer "$bundle/bin/stoker_trainer_tests" "$trainer_filter" || rc=$?
  gtest training "$bundle/bin/stoker_training_tests" "$training_filter" || rc=$?
  summary+=("GPU trainer tests: $(result trainer $rc); training loop on the GPU: $(result training $rc)")
  return $rc
}

run_python() {
  echo "== Python: device batches into torch"
  local py rc=0
  if [[ ! -d $bundle/python/stoker ]]; then
    summary+=("python: skipped (no Python 3.12 build in the bundle)")
    return 0
  fi
  py=$(torch_python) || { summary+=("python: skipped (no python with torch)"); return 0; }
  with_torch_path step python "$py" "$root/scripts/gpu_check_python.py" --data "$root/data/catsdogs-sample" || rc=1
  cat "$work/python.log"
  summary+=("$(grep -E "^python_gpu" "$work/python.log" | tr '\n' ';')")
  summary+=("python device batches: $([[ $rc -eq 0 ]] && echo ok || echo FAILED)")
  return $rc
}

run_cli() {
  local s=$bundle/bin/stoker rc=0
  echo "== the command on the GPU: train, predict, and its device tests"
  step cli_train "$s" train --device cuda --data "$root/data/catsdogs-sample" --validation-split 0.2 \
    --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$work/train_gpu" || rc=1
  tail -12 "$work/cli_train.log"
  step cli_predict "$s" predict --device cuda --model-dir "$work/train_gpu" "$root"/data/catsdogs-sample/dog/dog.1.jpg \
    "$root"/data/catsdogs-sample/cat/cat.1.jpg || rc=1
  cat "$work/cli_predict.log"
  run_two_ranks "$s" || rc=1
  STOKER_CLI=$s gtest cli_tests "$bundle/bin/stoker_apps_tests" "$cli_filter" || rc=1
  summary+=("stoker train/predict --device cuda and the command's device tests: $([[ $rc -eq 0 ]] && echo ok || echo FAILED)")
  summary+=("$(grep -E "^best epoch" "$work/cli_train.log" | tail -1)")
  summary+=("$(grep -iE "waited for data|limited by" "$work/cli_train.log" | tail -1)")
  return $rc
}

# Two ranks on one GPU (--device cuda:0,0: the command starts them under mpirun), with fine-tuning:
# the device path across ranks, its history against the one-process run's above. Needs a bundle
# built with MPI (STOKER_GPU_MPI=AUTO) and mpirun on this machine; else skipped, saying why.
run_two_ranks() {
  local s=$1 why=
  LD_LIBRARY_PATH=$bundle/bin:${LD_LIBRARY_PATH:-} ldd "$s" 2>/dev/null | grep -q 'libmpi\.so' ||
    why="the bundle was built without MPI (prepare with STOKER_GPU_MPI=AUTO)"
  [[ -z $why ]] && ! command -v mpirun >/dev/null 2>&1 && why="no mpirun on this machine (Open MPI)"
  if [[ -n $why ]]; then
    summary+=("two ranks on one GPU: skipped: $why")
    return 0
  fi
  local rc=0
  step cli_two_ranks "$s" train --device cuda:0,0 --data "$root/data/catsdogs-sample" --validation-split 0.2 \
    --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$work/train_two_ranks" || rc=1
  tail -8 "$work/cli_two_ranks.log"
  summary+=("two ranks on one GPU: $([[ $rc -eq 0 ]] && echo ok || echo FAILED); $(grep -E "^best epoch" \
    "$work/cli_two_ranks.log" | tail -1) (one process: $(grep -E "^best epoch" "$work/cli_train.log" | tail -1))")
  return $rc
}

run_memcheck() {
  echo "== compute-sanitizer memcheck over a few GPU tests"
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    summary+=("memcheck: skipped (no compute-sanitizer)")
    return 0
  fi
  local rc=0
  (cd "$work" && step memcheck compute-sanitizer --tool memcheck --error-exitcode 86 \
    "$bundle/bin/stoker_gpu_tests" --gtest_filter="$memcheck_filter") || rc=$?
  grep -E "ERROR SUMMARY|Invalid|out of bounds|^\[ *(PASSED|FAILED) *\]" "$work/memcheck.log" | head -20
  summary+=("memcheck: $(grep -m1 "ERROR SUMMARY" "$work/memcheck.log" || echo "exit $rc")")
  return $rc
}

run_bench() {
  local py rc=0 ours peer
  py=$(torch_python) || py=""
  echo "== CUDA augmentation kernel, warm epochs into device memory, the feed's copy bandwidth"
  step gpu_bench "$bundle/bin/gpu_bench" --dir /tmp/stoker_gpu_bench || rc=1
  cat "$work/gpu_bench.log"
  if [[ -n $py ]]; then
    with_torch_path step torch_augment_peer "$py" "$root/bench/torch_augment_peer.py"
    cat "$work/torch_augment_peer.log"
  fi
  ours=$(awk -F'|' '/^\| 1\. augmentation kernel/ {gsub(/[^0-9.]/, "", $3); print $3}' "$work/gpu_bench.log")
  peer=$(awk '/^torch_peer img\/s:/ {print $3}' "$work/torch_augment_peer.log" 2>/dev/null)
  summary+=("augmentation kernel 299x299 bf16 NCHW: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}" " (goal >= 3)")")
  while IFS= read -r line; do summary+=("$line"); done < <(grep -E "^\| [23]\." "$work/gpu_bench.log")

  echo "== cuDNN backend: MobileNetV2 0.35 forward, batch 256 (algorithms chosen, cold start)"
  step trainer_gpu_bench "$bundle/bin/trainer_gpu_bench" --model "$root/data/models/mobilenet_v2_0.35_224_3class.h5" \
    --batch 256 --iters 30 || rc=1
  grep -vE "^(Pad|Affine|Concat|MaxPool|AvgPool|Gap) " "$work/trainer_gpu_bench.log" | head -80
  if [[ -n $py ]]; then
    with_torch_path step torch_mobilenet_peer "$py" "$root/bench/torch_mobilenet_peer.py" --batch 256 --iters 30
    cat "$work/torch_mobilenet_peer.log"
  fi
  ours=$(awk '/^trainer_gpu_bench img\/s \(BF16\):/ {print $4}' "$work/trainer_gpu_bench.log")
  peer=$(awk '/^torch_mobilenet_peer img\/s:/ {print $3}' "$work/torch_mobilenet_peer.log" 2>/dev/null)
  summary+=("MobileNetV2 0.35 forward, batch 256, 224, bf16: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}")")
  summary+=("cuDNN cold start: $(grep -m1 -o "cold start: .*" "$work/trainer_gpu_bench.log" || echo "?")")
  summary+=("cuDNN choices: $(grep -c "fused bias+relu" "$work/trainer_gpu_bench.log") convolutions fused, $(grep -c "refused:" "$work/trainer_gpu_bench.log") with refusals, $(grep -c "channels padded" "$work/trainer_gpu_bench.log") on channels padded to 8, $(grep -c "not deterministic" "$work/trainer_gpu_bench.log") not deterministic (trainer_gpu_bench.log)")

  echo "== GPU fine-tuning step (MobileNetV2 0.35 from block_13_expand, batch 32, 224) and its PyTorch peer"
  step fine_tune_bench "$bundle/bin/fine_tune_bench" --device cuda --batch 32 --steps 20 || rc=1
  cat "$work/fine_tune_bench.log"
  if [[ -n $py ]]; then
    with_torch_path step fine_tune_peer "$py" "$root/bench/fine_tune_peers.py" --device cuda --batch 32 --steps 20
    cat "$work/fine_tune_peer.log"
  fi
  ours=$(awk '/^fine_tune_bench img\/s:/ {print $3}' "$work/fine_tune_bench.log")
  peer=$(grep -o '"images_per_second": [0-9.]*' "$work/fine_tune_peer.log" 2>/dev/null | awk '{print $2}')
  summary+=("fine-tuning step on the GPU, batch 32: stoker ${ours:-?} img/s, PyTorch bf16 ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}")")
  summary+=("$(grep -E "^on the GPU:" "$work/fine_tune_bench.log" | head -1)")

  echo "== stoker bench --suite gpu"
  step cli_bench_gpu "$bundle/bin/stoker" bench --suite gpu --data "$root/data/catsdogs-sample" --image-size 299 \
    --repeat 3 --json "$work/bench_gpu.json" || rc=1
  cat "$work/cli_bench_gpu.log"

  if [[ -n $py && -d $bundle/python/stoker ]]; then
    echo "== Python: pinned host batches copied to the GPU, stoker.torch.DataLoader against torch's (pin_memory=True)"
    with_torch_path step python_pinned "$py" "$root/bench/python_peers.py" --suite torch --pin-memory \
      --data "$root/data/catsdogs-sample" --workers "$(nproc)" --epochs 2 --json "$work/python_pinned.json" || rc=1
    cat "$work/python_pinned.log"
    summary+=("pinned batches to the GPU, $(nproc) workers: $(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print "torchvision " $2 " img/s, stoker " $3 " img/s (" $4 ")"}' "$work/python_pinned.log" | head -1)")
  fi
  summary+=("benchmarks: $([[ $rc -eq 0 ]] && echo ok || echo "one FAILED (logs)")")
  return $rc
}

run_large() {
  echo "== InceptionResNetV2 at 299 on cuDNN (about 240 convolutions' algorithm search, two precisions)"
  local rc=0
  gtest large "$bundle/bin/stoker_trainer_tests" 'CudnnBackend.InceptionResNetV2MatchesCpuBackend' || rc=$?
  grep -h "inception_resnet_v2" "$work"/large*.log
  summary+=("InceptionResNetV2 at 299: $(result large $rc)")
  return $rc
}

result() {  # result NAME RC: "ok (N passed)" or "FAILED ..." from NAME's log
  local passed failed
  passed=$(grep -ohE "^\[  PASSED  \] [0-9]+" "$work/$1.log" | awk '{print $4}')
  failed=$(grep -ohE "^\[  FAILED  \] [A-Za-z_0-9]+\.[A-Za-z_0-9/]+" "$work/$1"*.log | awk '{print $4}' | sort -u | paste -sd, -)
  if (($2 == 0)); then echo "ok (${passed:-0} passed)"; else echo "FAILED (exit $2${failed:+: $failed})"; fi
}
ratio() {  # ratio OURS PEER [SUFFIX]: ", ratio X.XX SUFFIX" when both are numbers
  [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" -v s="${3:-}" 'BEGIN {if (b > 0) printf ", ratio %.2f%s", a / b, s}'
}

run() {
  out=${STOKER_GPU_CHECK_OUT:-$root/build-gpu/check}
  work=/tmp/stoker_gpu_check
  deadline=$((SECONDS + ${STOKER_GPU_DEADLINE:-480}))
  rm -rf "$work" && mkdir -p "$out" "$work"
  exec > >(tee -a "$out/gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, deadline in $(remaining) s"
  summary=()
  export PYTHONUNBUFFERED=1
  setup || { pack; return 1; }
  local parts=("$@") status=0 part t0
  ((${#parts[@]})) || parts=(env feed cudnn trainer python cli memcheck bench large)
  for part in "${parts[@]}"; do
    t0=$SECONDS
    case $part in
      env | feed | cudnn | trainer | python | cli | memcheck | bench | large) "run_$part" || status=1 ;;
      *) echo "unknown part '$part' (env feed cudnn trainer python cli memcheck bench large)"; status=2 ;;
    esac
    summary+=("  ($part: $((SECONDS - t0)) s)")
    pack
  done
  echo "== summary ($((SECONDS)) s)"
  printf '%s\n' "${summary[@]}"
  pack
  return $status
}

case $mode in
  prepare) shift; prepare "$@" ;;
  plan) plan ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD_DIR] | plan | run [env] [feed] [cudnn] [trainer] [python] [cli] [memcheck] [bench] [large]" >&2; exit 2 ;;
esac
