#!/usr/bin/env bash
# The GPU check: everything GPU-side of stoker, run on any machine with an NVIDIA GPU from a build
# made on another machine (with the CUDA toolkit and cuDNN 9; it needs no GPU). docs/gpu.md
# (Running the GPU checks) says how; in short:
#
# 1. On the build machine:
#        bash scripts/gpu_check.sh prepare [BUILD_DIR]     # default BUILD_DIR: build-gpu
#    builds the GPU test suites, benchmarks, the stoker command and the Python extension (for the
#    GPU machine's Python 3.12, STOKER_PY312), and fills BUILD_DIR/carry/ (the bundle) with them,
#    the stoker libraries, libs.tar.xz (the shared libraries they load that an Ubuntu 24.04 CUDA
#    image lacks) and the shared model and images the tests use; it prints the bundle's size and the
#    repository's, which travel together. Copy the repository and the bundle to the GPU machine.
# 2. On the GPU machine, from the repository root:
#        STOKER_GPU_CHECK_OUT=/some/folder [STOKER_BUNDLE=BUILD_DIR/carry] bash scripts/gpu_check.sh run [PART...]
#    The parts, in this order (`bash scripts/gpu_check.sh plan` prints each one's share of the time):
#      gate      the environment (driver, runtime, cuDNN, the libraries cuDNN loads, cuDNN's support
#                of small channel counts), the feed, one kernel against its host twin, one cuDNN
#                forward against the CPU backend;
#      bench     every benchmark, each against its PyTorch peer on the same GPU;
#      feed, cudnn, trainer, python, cli   the rest of the correctness tests (the tail);
#      memcheck  compute-sanitizer over a few kernel and feed tests (no timing, no memory growth);
#      large     InceptionResNetV2 at 299 in two precisions.
#    Every step has a reserved share of one deadline (STOKER_GPU_DEADLINE seconds, default 480):
#    it is cut at the end of its share, and what a step leaves unused passes to the steps after it,
#    so the benchmarks get their time whatever the tests before them do.
#    Results go to $STOKER_GPU_CHECK_OUT (default build-gpu/check): summary.txt (one line per step
#    as it ends, and the figures), gpu_check.log (everything printed) and logs.tar.gz (every log,
#    refreshed after each step): a run cut off at any point leaves an account up to there.
#    libcudnn.so.9 comes from the system, else PyTorch's nvidia-cudnn wheel, else $CUDNN_LIB; the
#    wheel's other NVIDIA libraries (NVRTC, cuBLAS), which cuDNN's engines load, are found beside it.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${STOKER_BUNDLE:-$root/build-gpu/carry}
# What `prepare` puts in the bundle's bin/ and `run` checks before it starts.
bundle_programs=(stoker_gpu_tests stoker_augment_device_tests stoker_trainer_tests stoker_training_tests
  stoker_apps_tests gpu_bench trainer_gpu_bench cpu_backend_bench fine_tune_bench stoker)
mobilenet=$root/data/models/mobilenet_v2_0.35_224_3class.h5
sample=$root/data/catsdogs-sample

prepare() {
  local build=${1:-$root/build-gpu}
  set -e
  source "$root/scripts/build_env.sh"
  # sm_90 machine code only (Hopper: H100 and H200) keeps the bundle small; other GPUs: set
  # STOKER_GPU_ARCH (CMAKE_CUDA_ARCHITECTURES).
  # No MPI by default: a GPU machine need not have Open MPI, and the bundle stays self-contained.
  # STOKER_GPU_MPI=AUTO links it, for the cli part's two ranks on one GPU where the GPU machine has
  # Open MPI's mpirun (the same major version).
  cmake -S "$root" -B "$build" -DSTOKER_CUDNN=ON -DCMAKE_CUDA_ARCHITECTURES="${STOKER_GPU_ARCH:-90-real}" \
    -DSTOKER_DISTRIBUTED="${STOKER_GPU_MPI:-OFF}" >/dev/null
  cmake --build "$build" -j"${STOKER_BUILD_JOBS:-$(nproc)}" --target stoker_gpu_tests stoker_augment_device_tests \
    gpu_bench stoker_trainer_tests trainer_gpu_bench stoker_cli stoker_apps_tests stoker_training_tests \
    cpu_backend_bench fine_tune_bench
  local bundle=$build/carry
  prepare_python "$build" "$bundle"
  # Libraries with these sonames come with any Ubuntu 24.04 image that has apt, grep and Python 3.12:
  # not bundled. The rest (OpenCV's closure, oneTBB, TurboJPEG, HDF5, Kerberos, ...) is.
  local ubuntu_has='libz|liblzma|libzstd|libbz2|libexpat|libffi|libuuid|libcrypto|libssl|libsqlite3|libgnutls|libnettle|libhogweed|libgmp|libp11-kit|libtasn1|libidn2|libpcre2-8|liblz4|libxxhash|libudev|libselinux'
  rm -rf "${bundle:?}/bin" "$bundle/shared_data"
  mkdir -p "$bundle/bin"
  cp -fL "$build/tests/gpu/stoker_gpu_tests" "$build/tests/augment/stoker_augment_device_tests" \
    "$build/tests/trainer/stoker_trainer_tests" "$build/tests/training/stoker_training_tests" \
    "$build/tests/apps/stoker_apps_tests" "$build/bench/gpu_bench" "$build/bench/trainer_gpu_bench" \
    "$build/bench/cpu_backend_bench" "$build/bench/fine_tune_bench" "$build/apps/stoker" \
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
  set +e
  travel_size "$bundle"
  echo "the steps and their shares of the time:"
  plan
}

