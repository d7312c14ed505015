# Sourced by the build and test scripts: how stoker's scripts configure CMake, said once.
#
# - ccache, when installed, is the compiler launcher of every CMake build the scripts start,
#   nested ones included (the wheel pip builds, the package test's vendored build): CMake takes
#   CMAKE_<LANG>_COMPILER_LAUNCHER from the environment. Those builds compile the same sources with
#   the same flags as the Release tree, so they reuse its objects instead of compiling them again.
#   Paths stay absolute (no CCACHE_BASEDIR): relative ones would differ between trees at
#   different depths, and so would their preprocessed output. The cache lives outside the checkout
#   (ccache's default, ~/.cache/ccache), so building the same code again in the same place, a
#   fresh clone included, is mostly cache hits.
# - Ninja, when installed, generates the trees the scripts create (an existing tree keeps the
#   generator it was made with).
# - stage NAME CMD...: runs CMD and appends "NAME SECONDS" to $STOKER_STAGE_TIMES (when set), so that
#   .ci/run can say where its time went.

if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  # The build directory is not hashed, even with debug information (the sanitizer build).
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
fi

# configure DIR [cmake arguments...]
configure() {
  local dir=$1
  shift
  local generator=()
  if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
  cmake -S . -B "$dir" "${generator[@]}" "$@" >/dev/null
}

stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  if [[ -n ${STOKER_STAGE_TIMES:-} ]]; then
    printf '%-28s %5d s%s\n' "$name" $((SECONDS - t0)) "$( ((rc)) && echo "  (failed: exit $rc)")" >>"$STOKER_STAGE_TIMES"
  fi
  return $rc
}
