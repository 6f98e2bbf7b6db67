#!/usr/bin/env bash
# mnist_smoke.sh APP DATA [FLAG...]: trains the Keras CNN on 2,000 Fashion-MNIST images for one
# epoch (with the extra flags, --precision bf16 say) and checks the metrics line: every field
# present, accuracy well above chance (10%).
set -euo pipefail
app=$1; data=$2; shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$app" --dataset fashion-mnist --data-dir "$data" --train-samples 2000 --epochs 1 \
       --metrics "$out/m.jsonl" --seed 3 "$@" | tee "$out/log"
# the header names the precision the run used (fp32 unless asked)
precision=fp32
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  [[ ${args[i]} == --precision ]] && precision=${args[i + 1]}
done
grep -q "^mnist_train: fashion-mnist cnn on cpu, $precision, " "$out/log" \
  || { echo "FAIL: the header does not say $precision" >&2; exit 1; }
python3 - "$out/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1, rows
r = rows[0]
for k in ["epoch", "train_loss", "val_loss", "val_accuracy", "seconds", "samples_per_second"]:
    assert k in r, (k, r)
assert r["epoch"] == 1
assert r["val_accuracy"] > 0.6, r
assert r["samples_per_second"] > 0 and r["seconds"] > 0
print("metrics ok:", r)
PY
