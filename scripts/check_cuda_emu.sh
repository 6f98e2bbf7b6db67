#!/usr/bin/env bash
# The CUDA emulator stage of scripts/test.sh (also runs alone): builds build-emu/ with the
# CUDA backend and kernels/ compiled by the host compiler against the emulator in
# tests/cuda_emu (-DLIBNN_WITH_CUDA=EMULATOR) and runs there the unit tests, mnist_train's
# CUDA command-line checks (tests/cli/cuda_cli.sh) and the GPU suite's benchmark programs at
# tiny sizes (tests/cli/cuda_bench_smoke.sh), so every CUDA test runs on this CPU: our
# kernels thread by thread with real __syncthreads, warp-shuffle and WMMA semantics (a
# missing barrier gives a wrong value, a barrier not all threads reach a reported deadlock, a
# bad launch configuration a launch error, a write past a buffer's end a stop with a message
# naming the buffer), cuBLAS, cuBLASLt and cuDNN by reference loops (docs/architecture.md). It checks what the kernels compute, not
# their speed, and is no substitute for the GPU run (bench/gpu_suite.sh): races between
# blocks, timing and real hardware limits stay untested. Needs the CUDA toolkit's headers
# (not a GPU, not nvcc's compiler); skips with a message when there are none
# (CUDA_EMU_REQUIRED=1: fail instead).
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
build_dir=${EMU_BUILD_DIR:-build-emu}
t0=$SECONDS

if ! command -v nvcc > /dev/null && [[ ! -f /usr/local/cuda/include/cuda_runtime.h ]]; then
  echo "check_cuda_emu: no CUDA toolkit headers (nvcc, /usr/local/cuda): stage skipped"
  [[ "${CUDA_EMU_REQUIRED:-0}" == 1 ]] && exit 1
  exit 0
fi
root=()
if ! command -v nvcc > /dev/null; then root=(-DCUDAToolkit_ROOT=/usr/local/cuda); fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBNN_WITH_CUDA=EMULATOR \
      -DLIBNN_BUILD_APPS=ON -DLIBNN_BUILD_BENCH=ON "${root[@]}" "${launcher[@]}" > /dev/null
cmake --build "$build_dir" -j "$(nproc)" --target libnn_tests mnist_train cifar_train \
      fp16_vs_fp32 text_bench kernels_bench cuda_emu_selftest
t_build=$SECONDS

# Every unit test, the CUDA ones on the emulated device (they must run, not skip), with the
# caching allocator off so that each tensor is its own allocation between the emulator's
# guard zones (a kernel writing past a buffer fails its launch); then the allocator's own
# tests with the cache on.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run() {
  local rc=0
  "$@" > "$log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then tail -150 "$log"; else tail -2 "$log"; fi
  if grep -q "no CUDA device present" "$log"; then
    echo "check_cuda_emu: the CUDA tests skipped themselves: the emulated device was not seen"
    rc=1
  fi
  status=$((status | rc))
}
# (first the emulator's own checks, tests/cuda_emu/selftest.cu: barriers, shuffles and the
# faults it must report, in both orders)
run "$build_dir/bin/cuda_emu_selftest"
LIBNN_CUDA_EMU_ORDER=reverse run "$build_dir/bin/cuda_emu_selftest"
LIBNN_NO_MEMORY_CACHING=1 run "$build_dir/bin/libnn_tests" "~[memory]"
# again with blocks and threads scheduled last to first: a result that depends on the order
# (which the hardware does not promise) shows as a difference between the two runs' checks
LIBNN_CUDA_EMU_ORDER=reverse LIBNN_NO_MEMORY_CACHING=1 run "$build_dir/bin/libnn_tests" "~[memory]"
run "$build_dir/bin/libnn_tests" "[memory]"
# convolutions chosen by cuDNN's heuristics (as the GPU suite's memcheck runs them)
LIBNN_CUDNN_FIND=0 run "$build_dir/bin/libnn_tests" \
  "convolutions on cuDNN's heuristics*,a small ResNet in channels-last on CUDA matches the CPU*"
# The command-line checks of CUDA paths: mnist_train's (tests/cli/cuda_cli.sh: no GPU, out
# of memory, checkpoints moving between CPU and the device; they need Fashion-MNIST) and the
# GPU suite's benchmark programs at tiny sizes (tests/cli/cuda_bench_smoke.sh), and
# fp16_vs_fp32 asking for more than the device has (tests/cli/gpu_oom.sh).
cli_tests='^cli_cuda_(bench_smoke|bench_out_of_memory|cifar)$'
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  cli_tests='^cli_cuda_'
else
  echo "check_cuda_emu: no /usr/share/datasets/fashion-mnist: mnist_train's cli_cuda tests skipped"
fi
run ctest --test-dir "$build_dir" -R "$cli_tests" --output-on-failure
if grep -q "Skipped\|No tests were found" "$log"; then
  echo "check_cuda_emu: a cli_cuda test was skipped or missing"; cat "$log"; status=1
fi
echo "check_cuda_emu: build $((t_build - t0)) s, tests $((SECONDS - t_build)) s, exit $status"
exit $status
