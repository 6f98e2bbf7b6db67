#!/usr/bin/env bash
# cuda_bench_smoke.sh BIN_DIR DEVICE: the programs bench/gpu_suite.sh times, run at tiny sizes
# on the CUDA device, so that a GPU session spends its time measuring, not finding a crash.
# DEVICE is "gpu" (exit 77, reported as skipped, when `nvidia-smi -L` finds none) or
# "emulator" (tests/cuda_emu's device, always present).
#   fp16_vs_fp32 (MNIST CNN): FP32, FP16 and BF16 train; the first step's loss (same weights,
#                same batch) agrees across precisions within 16-bit rounding
#   text_bench:  tests/cli/text_bench_smoke.sh on the device, FP32 and FP16; BERT's FP16
#                training step profiled primitive by primitive, as the suite's extras step does
#   kernels_bench: one JSON line per memory-bound kernel, f32 and f16
set -euo pipefail
bin=$1; device=$2
if [[ $device != emulator ]] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "no GPU: skipped"; exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin/fp16_vs_fp32" --device cuda --model mnist_cnn --batch-size 4 --num-warmup-batches 1 \
    --num-batches 1 --json "$out/p.json" --loss-curve "$out/p.csv"
python3 - "$out/p.json" "$out/p.csv" <<'PY'
import csv, json, math, sys
d = json.load(open(sys.argv[1]))
recs = {r["precision"]: r for r in d["records"]}
assert set(recs) == {"fp32", "fp16", "bf16"}, recs
assert all(r["device"] == "cuda" and r["samples_per_second"] > 0 for r in recs.values()), recs
first = {}
for row in csv.DictReader(open(sys.argv[2])):
    assert math.isfinite(float(row["loss"])), row
    first.setdefault(row["precision"], float(row["loss"]))
tol = {"fp16": 0.01, "bf16": 0.05}  # relative, on a loss near ln 10
for p, t in tol.items():
    assert abs(first[p] - first["fp32"]) <= t * first["fp32"], (p, first)
print("ok: fp16_vs_fp32 first-step losses", first)
PY

"$(dirname "$0")/text_bench_smoke.sh" "$bin/text_bench" --device cuda --precisions fp32,fp16
"$bin/text_bench" --device cuda --preset tiny --models bert --classes 2 --precisions fp16 --phases train \
    --num-batches 1 --num-warmup-batches 1 --bert-batch 2 --bert-seq-len 16 --vocab-size 100 --profile \
    > /dev/null 2> "$out/profile.log"
for primitive in attention_forward attention_backward gemm_bias gemm_bias_grad layer_norm_backward \
    dropout_add_layer_norm_forward dropout_add_layer_norm_backward copy_many; do
  grep -q "^$primitive " "$out/profile.log" || { cat "$out/profile.log"; echo "no $primitive in the profile"; exit 1; }
done
echo "ok: BERT's FP16 step profiled on the device"

for dt in f32 f16; do
  "$bin/kernels_bench" --device cuda --dtype $dt -n 4096 --iters 1
done > "$out/k.log"
python3 - "$out/k.log" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ops = {(r["dtype"], r["op"]) for r in rows}
assert all(r["impl"] == "libnn" and r["gb_per_s"] >= 0 for r in rows), rows
want = {"copy", "add", "gelu", "transpose", "sum_all", "sum_columns", "softmax_rows", "layer_norm_rows",
        "batch_norm_nhwc", "batch_norm_add_relu_nhwc", "batch_norm_add_relu_nhwc_composed"}
assert {op for d, op in ops if d == "f32"} >= want | {"adamw_step"}, ops  # f32 master weights
assert {op for d, op in ops if d == "f16"} >= want, ops
print(f"ok: kernels_bench, {len(rows)} kernels")
PY
echo "cuda bench smoke ok"
