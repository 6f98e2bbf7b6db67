#!/usr/bin/env bash
# dist_launch.sh LAUNCH: scripts/dist_launch.sh's process handling, with stand-in ranks (no
# libnn program): a stop signal while the ranks are just starting, or ranks that all die at
# once on it, ends the launcher with the signal's status (bash 5.2 can drop such ranks from
# its job table, where a `wait -n` loop spun forever); a failing rank stops the others and
# sets the status; a rank that is a wrapper script has its child stopped too (the signal
# goes to the rank's process group); an option without its value is a usage error; numbers
# are read in base 10.
set -uo pipefail
launch=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/processes.sh"
fail() { echo "FAIL: $*"; exit 1; }

# runs the launcher with ARGS, sends SIG after DELAY seconds (and, with ready=TEXT, once two
# processes whose command line holds TEXT run: the callers' --nprocs 2); sets rc and secs
signalled() {
  local sig=$1 delay=$2; shift 2
  local t0=$SECONDS
  # (job control: a background job of a script would start with SIGINT ignored, for good)
  set -m
  "$launch" "$@" > "$work/out" 2>&1 &
  local pid=$!
  set +m
  sleep "$delay"
  if [[ -n ${ready:-} ]]; then
    local n=0
    for _ in $(seq 100); do n=$(pids_with "$ready" | wc -l); ((n >= 2)) && break; sleep 0.1; done
    ((n >= 2)) || { kill -KILL $pid; fail "only $n of the ranks' '$ready' started in 10 s"; }
  fi
  kill -"$sig" $pid
  # at most 20 s: a launcher that spins is killed, and the check below fails
  for _ in $(seq 200); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
  kill -KILL $pid 2> /dev/null
  wait $pid; rc=$?
  secs=$((SECONDS - t0))
}
for i in $(seq 10); do
  signalled TERM 0.3 --nprocs 2 -- sleep 30
  [[ $rc -eq 143 ]] || fail "TERM, try $i: exit $rc after ${secs}s, expected 143: $(head -3 "$work/out")"
  [[ $(wc -l < "$work/out") -le 2 ]] || fail "TERM, try $i: $(wc -l < "$work/out") lines of output"
done
for i in $(seq 3); do
  signalled INT 0.3 --nprocs 3 -- sleep 30
  [[ $rc -eq 130 ]] || fail "INT, try $i: exit $rc, expected 130"
done

# rank 1 fails after 0.3 s: the others are stopped, and its status is the launcher's
cat > "$work/fails.sh" <<'SH'
#!/bin/sh
[ "$RANK" = 1 ] && { sleep 0.3; exit 3; }
exec sleep 30
SH
chmod +x "$work/fails.sh"
for i in $(seq 3); do
  timeout 20 "$launch" --nprocs 3 -- "$work/fails.sh" > "$work/out" 2>&1; rc=$?
  [[ $rc -eq 3 ]] || fail "a failing rank, try $i: exit $rc, expected 3"
  grep -q "a rank exited with status 3; stopping the others" "$work/out" || fail "no message: $(cat "$work/out")"
done

# a wrapper rank: its child gets the signal too, nothing is left running
marker="sleep 37.$$"
printf '#!/bin/sh\n%s\necho after\n' "$marker" > "$work/wrap.sh"
chmod +x "$work/wrap.sh"
ready=$marker signalled TERM 0.5 --nprocs 2 -- "$work/wrap.sh"
[[ $rc -eq 143 ]] || fail "a launcher of wrapper ranks stopped by TERM: exit $rc, expected 143"
sleep 0.3
if left=$(pids_with "$marker"); then kill $left; fail "a wrapper rank's child outlived the launcher"; fi

# a wrapper rank that dies at once on TERM while its child takes a second to stop (an app
# writing its checkpoint): the launcher ends after the child, not before
printf '#!/bin/sh\ntrap "sleep 1; echo saved >> %s; exit 143" TERM\nwhile :; do sleep 0.1; done\n' "$work/saved" \
  > "$work/slow.sh"
printf '#!/bin/sh\n%s\n' "$work/slow.sh" > "$work/wrap2.sh"
chmod +x "$work/slow.sh" "$work/wrap2.sh"
signalled TERM 0.5 --nprocs 2 -- "$work/wrap2.sh"
[[ $rc -eq 143 && $(wc -l < "$work/saved" 2> /dev/null) -eq 2 ]] \
  || fail "the launcher ended (exit $rc) before its ranks' children had stopped ($(cat "$work/saved" 2> /dev/null | wc -l) of 2)"

for opt in --nprocs --nnodes --node-rank --master; do
  timeout 5 "$launch" --nprocs 2 "$opt" > "$work/out" 2>&1; rc=$?
  [[ $rc -eq 2 ]] && grep -q -- "$opt needs a value" "$work/out" || fail "$opt without a value: exit $rc: $(cat "$work/out")"
done
# numbers with a leading zero are decimal (08 was a bash error and no rank; 010 eight ranks)
out=$(timeout 10 "$launch" --nprocs 08 --nnodes 02 --node-rank 01 -- sh -c 'echo "$RANK/$WORLD_SIZE"' 2>&1)
[[ $(sort -n <<< "$out" | tr '\n' ' ') == "8/16 9/16 10/16 11/16 12/16 13/16 14/16 15/16 " ]] \
  || fail "--nprocs 08 --nnodes 02 --node-rank 01 started: $out"
echo "ok: dist_launch.sh stops, fails and refuses as it should"
