#!/usr/bin/env bash
# The GPU check's own logic, on a machine without a GPU: its step runner, its handling of a gtest
# binary that crashes or faults the device, summary.txt as it grows, a run killed mid-step, and
# the plan's shares. The commands are real processes (sleep, a shell killing itself with SIGSEGV,
# a small program printing GoogleTest's output); nothing of stoker runs.
#
#   bash tests/scripts/gpu_check_test.sh        # prints "ok: ..." per check; exit 1 on a failure
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check WHAT COMMAND...: COMMAND succeeds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
has() { grep -qE -- "$2" "$1"; }
lacks() { ! grep -qE -- "$2" "$1"; }
count() { grep -cE -- "$2" "$1"; }

# A stand-in for a GoogleTest binary: FAKE_TESTS lists its tests in order; a test named *Crash
# kills the process with SIGSEGV, *Fault fails with a sticky device error after which every later
# test fails, *Hang sleeps, *Fails fails. It honours --gtest_filter (positive and negative
# patterns) and --gtest_list_tests, and records every test it starts in $FAKE_RECORD.
cat >"$tmp/fake_gtest" <<'EOF'
#!/usr/bin/env bash
filter='*' list=0
for a in "$@"; do
  case $a in --gtest_filter=*) filter=${a#--gtest_filter=} ;; --gtest_list_tests) list=1 ;; esac
done
pos=${filter%%-*} neg=
[[ $filter == *-* ]] && neg=${filter#*-}
[[ -z $pos ]] && pos='*'
matches() {  # matches TEST PATTERNS
  local p
  IFS=: read -ra ps <<<"$2"
  for p in "${ps[@]}"; do [[ -n $p && $1 == $p ]] && return 0; done
  return 1
}
chosen=()
for t in $FAKE_TESTS; do matches "$t" "$pos" && ! matches "$t" "$neg" && chosen+=("$t"); done
if ((list)); then
  for t in "${chosen[@]}"; do echo "${t%%.*}."; echo "  ${t#*.}"; done
  exit 0
fi
echo "[==========] Running ${#chosen[@]} tests from 1 test suite."
lost=0 failed=0
for t in "${chosen[@]}"; do
  echo "$t${CUDA_LAUNCH_BLOCKING:+ blocking}" >>"$FAKE_RECORD"
  echo "[ RUN      ] $t"
  if ((lost)); then
    echo "error: the CUDA context is unusable since an illegal memory access"
    echo "[  FAILED  ] $t (0 ms)"; failed=1; continue
  fi
  case $t in
    *Crash) kill -SEGV $$ ;;
    *Hang) sleep 60 ;;
    *Fault) echo "CudaError: an illegal memory access was encountered"; echo "[  FAILED  ] $t (1 ms)"; lost=1 failed=1 ;;
    *Fails) echo "x.cpp:1: Failure"; echo "[  FAILED  ] $t (0 ms)"; failed=1 ;;
    *Skip) echo "[  SKIPPED ] $t (0 ms)" ;;
    *) echo "[       OK ] $t (0 ms)" ;;
  esac
done
echo "[==========] ${#chosen[@]} tests from 1 test suite ran. (1 ms total)"
exit $failed
EOF
chmod +x "$tmp/fake_gtest"
fake=$tmp/fake_gtest

# The script's functions, with a schedule of its own.
# shellcheck source=../../scripts/gpu_check.sh
source "$here/scripts/gpu_check.sh"
# shellcheck disable=SC2034  # read by the sourced functions
# A step ends where the shares up to its own end (the time the steps before it leave is its too):
# slow and hanging come first to be cut at 4 and 8 s.
schedule=("t slow 4" "t hanging 4" "t after_slow 5" "t plain 20" "t false_step 5" "t segv 5" "t crashing 20"
  "t faulting 20" "t trainer 10" "t training 10")
export STOKER_GPU_CHECK_OUT=$tmp/out STOKER_GPU_CHECK_WORK=$tmp/work STOKER_GPU_DEADLINE=99
init_run t
s=$tmp/out/summary.txt

# ---- steps
t0=$SECONDS
step slow sleep 30 >/dev/null
export slow_secs=$((SECONDS - t0))
# ---- a hang: cut at the end of its share, named
export FAKE_RECORD=$tmp/record_hang
FAKE_TESTS="H.one H.Hang H.after" gtest hanging "$fake" '*' >/dev/null
step after_slow sleep 0 >/dev/null
step plain true >/dev/null
step false_step false >/dev/null
step segv bash -c 'kill -SEGV $$' >/dev/null
check "a passing step: ok" has "$s" '^step +ok +plain +[0-9]+ s$'
check "a failing step: FAILED with its exit status" has "$s" '^step +FAILED +false_step +[0-9]+ s +exit 1$'
check "a step killed by SIGSEGV: CRASHED, naming the signal" has "$s" '^step +CRASHED +segv .*exit 139 \(SEGV\)'
check "a step past its share: cut at its end (after ${slow_secs} s of a 30 s sleep, its share 4 s)" \
  bash -c "((slow_secs <= 6)) && grep -qE '^step +TIMEOUT +slow .*cut at the end of its share' '$s'"
