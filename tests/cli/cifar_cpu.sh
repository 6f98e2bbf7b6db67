#!/usr/bin/env bash
# cifar_cpu.sh CIFAR_TRAIN: the CIFAR ResNet app end to end on the CPU.
# - It learns the synthetic set: validation accuracy far above chance after two epochs.
# - A resumed run (from a checkpoint in the middle of an epoch, so the crops and flips of the
#   rest of that epoch must be replayed) ends with the uninterrupted run's model, bit for bit.
# - It reads CIFAR-10 and CIFAR-100 binary folders (written here from the format's spec).
# - Bad inputs give clear errors.
set -euo pipefail
app=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
e="$(cd "$(dirname "$0")" && pwd)/expect.sh"
small=(--data synthetic --depth 8 --batch-size 50 --threads 2 --seed 3 --log-every 1000)

"$app" "${small[@]}" --synthetic-samples 750 --epochs 2 --metrics "$out/s.jsonl"
python3 - "$out/s.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, rows
assert all(math.isfinite(r["train_loss"]) and r["samples_per_second"] > 0 for r in rows), rows
assert rows[-1]["val_accuracy"] > 0.6, rows  # 10 classes: chance is 0.1
# top-5 accuracy: at least top-1's, at most 1, and above top-5's chance (0.5) once learned
assert all(r["val_accuracy"] <= r["val_top5_accuracy"] <= 1 for r in rows), rows
assert rows[-1]["val_top5_accuracy"] > 0.8, rows
print("synthetic ok:", [(round(r["train_loss"], 3), r["val_accuracy"], r["val_top5_accuracy"]) for r in rows])
PY

# 300 images, batch 50: 6 steps an epoch; checkpoints every 4 steps, so step 4 is mid-epoch.
r=(--synthetic-samples 300 --epochs 2 --checkpoint-dir "$out/ck" --checkpoint-every 4 --keep-last 100)
"$app" "${small[@]}" "${r[@]}" --save-model "$out/straight.safetensors" > "$out/straight.log"
for f in "$out"/ck/ckpt-*.safetensors; do
  [[ $f == */ckpt-0000000004.safetensors ]] || rm "$f"
done
"$app" "${small[@]}" "${r[@]}" --resume --save-model "$out/resumed.safetensors" > "$out/resumed.log"
grep -q "resumed from step 4" "$out/resumed.log" || { cat "$out/resumed.log"; exit 1; }
"$(dirname "$0")/same_tensors.py" "$out/straight.safetensors" "$out/resumed.safetensors" 100000

# CIFAR-10 (in its unpacked folder) and CIFAR-100, per the binary format: label byte(s), then
# 3072 pixel bytes. Pixels are random with a class-dependent brightness.
python3 - "$out" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(1)
def records(n, classes, hundred):
    b = bytearray()
    for i in range(n):
        c = i % classes
        b += bytes([c // 5, c]) if hundred else bytes([c])
        b += bytes(min(255, 20 * (c % 10) + rng.randrange(60)) for _ in range(3072))
    return b
os.makedirs(f"{root}/c10/cifar-10-batches-bin")
for k in range(1, 6):
    open(f"{root}/c10/cifar-10-batches-bin/data_batch_{k}.bin", "wb").write(records(40, 10, False))
open(f"{root}/c10/cifar-10-batches-bin/test_batch.bin", "wb").write(records(30, 10, False))
open(f"{root}/c10/cifar-10-batches-bin/batches.meta.txt", "w").write(
    "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n")
os.makedirs(f"{root}/c100")
open(f"{root}/c100/train.bin", "wb").write(records(200, 100, True))
open(f"{root}/c100/test.bin", "wb").write(records(100, 100, True))
PY
"$app" --data-dir "$out/c10" --depth 8 --batch-size 40 --epochs 1 --threads 2 --metrics "$out/c10.jsonl" \
  | tee "$out/c10.log"
grep -q "on CIFAR-10, 10 classes, 200 train / 30 test images" "$out/c10.log"
grep -q "val_top5 [0-9.]*%" "$out/c10.log"
"$app" --data-dir "$out/c100" --depth 8 --batch-size 40 --epochs 1 --threads 2 --test-samples 50 \
  --metrics "$out/c100.jsonl" | tee "$out/c100.log"
grep -q "on CIFAR-100, 100 classes, 200 train / 50 test images" "$out/c100.log"
python3 - "$out/c10.jsonl" "$out/c100.jsonl" <<'PY'
import json, math, sys
for f in sys.argv[1:]:
    (r,) = [json.loads(l) for l in open(f)]
    assert math.isfinite(r["val_loss"]) and 0 <= r["val_accuracy"] <= r["val_top5_accuracy"] <= 1, r
print("CIFAR folders ok")
PY

"$e" 1 "error: data folder 'data/nowhere' not found: run data/fetch_cifar.sh" -- "$app" --data-dir data/nowhere
mkdir "$out/empty"
"$e" 1 "CIFAR data not found in '$out/empty'" -- "$app" --data-dir "$out/empty"
head -c 5000 "$out/c100/train.bin" > "$out/c100/train.bin.part" && mv "$out/c100/train.bin.part" "$out/c100/train.bin"
"$e" 1 "train.bin' has 5000 bytes, not a whole number of 3074-byte records" -- "$app" --data-dir "$out/c100"
"$e" 1 "hold no full batch of 128" -- "$app" --data synthetic --synthetic-samples 100
"$e" 2 "--depth must be 6n \+ 2" -- "$app" --depth 18
"$e" 2 "--data must be one of cifar, synthetic" -- "$app" --data imagenet
"$e" 2 "--precision must be one of fp32, fp16, bf16" -- "$app" --precision fp8
"$e" 2 "--synthetic-samples must be" -- "$app" --data synthetic --synthetic-samples 0
"$e" 2 "--num-classes must be at least 2, got 1" -- "$app" --data synthetic --num-classes 1
"$e" 2 "--depth must be at most 10000" -- "$app" --depth 1000000000004
# optimizer flags are checked before the data is read (a missing folder would be exit 1)
"$e" 2 "--weight-decay must be a finite number >= 0, got -1" -- "$app" --data-dir data/nowhere --weight-decay -1
"$e" 2 "--label-smoothing must be in \[0, 1\], got 1.5" -- "$app" --data-dir data/nowhere --label-smoothing 1.5
"$e" 2 "--warmup-epochs must not exceed --epochs \(2\)" -- "$app" --data-dir data/nowhere --epochs 2 --warmup-epochs 3
mkdir -p "$out/both" && cp -r "$out/c10/cifar-10-batches-bin" "$out/both/" && mkdir "$out/both/cifar-100-binary"
cp "$out/c100/test.bin" "$out/both/cifar-100-binary/train.bin"
"$e" 1 "holds both CIFAR-10 and CIFAR-100: name one" -- "$app" --data-dir "$out/both"
"$app" --data-dir "$out/both/cifar-10-batches-bin" --depth 8 --batch-size 40 --epochs 1 --threads 2 \
  --augment=false > "$out/named.log"  # (not piped to grep -q: its early exit would SIGPIPE the app)
grep -q "on CIFAR-10, 10 classes, 200 train" "$out/named.log"
"$e" 2 "--num-classes applies to --data synthetic only" -- "$app" --num-classes 5
"$e" 2 "--data-dir applies to --data cifar only" -- "$app" --data synthetic --data-dir "$out/c10"
echo "cifar_train ok"
