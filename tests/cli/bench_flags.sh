#!/usr/bin/env bash
# bench_flags.sh BIN_DIR: every benchmark program refuses a bad flag as a usage error: one
# line naming the flag, exit status 2, before it builds a model or touches a device (the
# devices named here are the CPU, so nothing needs a GPU).
set -euo pipefail
bin=$1
e="$(dirname "$0")/expect.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

f="$bin/fp16_vs_fp32"
"$e" 0 "--num-warmup-batches" -- "$f" --help
"$e" 2 "Option.*bogus.*does not exist.*see --help" -- "$f" --bogus
"$e" 2 "unexpected argument 'extra'" -- "$f" extra
"$e" 2 "--model must be one of resnet50, resnet20, mnist_cnn, got 'vgg'" -- "$f" --device cpu --model vgg
"$e" 2 "--batch-size must be positive, got 0" -- "$f" --device cpu --batch-size 0
"$e" 2 "--num-warmup-batches must be 0 or more, got -1" -- "$f" --device cpu --num-warmup-batches -1
"$e" 2 "--image-size must be positive, got 0" -- "$f" --device cpu --image-size 0
"$e" 2 "--synthetic-batches must be at most 60" -- "$f" --device cpu --synthetic-batches 1000000000000
"$e" 2 "--precisions must be one of fp32, fp16, bf16, got 'fp8'" -- "$f" --device cpu --precisions fp32,fp8
"$e" 2 "--precisions names nothing" -- "$f" --device cpu --precisions ''
"$e" 2 "--precisions has an empty item: 'fp32,,bf16'" -- "$f" --device cpu --precisions fp32,,bf16
"$e" 2 "--layout must be one of auto, nhwc, nchw, got 'nwhc'" -- "$f" --device cpu --layout nwhc
"$e" 2 "--device: unknown device 'tpu'" -- "$f" --device tpu
# a launcher's LOCAL_RANK picks the GPU of a bare --device cuda: one that is not a number is
# named (the message had been "unknown device 'cuda:abc'")
"$e" 2 "LOCAL_RANK='abc' \(a launcher's process index, which picks the GPU\) is not a number" -- \
  env LOCAL_RANK=abc "$f" --device cuda
# result files are checked before the runs (a ResNet-50 step on the CPU takes seconds)
"$e" 1 "cannot open '/nonexistent/r.json' for writing \(--json\)" -- "$f" --device cpu --json /nonexistent/r.json
"$e" 1 "cannot open '$out' for writing \(--loss-curve\): it is a folder" -- "$f" --device cpu --loss-curve "$out"
# the command line lands in the result file as valid JSON, quotes and backslashes included
# A record's variant names the switches moved from their default as the library reads them:
# LIBNN_CUBLASLT=1 is the default (none), a named CPU GEMM kernel is one; an unreadable value
# is said on stderr.
LIBNN_CUBLASLT=1 LIBNN_CPU_GEMM=eigen LIBNN_NO_MEMORY_CACHING=yes \
"$f" --device cpu --model mnist_cnn --batch-size 2 --num-warmup-batches 0 --num-batches 1 --precisions fp32 \
    --machine 'a "quoted\ name' --json "$out/r.json" > "$out/r.log" 2>&1
grep -q "LIBNN_NO_MEMORY_CACHING=yes ignored (0 or 1): it stays off" "$out/r.log"
python3 - "$out/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["machine"] == 'a "quoted\\ name' and '"quoted\\ name' in d["command"], d
assert len(d["records"]) == 1 and d["records"][0]["precision"] == "fp32", d
assert d["records"][0]["variant"] == "LIBNN_CPU_GEMM=eigen", d["records"][0]
print("ok: result file", d["machine"])
PY

