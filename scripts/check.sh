#!/usr/bin/env bash
# The checking stage of scripts/test.sh (also runs alone): builds build-check/ with clang,
# AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer targets, runs the CPU
# tests under the sanitizers, then every fuzz target for FUZZ_SECONDS (60) from the seeds in
# fuzz/corpus. Any sanitizer report, test failure or fuzzer finding fails it; a fuzzer's
# crashing input is kept in build-check/fuzz-artifacts/ (replay: build-check/bin/fuzz_X FILE).
#
#   scripts/check.sh
#   FUZZ_SECONDS=600 scripts/check.sh     # fuzz longer
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
build_dir=${CHECK_BUILD_DIR:-build-check}
fuzz_seconds=${FUZZ_SECONDS:-60}
# (libFuzzer reads 0, or a value it cannot parse, as no time limit: the run would not end)
if [[ ! $fuzz_seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "check.sh: FUZZ_SECONDS must be a whole number of seconds >= 1, got '$fuzz_seconds'" >&2
  exit 2
fi
jobs=$(nproc)
t0=$SECONDS

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Release keeps the sanitized tests fast enough for CI; line tables name file:line in reports.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS=-gline-tables-only -DLIBNN_SANITIZE=address,undefined -DLIBNN_FUZZ=ON \
      -DLIBNN_WITH_CUDA=OFF -DLIBNN_BUILD_BENCH=OFF -DLIBNN_NATIVE=OFF "${launcher[@]}" > /dev/null
cmake --build "$build_dir" -j "$jobs"
t_build=$SECONDS

# Skipped under the sanitizers, by exact name (a bare word would also drop every Catch2 case
# whose name holds it): install_find_package (a packaging check; the consumer project it
# builds has no sanitizer flags, nor do the docs_* programs), the docker/report lint scripts
# (Python), mnist_fashion_smoke*, cli_text_learn_transformer and cli_resnet50_cpu_* (real
# training, minutes under ASan; the text apps' other tests still run here); all run in the
# normal stage.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# OpenMP threads that wait asleep, not spinning: two tests share the two cores, and libomp's
# spinning threads of one took the other's time (8% off two of the long tests)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure --timeout 900 \
      -E '^(install_find_package|mnist_fashion_smoke.*|cli_text_learn_transformer|cli_resnet50_cpu_.*|docker_lint.*|bench_report|docs_.*)$'
t_tests=$SECONDS

# Every fuzz/fuzz_<name>.cpp target at once (they share the cores), seeded from
# fuzz/corpus/<name>/ with fuzz/<name>.dict when present. New inputs go to a scratch corpus,
# so the committed seeds stay as they are.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
artifacts="$build_dir/fuzz-artifacts"
mkdir -p "$artifacts"
declare -A pids
for src in fuzz/fuzz_*.cpp; do
  t=$(basename "$src" .cpp)
  t=${t#fuzz_}
  mkdir -p "$scratch/$t"
  extra=()
  if [[ -d fuzz/corpus/$t ]]; then extra+=("fuzz/corpus/$t"); fi
  if [[ -f fuzz/$t.dict ]]; then extra+=(-dict="fuzz/$t.dict"); fi
  "$build_dir/bin/fuzz_$t" "$scratch/$t" "${extra[@]}" \
      -max_total_time="$fuzz_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/$t-" -print_final_stats=1 > "$scratch/$t.log" 2>&1 &
  pids[$t]=$!
done
failed=0
for t in "${!pids[@]}"; do
  if wait "${pids[$t]}"; then
    runs=$(grep -ho 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$')
    echo "check: fuzz_$t: no finding in ${fuzz_seconds} s ($runs inputs)"
  else
    echo "check: fuzz_$t FOUND A PROBLEM; the input is in $artifacts/. Its log:"
    tail -n 60 "$scratch/$t.log"
    failed=1
  fi
done
((failed == 0)) || exit 1
echo "check: build $((t_build - t0)) s, sanitized tests $((t_tests - t_build)) s," \
     "fuzzing $((SECONDS - t_tests)) s; total $((SECONDS - t0)) s"
