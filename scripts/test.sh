#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the Catch2 unit tests, CLI checks and
# the install check. Tests that need a GPU skip themselves when none is present. Then the
# checking stage (scripts/check.sh): the CPU tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer, and the file-reader fuzzers for a minute each; and the CUDA 12
# stage (scripts/check_cuda12.sh): the whole tree built with CUDA 12.4 for sm_70 (V100); and
# the CUDA emulator stage (scripts/check_cuda_emu.sh): the unit tests again with the CUDA
# backend built against tests/cuda_emu, so the CUDA tests run on the CPU; and, first, the
# newer-toolchain stage (scripts/check_toolchain.sh): every translation unit compiled with
# Debian 13's GCC 14 and Catch2 v3 (syntax only), as Ubuntu 24.04 and Debian 13 users build.
# LIBNN_QUICK_TEST=1 skips all four (for quick local runs; CI runs them).
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 900
if [[ "${LIBNN_QUICK_TEST:-0}" == 1 ]]; then
  echo "test: LIBNN_QUICK_TEST=1: skipping the sanitizer and fuzzing stage (scripts/check.sh)," \
       "the CUDA 12 build (scripts/check_cuda12.sh), the CUDA emulator (scripts/check_cuda_emu.sh)" \
       "and the newer toolchain (scripts/check_toolchain.sh)"
else
  scripts/check_toolchain.sh
  scripts/check.sh
  scripts/check_cuda12.sh
  scripts/check_cuda_emu.sh
fi
