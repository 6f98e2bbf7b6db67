#!/usr/bin/env bash
# sweep.sh MLP_TRAIN SWEEP_PY [CIFAR_TRAIN]: scripts/sweep.py over mlp_train on a synthetic
# set: a 2 x 2 grid split into two shards (as two machines would), the table over both,
# finished runs skipped, a sweep stopped by SIGTERM resumed from the run's checkpoint, one
# stopped by SIGHUP (its runs still checkpoint; stopped in their first epoch they show as
# partial), a --tensorboard folder per run, a Bool flag in the grid (cifar_train's --augment;
# CIFAR_TRAIN defaults to the one beside MLP_TRAIN), the quoted command file, a failing run
# reported, a wrapper script's app stopped with it, and usage errors.
set -uo pipefail
source "$(dirname "$0")/wait_checkpoint.sh"
source "$(dirname "$0")/processes.sh"
app=$1; sweep=$2; cifar=${3:-$(dirname "$1")/cifar_train}
work=$(mktemp -d)
trap 'kill %1 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }
base=(--data synthetic --synthetic-classes 3 --synthetic-size 200 --epochs 2 --threads 1)
grid=(--grid lr=1e-3,3e-3 --grid hidden=16,32)

"$sweep" --out "$work/s" "${grid[@]}" --shard 0/2 -- "$app" "${base[@]}" --tensorboard "$work/tb" > "$work/a.log" 2>&1 \
  || fail "shard 0/2 failed" "$work/a.log"
grep -q "4 runs in all, 2 in shard 0/2, 0 already done, 2 to run" "$work/a.log" || fail "shard 0/2 plan" "$work/a.log"
[[ -e "$work/s/lr=1e-3_hidden=16/done" && -e "$work/s/lr=3e-3_hidden=16/done" ]] || fail "shard 0 runs missing" "$work/a.log"
[[ ! -e "$work/s/lr=1e-3_hidden=32" ]] || fail "shard 0 ran another shard's run" "$work/a.log"
"$sweep" --out "$work/s" "${grid[@]}" --shard 1/2 -- "$app" "${base[@]}" --tensorboard="$work/tb" > "$work/b.log" 2>&1 \
  || fail "shard 1/2 failed" "$work/b.log"
# --tensorboard DIR (either spelling) is DIR/RUN for each run: four runs, four event logs
for r in lr=1e-3_hidden=16 lr=1e-3_hidden=32 lr=3e-3_hidden=16 lr=3e-3_hidden=32; do
  ls "$work/tb/$r"/events.out.tfevents.* > /dev/null 2>&1 || fail "no TensorBoard log for run $r" "$work/s/$r/command"
done
[[ -z $(find "$work/tb" -maxdepth 1 -type f) ]] || fail "event logs written to the shared --tensorboard folder" "$work/a.log"
"$sweep" --out "$work/s" "${grid[@]}" --summary > "$work/table" || fail "summary failed" "$work/table"
[[ $(grep -c " done " "$work/table") -eq 4 ]] || fail "the table should list 4 finished runs" "$work/table"
# without --grid, --summary reads the grid the sweep recorded in --out
"$sweep" --out "$work/s" --summary > "$work/table2" || fail "summary from grid.json failed" "$work/table2"
cmp -s "$work/table" "$work/table2" || fail "the summary from grid.json differs" "$work/table" "$work/table2"
python3 - "$work/s" <<'PY' || exit 1
import glob, json, sys
rows = [json.loads(open(f).read().splitlines()[-1]) for f in glob.glob(sys.argv[1] + "/*/metrics.jsonl")]
assert len(rows) == 4 and all(r["epoch"] == 2 for r in rows), rows
PY
"$sweep" --out "$work/s" "${grid[@]}" --shard 0/2 -- "$app" "${base[@]}" > "$work/c.log" 2>&1 \
  || fail "rerun failed" "$work/c.log"
grep -q "2 already done, 0 to run" "$work/c.log" || fail "finished runs were not skipped" "$work/c.log"

# Stopped mid-run by SIGTERM: the run checkpoints and stops; the same command resumes it.
# wide layers make each step take milliseconds, so the stop lands mid-run
long=(--data synthetic --synthetic-classes 3 --synthetic-size 1500 --epochs 2 --threads 1 --hidden 2048 --layers 2
      --checkpoint-every 5)
