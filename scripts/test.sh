#!/usr/bin/env bash
# Builds stoker and runs the whole test suite with CTest.
#   bash scripts/test.sh              # Release build in build/, all tests
#   bash scripts/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/, with the CUDA
#                                     # runtime emulated on the host so the GPU tests run too
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [[ "${1:-}" == "--sanitize" ]]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_CUDA_EMULATION=ON
         -DSTOKER_BUILD_BENCH=OFF)
  # TBB's worker threads outlive main's static destructors; leak reports there are TBB's, not ours.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
else
  dir=build
  flags=(-DCMAKE_BUILD_TYPE=Release)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$jobs"
ctest --test-dir "$dir" --output-on-failure -j"$jobs"
