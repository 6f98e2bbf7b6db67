#!/usr/bin/env bash
# Everything GPU-related in one script, for a machine with an NVIDIA GPU: configure and build
# for the local GPU, run every test (the GPU ones included) and compute-sanitizer's memcheck
# over the CUDA tests, then the benchmarks against PyTorch on the same GPU. Everything is
# written under $OUT (default ./gpu-results); summary.md holds the tables, and
# gpu-results.tar.gz bundles every log and result file (the device tool brings back at most 8
# files per call).
#
#   bench/gpu_suite.sh [STEP ...]          (default: all)
#
# Steps, in the order they run: build, test, kernels (bandwidth and attention
# microbenchmarks), mnist (MNIST CNN, 3 epochs, against PyTorch), resnet (ResNet-50 FP32/FP16/
# BF16 at batch 128 and 256 against PyTorch, and the 200-step loss curves), extras (NCHW
# ResNet-50, FP16 ResNet-50 without cuDNN's fused batch norm, its convolutions layer by layer,
# the MNIST CNN's precisions, CIFAR ResNet-20 against PyTorch), text (MLP and BERT-base at
# 2..20,000 classes against PyTorch), memcheck (compute-sanitizer over the CUDA tests; last,
# as its length is the least known). `bench` is kernels mnist resnet extras text; `all` is
# every step.
#
# GPU_SUITE_TIMEOUT=S stops the suite after S seconds (TERM to every step), still writing
# summary.md and the tarball: for callers that are themselves killed at a limit.
#
# Dependencies come from the system, or from .gpu_deps/ when present (bench/stage_gpu_deps.sh
# fills it on a machine with Debian's packages, for GPU machines that reach no registry).
set -uo pipefail
if [[ -n "${GPU_SUITE_TIMEOUT:-}" ]]; then
  [[ "$GPU_SUITE_TIMEOUT" =~ ^[1-9][0-9]*$ ]] \
    || { echo "gpu_suite: GPU_SUITE_TIMEOUT must be a number of seconds, got '$GPU_SUITE_TIMEOUT'" >&2; exit 2; }
  # TERM at the limit (the suite still bundles), KILL 20 s later if a step ignores TERM
  [[ -z "${GPU_SUITE_TIMED:-}" ]] && GPU_SUITE_TIMED=1 exec timeout -s TERM -k 20 "$GPU_SUITE_TIMEOUT" "$0" "$@"
fi
unset GPU_SUITE_TIMED GPU_SUITE_TIMEOUT  # not inherited by the steps (the tests run this script)
cd "$(dirname "$0")/.."
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(all)
for st in "${steps[@]}"; do
  case $st in build|test|kernels|mnist|resnet|extras|text|memcheck|bench|all) ;;
    *) echo "gpu_suite: unknown step '$st' (build test kernels mnist resnet extras text memcheck bench all)" >&2
       exit 2 ;;
  esac
done
want() {
  local s=" ${steps[*]} "
  [[ $s == *" $1 "* || $s == *" all "* ]] && return 0
  [[ $1 =~ ^(kernels|mnist|resnet|extras|text)$ && $s == *" bench "* ]]
}
FINAL=${OUT:-$PWD/gpu-results}
OUT=$FINAL/all
mkdir -p "$OUT"
bundle() {  # summary.md next to the tarball of everything
  cp "$OUT/summary.md" "$FINAL/summary.md" 2>/dev/null
  tar -czf "$FINAL/gpu-results.tar.gz" -C "$FINAL" all
  rm -rf "$OUT"
}
trap bundle EXIT
log() { echo "[gpu_suite $(date +%H:%M:%S)] $*" | tee -a "$OUT/summary.md"; }
trap 'log "stopped by a signal (GPU_SUITE_TIMEOUT or the caller)"; exit 124' TERM INT
deps=${LIBNN_GPU_DEPS:-$PWD/.gpu_deps}
bdir=${BUILD_DIR:-build-gpu}
py=${PYTHON:-python3}
fashion=/usr/share/datasets/fashion-mnist
[[ -d "$deps/fashion-mnist" ]] && fashion="$deps/fashion-mnist"
status=0
# The "machine" of every result file, the key of bench/report.py's price table
# (bench/prices.example.csv): GPU_MACHINE, else nvidia-h100-x1 / nvidia-h200 by the GPU's name.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $gpu_name in
  *H100*) default_machine=nvidia-h100-x1 ;;
  *H200*) default_machine=nvidia-h200 ;;
  *) default_machine=gpu-$(tr 'A-Z ' 'a-z-' <<<"${gpu_name:-unknown}") ;;