# stopped_sweep DIR SIG: the long sweep into $work/DIR (output in $work/DIR.log), sent SIG once
# its run has checkpointed; returns the sweep's exit status.
stopped_sweep() {
  "$sweep" --out "$work/$1" --grid lr=1e-3 -- "$app" "${long[@]}" > "$work/$1.log" 2>&1 &
  local pid=$!
  wait_checkpoint "$work/$1/lr=1e-3/ckpt"
  kill -"$2" $pid
  wait $pid
}
stopped_sweep t TERM
rc=$?
[[ $rc -eq 143 ]] || fail "a stopped sweep should exit 143, got $rc" "$work/t.log"
[[ ! -e "$work/t/lr=1e-3/done" ]] || fail "the stopped run is marked done" "$work/t.log"
"$sweep" --out "$work/t" --grid lr=1e-3 -- "$app" "${long[@]}" > "$work/e.log" 2>&1 \
  || fail "resuming the sweep failed" "$work/e.log" "$work/t/lr=1e-3/log"
grep -q "resumed from step" "$work/t/lr=1e-3/log" || fail "the run did not resume" "$work/t/lr=1e-3/log"
[[ -e "$work/t/lr=1e-3/done" ]] || fail "the resumed run is not done" "$work/e.log"

# SIGHUP (a closed terminal or ssh session) stops the sweep as SIGTERM does: the runs get
# SIGTERM, a graceful stop whatever the app does with SIGHUP. Stopped in its first epoch,
# the run has a checkpoint but no metrics yet: the table shows it as partial.
stopped_sweep h HUP
rc=$?
[[ $rc -eq 129 ]] || fail "a sweep stopped by SIGHUP should exit 129, got $rc" "$work/h.log"
grep -q "stopped by signal 15 .*checkpoint saved" "$work/h/lr=1e-3/log" \
  || fail "the run did not get SIGTERM and checkpoint" "$work/h.log" "$work/h/lr=1e-3/log"
"$sweep" --out "$work/h" --grid lr=1e-3 --summary > "$work/h.table" || fail "summary failed" "$work/h.table"
grep -Eq "^1e-3 +partial " "$work/h.table" || fail "the stopped run should be partial" "$work/h.table"

# A run that is a wrapper script (sh running the app as its child): the stop reaches the app
# too (the run's process group), which checkpoints, instead of training on orphaned, and the
# sweep ends after it.
printf '#!/bin/sh\n"$@"\n' > "$work/wrap.sh"
chmod +x "$work/wrap.sh"
"$sweep" --out "$work/w" --grid lr=1e-3 -- "$work/wrap.sh" "$app" "${long[@]}" > "$work/w.log" 2>&1 &
pid=$!
wait_checkpoint "$work/w/lr=1e-3/ckpt"
kill -TERM $pid
wait $pid
rc=$?
[[ $rc -eq 143 ]] || fail "a stopped sweep of a wrapper should exit 143, got $rc" "$work/w.log"
# (the sweep ends after the app: a re-run at once would otherwise start a second copy)
! pids_with "$work/w/lr=1e-3/ckpt" > /dev/null || fail "the app behind the wrapper outlived the sweep" "$work/w/lr=1e-3/log"
grep -q "stopped by signal 15 .*checkpoint saved" "$work/w/lr=1e-3/log" \
  || fail "the app behind the wrapper did not get SIGTERM" "$work/w.log" "$work/w/lr=1e-3/log"

# A Bool flag in the grid: passed as --augment=false (a separate word 'false' would be an
# unexpected argument to the app).
[[ -x "$cifar" ]] || fail "no cifar_train at '$cifar' (give it as the third argument)"
tiny=(--data synthetic --depth 8 --width 4 --synthetic-samples 100 --num-classes 2 --batch-size 50 --epochs 1
      --threads 1)
"$sweep" --out "$work/b" --grid augment=true,false -- "$cifar" "${tiny[@]}" > "$work/b.log" 2>&1 \
  || fail "a Bool grid flag failed" "$work/b.log" "$work/b/augment=false/log"
[[ -e "$work/b/augment=true/done" && -e "$work/b/augment=false/done" ]] || fail "Bool runs not done" "$work/b.log"

