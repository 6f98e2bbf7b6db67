#!/usr/bin/env bash
# Everything GPU-related in one script, for a machine with an NVIDIA GPU: configure and build
# for the local GPU, run the GPU tests and compute-sanitizer's memcheck over them, and the
# benchmarks against PyTorch on the same GPU. Everything is
# written under $OUT (default ./gpu-results); summary.md holds the tables, and
# gpu-results.tar.gz bundles every log and result file (the device tool brings back at most 8
# files per call).
#
#   bench/gpu_suite.sh [STEP ...]          (default: all)
#
# Steps, in the order they run (what the open issues need first, whatever the order of the
# arguments): build, test (libnn_tests' CUDA cases and the cli_cuda_* checks), mnist (MNIST
# CNN, 3 epochs, against PyTorch), kernels (memory-bound kernels' GB/s against a copy and
# PyTorch, and the host cost per call of tiny ops), resnet (ResNet-50 FP32/FP16 at batch 256
# and 128 against PyTorch), curves (200-step FP32 and FP16 ResNet-50 loss curves), text (MLP
# and BERT-base at 2..20,000 classes against PyTorch), memcheck (compute-sanitizer over the
# CUDA tests; asked for with test, it runs beside the test step, within its own budget, and
# ends before the next step starts), extras (ResNet-50 and BERT-base FP16 training's time per primitive,
# attention and FP16 batch-norm microbenchmarks, attention's kernels one by one under Nsight
# Compute where it is installed, BF16 ResNet-50, NCHW
# ResNet-50, FP16 ResNet-50 without cuDNN's fused batch norm, its convolutions layer by
# layer against PyTorch's, the MNIST CNN's precisions, CIFAR ResNet-20 against PyTorch, LSTM and GRU against
# PyTorch's cuDNN ones). `bench` is mnist
# kernels resnet curves text extras; `all` is every step.
#
# Each step has a time budget (seconds; GPU_SUITE_BUDGETS="resnet=300 text=150" overrides):
# its commands are stopped at the step's deadline and the next step starts, so one slow step
# cannot take the others' time. summary.md ends with each step's seconds and the steps to run
# again (cut, stopped or not reached). GPU_SUITE_TIMEOUT=S stops the whole suite after S
# seconds (TERM to every step), still writing summary.md and the tarball: for callers that are
# themselves killed at a limit. Steps other than build use the build folder as it is (a second
# call on a warm machine need not rebuild); without one they build it first.
#
# Dependencies come from the system, or from .gpu_deps/ when present (bench/stage_gpu_deps.sh
# fills it on a machine with Debian's packages, for GPU machines that reach no registry), and
# so does a build made there for sm_90 (.gpu_deps/prebuilt.tar.gz), which the build step uses
# instead of building when it fits this tree and GPU (bench/gpu_prebuilt.sh;
# GPU_SUITE_PREBUILT=0 builds regardless).
set -uo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
source "$(dirname "$0")/../scripts/args.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && { help_text; exit 0; }
if [[ -n "${GPU_SUITE_TIMEOUT:-}" ]]; then
  [[ "$GPU_SUITE_TIMEOUT" =~ ^[1-9][0-9]*$ ]] \
    || { echo "gpu_suite: GPU_SUITE_TIMEOUT must be a number of seconds, got '$GPU_SUITE_TIMEOUT'" >&2; exit 2; }
  # TERM at the limit (the suite still bundles), KILL 20 s later if a step ignores TERM
  [[ -z "${GPU_SUITE_TIMED:-}" ]] && GPU_SUITE_TIMED=1 exec timeout -s TERM -k 20 "$GPU_SUITE_TIMEOUT" "$self" "$@"
fi
unset GPU_SUITE_TIMED GPU_SUITE_TIMEOUT  # not inherited by the steps (the tests run this script)
cd "$(dirname "$self")/.."
# the tests' reference files in this tree (a prebuilt build names the tree it was built in)
export LIBNN_FIXTURES_DIR="$PWD/tests/fixtures"
# A CUDA case that finds no usable device fails instead of skipping: on this machine one is
# expected, and a driver older than the runtime must not pass as "no GPU" (tests/test_util.h).
export LIBNN_REQUIRE_CUDA=1
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(all)
all_steps="build test mnist kernels resnet curves text memcheck extras"
bench_steps=" mnist kernels resnet curves text extras "
for st in "${steps[@]}"; do
  case " $all_steps bench all " in *" $st "*) ;;
    *) echo "gpu_suite: unknown step '$st' ($all_steps bench all)" >&2; exit 2 ;;
  esac
