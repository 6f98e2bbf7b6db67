#!/usr/bin/env bash
# fp16_bench_tools.sh FP16_VS_FP32: the tools around the precision benchmark, on the CPU with
# the MNIST CNN at tiny sizes: fp16_vs_torch.py tabulates two result files (here one run and
# the same run at twice the throughput, so libnn / PyTorch must read 0.50x) and merges them, names a run whose loss is not
# finite, and refuses files it cannot read; plot_loss_curves.py summarises and
# plots the per-step losses, and fails on a NaN loss.
set -euo pipefail
bench=$1
root="$(cd "$(dirname "$0")/../.." && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
py=python3

"$bench" --device cpu --model mnist_cnn --batch-size 8 --num-warmup-batches 1 --num-batches 3 \
    --precisions fp32,bf16 --json "$out/l.json" --loss-curve "$out/c.csv" > "$out/run.log"
# the "peer": the same records at twice the throughput, so libnn / PyTorch must read 0.50x
"$py" - "$out/l.json" "$out/t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["records"]:
    r["samples_per_second"] *= 2
    r["impl"] = "pytorch"
json.dump(d, open(sys.argv[2], "w"))
PY
"$py" "$root/bench/fp16_vs_torch.py" --from "$out/l.json" "$out/t.json" --out "$out/m.json" \
    > "$out/table.md"
cat "$out/table.md"
grep -Eq '^\| fp32 \| [0-9,.]+ \| [0-9,.]+ \| 0\.50x \| 1\.00x \| 1\.00x \|' "$out/table.md"
# bf16's speedup over its own FP32, as the records give it (the same on both sides)
own=$("$py" - "$out/l.json" <<'PY'
import json, sys
r = {x["precision"]: x["samples_per_second"] for x in json.load(open(sys.argv[1]))["records"]}
print(f"{r['bf16'] / r['fp32']:.2f}")
PY
)
grep -Eq "^\| bf16 \| [0-9,.]+ \| [0-9,.]+ \| 0\.50x \| ${own//./\\.}x \| ${own//./\\.}x \|" "$out/table.md"
"$py" - "$out/m.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "libnn-bench-1" and len(d["records"]) == 4, d
assert {r["precision"] for r in d["records"]} == {"fp32", "bf16"}, d
PY
# The files swapped (the ratios would read inverted), or of another batch size: refused.
if "$py" "$root/bench/fp16_vs_torch.py" --from "$out/t.json" "$out/l.json" 2> "$out/err"; then
  echo "swapped files were accepted"; exit 1
fi
grep -q "holds records of \['pytorch'\], expected libnn's" "$out/err"
"$py" - "$out/t.json" "$out/t16.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["records"]:
    r["batch_size"] = 16
json.dump(d, open(sys.argv[2], "w"))
PY
if "$py" "$root/bench/fp16_vs_torch.py" --from "$out/l.json" "$out/t16.json" 2> "$out/err"; then
  echo "files of two batch sizes were accepted"; exit 1
fi
grep -q "the files differ in batch_size" "$out/err"
# --out into a folder that does not exist: said before anything runs, not a traceback after
if "$py" "$root/bench/fp16_vs_torch.py" --from "$out/l.json" "$out/t.json" --out "$out/none/m.json" \
    2> "$out/err"; then
  echo "--out into a missing folder was accepted"; exit 1
fi
grep -q "the folder .*/none does not exist" "$out/err"
# Not a result file: one clear message, exit 1.
echo '{}' > "$out/bad.json"
if "$py" "$root/bench/fp16_vs_torch.py" --from "$out/bad.json" "$out/l.json" 2> "$out/err"; then
  echo "a file without records was accepted"; exit 1
fi
grep -q "not a libnn-bench-1 result file" "$out/err"
# A missing file: a message, not a traceback.
if "$py" "$root/bench/fp16_vs_torch.py" --from "$out/none.json" "$out/l.json" 2> "$out/err"; then
  echo "a missing file was accepted"; exit 1
fi
grep -q "cannot read .*none.json" "$out/err"
# A diverged run (libnn writes its non-finite loss as null): tabulated, and named below the table.
"$py" - "$out/l.json" "$out/nan.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["records"][1]["final_loss"] = None
json.dump(d, open(sys.argv[2], "w"))
PY
"$py" "$root/bench/fp16_vs_torch.py" --from "$out/nan.json" "$out/t.json" > "$out/nan_table.md"
grep -q "Not finite last loss: libnn bf16" "$out/nan_table.md"

"$py" "$root/bench/plot_loss_curves.py" "$out/c.csv" --label libnn --out "$out/c.svg" > "$out/curves.md"
cat "$out/curves.md"
grep -Eq '^\| libnn fp32 \| 4 \| [0-9.]+ \| [0-9.]+ \| 0 \|' "$out/curves.md"
grep -q "<svg" "$out/c.svg"
printf 'step,precision,loss\n0,fp16,2.3\n1,fp16,nan\n' > "$out/nan.csv"
if "$py" "$root/bench/plot_loss_curves.py" "$out/nan.csv" --label run > "$out/nan.md"; then
  echo "a NaN loss passed"; exit 1
fi
grep -Eq '^\| run fp16 \| 2 \| .* \| 1 \|$' "$out/nan.md"
# a row without a loss: one line and exit 2 (1 means a NaN loss), not a traceback
printf 'step,precision,loss\n0,fp16\n' > "$out/short.csv"
rc=0; "$py" "$root/bench/plot_loss_curves.py" "$out/short.csv" > /dev/null 2> "$out/err" || rc=$?
[[ $rc == 2 ]] && grep -q "short.csv, line 2: no loss value" "$out/err" || {
  echo "a row without a loss: exit $rc"; cat "$out/err"; exit 1; }
echo "fp16 bench tools ok"

# The CIFAR ResNet-20 through the same benchmark: 32 x 32 images, 10 classes. --layout auto
# runs both channels-last on the CPU (the native format there of every precision).
"$bench" --device cpu --model resnet20 --batch-size 4 --num-warmup-batches 1 --num-batches 2 \
    --precisions fp32,bf16 --json "$out/r.json" > "$out/r.log"
"$py" - "$out/r.json" <<'PY'
import json, math, sys
r, h = json.load(open(sys.argv[1]))["records"]
assert r["model"] == "resnet20" and r["precision"] == "fp32" and r["layout"] == "nhwc" and r["samples"] == 8, r
assert h["precision"] == "bf16" and h["layout"] == "nhwc", h
for x in (r, h):
    assert math.isfinite(x["final_loss"]) and x["samples_per_second"] > 0, x
PY
