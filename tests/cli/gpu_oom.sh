#!/usr/bin/env bash
# gpu_oom.sh BENCH DEVICE: asking the CUDA device for far more memory than it has gives one
# clear error naming the device, and exit status 1 (not a crash, and not the host's refusal of
# a staging copy). DEVICE is "gpu" (exit 77, reported as skipped, when `nvidia-smi -L` finds
# none) or "emulator" (tests/cuda_emu's device, always present).
set -uo pipefail
bench=$1; device=$2
if [[ $device != emulator ]] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "no GPU: skipped"; exit 77
fi
# 2,000,000 images of 3 x 224 x 224 in f32: 1.2 TB, more than any GPU (or this host) holds,
# so the first batch already fails (an H200's 141 GB would hold a tenth of that, and tests
# running beside this one would be short of memory while it did)
out=$("$bench" --device cuda --model resnet50 --batch-size 2000000 --num-batches 1 \
      --num-warmup-batches 0 --precisions fp32 2>&1); rc=$?
echo "$out" | tail -3
[[ $rc -eq 1 ]] || { echo "expected exit status 1, got $rc"; exit 1; }
grep -q "out of memory on cuda:0: tried to allocate" <<<"$out" \
  || { echo "no out-of-memory message for cuda:0"; exit 1; }
