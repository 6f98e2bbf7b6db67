#!/usr/bin/env bash
# gpu_suite_budget.sh: bench/gpu_suite.sh's time keeping, with stand-in programs (no GPU
# needed). A GPU session has 15 minutes of device time, so the suite must not let one step
# take the others' time, nor lose its results when it is stopped:
#   - a step that overruns its budget is cut there (its programs' children too) and the next
#     step still runs; summary.md ends with each step's seconds;
#   - GPU_SUITE_TIMEOUT (TERM to the suite and its process group) and a TERM to the suite's
#     pid alone stop it mid-step at once (not when the step's program ends), still writing
#     summary.md and the tarball, and leave no program running;
#   - a step whose program fails is listed to run again;
#   - a malformed GPU_SUITE_BUDGETS is refused before anything runs.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/processes.sh"
fail() { echo "FAIL: $1"; [[ -f ${2:-} ]] && cat "$2"; exit 1; }

# Stand-ins: kernels_bench and fp16_vs_fp32 (which runs through tsum, its output kept and
# summarised) say they started, start a child that outlives them unless their process group
# is killed, write that child's pid, and sleep; the "python" runs real python for the suite's
# table scripts (stdin) and stands in for the peers and benchmark drivers.
mkdir -p "$work/build/bin"
cat > "$work/build/bin/kernels_bench" <<EOF
#!/usr/bin/env bash
echo "stand-in \$(basename "\$0") started"
sleep 300 &
echo \$! >> "$work/children"
sleep 300
EOF
cp "$work/build/bin/kernels_bench" "$work/build/bin/fp16_vs_fp32"
# libnn_tests (a build folder is there: no build first) and, on the PATH, compute-sanitizer
# write when they start and end to a timeline; ctest passes
cat > "$work/build/bin/libnn_tests" <<EOF
#!/usr/bin/env bash
echo "tests start" >> "$work/timeline"; sleep \${STANDIN_TESTS_SECONDS:-0}; echo "tests end" >> "$work/timeline"
EOF
mkdir -p "$work/path"
cat > "$work/path/compute-sanitizer" <<EOF
#!/usr/bin/env bash
echo "sanitizer start \$*" >> "$work/timeline"
sleep 300 &
echo \$! >> "$work/children"
sleep \${STANDIN_SANITIZER_SECONDS:-3}; echo "sanitizer end" >> "$work/timeline"
EOF
printf '#!/bin/sh\necho "100%% tests passed, 0 tests failed out of 7"\n' > "$work/path/ctest"
chmod +x "$work/path/"*
cat > "$work/python" <<EOF
#!/usr/bin/env bash
[[ \${1:-} == - ]] && exec python3 "\$@"
echo "stand-in for: \$*"
exit \${STANDIN_PYTHON_EXIT:-0}
EOF
chmod +x "$work/build/bin/"* "$work/python"
suite=(env -u GPU_SUITE_TIMEOUT -u GPU_SUITE_BUDGETS BUILD_DIR="$work/build" PYTHON="$work/python"
       LIBNN_GPU_DEPS="$work/none" PATH="$work/path:$PATH")
run() {  # run OUTDIR [VAR=VALUE...] -- STEPS...
  local out=$1; shift
  local vars=(); while [[ $1 != -- ]]; do vars+=("$1"); shift; done; shift
  "${suite[@]}" OUT="$out" "${vars[@]}" "$root/bench/gpu_suite.sh" "$@" > "$out.log" 2>&1
}
no_children() {
  local p
  sleep 1  # (signals are delivered asynchronously; a killed child may stay a zombie: dead)
  while read -r p; do
    alive "$p" && { kill "$p"; fail "$1: a benchmark's child (pid $p) still runs"; }
  done < "$work/children"
  : > "$work/children"
}
: > "$work/children"

# 1. kernels overruns its 6 s budget; text runs after it
start=$SECONDS
run "$work/r1" GPU_SUITE_BUDGETS="kernels=6 text=20" -- text kernels
rc=$?; took=$((SECONDS - start))
((took < 40)) || fail "a step over its 6 s budget held the suite ${took} s" "$work/r1.log"
s=$work/r1/summary.md
[[ -f $s && -f $work/r1/gpu-results.tar.gz ]] || fail "no summary.md or tarball" "$work/r1.log"
grep -q "step kernels: cut at its budget (6 s): .*kernels_bench --device cuda" "$s" \
  || fail "the cut is not reported" "$s"