# The bundle and the repository's tracked files travel to the GPU machine together.
travel_size() {
  local bundle=$1 b r
  b=$(du -sb "$bundle" | cut -f1)
  r=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')
  awk -v b="$b" -v r="$r" -v dir="${bundle#"$root"/}" 'BEGIN {
    m = 1048576; t = (b + r) / m
    printf "bundle: %s, %.1f MiB; the repository'"'"'s tracked files %.1f MiB; together %.1f MiB", dir, b / m, r / m, t
    if (t > 48) printf " -- WARNING: too close to 64 MiB, trim the bundle"
    printf "\n"
  }'
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
  cmake --build "$build" -j"${STOKER_BUILD_JOBS:-$(nproc)}" --target _stoker
  mkdir -p "$bundle/python"
  cp -r "$root/python/stoker" "$bundle/python/"
  find "$bundle/python" -name __pycache__ -prune -exec rm -rf {} +
  cp -L "$build"/python/_stoker*.so "$bundle/python/stoker/"
}

# ---- the schedule: part, step and the step's reserved seconds, in the order they run ---------------
# The shares add up to 480 s; another STOKER_GPU_DEADLINE, or a run of some parts only, scales them
# to fill it. A step ends at the latest where its share ends (counted from the start of the run:
# the unused time of the steps before it is its too); sub-steps (a gtest binary's re-runs) share
# their step's. The benchmark sizes below are chosen to fit their shares on a Hopper GPU and 16
# cores, each figure still the median of several runs.
schedule=(
  "gate env 20" "gate gate_feed 15" "gate gate_cudnn 20"
  "bench gpu_bench 30" "bench torch_augment_peer 15" "bench trainer_gpu_bench 25" "bench torch_mobilenet_peer 15"
  "bench fine_tune_bench 20" "bench fine_tune_peer 20" "bench cpu_backend_bench 10" "bench cli_bench_gpu 30"
  "bench python_pinned 20"
  "feed feed 25" "feed augment_device 5"
  "cudnn cudnn 25"
  "trainer trainer 20" "trainer training 15"
  "python python 25"
  "cli cli_train 15" "cli cli_predict 5" "cli cli_two_ranks 15" "cli cli_tests 20"
  "memcheck memcheck 30"
  "large large 40"
)
all_parts=(gate bench feed cudnn trainer python cli memcheck large)
default_deadline=480

plan() {
  local line part step secs total=0 cum=0 p
  local -A part_secs=() part_steps=()
  for line in "${schedule[@]}"; do
    read -r part step secs <<<"$line"
    part_secs[$part]=$((${part_secs[$part]:-0} + secs))
    part_steps[$part]+="$step $secs, "
    total=$((total + secs))
  done
  echo "  the parts' reserved shares of a ${STOKER_GPU_DEADLINE:-$default_deadline} s deadline (ends counted from the start):"
  for p in "${all_parts[@]}"; do
    secs=$(scaled "${part_secs[$p]}" "$total")
    cum=$((cum + secs))
    printf '  %-8s %4d s  ends by %4d s  %s\n' "$p" "$secs" "$cum" "$(sed -E 's/([0-9]+),/\1 s,/g; s/, $//' <<<"${part_steps[$p]}")"
  done
  cat <<'EOF'
  gate is the short correctness gate; bench every benchmark; feed .. cli the long correctness tail.
  Each step is cut at the end of its share, and the time a step leaves passes on to the next ones.
  A gtest binary that crashes or faults the device runs once more without the tests that ended and
  without the culprit, which runs alone under CUDA_LAUNCH_BLOCKING=1; passed tests never run twice.
EOF
}
# scaled SECS TOTAL: SECS of a schedule adding up to TOTAL, in a deadline of STOKER_GPU_DEADLINE.
scaled() { echo $(($1 * ${STOKER_GPU_DEADLINE:-$default_deadline} / $2)); }

# init_run PART...: the output and work folders, summary.txt's header and each step's end.
declare -A step_end=()
init_run() {
  out=${STOKER_GPU_CHECK_OUT:-$root/build-gpu/check}
  work=${STOKER_GPU_CHECK_WORK:-/tmp/stoker_gpu_check}
  rm -rf "$work" && mkdir -p "$out" "$work"
  summary=$out/summary.txt
  run_start=$SECONDS
  local line part step secs total=0 cum=0 p
  for line in "${schedule[@]}"; do
    read -r part step secs <<<"$line"
    for p in "$@"; do [[ $p == "$part" ]] && total=$((total + secs)); done
  done
  deadline=$((run_start + ${STOKER_GPU_DEADLINE:-$default_deadline}))
  for line in "${schedule[@]}"; do
    read -r part step secs <<<"$line"
    for p in "$@"; do
      if [[ $p == "$part" ]]; then
        cum=$((cum + secs))
        step_end[$step]=$((run_start + $(scaled "$cum" "$total")))
      fi
    done
  done
  {
    echo "# stoker GPU check, $(date -u +%FT%TZ) on $(hostname), $(nproc) cores; parts: $*; deadline $((deadline - run_start)) s"
    echo "# one line per step as it ends: step STATUS NAME SECONDS [what]; 'tests' is a gtest binary's result,"
    echo "# 'figure' a benchmark's, 'note' what was found; a run that was cut off has no 'finished' line"
  } >"$summary"
}

# note KIND TEXT...: one line of summary.txt, written at once; line KIND STATUS NAME TEXT: a step's or
# a binary's line, in columns.
note() { local kind=$1; shift; printf '%-7s %s\n' "$kind" "$*" >>"$summary"; }
line() { printf '%-7s %-8s %-22s %s\n' "$1" "$2" "$3" "$4" >>"$summary"; }