esac
machine=${GPU_MACHINE:-$default_machine}

{ echo "# GPU suite, $(date -u +%Y-%m-%dT%H:%MZ)"; echo; echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -1; echo '```'; } >> "$OUT/summary.md"

if want build; then
  log "build into $bdir"
  extra=()
  [[ -d "$deps" ]] && extra+=(-DCMAKE_PREFIX_PATH="$deps" -DZLIB_ROOT="$deps")
  arch=${CUDA_ARCHS:-native}
  cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBNN_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" -DLIBNN_FASHION_MNIST_DIR="$fashion" "${extra[@]}" > "$OUT/configure.log" 2>&1
  rc=$?; grep -E 'libnn: CUDA|Found CUDNN' "$OUT/configure.log" | tee -a "$OUT/summary.md"
  [[ $rc -ne 0 ]] && { log "configure exit $rc"; tail -40 "$OUT/configure.log"; exit $rc; }
  cmake --build "$bdir" -j "$(nproc)" > "$OUT/build.log" 2>&1
  rc=$?; log "build exit $rc"; [[ $rc -ne 0 ]] && { grep -m 20 -B2 -A8 -E 'error|FAILED' "$OUT/build.log"; tail -20 "$OUT/build.log"; exit $rc; }
fi

if want test; then
  log "tests"
  # eight tests at a time, two CPU threads each: the CPU tests do not oversubscribe the cores
  # (per-test limit well under a call's: one hung test must not take the call's later steps)
  OMP_NUM_THREADS=2 ctest --test-dir "$bdir" -j 8 --output-on-failure --timeout 150 > "$OUT/ctest.log" 2>&1
  rc=$?; status=$((status | rc)); log "ctest exit $rc: $(grep -E 'tests passed' "$OUT/ctest.log")"
  timeout -k 10 300 "$bdir/bin/libnn_tests" "[cuda]" > "$OUT/cuda_tests.log" 2>&1
  rc=$?; status=$((status | rc)); log "CUDA tests exit $rc: $(tail -3 "$OUT/cuda_tests.log" | tr '\n' ' ')"
  if [[ $rc -ne 0 ]]; then  # triage: the same tests with the paths not yet run before 2026-11-24 off
    LIBNN_CUDA_ATTENTION=simt LIBNN_CUBLASLT=0 LIBNN_CUDNN_BN_FUSED=0 timeout -k 10 300 "$bdir/bin/libnn_tests" "[cuda]" \
      > "$OUT/cuda_tests_fallbacks.log" 2>&1
    log "CUDA tests with LIBNN_CUDA_ATTENTION=simt LIBNN_CUBLASLT=0 LIBNN_CUDNN_BN_FUSED=0: exit $? $(tail -2 \
      "$OUT/cuda_tests_fallbacks.log" | tr '\n' ' ')"
  fi
fi

if want kernels; then
  log "kernel microbenchmarks (libnn, then PyTorch, same GPU)"
  { "$bdir/bin/kernels_bench" --device cuda; "$py" bench/peers/kernels_torch.py --device cuda; } \
    > "$OUT/kernels.jsonl" 2>> "$OUT/bench.log"
  "$py" - "$OUT/kernels.jsonl" <<'PY' | tee -a "$OUT/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["impl"], r["op"]): r for r in rows}