# The command file is the run's command line, quoted: a value with a space stays one word.
"$sweep" --out "$work/q" --grid "notify-cmd=wc -l" -- "$app" "${base[@]}" > "$work/q.log" 2>&1 \
  || fail "the notify-cmd sweep failed" "$work/q.log"
python3 - "$work/q/notify-cmd=wc_-l" "$app" "${base[@]}" <<'PY' || fail "the command file" "$work/q/notify-cmd=wc_-l/command"
import shlex, sys
d, want = sys.argv[1], sys.argv[2:] + ["--notify-cmd=wc -l", "--metrics", sys.argv[1] + "/metrics.jsonl",
                                        "--checkpoint-dir", sys.argv[1] + "/ckpt", "--resume"]
got = shlex.split(open(d + "/command").read())
assert got == want, (got, want)
PY

# A run that fails: marked, reported, exit status 1, the others still run.
"$sweep" --out "$work/f" --grid hidden=0,16 -- "$app" "${base[@]}" > "$work/g.log" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "a failing run should make the sweep exit 1, got $rc" "$work/g.log"
grep -q "FAILED hidden=0 (exit 2)" "$work/g.log" || fail "the failure is not reported" "$work/g.log"
[[ -e "$work/f/hidden=0/failed" && -e "$work/f/hidden=16/done" ]] || fail "markers" "$work/g.log"

# Usage errors: exit 1 with the one line that names the problem (no traceback), no run made.
usage_error() {  # usage_error MESSAGE SWEEP-ARGS...
  local msg=$1; shift
  "$sweep" "$@" > "$work/u.log" 2>&1 && fail "accepted $*" "$work/u.log"
  [[ $(wc -l < "$work/u.log") -eq 1 ]] && grep -q "^sweep: $msg" "$work/u.log" \
    || fail "expected the one line 'sweep: $msg' for $*" "$work/u.log"
  [[ ! -e "$work/u" ]] || fail "made run folders for $*" "$work/u.log"
}
usage_error "--shard must be I/N with 0 <= I < N, got '2/2'" --out "$work/u" --grid seed=1 --shard 2/2 -- "$app"
usage_error "--grid must be NAME=V1,V2" --out "$work/u" --grid seed=1 --grid lr -- "$app"
usage_error "--jobs must be at least 1" --out "$work/u" --grid seed=1 --jobs 0 -- "$app"
usage_error "--lr is both a grid flag and in the app's flags" --out "$work/u" --grid lr=1 -- "$app" --lr 2
usage_error "--lr is both a grid flag and in the app's flags" --out "$work/u" --grid lr=1 -- "$app" --lr=2
usage_error "--metrics is the sweep's own" --out "$work/u" --grid lr=1 -- "$app" --metrics m.jsonl
usage_error "--checkpoint-dir is the sweep's own" --out "$work/u" --grid lr=1 -- "$app" --checkpoint-dir=c
usage_error "--grid lr lists the value '1' twice" --out "$work/u" --grid lr=1,2,1 -- "$app"
usage_error "--grid lr has an empty value" --out "$work/u" --grid lr=1,,2 -- "$app"
usage_error "--out $work/table is not a folder" --out "$work/table" --grid lr=1 -- "$app"
usage_error "--out $work/u: no such folder" --out "$work/u" --summary
"$sweep" --out "$work/u" --grid x=a/b,a_b -- "$app" > "$work/u.log" 2>&1 && fail "accepted clashing run names" "$work/u.log"
grep -q "two runs would share a folder name" "$work/u.log" || fail "message" "$work/u.log"
# An app that is missing or not executable: a one-line error before any run folder, no traceback.
for bad in "$work/no-such-app" "$work/table" no-such-app-on-path; do
  "$sweep" --out "$work/m" --grid lr=1 -- "$bad" > "$work/u.log" 2>&1 && fail "accepted the app $bad" "$work/u.log"
  grep -q "^sweep: cannot run the app: '$bad'" "$work/u.log" || fail "message for $bad" "$work/u.log"
  ! grep -q Traceback "$work/u.log" || fail "a traceback for $bad" "$work/u.log"
  [[ ! -e "$work/m" ]] || fail "made run folders for $bad" "$work/u.log"
done
echo "ok: sharded sweep, table, skip, stop (SIGTERM, SIGHUP) and resume, TensorBoard folder per run, Bool grid flag, command" \
     "file, failure, usage errors"
