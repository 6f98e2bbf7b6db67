#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the Catch2 unit tests, CLI checks and
# the install check. Tests that need a GPU skip themselves when none is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 900