# a run stopped in a later precision keeps the earlier ones: the result files are rewritten
# whole after each precision
# (10 steps a precision: enough that the signal lands before the last one ends)
"$f" --device cpu --model mnist_cnn --batch-size 2 --num-warmup-batches 0 --num-batches 10 \
    --precisions fp32,bf16,bf16,bf16,bf16,bf16,bf16,bf16,bf16,bf16,bf16,bf16 \
    --json "$out/s.json" --loss-curve "$out/s.csv" > "$out/s.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [[ -s "$out/s.json" ]] && break; sleep 0.1; done
kill -TERM $pid 2> /dev/null || true
rc=0; wait $pid || rc=$?
# (a run that ended before the signal, writing its files only then, would exit 0)
[[ $rc -eq 143 ]] || { echo "a stopped fp16_vs_fp32 should exit 143, got $rc:"; cat "$out/s.log"; exit 1; }
grep -q "stopped by signal 15; the result files keep" "$out/s.log" || { cat "$out/s.log"; exit 1; }
python3 - "$out/s.json" "$out/s.csv" <<'PY'
import csv, json, sys
d = json.load(open(sys.argv[1]))
assert 1 <= len(d["records"]) < 12 and d["records"][0]["precision"] == "fp32", d
rows = list(csv.DictReader(open(sys.argv[2])))
assert rows and rows[0]["precision"] == "fp32", rows
print(f"ok: stopped run kept {len(d['records'])} of 12 precisions")
PY
[[ -z $(ls "$out" | grep '\.tmp-') ]] || { echo "temporary files left:"; ls "$out"; exit 1; }

t="$bin/text_bench"
"$e" 2 "--models must be one of mlp, bert, got 'gpt'" -- "$t" --models mlp,gpt
"$e" 2 "--classes must list positive whole numbers, got '0'" -- "$t" --classes 2,0
"$e" 2 "--classes must be at least 2, got 1" -- "$t" --classes 2,1
"$e" 2 "--classes must list positive whole numbers, got 'ten'" -- "$t" --classes ten
"$e" 2 "--classes names nothing" -- "$t" --classes ,
"$e" 2 "--models has an empty item: 'mlp,'" -- "$t" --models mlp,
"$e" 2 "--phases must be one of train, infer, got 'eval'" -- "$t" --phases eval
"$e" 2 "--preset must be one of tiny, mini, base, got 'huge'" -- "$t" --preset huge
"$e" 2 "--bert-seq-len must be at least 2, got 1" -- "$t" --bert-seq-len 1
"$e" 2 "--vocab-size must be more than 5, got 5" -- "$t" --vocab-size 5
"$e" 2 "--num-batches must be positive, got 0" -- "$t" --num-batches 0
"$e" 2 "--threads must be positive, got 0" -- "$t" --threads 0

k="$bin/kernels_bench"
"$e" 2 "-n must be a positive multiple of 1024, got 1000" -- "$k" --device cpu -n 1000
"$e" 2 "--iters must be positive, got 0" -- "$k" --device cpu --iters 0
"$e" 2 "--dtype must be one of f32, f16, bf16, got 'f64'" -- "$k" --device cpu --dtype f64
"$e" 2 "--attention-paths must be one of default, simt, one-pass-backward, got 'fast'" -- \
  "$k" --device cpu --attention --attention-paths default,fast
"$e" 2 "--attention-paths chooses --attention's paths: give --attention too" -- \
  "$k" --device cpu --attention-paths simt
"$e" 2 "--attention-paths: on cpu in f32 there is only the default path \(the plain kernel\)" -- \
  "$k" --device cpu --attention --attention-paths simt
# --attention runs on the CPU too: three phases (the training step with dropout among them),
# two shapes, each with a positive rate; one path (the plain kernel is the default there: a
# "simt" row would compare it with itself)
"$k" --device cpu --attention --iters 1 | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert len(rows) == 6, rows
assert all(r["impl"] == "libnn-default" for r in rows), rows
assert sum(r["op"] == "attention forward+backward, dropout 0.1" for r in rows) == 2, rows
assert all(r["tflops"] > 0 for r in rows), rows'
# --overhead: four ops, each with a positive time; not together with --attention
"$k" --device cpu --overhead --iters 10 | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert [r["op"] for r in rows] == ["overhead: add, no grad", "overhead: add, recorded",
    "overhead: relu(x w + b) forward + backward", "overhead: adamw step, 10 parameters"], rows