copy = by.get(("pytorch", "copy"), {}).get("gb_per_s")
print("\n| op | libnn GB/s | PyTorch GB/s | libnn / PyTorch | libnn / D2D copy |\n|---|---|---|---|---|")
for (impl, op), r in by.items():
    if impl != "libnn": continue
    t = by.get(("pytorch", op), {}).get("gb_per_s")
    ratio = f"{r['gb_per_s'] / t:.2f}" if t else "n/a"
    frac = f"{r['gb_per_s'] / copy:.0%}" if copy else "n/a"
    print(f"| {op} | {r['gb_per_s']} | {t} | {ratio} | {frac} |")
print(f"\nD2D copy through PyTorch: {copy} GB/s (bytes read + written)")
PY
  log "batch norm (+ residual + ReLU) in FP16 channels-last: libnn's fused (cuDNN's Ex kernels) and composed tails, then PyTorch's (composed)"
  { "$bdir/bin/kernels_bench" --device cuda --dtype f16; "$py" bench/peers/kernels_torch.py --device cuda --dtype f16; } \
    2>> "$OUT/bench.log" | tee "$OUT/kernels_f16.jsonl" | grep batch_norm | tee -a "$OUT/summary.md"
  log "fused attention, TFLOP/s: libnn (tensor-core and plain kernels), then PyTorch SDPA"
  for dt in f16 bf16 f32; do
    "$bdir/bin/kernels_bench" --device cuda --attention --dtype $dt --iters 20
    "$py" bench/peers/kernels_torch.py --device cuda --attention --dtype $dt --iters 20
  done > "$OUT/attention.jsonl" 2>> "$OUT/bench.log"
  "$py" - "$OUT/attention.jsonl" <<'PY' | tee -a "$OUT/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["impl"], r["dtype"], r["op"], r["shape"]): r["tflops"] for r in rows}
print("\n| dtype | op | shape | libnn TFLOP/s | libnn plain kernel | PyTorch SDPA | libnn / PyTorch |\n|---|---|---|---|---|---|---|")
for (impl, dt, op, shape), v in by.items():
    if impl != "libnn-default": continue
    simt, torch_ = by.get(("libnn-simt", dt, op, shape)), by.get(("pytorch", dt, op, shape))
    ratio = f"{v / torch_:.2f}" if torch_ else "n/a"
    print(f"| {dt} | {op} | {shape} | {v} | {simt} | {torch_} | {ratio} |")
PY
fi

if want mnist; then
  log "MNIST CNN on the GPU: libnn vs PyTorch, Fashion-MNIST, 3 epochs"
  PYTHON_FOR_TORCH="$py" "$py" bench/mnist_vs_torch.py --device cuda --dataset fashion-mnist \
      --data-dir "$fashion" --epochs 3 --models cnn --app "$bdir/bin/mnist_train" \
      --python "$py" --machine "$machine" --out "$OUT/mnist_cuda.json" > "$OUT/mnist_cuda.log" 2>&1
  rc=$?; status=$((status | rc)); tail -6 "$OUT/mnist_cuda.log" | tee -a "$OUT/summary.md"
fi

if want resnet; then
  log "ResNet-50 training throughput, FP32 / FP16 / BF16: libnn then PyTorch"
  for b in 128 256; do
    "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size $b --num-batches 50 \
        --num-warmup-batches 10 --json "$OUT/fp16_vs_fp32_libnn_b$b.json" 2>&1 | tee -a "$OUT/summary.md"
    rc=${PIPESTATUS[0]}; status=$((status | rc))
    "$py" bench/peers/fp16_vs_fp32_torch.py --machine "$machine" --model resnet50 --batch-size $b --num-batches 50 \
        --num-warmup-batches 10 --json "$OUT/fp16_vs_fp32_torch_b$b.json" 2>&1 | tee -a "$OUT/summary.md"
    "$py" bench/fp16_vs_torch.py --from "$OUT/fp16_vs_fp32_libnn_b$b.json" \
        "$OUT/fp16_vs_fp32_torch_b$b.json" --out "$OUT/fp16_vs_torch_b$b.json" 2>&1 \
        | tee -a "$OUT/summary.md"
  done
  log "200 steps of ResNet-50 on fixed synthetic batches: FP32 and FP16 loss curves"
  "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 64 --num-warmup-batches 0 \
      --num-batches 200 --precisions fp32,fp16 --loss-curve "$OUT/resnet50_loss_curve.csv" \
      2>&1 | tee -a "$OUT/summary.md"
  rc=${PIPESTATUS[0]}; status=$((status | rc))
  "$py" bench/plot_loss_curves.py "$OUT/resnet50_loss_curve.csv" --label libnn 2>&1 \
      | tee -a "$OUT/summary.md"   # the table here; plot it with --out where matplotlib is
