#!/usr/bin/env bash
# find_cudnn.sh: cmake/FindCUDNN.cmake on fake cuDNN installs, with the system's own search
# paths off so a real cuDNN on this machine cannot answer for them:
#   - CUDNN_ROOT holding only the versioned library (libcudnn.so.9, as the wheels ship it);
#   - the nvidia-cudnn wheel's layout inside a Python environment, found by asking Python;
#   - the headers-only mode (the CUDA emulator), which needs no library;
#   - nothing anywhere: configure fails with the message that says where to get cuDNN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module_dir=$(cd "$here/../../cmake" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

fake_install() {  # fake_install DIR LIBDIR: cudnn.h and cudnn_version.h of 9.4.2, libcudnn.so.9
  mkdir -p "$1/include" "$1/$2"
  printf '#pragma once\n#include "cudnn_version.h"\n' > "$1/include/cudnn.h"
  printf '#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 4\n#define CUDNN_PATCHLEVEL 2\n' \
    > "$1/include/cudnn_version.h"
  : > "$1/$2/libcudnn.so.9"
}
mkdir -p "$work/proj"
cat > "$work/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(find_cudnn_check LANGUAGES NONE)
set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH OFF)
set(CMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH OFF)
list(APPEND CMAKE_MODULE_PATH "$module_dir")
find_package(CUDNN REQUIRED \${COMPONENTS})
get_target_property(inc CUDNN::cudnn INTERFACE_INCLUDE_DIRECTORIES)
message(STATUS "cudnn: version=\${CUDNN_VERSION} include=\${CUDNN_INCLUDE_DIR} lib=\${CUDNN_LIBRARY} target-include=\${inc}")
CMAKE
configure() {  # configure NAME ARGS...: fresh build folder, system search paths off
  local b=$work/b-$1; shift
  cmake -S "$work/proj" -B "$b" -DPython3_EXECUTABLE="$work/python3" "$@" 2>&1
}
# A Python that knows only the fake wheel: the real interpreter, with the fake site first.
cat > "$work/python3" <<PY
#!/bin/sh
PYTHONPATH="$work/site\${PYTHONPATH:+:\$PYTHONPATH}" exec python3 "\$@"
PY
chmod +x "$work/python3"

# 1. CUDNN_ROOT with lib64/libcudnn.so.9 only
fake_install "$work/root" lib64
out=$(configure root -DCUDNN_ROOT="$work/root") || fail "CUDNN_ROOT: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/root/include lib=$work/root/lib64/libcudnn.so.9 target-include=$work/root/include" <<<"$out" \
  || fail "CUDNN_ROOT: $out"
echo "ok: CUDNN_ROOT with only libcudnn.so.9"

# 2. the wheel inside a Python environment: <site>/nvidia/cudnn/{include,lib}
fake_install "$work/site/nvidia/cudnn" lib
: > "$work/site/nvidia/cudnn/__init__.py"
out=$(configure wheel) || fail "wheel: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/site/nvidia/cudnn/include lib=$work/site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$out" \
  || fail "wheel: $out"
echo "ok: the nvidia-cudnn wheel found through Python"

# 3. headers only: a folder with cudnn.h and no library is enough
mkdir -p "$work/headers" && cp -r "$work/root/include" "$work/headers/"
out=$(configure headers -DCUDNN_ROOT="$work/headers" -DCOMPONENTS=headers -DPython3_EXECUTABLE=/nonexistent) \
  || fail "headers: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/headers/include lib= " <<<"$out" || fail "headers: $out"
echo "ok: headers-only mode"

# 4. nowhere: a clear error naming the ways to get it
rm -rf "$work/site"
if out=$(configure none -DCUDNN_ROOT="$work/empty"); then fail "nothing installed, yet configure passed: $out"; fi
grep -q "cuDNN (cudnn.h and libcudnn) was not found" <<<"$out" || fail "nowhere: $out"
grep -q "CUDNN_ROOT" <<<"$out" || fail "nowhere: the message names no way out: $out"
echo "ok: a clear error when cuDNN is nowhere"
