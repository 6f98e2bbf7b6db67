#!/usr/bin/env bash
# Starts a data-parallel run: --nprocs copies of PROGRAM on this machine, each with the
# environment a libnn app (or torchrun-style code) reads: WORLD_SIZE, RANK, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT, and OMP_NUM_THREADS = cores / nprocs unless already set.
# SIGTERM and SIGINT are passed on to every process and what it started, SIGHUP as SIGTERM
# (they stop together after one step, rank 0 writes the checkpoint). When a rank fails the
# others are stopped; the exit status is that of the first rank to fail (0 when all succeed).
#
#   scripts/dist_launch.sh --nprocs 2 -- build/bin/mnist_train --dataset fashion-mnist
#   # two machines, two GPUs each (run on each, with its --node-rank):
#   scripts/dist_launch.sh --nprocs 2 --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 -- \
#       build/bin/resnet50_train --device cuda --checkpoint-dir /shared/run1
set -uo pipefail

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  echo
  echo "usage: $0 --nprocs N [--nnodes M --node-rank K] [--master ADDR:PORT] -- PROGRAM [ARGS...]"
}

nprocs="" nnodes=1 node_rank=0 master=127.0.0.1:29500
while [[ $# -gt 0 ]]; do
  if [[ $1 == --nprocs || $1 == --nnodes || $1 == --node-rank || $1 == --master ]] && [[ $# -lt 2 ]]; then
    echo "$0: $1 needs a value (see --help)" >&2; exit 2
  fi
  case $1 in
    --nprocs) nprocs=${2-}; shift 2 ;;
    --nnodes) nnodes=${2-}; shift 2 ;;
    --node-rank) node_rank=${2-}; shift 2 ;;
    --master) master=${2-}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "$0: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
number() { [[ $1 =~ ^[0-9]{1,9}$ ]]; }  # (then read in base 10: a leading 0 is not octal)
if ! number "$nprocs" || ((10#$nprocs < 1)); then echo "$0: --nprocs must be a positive number (see --help)" >&2; exit 2; fi
if ! number "$nnodes" || ((10#$nnodes < 1)); then echo "$0: --nnodes must be a positive number" >&2; exit 2; fi
nprocs=$((10#$nprocs)) nnodes=$((10#$nnodes))
if ! number "$node_rank" || ((10#$node_rank >= nnodes)); then
  echo "$0: --node-rank must be from 0 to $((nnodes - 1))" >&2; exit 2
fi
port=${master##*:} addr=${master%:*}
if [[ $master != *:* ]] || ! number "$port" || [[ -z $addr ]]; then echo "$0: --master must be ADDR:PORT, got '$master'" >&2; exit 2; fi
node_rank=$((10#$node_rank)) port=$((10#$port))
if [[ $# -eq 0 ]]; then echo "$0: no program to run (see --help)" >&2; exit 2; fi

export WORLD_SIZE=$((nprocs * nnodes)) MASTER_ADDR=$addr MASTER_PORT=$port
if [[ -z ${OMP_NUM_THREADS-} ]]; then
  cores=$(nproc)
  export OMP_NUM_THREADS=$(( cores / nprocs > 0 ? cores / nprocs : 1 ))
fi

# The traps come first, so a signal while the ranks start still reaches those started.
running=()
stopping=0 stop_sig=TERM signalled=0
# SIGNAL [FROM]: to the process group of each rank from the FROM-th on (a rank that is a
# wrapper, a shell script or time, passes it on)
forward() {
  local pids=("${running[@]:${2:-0}}")
  [[ ${#pids[@]} -gt 0 ]] && kill -"$1" -- "${pids[@]/#/-}" 2>/dev/null
}
trap 'stopping=1 stop_sig=TERM signalled=${#running[@]}; forward TERM' TERM HUP
trap 'stopping=1 stop_sig=INT signalled=${#running[@]}; forward INT' INT

# Each rank in its own process group: a Ctrl-C at the terminal reaches only this script,
# which passes it on once. And each gets SIGTERM (a graceful stop) if this script dies
# without passing anything on (SIGKILL), instead of running on orphaned.
pdeath=()
if command -v setpriv > /dev/null && setpriv --pdeathsig TERM true 2> /dev/null; then
  pdeath=(setpriv --pdeathsig TERM --)
fi
set -m
started=()
for ((i = 0; i < nprocs && stopping == 0; i++)); do  # (none started after a stop signal)
  RANK=$((node_rank * nprocs + i)) LOCAL_RANK=$i "${pdeath[@]}" "$@" &
  running+=($!)
  started+=($!)
done
set +m  # the groups stay; no job-control notices from here on
# A signal that came between a rank's start and its entry in `running` reached only the ranks
# before it: the rest get it now (the first ones it reached are not signalled twice).
if [[ $stopping -eq 1 ]]; then forward "$stop_sig" "$signalled"; fi

# Wait for the ranks in the order they end. The first to fail sets the exit status (it is
# the cause); the others are then stopped, since they cannot go on without it and would
# otherwise wait for --dist-timeout.
status=0
while [[ ${#running[@]} -gt 0 ]]; do
  ended=""
  wait -n -p ended "${running[@]}" 2> /dev/null; rc=$?  # ("no such job": below)
  if [[ -z ${ended:-} ]]; then
    # A trapped signal interrupted the wait (wait unsets it), or a rank ended while a trap
    # ran: bash 5.2 then drops it from the job table, and wait -n returns at once without
    # naming it. A rank that is gone is waited for by its PID (bash kept its status).
    for p in "${running[@]}"; do
      if ! kill -0 "$p" 2> /dev/null; then
        ended=$p
        wait "$p"; rc=$?
        break
      fi
    done
    [[ -z ${ended:-} ]] && { sleep 0.1; continue; }  # (no busy loop while wait -n cannot wait)
  fi
  keep=()
  for p in "${running[@]}"; do [[ $p != "$ended" ]] && keep+=("$p"); done
  running=("${keep[@]}")
  if [[ $rc -ne 0 && $status -eq 0 ]]; then
    status=$rc
    # 130/143: a rank that stopped on a signal, which the ranks agree on, so the others stop
    # after the same step by themselves (rank 0 may still be writing the checkpoint).
    if [[ $stopping -eq 0 && $rc -ne 130 && $rc -ne 143 && ${#running[@]} -gt 0 ]]; then
      echo "$0: a rank exited with status $rc; stopping the others" >&2
      stopping=1
      forward TERM
    fi
  fi
done
# After a stop, a rank that was a wrapper may have ended before what it started (the app,
# still writing its checkpoint): the launcher ends when every rank's process group has
# (later signals still reach them).
if [[ $stopping -eq 1 ]]; then
  running=("${started[@]}")
  for p in "${started[@]}"; do
    while kill -0 -- "-$p" 2> /dev/null; do sleep 0.1; done
  done
fi
exit $status
