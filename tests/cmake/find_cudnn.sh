#!/usr/bin/env bash
# find_cudnn.sh: cmake/FindCUDNN.cmake on fake cuDNN installs, with the system's search paths,
# the environment's roots and any real Python off, so a real cuDNN on this machine (a GPU
# machine with PyTorch, say) cannot answer for them:
#   - CUDNN_ROOT holding only the versioned library (libcudnn.so.9, as the wheels ship it);
#   - the nvidia-cudnn wheel of a Python environment, asked of Python3_EXECUTABLE, and of the
#     python3 on the PATH when no Python3_EXECUTABLE is set;
#   - a new CUDNN_ROOT on reconfigure replacing what the cache held;
#   - the headers-only mode (the CUDA emulator), which needs no library;
#   - headers and library of different majors: refused;
#   - nothing anywhere: configure fails with the message that says where to get cuDNN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module_dir=$(cd "$here/../../cmake" && pwd)
cmake_bin=$(command -v cmake) env_bin=$(command -v env) ninja_bin=$(command -v ninja)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

fake_install() {  # fake_install DIR LIBDIR [LIBNAME]: cudnn.h of 9.4.2 and a library file
  mkdir -p "$1/include" "$1/$2"
  printf '#pragma once\n#include "cudnn_version.h"\n' > "$1/include/cudnn.h"
  printf '#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 4\n#define CUDNN_PATCHLEVEL 2\n' \
    > "$1/include/cudnn_version.h"
  : > "$1/$2/${3:-libcudnn.so.9}"
}
mkdir -p "$work/proj" "$work/bin"
cat > "$work/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(find_cudnn_check LANGUAGES NONE)
set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH OFF)
if(NOT SEARCH_PATH)  # the PATH (and the prefixes it implies) only where a case asks for it
  set(CMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH OFF)
endif()
list(APPEND CMAKE_MODULE_PATH "$module_dir")
find_package(CUDNN REQUIRED \${COMPONENTS})
get_target_property(inc CUDNN::cudnn INTERFACE_INCLUDE_DIRECTORIES)
message(STATUS "cudnn: version=\${CUDNN_VERSION} include=\${CUDNN_INCLUDE_DIR} lib=\${CUDNN_LIBRARY} target-include=\${inc}")
CMAKE
# A python3 that knows only the fake wheel: it answers FindCUDNN's one question.
cat > "$work/bin/python3" <<PY
#!/bin/sh
if [ -d "$work/site/nvidia/cudnn" ]; then echo "$work/site/nvidia/cudnn"; else exit 1; fi
PY
chmod +x "$work/bin/python3"
configure() {  # configure NAME ARGS...: build folder NAME (kept between calls), a clean environment
  local b=$work/b-$1; shift
  "$env_bin" -u CUDNN_ROOT -u CUDNN_PATH -u CMAKE_PREFIX_PATH -u CMAKE_LIBRARY_PATH -u CMAKE_INCLUDE_PATH \
    "$cmake_bin" -G Ninja -DCMAKE_MAKE_PROGRAM="$ninja_bin" -S "$work/proj" -B "$b" "$@" 2>&1
}
no_python=-DPython3_EXECUTABLE=/nonexistent

# 1. CUDNN_ROOT with lib64/libcudnn.so.9 only
fake_install "$work/root" lib64
out=$(configure root -DCUDNN_ROOT="$work/root" $no_python) || fail "CUDNN_ROOT: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/root/include lib=$work/root/lib64/libcudnn.so.9 target-include=$work/root/include" <<<"$out" \
  || fail "CUDNN_ROOT: $out"
echo "ok: CUDNN_ROOT with only libcudnn.so.9"

# 2. a new CUDNN_ROOT on reconfiguring the same build folder
fake_install "$work/root2" lib
out=$(configure root -DCUDNN_ROOT="$work/root2" $no_python) || fail "new root: configure failed: $out"
grep -q "include=$work/root2/include lib=$work/root2/lib/libcudnn.so.9" <<<"$out" \
  || fail "a new CUDNN_ROOT was ignored on reconfigure: $out"
echo "ok: a new CUDNN_ROOT replaces the cached search"

# 3. the wheel inside a Python environment: <site>/nvidia/cudnn/{include,lib}
fake_install "$work/site/nvidia/cudnn" lib
out=$(configure wheel -DPython3_EXECUTABLE="$work/bin/python3") || fail "wheel: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/site/nvidia/cudnn/include lib=$work/site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$out" \
  || fail "wheel: $out"
echo "ok: the nvidia-cudnn wheel found through Python3_EXECUTABLE"
out=$(PATH="$work/bin" configure wheel-path -DSEARCH_PATH=ON) || fail "wheel, PATH: configure failed: $out"
grep -q "lib=$work/site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$out" || fail "wheel, PATH: $out"
echo "ok: the nvidia-cudnn wheel found through the python3 on the PATH"

# 4. headers only: a folder with cudnn.h and no library is enough
mkdir -p "$work/headers" && cp -r "$work/root/include" "$work/headers/"
out=$(configure headers -DCUDNN_ROOT="$work/headers" -DCOMPONENTS=headers $no_python) \
  || fail "headers: configure failed: $out"
grep -q "cudnn: version=9.4.2 include=$work/headers/include lib= " <<<"$out" || fail "headers: $out"
echo "ok: headers-only mode"

# 5. version 9 headers beside a version 8 library
fake_install "$work/mixed" lib libcudnn.so.8
out=$(configure mixed -DCUDNN_ROOT="$work/mixed" $no_python) && fail "mixed majors accepted: $out"
grep -q "version 9.4.2 but" <<<"$out" && grep -q "is major 8" <<<"$out" || fail "mixed majors: $out"
echo "ok: headers and library of different majors refused"

# 6. nowhere: a clear error naming the ways to get it
rm -rf "$work/site"
out=$(configure none -DCUDNN_ROOT="$work/empty" -DPython3_EXECUTABLE="$work/bin/python3") \
  && fail "nothing installed, yet configure passed: $out"
grep -q "cuDNN (cudnn.h and libcudnn) was not found" <<<"$out" || fail "nowhere: $out"
grep -q "CUDNN_ROOT" <<<"$out" || fail "nowhere: the message names no way out: $out"
echo "ok: a clear error when cuDNN is nowhere"
