#!/usr/bin/env bash
# Builds stoker and runs the whole test suite with CTest.
#   bash scripts/test.sh              # Release build in build/, all tests, then the Python
#                                     # package built with pip and its pytest suite
#                                     # (scripts/test_python.sh)
#   bash scripts/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/, with the CUDA
#                                     # runtime emulated on the host so the GPU tests run too
#   bash scripts/test.sh --tsan       # ThreadSanitizer on the emulated device (build-tsan/): the GPU
#                                     # feed, CUDA executor and GPU training path; not in CI (slow,
#                                     # and oneTBB/OpenCV need scripts/tsan.supp)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
tests=()
if [[ "${1:-}" == "--sanitize" ]]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_CUDA_EMULATION=ON
         -DSTOKER_BUILD_BENCH=ON)  # the GPU benchmarks' smoke tests
  # TBB's worker threads outlive main's static destructors; leak reports there are TBB's, not ours.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  tests=(-E '^package[.]')  # the packaging is the Release run's: three more library builds
elif [[ "${1:-}" == "--tsan" ]]; then
  dir=build-tsan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
         -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DSTOKER_CUDA=OFF -DSTOKER_CUDA_EMULATION=ON
         -DSTOKER_BUILD_BENCH=OFF -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
  tests=(-R 'GpuFeed|GpuKernels|CudnnBackend|Cli.Device|GpuPathCheck')
else
  dir=build
  flags=(-DCMAKE_BUILD_TYPE=Release)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$jobs"
ctest --test-dir "$dir" --output-on-failure -j"$jobs" "${tests[@]}"
if [[ "$dir" == build ]]; then
  bash scripts/test_python.sh
fi
