#!/usr/bin/env bash
# Stages what the GPU machine lacks into .gpu_deps/ (git-ignored): the header-only
# dependencies (Eigen, Catch2, cxxopts) with their CMake packages (Catch2's with the
# libCatch2WithMain.a its package file requires), zlib's headers and shared library (to link
# against; libnn.so then needs libz.so.1, which every system has: Debian's libz.a is not
# position-independent and cannot go into a shared library), and Fashion-MNIST; then builds
# the GPU suite's build here, for sm_90 (Hopper), and packs it as prebuilt.tar.gz
# (bench/gpu_prebuilt.sh), which the suite uses there instead of building when it was made
# from the same sources and runs there. That machine reaches no package registry, so
# bench/gpu_suite.sh builds against this folder when it must; carry it with the call:
#   device run: command "GPU_SUITE_TIMEOUT=550 bench/gpu_suite.sh all", timeout_s 580,
#   carry [".gpu_deps"]
# (docs/benchmarks.md, "How to reproduce the GPU tables", gives the second call)
#   --no-prebuilt   stage the dependencies only (no build; the suite then builds there)
# GPU_DEPS_DIR=DIR stages into DIR instead (tests/cli/gpu_deps.sh); PREBUILT_DIR (default
# build-gpu-prebuilt) is the build folder; CUDA_ARCHS (default 90) its architectures.
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=1
for a in "$@"; do
  case $a in
    --no-prebuilt) prebuilt=0 ;;
    -h|--help) source scripts/args.sh; help_text; exit 0 ;;
    *) echo "stage_gpu_deps: unknown argument '$a' (--no-prebuilt, --help)" >&2; exit 2 ;;
  esac
done
d=${GPU_DEPS_DIR:-.gpu_deps}
rm -rf "$d"
mkdir -p "$d/include" "$d/lib/cmake" "$d/share"
cp -r /usr/include/eigen3 "$d/include/"
cp -r /usr/share/eigen3 "$d/share/"                 # Eigen3Config.cmake (paths relative)
cp -r /usr/include/catch2 "$d/include/"
cp -r /usr/lib/cmake/Catch2 "$d/lib/cmake/"
# the static libraries Catch2Targets.cmake names (it fails when one is missing): v2 (Debian
# 12) has libCatch2WithMain.a, v3 (Debian 13) libCatch2.a and libCatch2Main.a
cp /usr/lib/libCatch2*.a "$d/lib/"
cp /usr/include/cxxopts.hpp "$d/include/"
cp -r /usr/lib/cmake/cxxopts "$d/lib/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$d/include/"
cp -L /usr/lib/x86_64-linux-gnu/libz.so "$d/lib/libz.so"  # (-L: an absolute symlink there)
cp -r /usr/share/datasets/fashion-mnist "$d/"
du -sh "$d"
((prebuilt)) || exit 0

# The build the suite would make there (its own build step, the same configure), for sm_90;
# ccache keeps a rebuild after a small change short.
b=${PREBUILT_DIR:-build-gpu-prebuilt}
logs=$(mktemp -d)
if ! CUDA_ARCHS=${CUDA_ARCHS:-90} GPU_SUITE_PREBUILT=0 BUILD_DIR="$b" LIBNN_GPU_DEPS="$(cd "$d" && pwd)" \
     GPU_SUITE_BUDGETS="build=5400" OUT="$logs" bench/gpu_suite.sh build > "$logs/suite.log" 2>&1; then
  cat "$logs/suite.log" >&2
  echo "stage_gpu_deps: the build for the GPU machine failed (above); the dependencies are staged" >&2
  exit 1
fi
rm -rf "$logs"
bench/gpu_prebuilt.sh pack "$b" "$d/prebuilt.tar.gz"
du -sh "$d"