fi

if want extras; then
  log "What channels-last buys: ResNet-50 at batch 128 in NCHW (the resnet step's runs are NHWC)"
  "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 128 --num-batches 30 --layout nchw \
      --num-warmup-batches 5 --precisions fp32,fp16 --json "$OUT/fp16_vs_fp32_libnn_nchw_b128.json" \
      2>&1 | tee -a "$OUT/summary.md"
  log "What the fused batch norm + residual + ReLU buys: ResNet-50 FP16 at batch 256 with cuDNN's fused kernels off (LIBNN_CUDNN_BN_FUSED=0; the resnet step's runs have them on)"
  LIBNN_CUDNN_BN_FUSED=0 "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 256 --num-batches 30 \
      --num-warmup-batches 5 --precisions fp16 --json "$OUT/fp16_vs_fp32_libnn_unfused_b256.json" \
      2>&1 | tee -a "$OUT/summary.md"
  log "ResNet-50's convolutions layer by layer (cuDNN), FP16 and FP32 at batch 256"
  for prec in fp16 fp32; do
    "$bdir/bin/conv_bench" --device cuda --precision $prec --batch-size 256 --reps 5 2>&1 \
        | tee -a "$OUT/summary.md"
    rc=${PIPESTATUS[0]}; status=$((status | rc))
  done
  log "MNIST CNN throughput, FP32 / FP16 / BF16"
  "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model mnist_cnn --batch-size 128 --num-batches 200 \
      --json "$OUT/fp16_vs_fp32_mnist.json" 2>&1 | tee -a "$OUT/summary.md"
  log "CIFAR ResNet-20 training throughput at batch 128, FP32 / FP16 / BF16: libnn vs PyTorch"
  "$py" bench/fp16_vs_torch.py --machine "$machine" --model resnet20 --batch-size 128 --num-batches 100 \
      --num-warmup-batches 10 --bench "$bdir/bin/fp16_vs_fp32" --python "$py" \
      --out "$OUT/fp16_vs_torch_resnet20.json" 2>&1 | tee -a "$OUT/summary.md"
  rc=${PIPESTATUS[0]}; status=$((status | rc))
fi

if want text; then
  log "text classifiers (MLP, BERT-base) at 2..20,000 classes, FP32 and FP16: libnn then PyTorch"
  "$py" bench/text_vs_torch.py --device cuda --machine "$machine" --python "$py" --bench "$bdir/bin/text_bench" \
      --gemm 8192 --precisions fp32,fp16 --num-batches 20 --out "$OUT/text_cuda.json" \
      > "$OUT/text_cuda.log" 2>&1
  rc=$?; status=$((status | rc)); grep -E '^\||^text|^measured' "$OUT/text_cuda.log" | tee -a "$OUT/summary.md"
fi
if want memcheck; then  # last: its length is the least known, and the benchmarks come first
  log "compute-sanitizer memcheck over the CUDA tests"
  # without the caching allocator, so each tensor's bounds are an allocation's bounds
  # (the allocator's own test, which counts the cache's reuse, runs with the cache on)
  { LIBNN_NO_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bdir/bin/libnn_tests" "[cuda]~[memory]" \
    && compute-sanitizer --tool memcheck --error-exitcode 3 "$bdir/bin/libnn_tests" "[cuda][memory]"
  } > "$OUT/memcheck.log" 2>&1
  rc=$?; status=$((status | rc))
  log "memcheck exit $rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tr '\n' ' ')"
fi

log "done, status $status"
exit $status