check "the step after it still runs" has "$s" '^step +ok +after_slow'
check "logs.tar.gz holds each step's log" bash -c "tar -tzf '$tmp/out/logs.tar.gz' | grep -q after_slow.log"

# ---- a gtest binary that crashes: the rest once, the culprit alone, no passed test again
export FAKE_RECORD=$tmp/record_crash
FAKE_TESTS="A.one A.two B.Crash B.after C.Fails C.Skip" gtest crashing "$fake" '*' >/dev/null
r=$FAKE_RECORD
check "crash: the tests before it ran once" bash -c "[[ \$(grep -cx A.one '$r') == 1 && \$(grep -cx A.two '$r') == 1 ]]"
check "crash: the culprit ran again alone with CUDA_LAUNCH_BLOCKING=1" has "$r" '^B.Crash blocking$'
check "crash: the tests after it ran once, in a new process" \
  bash -c "[[ \$(grep -cx B.after '$r') == 1 && \$(grep -cx C.Fails '$r') == 1 ]]"
check "crash: one tests line naming the culprit and the failure" \
  has "$s" '^tests +FAILED +crashing +fake_gtest: 3 passed, 1 skipped; B.Crash \(crashed: SEGV\); failed: C.Fails$'
check "crash: the re-run's step lines" has "$s" '^step +ok +crashing.blocking1|^step +CRASHED +crashing.blocking1'
check "crash: the rest's step line" has "$s" '^step +FAILED +crashing.rest1'

# ---- a sticky device fault: the tests that failed after it run again and pass
export FAKE_RECORD=$tmp/record_fault
FAKE_TESTS="A.one D.Fault E.x E.y" gtest faulting "$fake" 'A.*:D.*:E.*' >/dev/null
r=$FAKE_RECORD
check "fault: the tests after it ran again (failed with the fault, then passed)" \
  bash -c "[[ \$(grep -cx E.x '$r') == 2 && \$(grep -cx E.y '$r') == 2 && \$(grep -cx A.one '$r') == 1 ]]"
check "fault: the culprit alone with CUDA_LAUNCH_BLOCKING=1" has "$r" '^D.Fault blocking$'
check "fault: one tests line, the context loss not counted against the others" \
  has "$s" '^tests +FAILED +faulting +fake_gtest: 3 passed, 0 skipped; D.Fault \(device fault\)$'

# ---- two binaries, two statuses
export FAKE_RECORD=$tmp/record_two
FAKE_TESTS="T.ok" gtest trainer "$fake" '*' >/dev/null
FAKE_TESTS="U.Fails" gtest training "$fake" '*' >/dev/null
check "two binaries: each its own status" \
  bash -c "grep -qE '^tests +ok +trainer ' '$s' && grep -qE '^tests +FAILED +training .*failed: U.Fails' '$s'"

check "hang: named as hung, not run again alone" \
  bash -c "grep -qE '^tests +FAILED +hanging .*H.Hang \(hung' '$s' && ! grep -q 'H.Hang blocking' '$tmp/record_hang'"

# ---- a run killed in the middle of a step: summary.txt names every step that ended
kill_out=$tmp/killed
(
  export STOKER_GPU_CHECK_OUT=$kill_out STOKER_GPU_CHECK_WORK=$tmp/killed_work
  # shellcheck disable=SC2034
  schedule=("k first 10" "k second 10" "k third 60")
  init_run k
  step first true
  step second sleep 1
  step third bash -c "echo \$\$ >'$tmp/third.pid'; exec sleep 60"
  note finished "never reached"
) >/dev/null 2>&1 &
runner=$!
for _ in $(seq 50); do grep -q ' second ' "$kill_out/summary.txt" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -KILL "$runner"
wait "$runner" 2>/dev/null
check "killed: summary.txt names each step that ended" \
  bash -c "grep -qE '^step +ok +first' '$kill_out/summary.txt' && grep -qE '^step +ok +second' '$kill_out/summary.txt'"
check "killed: no line for the step cut off, no finished line" \
  bash -c "! grep -qE ' third |^finished' '$kill_out/summary.txt'"
check "killed: logs.tar.gz readable, with the ended steps' logs" \
  bash -c "tar -tzf '$kill_out/logs.tar.gz' | grep -q second.log"
# The cut-off step's own process outlives the run that started it (as on a machine that is
# taken back, where it dies with the machine): ended here by its id.
[[ -s $tmp/third.pid ]] && kill "$(cat "$tmp/third.pid")" 2>/dev/null

# ---- the plan
p=$tmp/plan.txt
env -u STOKER_GPU_DEADLINE bash "$here/scripts/gpu_check.sh" plan >"$p"
check "plan: every part's share inside the 480 s deadline" \
  bash -c "grep -q 'of a 480 s deadline' '$p' && grep -qE '^  large +[0-9]+ s +ends by +480 s' '$p' &&
           [[ \$(grep -cE '^  (gate|bench|feed|cudnn|trainer|python|cli|memcheck|large) +[0-9]+ s ' '$p') == 9 ]]"
check "plan: the benchmarks come right after the gate" bash -c "grep -A1 -E '^  gate ' '$p' | grep -qE '^  bench '"

((failures)) && { echo "$failures check(s) FAILED; the summary:"; cat "$s"; exit 1; }
echo "all checks passed"
