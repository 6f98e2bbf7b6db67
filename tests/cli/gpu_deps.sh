#!/usr/bin/env bash
# gpu_deps.sh: what bench/stage_gpu_deps.sh stages for a GPU machine without package
# registries is enough to configure there and to link libnn.so: a configure against the
# staged folder (as bench/gpu_suite.sh's build step does, CUDA off here) finds every
# dependency in it, and a shared library calling zlib links against the staged zlib.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; [[ -f ${2:-} ]] && tail -30 "$2"; exit 1; }
deps=$work/deps
GPU_DEPS_DIR=$deps "$root/bench/stage_gpu_deps.sh" --no-prebuilt > "$work/stage.log" 2>&1 || fail "staging failed" "$work/stage.log"
cmake -S "$root" -B "$work/b" -DLIBNN_WITH_CUDA=OFF -DCMAKE_PREFIX_PATH="$deps" -DZLIB_ROOT="$deps" \
      -DLIBNN_FASHION_MNIST_DIR="$deps/fashion-mnist" > "$work/configure.log" 2>&1 \
  || fail "configure against the staged folder failed" "$work/configure.log"
for v in Catch2_DIR Eigen3_DIR cxxopts_DIR ZLIB_INCLUDE_DIR ZLIB_LIBRARY_RELEASE; do
  grep -q "^$v:[A-Z]*=$deps/" "$work/b/CMakeCache.txt" \
    || fail "$v is not from the staged folder: $(grep "^$v:" "$work/b/CMakeCache.txt")"
done
printf '#include <zlib.h>\nint f() { gzFile g = gzopen("x", "wb"); return gzwrite(g, "a", 1) + gzclose(g); }\n' > "$work/z.c"
cc -fPIC -shared -o "$work/libz_user.so" "$work/z.c" -I"$deps/include" -L"$deps/lib" -lz 2> "$work/link.log" \
  || fail "a shared library does not link against the staged zlib" "$work/link.log"
echo "ok: the staged dependencies configure and link"
