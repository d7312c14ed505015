#!/usr/bin/env bash
# Builds stoker and runs the whole test suite.
#   bash scripts/test.sh              # Release build in build/: CTest, then the Python package built
#                                     # as a user builds it (pip) and its pytest suite
#                                     # (scripts/test_python.sh)
#   bash scripts/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/, with the CUDA
#                                     # runtime emulated on the host so the GPU tests run too: CTest,
#                                     # then the Python device-batch tests on that build's extension,
#                                     # then, with clang, a short run of every libFuzzer target in
#                                     # tests/fuzz (build-fuzz/; STOKER_FUZZ_SECONDS each, 30 by default,
#                                     # one per core at a time)
#   bash scripts/test.sh --tsan       # ThreadSanitizer on the emulated device (build-tsan/): the CPU
#                                     # loader and its caches, the GPU feed, CUDA executor and GPU
#                                     # training path; not in CI (slow; scripts/tsan.supp says what
#                                     # of oneTBB/OpenCV it cannot see)
# Every build goes through ccache when it is installed (scripts/build_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
jobs=$(nproc)
tests=()
case "${1:-}" in
  --sanitize)
    dir=build-asan
    # The Python extension too, for the device-batch tests (its venv provides nanobind).
    [[ -x $dir/venv/bin/python ]] || python3 -m venv "$dir/venv"
    "$dir/venv/bin/python" -m pip install -q nanobind numpy pytest pillow
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_CUDA_EMULATION=ON
           -DSTOKER_BUILD_BENCH=ON  # the GPU benchmarks' smoke tests
           -DSTOKER_PYTHON=ON -DPython_EXECUTABLE="$PWD/$dir/venv/bin/python")
    # TBB's worker threads outlive main's static destructors; leak reports there are TBB's, not ours.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    tests=(-E '^package[.]')  # the packaging is the Release run's
    ;;
  --tsan)
    dir=build-tsan
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
           -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DSTOKER_CUDA=OFF -DSTOKER_CUDA_EMULATION=ON
           -DSTOKER_BUILD_BENCH=OFF -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
    tests=(-R '^Loader[.]|Cache|Checksum|GpuFeed|GpuKernels|CudnnBackend|Cli.Device|GpuPathCheck')
    ;;
  "")
    dir=build
    flags=(-DCMAKE_BUILD_TYPE=Release)
    ;;
  *) echo "usage: $0 [--sanitize | --tsan]" >&2; exit 2 ;;
esac

stage "$dir: configure" configure "$dir" "${flags[@]}"
stage "$dir: build" cmake --build "$dir" -j"$jobs"
stage "$dir: ctest" ctest --test-dir "$dir" --output-on-failure -j"$jobs" "${tests[@]}"

case $dir in
  build) bash scripts/test_python.sh ;;
  build-asan)
    # Device batches through DLPack on the emulated CUDA device, under the sanitizers. The
    # interpreter is not instrumented, so the sanitizer runtimes are preloaded; its own allocations
    # are not leaks of ours.
    pkg=$dir/python-package/stoker
    rm -rf "$pkg" && mkdir -p "$pkg"
    ln -s "$PWD"/python/stoker/* "$PWD"/$dir/python/_stoker*.so "$pkg/"
    run_device_batch_tests() {
      (cd python/tests &&
        LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
          ASAN_OPTIONS="detect_leaks=0:halt_on_error=1" PYTHONPATH="$PWD/../../$dir/python-package" \
          "../../$dir/venv/bin/python" -m pytest -q -p no:cacheprovider test_device_batches.py)
    }
    stage "$dir: python device batches" run_device_batch_tests

    # Every fuzz target on its seeds for half a minute: a parser change that crashes on them, or
    # on what the fuzzer derives from them at once, fails here. Longer runs: tests/fuzz/README.md.
    if command -v clang++ >/dev/null 2>&1; then
      build_fuzz() {
        configure build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DSTOKER_FUZZ=ON -DSTOKER_CUDA=OFF \
          -DSTOKER_BUILD_BENCH=OFF -DSTOKER_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo  # apps: fuzz_config
        cmake --build build-fuzz -j"$jobs"
      }
      # fuzz_one TARGET: TARGET on its seeds for STOKER_FUZZ_SECONDS; one line saying how it went
      # (its log: build-fuzz/NAME.log; a finding's input: build-fuzz/artifacts/).
      fuzz_one() {
        local target=$1 name corpus log rc=0
        name=$(basename "$target")
        log=build-fuzz/$name.log
        corpus=$(mktemp -d)
        [[ -d tests/fuzz/seeds/${name#fuzz_} ]] && cp -r "tests/fuzz/seeds/${name#fuzz_}/." "$corpus/"
        local run=(-max_total_time="${STOKER_FUZZ_SECONDS:-30}")
        if [[ $name == fuzz_config ]]; then
          # Its seeds only: CLI11 2.1.2's TOML reader has undefined behaviour on an unterminated
          # array (`out =[t`), which the fuzzer finds within seconds (tests/fuzz/README.md).
          run=(-runs=0)
        fi
        if [[ $name == fuzz_model_file ]]; then  # byte 0 picks .h5 (0) or .keras (1)
          { printf '\0'; cat tests/trainer/vectors/layers/nested.h5; } >"$corpus/nested.h5"
          { printf '\1'; cat tests/trainer/vectors/keras3/nested.keras; } >"$corpus/nested.keras"
          # Its seeds only: libhdf5 can spin for minutes, in bounded memory, on a damaged global
          # heap the fuzzer finds within seconds, which would stall this stage.
          run=(-runs=0)
        fi
        ASAN_OPTIONS="halt_on_error=1" "$target" "${run[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
          -artifact_prefix=build-fuzz/artifacts/ "$corpus" >"$log" 2>&1 || rc=$?
        rm -rf "$corpus"
        if ((rc == 0)); then
          echo "$name: $(grep -o 'number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') executions"
        else
          echo "$name: FAILED (input in build-fuzz/artifacts/)"
          tail -n 40 "$log"
        fi
        return $rc
      }
      # Every target, one per core at a time.
      run_fuzz() {
        local failed=0 target pids=() pid
        mkdir -p build-fuzz/artifacts
        for target in build-fuzz/tests/fuzz/fuzz_*; do
          [[ -f $target && -x $target ]] || continue
          fuzz_one "$target" >"build-fuzz/$(basename "$target").result" &
          pids+=($!)
          if ((${#pids[@]} >= jobs)); then
            wait "${pids[0]}" || failed=1
            pids=("${pids[@]:1}")
          fi
        done
        for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
        cat build-fuzz/fuzz_*.result
        return $failed
      }
      stage "build-fuzz: build" build_fuzz
      stage "build-fuzz: run" run_fuzz
    else
      echo "test.sh: clang++ is not installed: the fuzz targets were not run (scripts/install-deps.sh installs it)"
    fi
    ;;
esac