# ---- steps ------------------------------------------------------------------------------------------
status_word() {  # status_word RC SECONDS LIMIT
  local rc=$1
  if ((rc == 0)); then echo ok
  elif ((rc == 125)); then echo SKIPPED
  elif ((rc == 124 || (rc == 137 && $2 >= $3))); then echo TIMEOUT
  elif ((rc > 128 && rc < 160)); then echo CRASHED
  else echo FAILED; fi
}
signal_name() { kill -l $(($1 - 128)) 2>/dev/null || echo "signal $(($1 - 128))"; }

# step NAME CMD...: runs CMD in $work until the end of NAME's share (NAME.x: NAME's), its output to
# $work/NAME.log; writes its summary line, packs the logs; returns CMD's status (125: not run).
step() {
  local name=$1 base=${1%%.*} left
  shift
  local until=${step_end[$base]:-$deadline}
  ((until > deadline)) && until=$deadline
  left=$((until - SECONDS))
  if ((left < 3)); then
    echo "SKIPPED $name: its share of the time is spent" | tee "$work/$name.log"
    line step SKIPPED "$name" "0 s  its share of the time was spent"
    return 125
  fi
  local unbuffer=()
  # Line-buffered: a step cut at the end of its share still leaves its lines up to there.
  command -v stdbuf >/dev/null 2>&1 && unbuffer=(stdbuf -oL -eL)
  echo "-> $name (at most $left s)"
  local t0=$SECONDS rc=0
  (cd "$work" && exec timeout -k 5 "$left" "${unbuffer[@]}" "$@") >"$work/$name.log" 2>&1 || rc=$?
  local secs=$((SECONDS - t0)) status what="exit $rc"
  status=$(status_word "$rc" "$secs" "$left")
  case $status in
    TIMEOUT) what="cut at the end of its share ($left s)" ;;
    CRASHED) what="exit $rc ($(signal_name "$rc"))" ;;
    ok) what="" ;;
  esac
  line step "$status" "$name" "$secs s${what:+  $what}"
  echo "-- $name: $status after $secs s${what:+ ($what)}"
  pack
  return $rc
}

# Copies every log (files under 8 MB: not the trained models) into $out/logs.tar.gz, atomically.
pack() {
  [[ -n ${out:-} && -d ${work:-} ]] || return 0
  (cd "$work" && find . -type f -size -8M -print0 | tar --null -T - -czf "$out/logs.tar.gz.new" 2>/dev/null) &&
    mv "$out/logs.tar.gz.new" "$out/logs.tar.gz"
}

# ---- gtest binaries ---------------------------------------------------------------------------------
# The errors after which the process's CUDA context is lost (a sticky fault): every later test of the
# binary fails with it.
sticky_re='illegal memory access|illegal address|illegal instruction|misaligned address|unspecified launch failure|hardware stack error|device-side assert|context is unusable|an exception occurred on the device'

# tests_of LOG: one line per test that ended, in order: "STATUS NAME" (OK, FAILED, SKIPPED; FAULT:
# failed with a sticky device error), then "UNFINISHED NAME" for a test that started and never
# ended (a crash or a hang), then "COMPLETE" when the binary got to its end.
tests_of() {
  awk -v sticky="$sticky_re" '
    $1 == "[" && $3 == "]" && $2 == "RUN" {cur = $4; fault = 0; next}
    cur != "" && tolower($0) ~ sticky {fault = 1}
    $1 == "[" && $3 == "]" && ($2 == "OK" || $2 == "FAILED" || $2 == "SKIPPED") && / \([0-9]+ ms\)$/ {
      name = $4; sub(/,$/, "", name)
      s = $2; if (s == "FAILED" && fault) s = "FAULT"
      print s, name; cur = ""; next
    }
    /^\[==========\] [0-9]+ tests? from [0-9]+ test suites? ran\./ {done = 1}
    END {if (cur != "") print "UNFINISHED", cur; if (done) print "COMPLETE"}' "$1"
}

# gtest NAME BINARY FILTER: a GoogleTest binary as `step` runs it, one 'tests' line in the summary.
# A crash, a hang or a sticky device fault would hide (or fail) every test after it: the tests that
# had not ended run again in a new process without the culprit (NAME.restN), and the culprit of a
# crash or a fault alone with CUDA_LAUNCH_BLOCKING=1 (NAME.blockingN: its error names the kernel).
# Failed tests with a cuDNN error run again with cuDNN's error log (NAME.cudnnlog).
gtest() {
  local name=$1 bin=$2 filter=$3 rc=0 round=0 log culprit kind ended
  local -a logs=() culprits=() excluded=()
  step "$name" "$bin" --gtest_filter="$filter" --gtest_output="xml:$work/$name.xml" || rc=$?
  if ((rc == 125)); then
    line tests SKIPPED "$name" "$(basename "$bin"): not run"
    return 125
  fi
  logs+=("$work/$name.log")
  while :; do
    log=${logs[-1]}
    # Not to run again: every test that ended before the culprit, the culprit, and the tests after
    # it that passed or skipped (those that failed after a fault failed with it: they run again).
    culprit="" kind="" ended=()
    local s t
    while read -r s t; do
      case $s in
        OK | SKIPPED) ended+=("$t") ;;
        FAILED) [[ -z $culprit ]] && ended+=("$t") ;;
        FAULT) if [[ -z $culprit ]]; then culprit=$t kind="device fault"; fi ;;
        UNFINISHED)
          culprit=$t
          if ((rc == 124 || rc == 137)); then
            kind="hung: killed at the end of its share"
          elif ((rc > 128)); then
            kind="crashed: $(signal_name "$rc")"
          else
            kind="crashed: exit $rc"
          fi ;;
      esac
    done < <(tests_of "$log")
    [[ -n $culprit ]] || break
    round=$((round + 1))
    culprits+=("$culprit ($kind)")
    excluded+=("${ended[@]}" "$culprit")
    echo "!! $culprit $kind: the tests that had not ended run again without it"
    # The culprit alone, with every launch synchronous: the error names the kernel that faulted. Not
    # for a hang, which would only hang again.
    if [[ $kind != hung* ]]; then
      step "$name.blocking$round" env CUDA_LAUNCH_BLOCKING=1 "$bin" --gtest_filter="$culprit" || true
      grep -m5 -iE "illegal|launch|misaligned|kernel|signal|error" "$work/$name.blocking$round.log"
    fi
    ((round >= 3)) && break
    local rest
    rest=$(without "$filter" "${excluded[@]}")
    # Nothing left to run (the culprit was the binary's last test):
    local left_to_run
    left_to_run=$(cd "$work" && timeout 30 "$bin" --gtest_filter="$rest" --gtest_list_tests 2>/dev/null)
    grep -q '^  ' <<<"$left_to_run" || break
    rc=0
    step "$name.rest$round" "$bin" --gtest_filter="$rest" || rc=$?
    ((rc == 125)) && break
    logs+=("$work/$name.rest$round.log")
  done
  gtest_result "$name" "$bin" "${#culprits[@]}" "${culprits[@]}" "${logs[@]}"
}

