#!/usr/bin/env bash
# Stages what the GPU machine lacks into .gpu_deps/ (git-ignored): the header-only
# dependencies (Eigen, Catch2, cxxopts) with their CMake packages (Catch2's with the
# libCatch2WithMain.a its package file requires), zlib's headers and shared library (to link
# against; libnn.so then needs libz.so.1, which every system has: Debian's libz.a is not
# position-independent and cannot go into a shared library), and Fashion-MNIST. That machine reaches no package registry, so bench/gpu_suite.sh
# builds against this folder; carry it with the call:
#   device run: command "GPU_SUITE_TIMEOUT=550 bench/gpu_suite.sh all", timeout_s 580,
#   carry [".gpu_deps"]
# (docs/benchmarks.md, "How to reproduce the GPU tables", gives the second call)
# GPU_DEPS_DIR=DIR stages into DIR instead (tests/cli/gpu_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
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
