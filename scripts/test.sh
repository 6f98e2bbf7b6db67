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
# LIBNN_QUICK_TEST=1 skips all four (for quick local runs; CI runs them). The downloads of
# the toolchain and CUDA 12 stages (a Debian 13 chroot, CUDA 12.4) run during the main build,
# so that the network's time hides behind the compiler's.
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
quick=${LIBNN_QUICK_TEST:-0}
if [[ $quick == 1 ]]; then
  scripts/setup.sh
else
  LIBNN_SETUP_PACKAGES_ONLY=1 scripts/setup.sh  # (debootstrap first)
  fetch_logs=$(mktemp -d)
  fetches=()  # (each in a process group of its own, which the trap stops whole)
  TOOLCHAIN_FETCH_ONLY=1 setsid scripts/check_toolchain.sh > "$fetch_logs/toolchain" 2>&1 &
  fetches+=($!)
  CUDA12_FETCH_ONLY=1 setsid scripts/check_cuda12.sh > "$fetch_logs/cuda12" 2>&1 &
  fetches+=($!)
  # (|| true: errexit holds in the trap too, and a finished fetch's group is gone)
  trap 'for p in "${fetches[@]}"; do kill -- "-$p" 2> /dev/null || true; done; rm -rf "$fetch_logs"' EXIT
  scripts/setup.sh
  # Both done before the tests, some of which time how soon a signal stops a run
  echo "test: waiting for the downloads of the toolchain and CUDA 12 stages (their logs follow)"
  for p in "${fetches[@]}"; do wait "$p" || true; done
  fetches=()
  cat "$fetch_logs/toolchain" "$fetch_logs/cuda12"  # a failed fetch is tried again by its stage
fi
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 900
if [[ $quick == 1 ]]; then
  echo "test: LIBNN_QUICK_TEST=1: skipping the sanitizer and fuzzing stage (scripts/check.sh)," \
       "the CUDA 12 build (scripts/check_cuda12.sh), the CUDA emulator (scripts/check_cuda_emu.sh)" \
       "and the newer toolchain (scripts/check_toolchain.sh)"
else
  scripts/check_toolchain.sh
  scripts/check.sh
  scripts/check_cuda12.sh
  scripts/check_cuda_emu.sh
fi