# without FILTER TEST...: FILTER with TESTs added to its negative patterns.
without() {
  local filter=$1 neg
  shift
  neg=$(printf '%s:' "$@")
  neg=${neg%:}
  [[ $filter == *-* ]] && echo "$filter:$neg" || echo "$filter-$neg"
}

# gtest_result NAME BINARY N CULPRIT... LOG...: the binary's one summary line (every test's last
# status over its runs), and its status: 0 when every test passed or skipped, 3 when the GPU tests
# skipped for want of a usable GPU.
gtest_result() {
  local name=$1 bin=$2 n=$3
  shift 3
  local -a culprits=("${@:1:n}") logs=("${@:n+1}")
  local -A last=()
  local s t log
  for log in "${logs[@]}"; do
    while read -r s t; do
      case $s in OK | SKIPPED | FAILED | FAULT) last[$t]=$s ;; esac
    done < <(tests_of "$log")
  done
  local c
  for c in "${culprits[@]}"; do last[${c%% (*}]=CULPRIT; done
  local passed=0 skipped=0 failed=()
  for t in "${!last[@]}"; do
    case ${last[$t]} in
      OK) passed=$((passed + 1)) ;;
      SKIPPED) skipped=$((skipped + 1)) ;;
      FAILED | FAULT) failed+=("$t") ;;
    esac
  done
  local complete=1
  tests_of "${logs[-1]}" | grep -q '^COMPLETE' || complete=0
  local what
  what="$(basename "$bin"): $passed passed, $skipped skipped"
  ((${#culprits[@]})) && what+="; $(IFS=,; echo "${culprits[*]}" | sed 's/,/, /g')"
  ((${#failed[@]})) && what+="; failed: $(printf '%s\n' "${failed[@]}" | sort | paste -sd, - | sed 's/,/, /g')"
  ((complete)) || what+="; the last run did not reach the binary's end ($(basename "${logs[-1]}"))"
  local rc=0 status=ok
  if ((${#culprits[@]} || ${#failed[@]} || !complete)); then rc=1 status=FAILED; fi
  if grep -q "no CUDA device:" "${logs[0]}"; then
    what+="; the GPU tests skipped: $(grep -m1 -o "no CUDA device:.*" "${logs[0]}" | cut -c1-160)"
    ((rc == 0)) && rc=3 status="NO-GPU"
  fi
  if ((${#failed[@]})) && grep -qE "CUDNN_STATUS|cudnn[A-Z][A-Za-z]+ failed" "${logs[@]}"; then
    echo "!! a cuDNN failure: ${failed[*]} again with cuDNN's error log ($name.cudnnlog.log)"
    step "$name.cudnnlog" env CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr "$bin" \
      --gtest_filter="$(IFS=:; echo "${failed[*]}")" || true
    grep -m10 -E "CUDNN_STATUS|E! " "$work/$name.cudnnlog.log"
  fi
  grep -h -E "^\[ *(PASSED|FAILED|SKIPPED) *\]|Failure|Expected|Which is|actual" "${logs[@]}" | head -30
  line tests "$status" "$name" "$what"
  echo "== $name: $status: $what"
  return $rc
}

# ---- the machine: libraries, PyTorch ----------------------------------------------------------------
# resolve_torch: the Python with torch and torchvision, once: torch_py, torch_cuda (its CUDA version).
resolve_torch() {
  local cand info
  torch_py="" torch_cuda=""
  for cand in ${TORCH_PYTHON:-} python3 python; do
    command -v "$cand" >/dev/null 2>&1 || continue
    info=$("$cand" -c 'import torch, torchvision; print(torch.__version__, torch.version.cuda or "none", torch.cuda.is_available())' 2>/dev/null | tail -1) || continue
    [[ -n $info ]] || continue
    torch_py=$(command -v "$cand")
    torch_cuda=$(awk '{print $2}' <<<"$info")
    note note "python with torch: $torch_py (torch $(awk '{print $1}' <<<"$info"), CUDA $torch_cuda, sees a GPU: $(awk '{print $3}' <<<"$info"))"
    return 0
  done
  note note "no Python with torch and torchvision (tried ${TORCH_PYTHON:+$TORCH_PYTHON, }python3, python; TORCH_PYTHON names one): the PyTorch peers and the python part are skipped"
  return 1
}

find_cudnn() {
  # Prints a directory holding libcudnn.so.9 when the loader does not find it by itself.
  if ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then return 0; fi
  if [[ -n ${CUDNN_LIB:-} && -e $CUDNN_LIB/libcudnn.so.9 ]]; then echo "$CUDNN_LIB"; return 0; fi
  local cand py
  for py in ${torch_py:-} python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    cand=$("$py" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) || cand=""
    if [[ -n $cand && -e $cand/libcudnn.so.9 ]]; then echo "$cand"; return 0; fi
  done
  cand=$(find /usr /opt -name 'libcudnn.so.9' 2>/dev/null | head -1)
  [[ -n $cand ]] && dirname "$cand"
}

# The library folders of PyTorch's NVIDIA wheels (cuBLAS, NVRTC, ...), which cuDNN's engines load.
nvidia_wheel_libs() {
  local site
  [[ -n ${torch_py:-} ]] || return 0
  site=$("$torch_py" -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null) || return 0
  find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | paste -sd: -
}

# The library paths: stoker's binaries get the bundled libraries, cuDNN and the NVIDIA wheels'
# folders. Steps that run PyTorch get PyTorch's own path first and the bundle without its CUDA
# runtime: PyTorch loads its own libcudart, which serves stoker's extension too when the major
# versions agree; when they differ (other sonames) the bundled one comes last, for the extension.
setup() {
  local p missing=()
  for p in "${bundle_programs[@]}"; do [[ -x $bundle/bin/$p ]] || missing+=("$p"); done
  if ((${#missing[@]} == ${#bundle_programs[@]})); then
    note note "no bundle in $bundle: run 'bash scripts/gpu_check.sh prepare' on a build machine and copy its bundle here (STOKER_BUNDLE names it)"
    return 1
  fi
  ((${#missing[@]})) && note note "the bundle lacks ${missing[*]}: their steps fail"
  local libs=$work/bundled_libs
  mkdir -p "$libs"
  if ! tar -C "$libs" -xJf "$bundle/libs.tar.xz"; then
    note note "the bundle's libs.tar.xz did not unpack ($bundle/libs.tar.xz): nothing can run"
    return 1
  fi
  local lib absent=()
  [[ -f $bundle/libs.txt ]] || { note note "the bundle has no libs.txt: prepare it again"; return 1; }
  while read -r lib; do [[ -e $libs/$(basename "$lib") ]] || absent+=("$(basename "$lib")"); done <"$bundle/libs.txt"
  if ((${#absent[@]})); then
    note note "libs.tar.xz lacks ${absent[*]} (named in libs.txt): prepare the bundle again"
    return 1
  fi
  # Only what this machine lacks: a bundled copy of a library the system has would shadow it.
  local system_libs f kept=0 dropped=0
  system_libs=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for f in "$libs"/*; do
    [[ -e $f ]] || continue
    if grep -qxF "$(basename "$f")" <<<"$system_libs"; then rm -f "$f"; ((++dropped)); else ((++kept)); fi
  done
  # The same libraries without the CUDA runtime, for the steps that run PyTorch.
  local python_libs=$work/bundled_libs_python cudart_libs=$work/bundled_cudart
  mkdir -p "$python_libs" "$cudart_libs"
  for f in "$libs"/*; do
    [[ -e $f ]] || continue
    case $(basename "$f") in libcudart.so*) ln -sf "$f" "$cudart_libs/" ;; *) ln -sf "$f" "$python_libs/" ;; esac
  done
  local bundled_cudart cudart_note=""
  bundled_cudart=$(cd "$cudart_libs" && ls libcudart.so.* 2>/dev/null | head -1)
  if [[ -n $bundled_cudart && -n ${torch_cuda:-} && ${torch_cuda%%.*} != "$(cut -d. -f3 <<<"$bundled_cudart")" ]]; then
    cudart_note=":$cudart_libs"
  fi
  note note "bundled libraries: $kept used, $dropped left to this machine's own copies; CUDA runtime for stoker: ${bundled_cudart:-the system copy}; for the PyTorch steps: the one of PyTorch${cudart_note:+ (and the bundled one last, another major version)}"
  cudnn_dir=$(find_cudnn)
  wheel_libs=$(nvidia_wheel_libs)
  local torch_ld_path="${LD_LIBRARY_PATH:-}"
  stoker_ld_path="$bundle/bin:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}${cudnn_dir:+:$cudnn_dir}${wheel_libs:+:$wheel_libs}"
  python_ld_path="${torch_ld_path:+$torch_ld_path:}$bundle/bin:$python_libs${cudnn_dir:+:$cudnn_dir}$cudart_note"
  export LD_LIBRARY_PATH=$stoker_ld_path
  export STOKER_SOURCE_DIR=$root  # the tests' committed vectors
  export STOKER_CLI=$bundle/bin/stoker
  if [[ -d $bundle/shared_data ]]; then
    mkdir -p "$bundle/shared_data/models/keras"
    ln -sf "$mobilenet" "$bundle/shared_data/models/keras/"
    export STOKER_SHARED_DATA=$bundle/shared_data
  else
    note note "no shared_data in the bundle: the tests of the shared models skip"
  fi
  return 0
}
# torch_step NAME CMD...: a step with PyTorch's library path and stoker's extension on PYTHONPATH.
torch_step() { local name=$1; shift; step "$name" env LD_LIBRARY_PATH="$python_ld_path" PYTHONPATH="$bundle/python" "$@"; }

# figure TEXT: a benchmark's figure line; ratio OURS PEER: ", ratio X.XX" when both are numbers.
figure() { [[ -n $* ]] || return 0; note figure "$*"; echo "figure: $*"; }
ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf ", ratio %.2f", a / b}'; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
logof() { cat "$work/$1.log" 2>/dev/null; }

# ---- the parts --------------------------------------------------------------------------------------
# Device-only test filters: the host-only suites (CudaExecutorHostPath, ConvertMath, DeviceStages,
# CudnnPlan, Lowering, the GpuFineTune host twins, the CPU training tests) run in CI on every
# change and are left out here. The gate's tests are left out of the tail.
gate_feed_filter='GpuKernels.ConversionMatchesHostReference:GpuKernels.Bfloat16NchwNormalisedEqualsHostEmulation:GpuFeedTest.BatchesEqualTheCpuLoaders'
gate_cudnn_filter='CudnnBackend.MobileNetV2FeaturesMatchCpuBackend'
feed_filter="*-CudaExecutorHostPath.*:ConvertMath.*:DeviceStages.*:GpuFeedWithoutGpu.*:${gate_feed_filter}"
cudnn_filter="CudnnBackend.*:CudnnConv.*-CudnnBackend.InceptionResNetV2MatchesCpuBackend:${gate_cudnn_filter}"
trainer_filter='GpuFineTune.RunsOnTheDevice:GpuFineTune.MobileNetTopOnTheDevice:GpuFineTune.ConvolutionsCudnnRefusesTrainOnPaddedChannels:Ops.BackwardOnTheGpuMatchesTheCpu'
training_filter='TrainRun.OnTheGpuWhenThereIsOne'
cli_filter='Cli.DeviceCuda:Cli.DeviceAuto:Cli.FineTuneOnTheDevice'
# No timing tests (overlap) and no memory-growth tests: under the sanitizer they are slow and wrong.
memcheck_filter='GpuKernels.AugmentationMatchesCpuExecutor:GpuKernels.ConversionMatchesHostReference:GpuKernels.WorkspaceReuseAcrossStreams:GpuFeedTest.BatchesEqualTheCpuLoaders:GpuFeedTest.AugmentStageMatchesCpuExecutor:GpuFeedTest.ShutdownMidEpochLeavesNoPendingWork'

# report: the environment, for the gate's first step.
report() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free,clocks.max.sm --format=csv
  echo "libcudnn from: ${cudnn_dir:-the library path (ldconfig)}"
  echo "NVIDIA wheel libraries: ${wheel_libs:-none}"
  local lib dir=${cudnn_dir:-}
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
}

run_gate() {
  echo "== the gate: environment, the feed, one kernel against its host twin, one cuDNN forward against the CPU"
  step env.report env STOKER_BUNDLE="$bundle" cudnn_dir="$cudnn_dir" wheel_libs="$wheel_libs" \
    bash "$root/scripts/gpu_check.sh" report
  grep -E "Driver Version|^NVIDIA|^name|H200|H100|libcudnn from|not found|MISSING|compute-sanitizer" "$work/env.report.log" | head -20
  note note "GPU: $(grep -A1 -m1 '^name' "$work/env.report.log" | tail -1 | grep . || echo "none that nvidia-smi reports")"
  grep -q MISSING "$work/env.report.log" && note note "libraries missing: $(grep MISSING "$work/env.report.log" | awk '{print $2}' | paste -sd' ' -)"
  local rc=0 env_rc=0
  gtest env "$bundle/bin/stoker_trainer_tests" 'CudnnEnvironment.*' || env_rc=$?
  grep -E "^cuDNN |^NVIDIA|sm_|^bfloat16 |^float16 " "$work/env.log" | head -40
  note note "environment: $(grep -m1 -E "sm_[0-9]+" "$work/env.log"); $(grep -m1 "^cuDNN " "$work/env.log")"
  note note "cuDNN small-channel probe (bf16): $(grep -c "^bfloat16 .*forward ok.*backward-data ok.*backward-filter ok" "$work/env.log") of $(grep -c "^bfloat16 " "$work/env.log") configurations run fully (env.log)"
  gtest gate_feed "$bundle/bin/stoker_gpu_tests" "$gate_feed_filter" || rc=$?
  gtest gate_cudnn "$bundle/bin/stoker_trainer_tests" "$gate_cudnn_filter" || rc=$?
  if ((env_rc == 3 || rc == 3)); then
    no_gpu=1
    note note "no usable GPU for stoker's binaries here: the parts after the gate are not run"
  fi
  ((env_rc || rc)) && return 1
  return 0
}

run_bench() {
  local rc=0 ours peer
  echo "== CUDA augmentation kernel, warm epochs into device memory, the feed's copy bandwidth"
  step gpu_bench "$bundle/bin/gpu_bench" --size 299 --batch 256 --images 2048 --epochs 3 --iters 30 --reps 5 \
    --dir "$work/gpu_bench_data" || rc=1
  cat "$work/gpu_bench.log"
  [[ -n $torch_py ]] && { torch_step torch_augment_peer "$torch_py" "$root/bench/torch_augment_peer.py" --iters 30 --reps 5; cat "$work/torch_augment_peer.log"; }
  ours=$(logof gpu_bench | awk -F'|' '/^\| 1\. augmentation kernel/ {gsub(/[^0-9.]/, "", $3); print $3}')
  peer=$(logof torch_augment_peer | awk '/^torch_peer img\/s:/ {print $3}')
  figure "augmentation kernel 299x299 bf16 NCHW, batch 256: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}") (goal >= 3)"
  while IFS= read -r line; do figure "$line"; done < <(logof gpu_bench | grep -E "^\| [23]\.")

  echo "== cuDNN backend: MobileNetV2 0.35 forward, batch 256 (algorithms chosen, cold start)"
  step trainer_gpu_bench "$bundle/bin/trainer_gpu_bench" --model "$mobilenet" --batch 256 --iters 15 --reps 5 || rc=1
  grep -vE "^(Pad|Affine|Concat|MaxPool|AvgPool|Gap) " "$work/trainer_gpu_bench.log" | head -80
  [[ -n $torch_py ]] && { torch_step torch_mobilenet_peer "$torch_py" "$root/bench/torch_mobilenet_peer.py" --batch 256 --iters 15 --reps 5; cat "$work/torch_mobilenet_peer.log"; }
  ours=$(logof trainer_gpu_bench | awk '/^trainer_gpu_bench img\/s \(BF16\):/ {print $4}')
  peer=$(logof torch_mobilenet_peer | awk '/^torch_mobilenet_peer img\/s:/ {print $3}')
  figure "MobileNetV2 0.35 forward, batch 256, 224, bf16: stoker ${ours:-?} img/s, PyTorch ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}")"
  figure "cuDNN cold start: $(logof trainer_gpu_bench | grep -m1 -o "cold start: .*" || echo "?")"
  figure "cuDNN choices: $(grep -c "fused bias+relu" "$work/trainer_gpu_bench.log") convolutions fused, $(grep -c "refused:" "$work/trainer_gpu_bench.log") with refusals, $(grep -c "channels padded" "$work/trainer_gpu_bench.log") on channels padded to 8, $(grep -c "not deterministic" "$work/trainer_gpu_bench.log") not deterministic (trainer_gpu_bench.log)"

  echo "== GPU fine-tuning step (MobileNetV2 0.35 from block_13_expand, batch 32, 224) and its PyTorch peer"
  step fine_tune_bench "$bundle/bin/fine_tune_bench" --model "$mobilenet" --device cuda --batch 32 --steps 10 --reps 3 || rc=1
  cat "$work/fine_tune_bench.log"
  if [[ -n $torch_py ]]; then
    # Three runs of the peer in one step; the median of those that ended.
    torch_step fine_tune_peer bash -c 'for i in 1 2 3; do "$@" || exit; done' _ "$torch_py" "$root/bench/fine_tune_peers.py" \
      --device cuda --batch 32 --warmup 3 --steps 10
    cat "$work/fine_tune_peer.log"
  fi
  ours=$(logof fine_tune_bench | awk '/^fine_tune_bench img\/s:/ {print $3}')
  peer=$(logof fine_tune_peer | grep -o '"images_per_second": [0-9.]*' | awk '{print $2}' | median)
  figure "fine-tuning step on the GPU, batch 32: stoker ${ours:-?} img/s, PyTorch bf16 ${peer:-?} img/s$(ratio "${ours:-}" "${peer:-}") (medians of 3)"
  figure "$(logof fine_tune_bench | grep -E "^on the GPU:" | head -1)"

  echo "== the CPU backend on this machine's cores (MobileNetV2 0.35, batch 32)"
  step cpu_backend_bench "$bundle/bin/cpu_backend_bench" --model "$mobilenet" --cut sequential_9 --batch 32 --reps 3 \
    --min-time 0.5 || rc=1
  cat "$work/cpu_backend_bench.log"
  figure "CPU backend MobileNetV2 0.35 forward, batch 32, $(nproc) cores: $(logof cpu_backend_bench | awk '/^cpu_backend_bench img\/s:/ {print $3}') img/s, $(logof cpu_backend_bench | awk '/^cpu_backend_bench GFLOP\/s:/ {print $3}') GFLOP/s"

  echo "== stoker bench --suite gpu"
  step cli_bench_gpu "$bundle/bin/stoker" bench --suite gpu --data "$sample" --image-size 299 \
    --repeat 3 --json "$work/bench_gpu.json" || rc=1
  cat "$work/cli_bench_gpu.log"
  figure "stoker bench --suite gpu, 299, $(nproc) cores: $(logof cli_bench_gpu | grep -m1 -E "^warm epochs into GPU memory" | tr -s ' ' | cut -c1-200)"

  if [[ -n $torch_py && -d $bundle/python/stoker ]]; then
    echo "== Python: pinned host batches copied to the GPU, stoker.torch.DataLoader against torch's (pin_memory=True)"
    torch_step python_pinned "$torch_py" "$root/bench/python_peers.py" --suite torch --pin-memory \
      --data "$sample" --workers "$(nproc)" --epochs 1 --repeat 3 --json "$work/python_pinned.json" || rc=1
    cat "$work/python_pinned.log"
    figure "pinned batches to the GPU, $(nproc) workers: $(logof python_pinned | awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print "torchvision " $2 " img/s, stoker " $3 " img/s (" $4 ")"}' | head -1)"
  fi
  return $rc
}

run_feed() {
  echo "== GPU feed, conversion and CUDA augmentation; the shared augmentation math on the device"
  local rc=0
  gtest feed "$bundle/bin/stoker_gpu_tests" "$feed_filter" || rc=$?
  gtest augment_device "$bundle/bin/stoker_augment_device_tests" 'AugmentDevice.*' || rc=$?
  return $rc
}

run_cudnn() {
  echo "== cuDNN backend"
  local rc=0
  gtest cudnn "$bundle/bin/stoker_trainer_tests" "$cudnn_filter" || rc=$?
  grep -h -E "^gpu |darknet|mobilenet|device free" "$work"/cudnn*.log | head -20
  return $rc
}

run_trainer() {
  echo "== GPU fine-tuning and the training loop on the GPU"
  local rc=0
  gtest trainer "$bundle/bin/stoker_trainer_tests" "$trainer_filter" || rc=$?
  gtest training "$bundle/bin/stoker_training_tests" "$training_filter" || rc=$?
  return $rc
}

run_python() {
  echo "== Python: device batches into torch"
  if [[ ! -d $bundle/python/stoker ]]; then
    line step SKIPPED python "0 s  no Python 3.12 build in the bundle"
    return 0
  fi
  if [[ -z $torch_py ]]; then
    line step SKIPPED python "0 s  no Python with torch"
    return 0
  fi
  local rc=0
  torch_step python "$torch_py" "$root/scripts/gpu_check_python.py" --data "$sample" || rc=1
  cat "$work/python.log"
  while IFS= read -r line; do note note "$line"; done < <(logof python | grep -E "^python_gpu")
  return $rc
}

run_cli() {
  local s=$bundle/bin/stoker rc=0
  echo "== the command on the GPU: train, predict, and its device tests"
  step cli_train "$s" train --device cuda --data "$sample" --validation-split 0.2 \
    --model "$mobilenet" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$work/train_gpu" || rc=1
  tail -12 "$work/cli_train.log"
  note note "stoker train --device cuda: $(logof cli_train | grep -E "^best epoch" | tail -1); $(logof cli_train | grep -iE "waited for data|limited by" | tail -1)"
  step cli_predict "$s" predict --device cuda --model-dir "$work/train_gpu" "$sample/dog/dog.1.jpg" \
    "$sample/cat/cat.1.jpg" || rc=1
  cat "$work/cli_predict.log"
  run_two_ranks "$s" || rc=1
  gtest cli_tests "$bundle/bin/stoker_apps_tests" "$cli_filter" || rc=1
  return $rc
}

# Two ranks on one GPU (--device cuda:0,0: the command starts them under mpirun), with fine-tuning:
# the device path across ranks, its history against the one-process run's above. Needs a bundle
# built with MPI (STOKER_GPU_MPI=AUTO) and mpirun on this machine; else skipped, saying why.
run_two_ranks() {
  local s=$1 why=
  ldd "$s" 2>/dev/null | grep -q 'libmpi\.so' || why="the bundle was built without MPI (prepare with STOKER_GPU_MPI=AUTO)"
  [[ -z $why ]] && ! command -v mpirun >/dev/null 2>&1 && why="no mpirun on this machine (Open MPI)"
  if [[ -n $why ]]; then
    line step SKIPPED cli_two_ranks "0 s  $why"
    return 0
  fi
  local rc=0
  step cli_two_ranks "$s" train --device cuda:0,0 --data "$sample" --validation-split 0.2 \
    --model "$mobilenet" --cut-at sequential_9 --image-size 224 \
    --epochs 3 --horizontal-flip --rotation-range 20 --out "$work/train_two_ranks" || rc=1
  tail -8 "$work/cli_two_ranks.log"
  note note "two ranks on one GPU: $(logof cli_two_ranks | grep -E "^best epoch" | tail -1) (one process: $(logof cli_train | grep -E "^best epoch" | tail -1))"
  return $rc
}

run_memcheck() {
  echo "== compute-sanitizer memcheck over a few kernel and feed tests"
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    line step SKIPPED memcheck "0 s  no compute-sanitizer"
    return 0
  fi
  local rc=0
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 86 \
    "$bundle/bin/stoker_gpu_tests" --gtest_filter="$memcheck_filter" || rc=$?
  grep -E "ERROR SUMMARY|Invalid|out of bounds|^\[ *(PASSED|FAILED) *\]" "$work/memcheck.log" | head -20
  note note "memcheck: $(grep -m1 "ERROR SUMMARY" "$work/memcheck.log" || echo "no ERROR SUMMARY (exit $rc)")"
  return $rc
}

run_large() {
  echo "== InceptionResNetV2 at 299 on cuDNN (about 240 convolutions' algorithm search, two precisions)"
  local rc=0
  gtest large "$bundle/bin/stoker_trainer_tests" 'CudnnBackend.InceptionResNetV2MatchesCpuBackend' || rc=$?
  grep -h "inception_resnet_v2" "$work"/large*.log
  return $rc
}

run() {
  local parts=() p q
  for q in "$@"; do
    [[ " ${all_parts[*]} " == *" $q "* ]] || { echo "unknown part '$q' (${all_parts[*]})" >&2; return 2; }
  done
  # The canonical order, whatever the order asked for.
  for p in "${all_parts[@]}"; do
    if (($# == 0)); then parts+=("$p"); else for q in "$@"; do [[ $p == "$q" ]] && parts+=("$p"); done; fi
  done
  init_run "${parts[@]}"
  exec > >(tee -a "$out/gpu_check.log") 2>&1
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, deadline in $((deadline - SECONDS)) s; summary: $summary"
  export PYTHONUNBUFFERED=1
  no_gpu=0
  resolve_torch
  if ! setup; then
    note finished "in $((SECONDS - run_start)) s: nothing ran"
    pack
    return 1
  fi
  local status=0 failed=()
  for p in "${parts[@]}"; do
    if ((no_gpu)); then
      line step SKIPPED $p "0 s  no usable GPU"
      continue
    fi
    "run_$p" || { status=1; failed+=("$p"); }
    pack
  done
  note finished "in $((SECONDS - run_start)) s; parts with a failure: ${failed[*]:-none}"
  echo "== summary ($((SECONDS - run_start)) s)"
  cat "$summary"
  return $status
}

main() {
  local mode=${1:-run}
  (($#)) && shift
  case $mode in
    prepare) prepare "$@" ;;
    plan) plan ;;
    run) run "$@" ;;
    report) report ;;  # the gate's first step
    *) echo "usage: $0 prepare [BUILD_DIR] | plan | run [PART...] (parts: ${all_parts[*]})" >&2; return 2 ;;
  esac
}

# Sourced (by its test), the script only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
