#!/usr/bin/env bash
# resnet50_cpu.sh RESNET50_TRAIN MAKE_IMAGE_FOLDER PART: ResNet-50 end to end on the CPU at a
# small image size. PART synthetic: synthetic data (loss falls, no validation fields), NHWC and
# NCHW runs agree, resume, bad flags. PART folder: an ImageNet-layout JPEG folder (validation on
# val/) and its bad inputs; exit 77 (CTest: skipped) where the build has no JPEG decoder.
set -euo pipefail
app=$1; make_folder=$2; part=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
e="$(cd "$(dirname "$0")" && pwd)/expect.sh"
small=(--device cpu --image-size 32 --batch-size 4 --seed 2)

case $part in
synthetic)
"$app" "${small[@]}" --num-classes 4 --num-batches 6 --epochs 4 --metrics "$out/s.jsonl"
python3 - "$out/s.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, rows
assert all(r["val_loss"] is None and r["val_accuracy"] is None for r in rows), rows
assert all(math.isfinite(r["train_loss"]) for r in rows), rows
assert rows[-1]["train_loss"] < rows[0]["train_loss"], rows  # the synthetic pool is learnable
print("synthetic ok:", [round(r["train_loss"], 3) for r in rows])
PY

# Channels-last gives the row-major run's losses (same seed, same arithmetic on the CPU).
for l in nchw nhwc; do
  "$app" "${small[@]}" --num-classes 4 --num-batches 2 --epochs 2 --layout $l --metrics "$out/$l.jsonl" \
    --profile > "$out/$l.log"
  grep -q "where the training time went" "$out/$l.log"  # --profile's table
  grep -q "^conv2d_backward_weight " "$out/$l.log"
done
python3 - "$out/nchw.jsonl" "$out/nhwc.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["train_loss"] for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) == 2 and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)), (a, b)
print("layouts agree:", a, b)
PY

# Resumed in the second pass over the synthetic pool of 4 batches (from the checkpoint of
# step 5 of 6), the run ends with the uninterrupted run's weights bit for bit: each pass
# takes the loader's next order, the resumed one too.
"$app" "${small[@]}" --num-classes 4 --num-batches 6 --checkpoint-dir "$out/ck" --checkpoint-every 5 \
  --keep-last 10 --save-model "$out/straight.st" > /dev/null
ls "$out/ck"/ckpt-*.safetensors | tail -n +2 | xargs rm -f  # keep step 5's
"$app" "${small[@]}" --num-classes 4 --num-batches 6 --checkpoint-dir "$out/ck" --checkpoint-every 5 \
  --keep-last 10 --resume --save-model "$out/resumed.st" > "$out/resumed.log"
grep -q "resumed from step 5" "$out/resumed.log"
"$(dirname "$0")/same_tensors.py" "$out/straight.st" "$out/resumed.st" 1000000

"$e" 2 "--precision must be one of fp32, fp16, bf16" -- "$app" "${small[@]}" --precision fp8
"$e" 2 "--batch-size must be positive, got 0" -- "$app" "${small[@]}" --batch-size 0
"$e" 2 "--layout must be one of auto, nhwc, nchw" -- "$app" "${small[@]}" --layout nwhc
"$e" 2 "--lr must be a finite number >= 0, got -0.1" -- "$app" --device cpu --data /nonexistent --lr -0.1
"$e" 2 "--momentum must be a finite number >= 0" -- "$app" --device cpu --data /nonexistent --momentum -0.9
"$e" 2 "--num-batches must be 0 or more, got -3" -- "$app" "${small[@]}" --num-batches -3
;;
folder)
rc=0; "$make_folder" "$out/img" || rc=$?
if [[ $rc -eq 77 ]]; then echo "skipped: this build has no JPEG decoder (libjpeg)"; exit 77; fi
[[ $rc -eq 0 ]]
"$app" "${small[@]}" --data "$out/img" --epochs 1 --metrics "$out/f.jsonl" --save-model "$out/r.st"
python3 - "$out/f.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1, rows
r = rows[0]
assert math.isfinite(r["val_loss"]) and 0 <= r["val_accuracy"] <= 1, r
assert r["samples_per_second"] > 0, r
print("folder ok:", r)
PY
test -s "$out/r.st"

"$e" 1 "error: .*'/nonexistent" -- "$app" "${small[@]}" --data /nonexistent
mkdir -p "$out/noclass/train"
"$e" 1 "error: .*(no class|empty)" -- "$app" "${small[@]}" --data "$out/noclass"
"$e" 2 "--num-classes applies to --data synthetic only" -- "$app" "${small[@]}" --data "$out/img" --num-classes 2
# a folder of one class is refused as --num-classes 1 is (it trained, to a loss of -0)
mkdir -p "$out/oneclass/train"
cp -r "$out/img/train/bright" "$out/oneclass/train/"
"$e" 1 "has 1 class folder: a classifier needs two classes" -- "$app" "${small[@]}" --data "$out/oneclass"
# validation classes other than the training ones
cp -r "$out/img" "$out/img2"
mv "$out/img2/val/$(ls "$out/img2/val" | head -1)" "$out/img2/val/aaa_other"
"$e" 1 "has other class folders than" -- "$app" "${small[@]}" --data "$out/img2"
# --num-batches shorter than the set: a file past the epoch's batches is not waited for (the
# loop took one batch more after the last step, and a bad file there ended the run before
# validation and the checkpoint). DataLoader's order of the 24 images at seed 2, epoch 0:
# 20 5 2 10 19 14 16 13 | 1 15 9 3 | ...: sample 1, bright/1.jpg, opens the batch after two
cp -r "$out/img" "$out/img3"
head -c 100 "$out/img3/train/bright/1.jpg" > "$out/img3/cut" && mv "$out/img3/cut" "$out/img3/train/bright/1.jpg"
"$e" 0 "epoch 1/1" -- "$app" "${small[@]}" --data "$out/img3" --epochs 1 --num-batches 2
"$e" 1 "cannot decode JPEG '.*bright/1.jpg'" -- "$app" "${small[@]}" --data "$out/img3" --epochs 1 --num-batches 3
# a file larger than --max-image-pixels is named before it is decoded
"$e" 1 "JPEG '.*' is [0-9]+ x [0-9]+ = [0-9]+ pixels, more than the limit of 100 " -- "$app" "${small[@]}" --data "$out/img" --max-image-pixels 100
"$e" 2 "--max-image-pixels must be 0 \(no limit\) or more, got -1" -- "$app" "${small[@]}" --data "$out/img" --max-image-pixels -1
;;
*) echo "resnet50_cpu.sh: PART must be synthetic or folder, got '$part'" >&2; exit 2 ;;
esac