grep -q "step text [0-9]* s" "$s" || fail "the step after the cut one did not run" "$s"
grep -Eq "step times: kernels [0-9]+ s \(cut at its budget\),text [0-9]+ s$" "$s" \
  || fail "no step-times line, or one without the cut" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): kernels$" "$s" \
  || fail "the cut step is not listed to run again" "$s"
[[ $rc -ne 0 ]] || fail "a cut step left the suite's status 0" "$s"
[[ $(wc -l < "$work/children") -ge 1 ]] || fail "the stand-in benchmark never ran" "$work/r1.log"
no_children "cut at the step's budget"

# 2. GPU_SUITE_TIMEOUT=4 while kernels (budget 90 s) sleeps: stopped within seconds
start=$SECONDS
run "$work/r2" GPU_SUITE_TIMEOUT=4 -- kernels text
rc=$?; took=$((SECONDS - start))
((took < 20)) || fail "GPU_SUITE_TIMEOUT=4 took ${took} s to stop the suite" "$work/r2.log"
[[ $rc -eq 124 ]] || fail "a stopped suite exits $rc, not 124" "$work/r2.log"
s=$work/r2/summary.md
[[ -f $s && -f $work/r2/gpu-results.tar.gz ]] || fail "stopped suite: no summary.md or tarball" "$work/r2.log"
grep -q "stopped by a signal .* in step kernels" "$s" || fail "the stop does not name its step" "$s"
grep -Eq "step times: kernels [0-9]+ s \(stopped\)$" "$s" || fail "the stopped step is not in the step times" "$s"
grep -q "step text" "$s" && fail "a step ran after the suite was stopped" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): kernels text$" "$s" \
  || fail "the stopped and the unreached steps are not listed to run again" "$s"
no_children "stopped by GPU_SUITE_TIMEOUT"

# 3. a TERM to the suite's pid alone (not its group) while a summarised program runs: the
#    suite stops within seconds, not at the step's deadline, and its program is stopped
"${suite[@]}" OUT="$work/r3" GPU_SUITE_BUDGETS="resnet=60" "$root/bench/gpu_suite.sh" resnet curves \
  > "$work/r3.log" 2>&1 &
pid=$!  # (env execs the suite: this is its pid)
for ((i = 0; i < 50; ++i)); do [[ -s "$work/children" ]] && break; sleep 0.1; done
[[ -s "$work/children" ]] || fail "the stand-in fp16_vs_fp32 never started" "$work/r3.log"
start=$SECONDS; kill -TERM "$pid"; wait "$pid"; rc=$?; took=$((SECONDS - start))
((took < 20)) || fail "a TERM to the suite took ${took} s to stop it" "$work/r3.log"
[[ $rc -eq 124 ]] || fail "a suite stopped by TERM exits $rc, not 124" "$work/r3.log"
s=$work/r3/summary.md
[[ -f $s && -f $work/r3/gpu-results.tar.gz ]] || fail "TERM: no summary.md or tarball" "$work/r3.log"
grep -q "steps to run again (cut, stopped, failed or not reached): resnet curves$" "$s" \
  || fail "TERM: the stopped and unreached steps are not listed to run again" "$s"
no_children "stopped by a TERM to the suite's pid"

# 5. memcheck runs beside the tests (it starts before they end), keeps its own budget, and is
#    joined before the next step: both steps' times, neither to run again; then with a 6 s
#    budget its 30 s run is cut there, and only memcheck is to run again
: > "$work/timeline"
run "$work/r5" STANDIN_TESTS_SECONDS=3 -- memcheck test text
s=$work/r5/summary.md
[[ $(grep -n "sanitizer start" "$work/timeline" | head -1 | cut -d: -f1) -lt \
   $(grep -n "tests end" "$work/timeline" | head -1 | cut -d: -f1) ]] \
  || fail "memcheck did not run beside the tests: $(tr '\n' ' ' < "$work/timeline")" "$work/r5.log"
[[ $(grep -c "sanitizer end" "$work/timeline") -eq 5 ]] || fail "memcheck's five runs did not all end" "$work/r5.log"
# racecheck and synccheck over the attention case
for tool in racecheck synccheck; do
  grep -- "--tool $tool " "$work/timeline" | grep -qF "attention on the plain kernel and with the one-pass backward*" \
    || fail "no $tool run over the attention case: $(tr '\n' ' ' < "$work/timeline")" "$work/r5.log"
