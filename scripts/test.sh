#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the Catch2 unit tests, CLI checks and
# the install check. Tests that need a GPU skip themselves when none is present. Then the
# checking stage (scripts/check.sh): the CPU tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer, and the file-reader fuzzers for a minute each.
# LIBNN_QUICK_TEST=1 skips the checking stage (for quick local runs; CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 900
if [[ "${LIBNN_QUICK_TEST:-0}" == 1 ]]; then
  echo "test: LIBNN_QUICK_TEST=1: skipping the sanitizer and fuzzing stage (scripts/check.sh)"
else
  scripts/check.sh
fi
