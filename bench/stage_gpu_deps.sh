#!/usr/bin/env bash
# Stages what the GPU machine lacks into .gpu_deps/ (git-ignored): the header-only
# dependencies (Eigen, Catch2, cxxopts) with their CMake packages, zlib's headers and static
# library, and Fashion-MNIST. That machine reaches no package registry, so bench/gpu_suite.sh
# builds against this folder; carry it with the call:
#   device run: command "GPU_SUITE_TIMEOUT=570 bench/gpu_suite.sh build test kernels mnist",
#   carry [".gpu_deps"]
# (docs/benchmarks.md, "How to reproduce the GPU tables", gives the other calls)
set -euo pipefail
cd "$(dirname "$0")/.."
d=.gpu_deps
rm -rf "$d"
mkdir -p "$d/include" "$d/lib/cmake" "$d/share"
cp -r /usr/include/eigen3 "$d/include/"
cp -r /usr/share/eigen3 "$d/share/"                 # Eigen3Config.cmake (paths relative)
cp -r /usr/include/catch2 "$d/include/"
cp -r /usr/lib/cmake/Catch2 "$d/lib/cmake/"
cp /usr/include/cxxopts.hpp "$d/include/"
cp -r /usr/lib/cmake/cxxopts "$d/lib/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$d/include/"
cp /usr/lib/x86_64-linux-gnu/libz.a "$d/lib/"
cp -r /usr/share/datasets/fashion-mnist "$d/"
mkdir -p .git/info && { grep -qx '/.gpu_deps/' .git/info/exclude 2>/dev/null || echo '/.gpu_deps/' >> .git/info/exclude; }
du -sh "$d"