done
# the API-error report is off for the out-of-memory case alone
[[ $(grep -c -- "--report-api-errors no" "$work/timeline") -eq 1 ]] \
  && grep -- "--report-api-errors no" "$work/timeline" | grep -qF "[cuda][oom] " \
  && grep -qF "[cuda][memory]~[oom] " "$work/timeline" \
  || fail "the out-of-memory case is not the one run without the API-error report: $(tr '\n' ' ' < "$work/timeline")" "$work/r5.log"
grep -q "waiting for memcheck" "$s" || fail "the test step did not join memcheck" "$s"
(( $(grep -n "memcheck exit 0" "$s" | cut -d: -f1) < $(grep -n "text classifiers" "$s" | cut -d: -f1) )) \
  || fail "memcheck did not end before the next step started" "$s"
grep -Eq "step times: test [0-9]+ s,memcheck [0-9]+ s,text [0-9]+ s$" "$s" \
  || fail "the step times do not name test and memcheck" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): none$" "$s" \
  || fail "a step is to run again" "$s"
no_children "memcheck beside the tests"
run "$work/r5b" GPU_SUITE_BUDGETS="memcheck=6" STANDIN_SANITIZER_SECONDS=30 -- test memcheck
s=$work/r5b/summary.md
grep -q "step memcheck: cut at its budget (6 s): compute-sanitizer" "$s" || fail "memcheck's cut is not reported" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): memcheck$" "$s" \
  || fail "the cut memcheck is not (alone) to run again" "$s"
no_children "memcheck cut beside the tests"

# 6. a TERM while memcheck runs beside the tests stops both at once; both are to run again
"${suite[@]}" OUT="$work/r6" STANDIN_TESTS_SECONDS=60 STANDIN_SANITIZER_SECONDS=60 \
  "$root/bench/gpu_suite.sh" test memcheck > "$work/r6.log" 2>&1 &
pid=$!
for ((i = 0; i < 50; ++i)); do [[ -s "$work/children" ]] && break; sleep 0.1; done
[[ -s "$work/children" ]] || fail "the stand-in compute-sanitizer never started" "$work/r6.log"
start=$SECONDS; kill -TERM "$pid"; wait "$pid"; rc=$?; took=$((SECONDS - start))
((took < 20)) || fail "a TERM took ${took} s to stop the suite and memcheck" "$work/r6.log"
[[ $rc -eq 124 ]] || fail "a suite stopped by TERM exits $rc, not 124" "$work/r6.log"
s=$work/r6/summary.md
grep -Eq "step times: test [0-9]+ s \(stopped\),memcheck [0-9]+ s \(stopped\)$" "$s" \
  || fail "the stopped test and memcheck are not in the step times" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): test memcheck$" "$s" \
  || fail "TERM: test and memcheck are not listed to run again" "$s"
no_children "memcheck beside the tests, stopped by TERM"
pids_with "$work/build/bin/libnn_tests" > /dev/null && fail "the stand-in tests still run after a TERM"

# 6. a step whose program fails is to run again, and says so in the step times (it was
#    counted as finished: the line call 2 is planned from left it out)
run "$work/r6" STANDIN_PYTHON_EXIT=1 -- text
rc=$?
s=$work/r6/summary.md
[[ $rc -ne 0 ]] || fail "a failed step left the suite's status 0" "$s"
grep -Eq "step times: text [0-9]+ s \(failed\)$" "$s" || fail "the failed step is not marked failed" "$s"
grep -q "steps to run again (cut, stopped, failed or not reached): text$" "$s" \
  || fail "the failed step is not listed to run again" "$s"

# 4. bad budgets are usage errors
for b in "kernels" "kernels=0" "kernels=5s" "bogus=5"; do
  run "$work/r4" GPU_SUITE_BUDGETS="$b" -- kernels
  rc=$?
  [[ $rc -eq 2 ]] || fail "GPU_SUITE_BUDGETS='$b' exits $rc, not 2" "$work/r4.log"
  grep -q "GPU_SUITE_BUDGETS takes STEP=SECONDS words .*got '$b'" "$work/r4.log" \
    || fail "GPU_SUITE_BUDGETS='$b': no usage message" "$work/r4.log"
done
echo "ok"
