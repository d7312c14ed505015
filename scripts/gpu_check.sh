#!/usr/bin/env bash
# GPU checks of issue 5 (GpuFeed, conversion, CUDA augmentation): the GPU test suite and the GPU
# benchmark, on a machine with an NVIDIA GPU, from a build made elsewhere.
#
# 1. Here (any machine with the CUDA toolkit; no GPU needed):
#        scripts/gpu_check.sh prepare [BUILD_DIR]          # default BUILD_DIR: build-gpu
#    builds stoker_gpu_tests and gpu_bench and fills BUILD_DIR/carry/ with them, libstoker and
#    libs.tar.xz: every shared library they load except glibc, libstdc++/libgcc, libcuda (the
#    driver's, from the GPU machine) and libcudnn.
# 2. On the GPU machine, from the repository root, with BUILD_DIR/carry carried along:
#        OUT=/some/dir scripts/gpu_check.sh run [CARRY_DIR]  # default CARRY_DIR: build-gpu/carry
#    unpacks the libraries only if the machine lacks some, runs the GPU tests (gtest XML + log),
#    the benchmark and the PyTorch peer, and prints a summary. Logs go to $OUT (7 files at most).
#    Time: tests <= 200 s, benchmark <= 200 s, PyTorch peer <= 90 s, compute-sanitizer (if the
#    machine has it) <= 100 s.
#    With the device tool:
#        run(command="bash scripts/gpu_check.sh run", carry=["build-gpu/carry"], timeout_s=590)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-run}

prepare() {
  local build=${1:-$root/build-gpu}
  set -e
  cmake -S "$root" -B "$build" -DSTOKER_MODULES="pipeline;augment;cache" >/dev/null
  cmake --build "$build" -j2 --target stoker_gpu_tests gpu_bench
  local carry=$build/carry
  mkdir -p "$carry/bin"
  cp -fL "$build/tests/gpu/stoker_gpu_tests" "$build/bench/gpu_bench" "$carry/bin/"
  cp -fL "$build/libstoker.so.0" "$carry/bin/"
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
  du -sh "$carry"
  echo "carry: ${carry#"$root"/}"
}

run() {
  local carry=${1:-$root/build-gpu/carry}
  local out=${OUT:-$root/out}
  mkdir -p "$out"
  exec > >(tee "$out/gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
  if [[ ! -x $carry/bin/stoker_gpu_tests ]]; then
    echo "no build in $carry: run 'scripts/gpu_check.sh prepare' on the build machine and carry build-gpu/carry"
    return 1
  fi
  nvidia-smi >"$out/nvidia_smi.log" 2>&1 || echo "nvidia-smi failed (see nvidia_smi.log)"
  head -15 "$out/nvidia_smi.log"
  export LD_LIBRARY_PATH="$carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$carry"/bin/* 2>/dev/null | grep -q "not found"; then
    local libs=/tmp/stoker_carried_libs
    mkdir -p "$libs" && tar -C "$libs" -xJf "$carry/libs.tar.xz"
    export LD_LIBRARY_PATH="$carry/bin:$libs:$LD_LIBRARY_PATH"
    echo "unpacked the carried libraries into $libs"
  fi
  if ldd "$carry"/bin/* 2>/dev/null | grep "not found"; then echo "libraries still missing (above)"; fi

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

case $mode in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD_DIR] | run [CARRY_DIR]" >&2; exit 2 ;;
esac
