#!/usr/bin/env bash
# text_bench_smoke.sh TEXT_BENCH [ARGS...]: the text benchmark runs at tiny sizes and prints
# one well-formed JSON line per (model, classes, precision, phase) plus the matmul rate of
# each precision. ARGS go last, so they may replace the defaults (--device cuda, two other
# --precisions).
set -euo pipefail
bench=$1; shift
# the device every line must name: the last --device of ARGS, else the default, the CPU
device=cpu
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  [[ ${args[i]} == --device ]] && device=${args[i + 1]%%:*}
done
out=$("$bench" --preset tiny --classes 3,7 --precisions fp32,bf16 --num-batches 1 --num-warmup-batches 1 \
          --mlp-batch 4 --mlp-seq-len 16 --bert-batch 2 --bert-seq-len 16 --vocab-size 100 --gemm 64 "$@")
python3 - <<PY
import json, math
rows = [json.loads(l) for l in """$out""".splitlines() if l.startswith("{")]
gemm = [r for r in rows if r["kind"] == "gemm"]
model = [r for r in rows if r["kind"] == "model"]
assert len(gemm) == 2 and all(r["tflops"] > 0 for r in gemm), gemm
assert len(model) == 2 * 2 * 2 * 2, len(model)
for r in model:
    assert r["samples_per_second"] > 0 and r["seconds"] > 0, r
    if r["phase"] == "train":
        assert math.isfinite(r["loss"]), r
devices = {r["device"] for r in rows}
assert devices == {"$device"}, devices
print(f"ok: {len(model)} measurements on {devices.pop()}")
PY
"$(dirname "$0")/expect.sh" 2 "--precisions must be one of fp32, fp16, bf16, got 'fp8'" -- "$bench" --precisions fp8
