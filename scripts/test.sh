#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the Catch2 unit tests, CLI checks and
# the install check. Tests that need a GPU skip themselves when none is present. Then the
# checking stage (scripts/check.sh): the CPU tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer, and the file-reader fuzzers for a minute each; and the CUDA 12
# stage (scripts/check_cuda12.sh): the whole tree built with CUDA 12.4 for sm_70 (V100).
# LIBNN_QUICK_TEST=1 skips both (for quick local runs; CI runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 900
if [[ "${LIBNN_QUICK_TEST:-0}" == 1 ]]; then
  echo "test: LIBNN_QUICK_TEST=1: skipping the sanitizer and fuzzing stage (scripts/check.sh)" \
       "and the CUDA 12 build (scripts/check_cuda12.sh)"
else
  scripts/check.sh
  scripts/check_cuda12.sh
fi
