#!/usr/bin/env bash
# cifar_cuda.sh CIFAR_TRAIN DEVICE: the CIFAR ResNet on CUDA (DEVICE "gpu": exit 77, skipped,
# when `nvidia-smi -L` finds none; "emulator": the CUDA emulator, tests/cuda_emu). One epoch
# of ResNet-8 with crops and flips on cuda:0, channels-last (stride-2 blocks: the shortcut's
# strided slice and zero channels), gives the CPU's validation loss; FP16 with loss scaling
# trains to a finite loss there.
set -uo pipefail
app=$1; device=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ $device != emulator ]]; then nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }; fi
small=(--data synthetic --synthetic-samples 96 --depth 8 --batch-size 32 --epochs 1 --seed 4
       --threads 2 --log-every 1000)
for d in cuda:0 cpu; do
  timeout 900 "$app" "${small[@]}" --device $d --metrics "$work/$d.jsonl" || exit 1
done
for p in fp16; do
  timeout 900 "$app" "${small[@]}" --device cuda:0 --precision $p --metrics "$work/$p.jsonl" || exit 1
done
python3 - "$work" <<'PY' || exit 1
import json, math, sys
row = lambda n: json.loads(open(f"{sys.argv[1]}/{n}.jsonl").read().splitlines()[-1])
gpu, cpu = row("cuda:0"), row("cpu")
print(f"val_loss: cuda {gpu['val_loss']:.6f}, cpu {cpu['val_loss']:.6f}")
assert abs(gpu["val_loss"] - cpu["val_loss"]) < 1e-3 * max(1, abs(cpu["val_loss"])), (gpu, cpu)
for p in ("fp16",):
    r = row(p)
    print(f"{p}: train_loss {r['train_loss']:.4f}, val_loss {r['val_loss']:.4f}")
    assert math.isfinite(r["train_loss"]) and math.isfinite(r["val_loss"]), r
PY
