#!/usr/bin/env bash
# Asking a GPU for far more memory than it has gives one clear error and exit status 1
# (not a crash). Exits 77 (reported as skipped) when no GPU is present.
set -uo pipefail
bench=$1
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
out=$("$bench" --device cuda --model resnet50 --batch-size 200000 --num-batches 1 \
      --num-warmup-batches 0 --precisions fp32 2>&1); rc=$?
echo "$out" | tail -3
[[ $rc -eq 1 ]] || { echo "expected exit status 1, got $rc"; exit 1; }
grep -q "out of memory on cuda:0: tried to allocate" <<<"$out" || { echo "no out-of-memory message"; exit 1; }
