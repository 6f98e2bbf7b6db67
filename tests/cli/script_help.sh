#!/usr/bin/env bash
# script_help.sh: every shell script a user runs answers --help with its purpose (exit 0) and
# does nothing else; those that take no arguments refuse one (exit 2) instead of ignoring it
# and starting their work. (Each runs under a 20 s KILL, so a script that ignored the flag
# and set out on a build or a test run is stopped and reported, not waited for.)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
status=0
fail() { echo "FAIL: $1"; status=1; }
for s in scripts/check.sh scripts/check_cuda12.sh scripts/check_cuda_emu.sh scripts/check_toolchain.sh \
         scripts/setup.sh scripts/test.sh scripts/dist_launch.sh bench/gpu_suite.sh bench/gpu_prebuilt.sh \
         bench/stage_gpu_deps.sh data/fetch_mnist.sh data/fetch_cifar.sh; do
  out=$(timeout -s KILL 20 "$root/$s" --help 2>&1); rc=$?
  [[ $rc -eq 0 ]] || fail "$s --help exits $rc: $(head -3 <<< "$out")"
  [[ $(wc -l <<< "$out") -ge 2 && $out != *"unknown"* ]] || fail "$s --help prints no help: $out"
done
for s in scripts/check.sh scripts/check_cuda12.sh scripts/check_cuda_emu.sh scripts/check_toolchain.sh \
         scripts/setup.sh scripts/test.sh; do
  out=$(timeout -s KILL 20 "$root/$s" --quick 2>&1); rc=$?
  [[ $rc -eq 2 ]] || fail "$s --quick exits $rc, not 2: $(head -3 <<< "$out")"
  grep -q "takes no arguments, got '--quick'" <<< "$out" || fail "$s --quick: no message: $out"
done
# the fetch scripts take one folder: a second is refused before anything is made or fetched
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for s in data/fetch_mnist.sh data/fetch_cifar.sh; do
  out=$(cd "$work" && timeout -s KILL 20 "$root/$s" one two 2>&1; echo "rc=$?")
  grep -q "one folder at most" <<< "$out" && grep -q "rc=2" <<< "$out" || fail "$s one two: $out"
done
((status == 0)) && echo "ok: every script answers --help, and those without arguments refuse one"
exit $status