assert all(r["us"] > 0 for r in rows), rows'
"$e" 2 "--attention and --overhead are different runs: give one" -- "$k" --device cpu --attention --overhead
"$e" 2 "-n sets the memory-bound kernels' size" -- "$k" --device cpu --overhead -n 1024

v="$bin/conv_bench"
"$e" 2 "--precision must be one of fp32, fp16, bf16, got 'fp8'" -- "$v" --precision fp8
"$e" 2 "--layout must be one of nhwc, nchw, got 'nwhc'" -- "$v" --layout nwhc
"$e" 2 "--reps must be positive, got 0" -- "$v" --reps 0
"$e" 2 "--batch-size must be positive, got -2" -- "$v" --batch-size -2
"$e" 2 "--device: unknown device 'tpu'" -- "$v" --device tpu
# no usable device: the error before the table (no device visible, even on a GPU machine)
rc=0; CUDA_VISIBLE_DEVICES= "$v" --device cuda > "$out/v.log" 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q "error: device cuda:0 asked for" "$out/v.log" && ! grep -q "layer (in->out" "$out/v.log" ||
  { echo "conv_bench --device cuda without a device: exit $rc:"; cat "$out/v.log"; exit 1; }

n="$bin/rnn_bench"
"$e" 2 "--cells must be one of lstm, gru, rnn, got 'elman'" -- "$n" --cells lstm,elman
"$e" 2 "--seq-len must be positive, got 0" -- "$n" --seq-len 0
"$e" 2 "--layers must be at most 10000" -- "$n" --layers 100000000000
"$e" 2 "--precision must be one of fp32, fp16, bf16, got 'fp8'" -- "$n" --precision fp8
"$e" 0 '"cell": "gru", "phase": "train"' -- "$n" --cells gru --seq-len 3 --batch-size 2 --input-size 4 \
  --hidden-size 5 --layers 2 --bidirectional --reps 1
"$e" 0 '"cell": "rnn", "phase": "train"' -- "$n" --cells rnn --seq-len 3 --batch-size 2 --input-size 4 \
  --hidden-size 5 --reps 1

c="$bin/cpu_ceiling"
"$e" 2 "-n must be 1 to 16384, got 0" -- "$c" -n 0
# an OMP_NUM_THREADS OpenMP cannot create (it crashed in the first parallel region) is taken
# down to nn::kMaxThreads, and said
"$e" 0 "OpenMP asks for 100000 threads \(OMP_NUM_THREADS\): using 1024" -- \
  env OMP_NUM_THREADS=100000 "$c" -n 64 --shapes 8x8x8
"$e" 2 "--shapes: expected MxNxK with positive sizes, got '99999999999999999999x1x1'" -- "$c" --shapes 99999999999999999999x1x1
"$e" 2 "--shapes: '1000000x1000000x1' needs a matrix of more than 2\^28 floats" -- "$c" --shapes 64x64x64,1000000x1000000x1

r="$bin/allreduce_bench"
"$e" 2 "--sizes must list positive whole numbers, got '1k'" -- "$r" --sizes 1024,1k
"$e" 2 "--sizes must list positive whole numbers, got '99999999999999999999'" -- "$r" --sizes 99999999999999999999
"$e" 2 "--sizes names nothing" -- "$r" --sizes ''
"$e" 2 "--iters must be positive, got 0" -- "$r" --iters 0
"$e" 1 "cannot open '/nonexistent/a.jsonl' for writing \(--json\)" -- "$r" --json /nonexistent/a.jsonl
echo "bench flags ok"
