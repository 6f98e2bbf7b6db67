#!/usr/bin/env bash
# A checkpoint without loss-scaler state (as mnist_train wrote before it took --precision)
# resumes an fp16 run with a fresh scaler and says so; the checkpoints it then writes hold the
# scaler's state again. A checkpoint that has the state resumes without the message.
set -uo pipefail
app=$1; data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--dataset fashion-mnist --data-dir "$data" --model cnn --train-samples 256 --test-samples 256
      --batch-size 64 --seed 5 --threads 2 --precision fp16 --checkpoint-every 4)
fail() { echo "$1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

"$app" "${args[@]}" --epochs 1 --checkpoint-dir "$work/ck" > "$work/first.log" 2>&1 \
  || fail "first run failed:" "$work/first.log"
last=$(ls "$work/ck"/ckpt-*.safetensors | tail -1)
[[ -n "$last" ]] || fail "no checkpoint written:" "$work/first.log"
cp -r "$work/ck" "$work/old"
"$(dirname "$0")/drop_tensors.py" "$work/old/$(basename "$last")" extra. || exit 1

"$app" "${args[@]}" --epochs 2 --checkpoint-dir "$work/old" --resume > "$work/old.log" 2>&1 \
  || fail "resume from the checkpoint without scaler state failed:" "$work/old.log"
grep -q "holds no loss-scaler state: loss scaling starts afresh" "$work/old.log" \
  || fail "no message about the missing scaler state:" "$work/old.log"
grep -q "resumed from step" "$work/old.log" || fail "did not resume:" "$work/old.log"
newest=$(ls "$work/old"/ckpt-*.safetensors | tail -1)
[[ "$newest" != "$work/old/$(basename "$last")" ]] || fail "the resumed run wrote no checkpoint:" "$work/old.log"
grep -aq '"extra.scale"' "$newest" || fail "the resumed run's checkpoint has no scaler state"

"$app" "${args[@]}" --epochs 2 --checkpoint-dir "$work/ck" --resume > "$work/new.log" 2>&1 \
  || fail "resume from a full checkpoint failed:" "$work/new.log"
grep -q "resumed from step" "$work/new.log" || fail "did not resume:" "$work/new.log"
if grep -q "loss-scaler state" "$work/new.log"; then fail "spurious scaler message:" "$work/new.log"; fi
echo "resumed with a fresh scaler from $(basename "$last")"