done
declare -A budget=([build]=300 [test]=200 [mnist]=150 [kernels]=90 [resnet]=300 [curves]=150
                   [text]=200 [memcheck]=300 [extras]=420)
for kv in ${GPU_SUITE_BUDGETS:-}; do
  if [[ $kv =~ ^([a-z]+)=([1-9][0-9]*)$ && -n "${budget[${BASH_REMATCH[1]}]:-}" ]]; then
    budget[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  else
    echo "gpu_suite: GPU_SUITE_BUDGETS takes STEP=SECONDS words (steps: $all_steps), got '$kv'" >&2; exit 2
  fi
done
want() {
  local s=" ${steps[*]} "
  [[ $s == *" $1 "* || $s == *" all "* ]] && return 0
  [[ $bench_steps == *" $1 "* && $s == *" bench "* ]]
}
FINAL=${OUT:-$PWD/gpu-results}
OUT=$FINAL/all
mkdir -p "$OUT"
suite_pid=$BASHPID
exec 3>&1 4>&2  # the suite's own output: log lines and the closing lines go here whatever a step redirects
log() { echo "[gpu_suite $(date +%H:%M:%S)] $*" | tee -a "$OUT/summary.md" >&3; }
bundle() {  # summary.md next to the tarball of everything
  cp "$OUT/summary.md" "$FINAL/summary.md"
  tar -czf "$FINAL/gpu-results.tar.gz" -C "$FINAL" all && rm -rf "$OUT"
}

# Each step's commands run through t: in a process group of their own (GNU timeout's), cut at
# the step's deadline, and waited for with `wait`, which a signal interrupts, so that a TERM
# to the suite stops them at once (their groups are listed in $groups) instead of after them.
# t runs in the suite's own shell, never in a pipeline's subshell (tsum keeps the output).
groups=$(mktemp)
stop_group() {  # stop_group PGID: TERM, up to 8 s to end (the apps save their state), KILL
  local g=$1 i
  kill -TERM -- "-$g" 2> /dev/null || kill -TERM "$g" 2> /dev/null || return 0
  for ((i = 0; i < 40; ++i)); do kill -0 -- "-$g" 2> /dev/null || return 0; sleep 0.2; done
  kill -KILL -- "-$g" 2> /dev/null
}
step=none; step_start=$SECONDS; step_deadline=$SECONDS; times=(); finished=" "; cut=" "; failed=" "; status=0
memcheck_pid=; memcheck_joined=; memcheck_t0=0  # memcheck beside the tests (memcheck_start)
begin() {  # begin STEP DESCRIPTION
  step=$1; step_start=$SECONDS; step_deadline=$((SECONDS + budget[$1]))
  log "$2 (step $1, budget ${budget[$1]} s)"
}
end() {  # end [failed]: the step is over; a cut or failed one is to run again
  local took="$step $((SECONDS - step_start)) s"
  if [[ $cut == *" $step "* ]]; then took+=" (cut at its budget)"
  elif [[ ${1:-} == failed || $failed == *" $step "* ]]; then took+=" (failed)"
  else finished+="$step "; fi
  times+=("$took"); log "step $took"; step=none
}
t() {  # t COMMAND...: one of the step's commands, stopped at the step's deadline (exit 124);
       # its failure (a cut included) fails the suite
  local left=$((step_deadline - SECONDS)) pid rc
  if ((left < 5)); then
    log "step $step: its budget is spent, not run: $*"; cut+="$step "; status=1; return 124
  fi
  timeout -k 10 "$left" "$@" &
  pid=$!; echo "$pid" >> "$groups"
  wait "$pid"; rc=$?
  stop_group "$pid"  # what the command left running (a driver's child cut with it)
  if ((rc == 124 || (rc == 137 && SECONDS >= step_deadline))); then
    log "step $step: cut at its budget (${budget[$step]} s): $*"; cut+="$step "
  fi
  ((rc == 0)) || { status=1; failed+="$step "; }  # (a failed program fails its step)
  return $rc
}
tsum() {  # tsum FILE COMMAND...: t, its output kept in $OUT/FILE and added to summary.md
  local f=$OUT/$1 rc; shift
  t "$@" > "$f" 2>&1; rc=$?
  tee -a "$OUT/summary.md" < "$f"
  return $rc
}
conv_layers() {  # conv_layers PRECISION: ResNet-50's convolutions one by one, libnn then PyTorch
  log "ResNet-50's convolutions layer by layer in $1 at batch 256, channels-last: libnn (cuDNN, its algorithms found by benchmark), then PyTorch (cudnn.benchmark) on the same shapes"
  tsum conv_$1.log "$bdir/bin/conv_bench" --device cuda --precision $1 --batch-size 256 --reps 5
  tsum conv_torch_$1.log "$py" bench/peers/conv_torch.py --layers-from "$OUT/conv_$1.log" --device cuda \
      --precision $1 --batch-size 256 --reps 5
}
text_vs_torch() {  # text_vs_torch NAME FLAGS...: libnn then PyTorch on the text models, with
                   # the measured matmul rate; NAME.log and NAME.json, its tables to summary.md
  local name=$1 rc; shift
  t "$py" bench/text_vs_torch.py --device cuda --machine "$machine" --python "$py" \
      --bench "$bdir/bin/text_bench" --gemm 8192 --out "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  grep -E '^\||^text|^measured' "$OUT/$name.log" | tee -a "$OUT/summary.md"
  return $rc
}
finish() {  # on every exit, once, in the suite's shell only: stop, report, bundle
  trap '' TERM INT
  [[ $BASHPID == "$suite_pid" ]] || return 0
  exec 1>&3 2>&4
  local g st left=()
  while read -r g; do stop_group "$g"; done < "$groups"
  pkill -TERM -P "$suite_pid" 2> /dev/null  # a command started but not yet listed
  [[ $step != none ]] && times+=("$step $((SECONDS - step_start)) s (stopped)")
  [[ -n $memcheck_pid && -z $memcheck_joined ]] && times+=("memcheck $((SECONDS - memcheck_t0)) s (stopped)")
  log "step times: $(IFS=,; echo "${times[*]:-none}")"
  for st in $all_steps; do want "$st" && [[ $finished != *" $st "* ]] && left+=("$st"); done
  log "steps to run again (cut, stopped, failed or not reached): ${left[*]:-none}"
  rm -f "$groups"
  bundle
}
trap finish EXIT
trap 'trap "" TERM INT; log "stopped by a signal (GPU_SUITE_TIMEOUT or the caller) in step $step"; exit 124' TERM INT
deps=${LIBNN_GPU_DEPS:-$PWD/.gpu_deps}
bdir=${BUILD_DIR:-build-gpu}
py=${PYTHON:-python3}
fashion=/usr/share/datasets/fashion-mnist
[[ -d "$deps/fashion-mnist" ]] && fashion="$deps/fashion-mnist"
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

# Steps other than build use the build folder as it is; without one, they build it first.
if ! want build && [[ ! -x "$bdir/bin/libnn_tests" ]]; then
  log "no build in $bdir: building it first"
  steps+=(build)
fi
if want build; then
  begin build "build into $bdir"
  # A build made beforehand on a machine without a GPU (bench/stage_gpu_deps.sh) when it was
  # made from these sources for this GPU and runs here (bench/gpu_prebuilt.sh), else from source
  if [[ ${GPU_SUITE_PREBUILT:-1} != 0 && -f $deps/prebuilt.tar.gz ]] \
     && timeout 120 bench/gpu_prebuilt.sh unpack "$deps/prebuilt.tar.gz" "$bdir" > "$OUT/prebuilt.log" 2>&1; then
    log "$(tail -1 "$OUT/prebuilt.log")"
  else
    [[ -f $OUT/prebuilt.log ]] && log "$(tail -1 "$OUT/prebuilt.log"): building from source"
    extra=()
    [[ -d "$deps" ]] && extra+=(-DCMAKE_PREFIX_PATH="$deps" -DZLIB_ROOT="$deps")
    command -v ccache > /dev/null && extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    arch=${CUDA_ARCHS:-native}
    # (programs find libnn.so beside them wherever the folder goes; no JPEG: the suite reads
    # none, and a GPU machine's libjpeg need not be a build machine's)
    t cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBNN_WITH_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES="$arch" -DLIBNN_FASHION_MNIST_DIR="$fashion" \
          -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DCMAKE_DISABLE_FIND_PACKAGE_JPEG=ON "${extra[@]}" > "$OUT/configure.log" 2>&1
    rc=$?; grep -E 'libnn: CUDA|Found CUDNN' "$OUT/configure.log" | tee -a "$OUT/summary.md"
    if [[ $rc -ne 0 ]]; then log "configure exit $rc"; tail -40 "$OUT/configure.log"; end failed; exit "$rc"; fi
    t cmake --build "$bdir" -j "$(nproc)" > "$OUT/build.log" 2>&1
    rc=$?; log "build exit $rc"
    if [[ $rc -ne 0 ]]; then
      grep -m 20 -B2 -A8 -E 'error|FAILED' "$OUT/build.log"; tail -20 "$OUT/build.log"; end failed; exit "$rc"
    fi
  fi
  end
fi
# the library folders a carried build needed here (bench/gpu_prebuilt.sh), for every step
[[ -f $bdir/prebuilt.env ]] && source "$bdir/prebuilt.env"

memcheck_body() {
  # without the caching allocator, so each tensor's bounds are an allocation's bounds (the
  # allocator's own test, which counts the cache's reuse, runs with the cache on); --durations
  # lists each case as it passes, so a run cut at the budget still says how far it got.
  # Convolutions take cuDNN's heuristic choice (LIBNN_CUDNN_FIND=0): its benchmark runs every
  # algorithm of every shape, each a library kernel the sanitizer instruments; the test step
  # runs the benchmark's choices.
  LIBNN_CUDNN_FIND=0 LIBNN_NO_MEMORY_CACHING=1 t compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bdir/bin/libnn_tests" "[cuda]~[memory]" --durations yes > "$OUT/memcheck.log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    LIBNN_CUDNN_FIND=0 t compute-sanitizer --tool memcheck --error-exitcode 3 "$bdir/bin/libnn_tests" \
        "[cuda][memory]~[oom]" --durations yes >> "$OUT/memcheck.log" 2>&1
    rc=$?
  fi
  # The out-of-memory case asks cudaMalloc for more than the device has, and the sanitizer
  # counts the failed call (and the cudaGetLastError that clears it) as errors: there only the
  # API-error report is off; its memory accesses are checked as everywhere.
  if [[ $rc -eq 0 ]]; then
    LIBNN_CUDNN_FIND=0 t compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        "$bdir/bin/libnn_tests" "[cuda][oom]" --durations yes >> "$OUT/memcheck.log" 2>&1
    rc=$?
  fi
  # Shared-memory races and barrier misuse in the tensor-core attention, whose one-pass
  # backward reads the other warps' tiles: racecheck and synccheck over its paths' test case.
  local tool
  for tool in racecheck synccheck; do
    [[ $rc -eq 0 ]] || break
    t compute-sanitizer --tool $tool --error-exitcode 3 "$bdir/bin/libnn_tests" \
        "attention on the plain kernel and with the one-pass backward*" --durations yes \
        >> "$OUT/memcheck.log" 2>&1
    rc=$?
  done
  log "memcheck exit $rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tr '\n' ' ')" \
      "$(grep -c ' s: ' "$OUT/memcheck.log") test cases finished"
}
# With the test step, memcheck runs beside it as a background job (neither is timed, and the
# GPU and the cores hold both), so the suite spends the longer of the two, not their sum. The
# job keeps memcheck's own budget; its step's bookkeeping comes back through a file and is
# merged when the test step joins it (memcheck_join).
memcheck_state=$OUT/.memcheck_state
memcheck_start() {
  memcheck_t0=$SECONDS
  ( begin memcheck "compute-sanitizer memcheck over the CUDA tests, beside the tests"
    OMP_NUM_THREADS=8 memcheck_body
    end
    printf '%s\n%s\n%s\n%s\n' "$status" "$finished" "$cut" "${times[-1]}" > "$memcheck_state"
  ) &
  memcheck_pid=$!
}
memcheck_join() {
  wait "$memcheck_pid"
  memcheck_joined=1
  local st fin ct took
  { IFS= read -r st; IFS= read -r fin; IFS= read -r ct; IFS= read -r took; } < "$memcheck_state" 2> /dev/null \
    || { log "memcheck: its job left no state"; status=1; return; }
  rm -f "$memcheck_state"
  ((st == 0)) || status=1
  [[ $fin == *" memcheck "* ]] && finished+="memcheck "
  [[ $ct == *" memcheck "* ]] && cut+="memcheck "
  times+=("$took")
}

if want test; then
  begin test "tests: the CUDA cases of libnn_tests, then the command-line checks on the GPU"
  want memcheck && memcheck_start
  omp=(); [[ -n $memcheck_pid ]] && omp=(env OMP_NUM_THREADS=8)  # (the cores shared with memcheck)
  # (every Catch2 case that runs on a GPU carries the [cuda] tag)
  t "${omp[@]}" "$bdir/bin/libnn_tests" "[cuda]" --durations yes > "$OUT/cuda_tests.log" 2>&1
  rc=$?; log "CUDA tests exit $rc: $(tail -3 "$OUT/cuda_tests.log" | tr '\n' ' ')"
  if [[ $rc -ne 0 && $rc -ne 124 ]]; then  # triage: the same tests with the paths not yet run on a GPU off
    LIBNN_CUDA_ATTENTION=simt LIBNN_CUBLASLT=0 LIBNN_CUDNN_BN_FUSED=0 LIBNN_CUDA_LN_FUSED=0 t "${omp[@]}" "$bdir/bin/libnn_tests" "[cuda]" \
      > "$OUT/cuda_tests_fallbacks.log" 2>&1
    log "CUDA tests with LIBNN_CUDA_ATTENTION=simt LIBNN_CUBLASLT=0 LIBNN_CUDNN_BN_FUSED=0 LIBNN_CUDA_LN_FUSED=0: exit $? $(tail -2 \
      "$OUT/cuda_tests_fallbacks.log" | tr '\n' ' ')"
  fi
  # the command-line checks that use the GPU (the CPU tests are CI's, and the Catch2 cases ran
  # above), four at a time with four CPU threads each; a per-test limit well under the step's
  OMP_NUM_THREADS=4 t ctest --test-dir "$bdir" -R '^cli_cuda_' --no-tests=error -j 4 --output-on-failure \
    --timeout 120 > "$OUT/ctest.log" 2>&1
  rc=$?; log "ctest exit $rc: $(grep -E 'tests passed|No tests were found' "$OUT/ctest.log")"
  end
  if [[ -n $memcheck_pid ]]; then  # the benchmarks must not share the GPU with it
    log "waiting for memcheck (beside the tests) to end before the next step"
    memcheck_join
  fi
fi

if want mnist; then
  begin mnist "MNIST CNN on the GPU: libnn vs PyTorch, Fashion-MNIST, 3 epochs"
  t "$py" bench/mnist_vs_torch.py --device cuda --dataset fashion-mnist \
      --data-dir "$fashion" --epochs 3 --models cnn --app "$bdir/bin/mnist_train" \
      --python "$py" --machine "$machine" --out "$OUT/mnist_cuda.json" > "$OUT/mnist_cuda.log" 2>&1
  tail -6 "$OUT/mnist_cuda.log" | tee -a "$OUT/summary.md"
  log "the same libnn run with cuDNN's heuristic algorithms (LIBNN_CUDNN_FIND=0, PyTorch's default) instead of its benchmark of each: what the search costs in the first epoch and buys in the others"
  w0=$(date +%s.%N)
  LIBNN_CUDNN_FIND=0 t "$bdir/bin/mnist_train" --device cuda --dataset fashion-mnist --data-dir "$fashion" \
      --epochs 3 --model cnn --metrics "$OUT/mnist_cuda_heuristics.jsonl" > "$OUT/mnist_cuda_heuristics.log" 2>&1
  w1=$(date +%s.%N)
  "$py" - "$OUT/mnist_cuda_heuristics.jsonl" "$w0" "$w1" <<'PY' 2>&1 | tee -a "$OUT/summary.md"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")] if os.path.exists(sys.argv[1]) else []
if not rows:
    sys.exit("libnn, heuristics: no epoch finished (mnist_cuda_heuristics.log)")
print(f"libnn, heuristics: {sum(r['seconds'] for r in rows):.1f} s training, "
      f"{float(sys.argv[3]) - float(sys.argv[2]):.1f} s wall, epoch s "
      + " ".join(f"{r['seconds']:.2f}" for r in rows)
      + f", val acc {100 * rows[-1]['val_accuracy']:.2f}%")
PY
  end
fi

if want kernels; then
  begin kernels "memory-bound kernels, GB/s (libnn, then PyTorch, same GPU)"
  t "$bdir/bin/kernels_bench" --device cuda > "$OUT/kernels.jsonl" 2>> "$OUT/bench.log"
  t "$py" bench/peers/kernels_torch.py --device cuda >> "$OUT/kernels.jsonl" 2>> "$OUT/bench.log"
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
  log "host cost per call (launch and bookkeeping), ops on 16-element tensors: libnn then PyTorch"
  t "$bdir/bin/kernels_bench" --device cuda --overhead --iters 2000 > "$OUT/overhead.jsonl" 2>> "$OUT/bench.log"
  t "$py" bench/peers/kernels_torch.py --device cuda --overhead --iters 2000 >> "$OUT/overhead.jsonl" \
    2>> "$OUT/bench.log"
  tee -a "$OUT/summary.md" < "$OUT/overhead.jsonl"
  end
fi

if want resnet; then
  begin resnet "ResNet-50 training throughput, FP32 / FP16 (channels-last): libnn then PyTorch"
  for b in 256 128; do  # the headline batch first
    tsum resnet_libnn_b$b.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size $b \
        --num-batches 50 --num-warmup-batches 10 --precisions fp32,fp16 --json "$OUT/fp16_vs_fp32_libnn_b$b.json"
    tsum resnet_torch_b$b.log "$py" bench/peers/fp16_vs_fp32_torch.py --machine "$machine" --model resnet50 \
        --batch-size $b --num-batches 50 --num-warmup-batches 10 --precisions fp32,fp16 \
        --json "$OUT/fp16_vs_fp32_torch_b$b.json"
    "$py" bench/fp16_vs_torch.py --from "$OUT/fp16_vs_fp32_libnn_b$b.json" \
        "$OUT/fp16_vs_fp32_torch_b$b.json" --out "$OUT/fp16_vs_torch_b$b.json" 2>&1 \
        | tee -a "$OUT/summary.md"
    # the merged file holds both programs' records: theirs apart would be counted twice by
    # bench/report.py (kept where the merge failed)
    [[ -s "$OUT/fp16_vs_torch_b$b.json" ]] && rm -f "$OUT/fp16_vs_fp32_libnn_b$b.json" "$OUT/fp16_vs_fp32_torch_b$b.json"
  done
  end
fi

if want curves; then
  begin curves "200 steps of ResNet-50 on fixed synthetic batches: FP32 and FP16 loss curves"
  tsum curves.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 64 \
      --num-warmup-batches 0 --num-batches 200 --precisions fp32,fp16 --loss-curve "$OUT/resnet50_loss_curve.csv"
  "$py" bench/plot_loss_curves.py "$OUT/resnet50_loss_curve.csv" --label libnn 2>&1 \
      | tee -a "$OUT/summary.md"   # the table here; plot it with --out where matplotlib is
  end
fi

if want text; then
  begin text "text classifiers (MLP, BERT-base) at 2..20,000 classes, FP32 and FP16: libnn then PyTorch"
  text_vs_torch text_cuda --precisions fp32,fp16 --num-batches 20
  end
fi

if want memcheck && [[ -z $memcheck_joined ]]; then
  begin memcheck "compute-sanitizer memcheck over the CUDA tests"
  memcheck_body
  end
fi

if want extras; then
  begin extras "what the issues do not ask for: microbenchmarks, BF16, layouts, fusions, smaller models"
  log "where ResNet-50 FP16 training's time goes at batch 256, primitive by primitive (device time between stream events around each)"
  tsum resnet_profile.log "$bdir/bin/resnet50_train" --device cuda --data synthetic --precision fp16 \
      --batch-size 256 --num-batches 20 --log-every 100 --profile  # (the first step holds cuDNN's algorithm search)
  conv_layers fp16
  log "batch norm (+ residual + ReLU) in FP16 channels-last: libnn's fused (cuDNN's Ex kernels) and composed tails, then PyTorch's (composed)"
  t "$bdir/bin/kernels_bench" --device cuda --dtype f16 > "$OUT/kernels_f16.jsonl" 2>> "$OUT/bench.log"
  t "$py" bench/peers/kernels_torch.py --device cuda --dtype f16 >> "$OUT/kernels_f16.jsonl" 2>> "$OUT/bench.log"
  grep batch_norm "$OUT/kernels_f16.jsonl" | tee -a "$OUT/summary.md"
  log "fused attention, TFLOP/s: libnn (tensor-core kernels, the plain kernel, the one-pass backward), then PyTorch SDPA"
  : > "$OUT/attention.jsonl"
  for dt in f16 bf16 f32; do
    t "$bdir/bin/kernels_bench" --device cuda --attention --dtype $dt --iters 20 >> "$OUT/attention.jsonl" \
      2>> "$OUT/bench.log"
    t "$py" bench/peers/kernels_torch.py --device cuda --attention --dtype $dt --iters 20 >> "$OUT/attention.jsonl" \
      2>> "$OUT/bench.log"
  done
  "$py" - "$OUT/attention.jsonl" <<'PY' | tee -a "$OUT/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["impl"], r["dtype"], r["op"], r["shape"]): r["tflops"] for r in rows}
print("\n| dtype | op | shape | libnn TFLOP/s | libnn plain kernel | libnn one-pass backward | PyTorch SDPA | libnn / PyTorch |\n|---|---|---|---|---|---|---|---|")
for (impl, dt, op, shape), v in by.items():
    if impl != "libnn-default": continue
    simt, torch_ = by.get(("libnn-simt", dt, op, shape)), by.get(("pytorch", dt, op, shape))
    one = by.get(("libnn-one-pass-backward", dt, op, shape), "n/a")
    ratio = f"{v / torch_:.2f}" if torch_ else "n/a"
    plain = simt if simt is not None else "(the same kernel)"  # (no plain row: the default is it)
    print(f"| {dt} | {op} | {shape} | {v} | {plain} | {one} | {torch_} | {ratio} |")
PY
  if command -v ncu > /dev/null; then
    log "attention's kernels one by one (Nsight Compute, each launch's device time; grids: 32 x 12 x 128 and 8 x 12 x 512): forward, delta, dQ, dK/dV, one path per run"
    for run in f16:default f16:one-pass-backward f32:default; do
      dt=${run%%:*} path=${run#*:}
      t ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum \
          --kernel-name regex:attention "$bdir/bin/kernels_bench" --device cuda --attention --dtype $dt \
          --attention-paths $path --iters 3 > "$OUT/attention_ncu_${dt}_$path.csv" 2>> "$OUT/bench.log"
      "$py" bench/ncu_times.py "$OUT/attention_ncu_${dt}_$path.csv" --title "attention kernels, $dt, $path" \
        2>&1 | tee -a "$OUT/summary.md"
    done
  else
    log "no ncu here: attention's per-kernel times left out"
  fi
  log "where BERT-base FP16 training's time goes, primitive by primitive (device time between stream events around each)"
  tsum bert_profile.log "$bdir/bin/text_bench" --device cuda --models bert --classes 2 --precisions fp16 \
      --phases train --num-batches 5 --num-warmup-batches 2 --profile
  log "What the fused dropout + residual add + layer norm buys: BERT-base FP16 training with it (the default) and without (LIBNN_CUDA_LN_FUSED=0)"
  for fused in 1 0; do
    LIBNN_CUDA_LN_FUSED=$fused tsum bert_ln_fused$fused.log "$bdir/bin/text_bench" --device cuda --models bert \
        --classes 2 --precisions fp16 --phases train --num-batches 20 --num-warmup-batches 3
  done
  log "BERT-base FP16 training with the one-pass attention backward (LIBNN_CUDA_ATTENTION=one-pass-backward) at batch 32 and 128: against the two-pass rows of the text step and of the next run"
  for bb in 32 128; do
    LIBNN_CUDA_ATTENTION=one-pass-backward tsum bert_one_pass_b$bb.log "$bdir/bin/text_bench" --device cuda \
        --models bert --classes 2 --precisions fp16 --phases train --bert-batch $bb --num-batches 10 \
        --num-warmup-batches 3
  done
  log "BERT-base training at batch 128 x 128 tokens (the text step's is 32): FP16 and FP32, libnn then PyTorch, with model FLOP utilisation"
  text_vs_torch text_cuda_b128 --models bert --classes 2 --precisions fp16,fp32 --phases train \
      --bert-batch 128 --num-batches 10
  log "ResNet-50 in BF16 at batch 256: libnn then PyTorch"
  tsum bf16_libnn.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 256 \
      --num-batches 30 --num-warmup-batches 5 --precisions bf16 --json "$OUT/fp16_vs_fp32_libnn_bf16_b256.json"
  tsum bf16_torch.log "$py" bench/peers/fp16_vs_fp32_torch.py --machine "$machine" --model resnet50 \
      --batch-size 256 --num-batches 30 --num-warmup-batches 5 --precisions bf16 \
      --json "$OUT/fp16_vs_fp32_torch_bf16_b256.json"
  log "What channels-last buys: ResNet-50 at batch 128 in NCHW (the resnet step's runs are NHWC)"
  tsum nchw.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 --batch-size 128 --num-batches 30 \
      --layout nchw --num-warmup-batches 5 --precisions fp32,fp16 --json "$OUT/fp16_vs_fp32_libnn_nchw_b128.json"
  log "What the fused batch norm + residual + ReLU buys: ResNet-50 FP16 at batch 256 with cuDNN's fused kernels off (LIBNN_CUDNN_BN_FUSED=0; the resnet step's runs have them on)"
  LIBNN_CUDNN_BN_FUSED=0 tsum unfused.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model resnet50 \
      --batch-size 256 --num-batches 30 --num-warmup-batches 5 --precisions fp16 \
      --json "$OUT/fp16_vs_fp32_libnn_unfused_b256.json"
  conv_layers fp32
  log "MNIST CNN throughput, FP32 / FP16 / BF16"
  tsum mnist_precisions.log "$bdir/bin/fp16_vs_fp32" --machine "$machine" --model mnist_cnn --batch-size 128 \
      --num-batches 200 --json "$OUT/fp16_vs_fp32_mnist.json"
  log "CIFAR ResNet-20 training throughput at batch 128, FP32 / FP16 / BF16: libnn vs PyTorch"
  tsum resnet20.log "$py" bench/fp16_vs_torch.py --machine "$machine" --model resnet20 --batch-size 128 \
      --num-batches 100 --num-warmup-batches 10 --bench "$bdir/bin/fp16_vs_fp32" --python "$py" \
      --out "$OUT/fp16_vs_torch_resnet20.json"
  log "LSTM and GRU (2 layers x 512, 256 steps, batch 64), FP32 and FP16: libnn vs torch.nn's (cuDNN)"
  for prec in fp32 fp16; do
    t "$py" bench/rnn_vs_torch.py --device cuda --machine "$machine" --python "$py" --bench "$bdir/bin/rnn_bench" \
        --layers 2 --hidden-size 512 --batch-size 64 --precision $prec --out "$OUT/rnn_$prec.json" \
        > "$OUT/rnn_$prec.log" 2>&1
    grep -E '^\||^LSTM' "$OUT/rnn_$prec.log" | tee -a "$OUT/summary.md"
  done
  end
fi

log "done, status $status"
exit $status
