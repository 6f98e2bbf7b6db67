#!/usr/bin/env bash
# gpu_prebuilt.sh: bench/gpu_prebuilt.sh, with a stand-in build (two tiny programs and a
# library, CTest files naming the tree's paths) and a stand-in nvidia-smi (no GPU needed). A
# build carried to a GPU machine must be used there only when it is what a build there would
# make and it runs there; otherwise the suite builds from source:
#   - packed in one tree and unpacked in a copy of it elsewhere, it is used, and CTest's paths
#     name the copy (its scripts, its build folder), not the tree it was built in;
#   - it is refused (exit 1, the reason given, the folder removed) for a GPU of another compute
#     capability, for a driver older than the CUDA it was built with, for sources changed
#     since, and when a library it needs is missing;
#   - a build naming no CUDA architecture is not packed;
#   - gpu_suite.sh's build step takes it (no configure) and falls back to building from source.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; [[ -f ${2:-} ]] && cat "$2"; exit 1; }

mkdir -p "$work/stub"
# bare, the header line with the driver's CUDA version; with a query, the compute capability
cat > "$work/stub/nvidia-smi" <<'EOF'
#!/bin/sh
if [ $# -eq 0 ]; then echo "| NVIDIA-SMI 580.65   Driver Version: 580.65   CUDA Version: ${FAKE_DRIVER_CUDA:-13.0}  |"
else echo "${FAKE_COMPUTE_CAP:-9.0}"; fi
EOF
chmod +x "$work/stub/nvidia-smi"
export PATH="$work/stub:$PATH"

# the stand-in build, "configured" from this tree
fake_build() {  # fake_build DIR ARCHS [EXTRA_LIB]: mnist_train needs libnn.so (and EXTRA_LIB)
  local b=$1 archs=$2 extra=${3:-}
  mkdir -p "$b/bin" "$b/lib" "$b/tests/CMakeFiles" "$b/CMakeFiles/3.25.1"
  echo 'set(CMAKE_CUDA_COMPILER_VERSION "13.0.88")' > "$b/CMakeFiles/3.25.1/CMakeCUDACompiler.cmake"
  printf 'CMAKE_HOME_DIRECTORY:INTERNAL=%s\nCMAKE_CACHEFILE_DIR:INTERNAL=%s\nCMAKE_CUDA_ARCHITECTURES:STRING=%s\n' \
    "$root" "$b" "$archs" > "$b/CMakeCache.txt"
  echo 'int nn_answer(void) { return 42; }' > "$work/nn.c"
  cc -shared -fPIC -Wl,-soname,libnn.so.0 -o "$b/lib/libnn.so.0.1.0" "$work/nn.c" || fail "cc"
  ln -sf libnn.so.0.1.0 "$b/lib/libnn.so.0"; ln -sf libnn.so.0 "$b/lib/libnn.so"
  local libs=(-L"$b/lib" -lnn)
  if [[ -n $extra ]]; then
    echo 'int extra(void) { return 1; }' > "$work/extra.c"
    cc -shared -fPIC -o "$b/lib/lib$extra.so" "$work/extra.c" || fail "cc"
    libs+=(-l"$extra")
  fi
  if [[ -n $extra ]]; then
    echo 'int nn_answer(void), extra(void); int main(void) { return nn_answer() + extra() == 43 ? 0 : 1; }'
  else
    echo 'int nn_answer(void); int main(void) { return nn_answer() == 42 ? 0 : 1; }'
  fi > "$work/main.c"
  cc -o "$b/bin/mnist_train" "$work/main.c" "${libs[@]}" -Wl,-rpath,'$ORIGIN/../lib' || fail "cc"
  cp "$b/bin/mnist_train" "$b/bin/libnn_tests"
  printf 'subdirs("tests")\n' > "$b/CTestTestfile.cmake"
  printf 'add_test([=[cli_x]=] "%s/tests/cli/x.sh" "%s/bin/mnist_train" "%s/.gpu_deps/fashion-mnist")\n' \
    "$root" "$b" "$root" > "$b/tests/CTestTestfile.cmake"
  echo 'not packed' > "$b/tests/CMakeFiles/junk.cmake"
}
fake_build "$work/b" 90
"$root/bench/gpu_prebuilt.sh" pack "$work/b" "$work/p.tar.gz" > "$work/pack.log" 2>&1 \
  || fail "pack failed" "$work/pack.log"
# (the listing whole before grep: grep -q at a match would end tar by SIGPIPE, failing the
# pipeline, and the check would pass)
tar -tzf "$work/p.tar.gz" > "$work/p.list" || fail "cannot list the pack"
grep -q CMakeFiles "$work/p.list" && fail "CMake's own folders were packed"

# a copy of the tree elsewhere, as the GPU machine's
copy=$work/copy
mkdir -p "$copy"
cp -r "$root/CMakeLists.txt" "$root/cmake" "$root/libnn" "$root/kernels" "$root/apps" "$root/bench" \
      "$root/tests" "$root/examples" "$copy/"
unpack() { "$copy/bench/gpu_prebuilt.sh" unpack "$1" "$copy/build-gpu" > "$work/unpack.log" 2>&1; }

unpack "$work/p.tar.gz" || fail "a matching build was refused" "$work/unpack.log"
grep -q "gpu_prebuilt: using" "$work/unpack.log" || fail "no note of the build used" "$work/unpack.log"
t=$copy/build-gpu/tests/CTestTestfile.cmake
want="add_test([=[cli_x]=] \"$copy/tests/cli/x.sh\" \"$copy/build-gpu/bin/mnist_train\" \"$copy/.gpu_deps/fashion-mnist\")"
[[ $(cat "$t") == "$want" ]] || fail "CTest's paths were not moved to the copy: $(cat "$t")"
[[ -f $copy/build-gpu/prebuilt.env ]] && fail "a library path was written though every library was found"
"$copy/build-gpu/bin/mnist_train" || fail "the unpacked program does not run"

refused() {  # refused TARBALL REASON_PATTERN WHAT
  unpack "$1" && fail "$3: accepted" "$work/unpack.log"
  (($? == 1)) || fail "$3: exit is not 1" "$work/unpack.log"
  grep -Eq "not used: .*$2" "$work/unpack.log" || fail "$3: the reason is not given" "$work/unpack.log"
  [[ -e $copy/build-gpu ]] && fail "$3: the refused build folder was left"
  return 0
}
FAKE_COMPUTE_CAP=8.0 refused "$work/p.tar.gz" "this GPU is sm_80" "another compute capability"
FAKE_DRIVER_CUDA=12.8 refused "$work/p.tar.gz" "built with CUDA 13.0.88, this machine's driver supports CUDA 12 at most" \
  "a driver older than the build's runtime"
FAKE_DRIVER_CUDA=13.2 unpack "$work/p.tar.gz" || fail "a driver of a later CUDA 13 was refused" "$work/unpack.log"
echo '// changed' >> "$copy/libnn/src/core/tensor.cpp"
refused "$work/p.tar.gz" "other sources" "changed sources"
cp "$root/libnn/src/core/tensor.cpp" "$copy/libnn/src/core/tensor.cpp"

fake_build "$work/b2" "80;90" extra
"$root/bench/gpu_prebuilt.sh" pack "$work/b2" "$work/p2.tar.gz" > "$work/pack.log" 2>&1 \
  || fail "pack failed" "$work/pack.log"
refused "$work/p2.tar.gz" "libraries not found: .*libextra" "a missing library"

fake_build "$work/b3" ""
"$root/bench/gpu_prebuilt.sh" pack "$work/b3" "$work/p3.tar.gz" > "$work/pack.log" 2>&1
(($? == 2)) || fail "a build without CUDA architectures was packed" "$work/pack.log"

# the suite's build step: the carried build when it is usable, else a build from source (cut
# at once by a 5 s budget here: its configure is what shows it started)
mkdir -p "$work/deps"; cp "$work/p.tar.gz" "$work/deps/prebuilt.tar.gz"
suite() {  # suite OUT [VAR=VALUE...]
  local out=$1; shift
  env -u GPU_SUITE_TIMEOUT -u GPU_SUITE_BUDGETS -u GPU_SUITE_PREBUILT BUILD_DIR="$copy/build-gpu" \
    LIBNN_GPU_DEPS="$work/deps" OUT="$out" "$@" "$copy/bench/gpu_suite.sh" build > "$out.log" 2>&1
}
suite "$work/s1" || fail "the suite's build step failed with a usable carried build" "$work/s1.log"
grep -q "gpu_prebuilt: using" "$work/s1/summary.md" || fail "the suite did not use the carried build" "$work/s1.log"
grep -q "cmake -S" "$work/s1/summary.md" && fail "the suite configured though the carried build was usable" "$work/s1.log"
suite "$work/s2" FAKE_COMPUTE_CAP=8.0 GPU_SUITE_BUDGETS=build=5
grep -q "not used: .*sm_80.*: building from source" "$work/s2/summary.md" \
  || fail "the suite did not say why it built from source" "$work/s2.log"
grep -Eq "cmake -S|configure exit" "$work/s2/summary.md" || fail "the suite did not build from source" "$work/s2.log"
echo "ok: a carried GPU build is used where it fits and refused, with the reason, where it does not"
