#!/usr/bin/env bash
# A GPU build made on a machine without a GPU, carried to one and used there instead of
# building again (a lent GPU machine's minutes are few; the build is about 1.5 of them).
#
#   bench/gpu_prebuilt.sh pack BUILD_DIR TARBALL     where it was built (stage_gpu_deps.sh)
#   bench/gpu_prebuilt.sh unpack TARBALL BUILD_DIR   on the GPU machine (gpu_suite.sh's build)
#   bench/gpu_prebuilt.sh sources                    the hash of the sources a build depends on
#
# pack keeps what the suite runs (bin/, lib/libnn.so*, CTest's .cmake files) and a manifest: the
# source and build folders, the hash of the sources, the CUDA architectures, the commit.
# unpack accepts it only when this tree's sources hash the same, the GPU's compute capability
# is among the architectures and every program finds its libraries (adding the CUDA
# toolkit's and Python's nvidia-* wheels' library folders to LD_LIBRARY_PATH if needed,
# written to BUILD_DIR/prebuilt.env for the caller to source); it rewrites CTest's paths to
# this tree. Exit 0: BUILD_DIR is ready. Exit 1: the reason on stderr, BUILD_DIR removed
# (the caller builds from source). Exit 2: bad arguments.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
manifest=prebuilt.txt
die() { echo "gpu_prebuilt: $*" >&2; exit 2; }

sources_hash() {  # every file a build compiles or configures from, by content and path
  (cd "$root" && find CMakeLists.txt cmake libnn kernels apps bench tests examples -type f \
      \( -name '*.cpp' -o -name '*.cc' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \
         -o -name CMakeLists.txt -o -name '*.cmake' -o -name '*.in' \) -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -1; }
# the CUDA toolkit a build was compiled with (its runtime is what the driver must support)
cuda_version() {
  find "$1/CMakeFiles" -maxdepth 2 -name CMakeCUDACompiler.cmake -exec \
    sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\([0-9.]*\)")/\1/p' {} + | head -1
}

pack() {
  local b t src bdir archs
  b=$(cd "$1" && pwd) || die "no build folder '$1'"
  t=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") || die "no folder for '$2'"
  [[ -f $b/CMakeCache.txt && -x $b/bin/libnn_tests ]] || die "'$1' holds no build (CMakeCache.txt, bin/libnn_tests)"
  src=$(cache_value "$b" CMAKE_HOME_DIRECTORY)
  bdir=$(cache_value "$b" CMAKE_CACHEFILE_DIR)
  archs=$(cache_value "$b" CMAKE_CUDA_ARCHITECTURES)
  [[ $src == "$root" ]] || die "'$1' was configured from $src, not from this tree ($root)"
  [[ -n $archs && $archs != native ]] || die "'$1' names no CUDA architectures (CMAKE_CUDA_ARCHITECTURES='$archs')"
  { echo "source_root=$src"; echo "build_dir=$bdir"; echo "sources=$(sources_hash)"
    echo "cuda_archs=$archs"; echo "cuda_version=$(cuda_version "$b")"
    echo "built=$(date -u +%Y-%m-%dT%H:%MZ) on $(hostname)"
    echo "commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)$(
      [[ -n $(git -C "$root" status --porcelain -uno 2> /dev/null) ]] && echo ' (with uncommitted changes)')"
  } > "$b/$manifest"
  # CTest's files (with the lists of Catch2 cases they include) outside CMake's own folders
  (cd "$b" && find . -name CMakeFiles -prune -o -name '*.cmake' -print0 \
     | tar -czf "$t" --null -T - "$manifest" bin lib/libnn.so*)
  echo "gpu_prebuilt: packed $b into $t ($(du -h "$t" | cut -f1)): $(tr '\n' ' ' < "$b/$manifest")"
}

unpack() {
  local t=$1 b=$2 m want cap old_src old_b lib_dirs d missing drv rt
  refuse() { echo "gpu_prebuilt: not used: $*" >&2; rm -rf "$b"; exit 1; }
  [[ -f $t ]] || refuse "no $t"
  m=$(tar -xzf "$t" -O "$manifest" 2> /dev/null) || refuse "$t has no $manifest"
  get() { sed -n "s/^$1=//p" <<< "$m"; }
  want=$(get sources)
  [[ $want == "$(sources_hash)" ]] || refuse "built from other sources (commit $(get commit)) than this tree's"
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d ' .')
  [[ -n $cap ]] || refuse "the GPU's compute capability is unknown (nvidia-smi)"
  [[ " $(get cuda_archs | tr ';' ' ') " =~ \ $cap(-real|-virtual)?\  ]] \
    || refuse "built for CUDA architectures $(get cuda_archs), this GPU is sm_$cap"
  # a driver supports the runtimes of its CUDA major version and older; the CUDA cases would
  # fail on a newer one (a source build here uses this machine's toolkit)
  drv=$(nvidia-smi 2> /dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -1)
  rt=$(get cuda_version); rt=${rt%%.*}
  [[ -z $drv || -z $rt || $drv -ge $rt ]] \
    || refuse "built with CUDA $(get cuda_version), this machine's driver supports CUDA $drv at most"
  rm -rf "$b"; mkdir -p "$b"; b=$(cd "$b" && pwd)
  tar -xzf "$t" -C "$b" || refuse "$t does not extract"
  old_src=$(get source_root); old_b=$(get build_dir)
  find "$b" -name '*.cmake' -exec sed -i -e "s|$old_b|$b|g" -e "s|$old_src/|$root/|g" {} +
  # the libraries: as found, else with the toolkit's and the wheels' folders on the path
  missing() { ldd "$b/bin/"* "$b"/lib/libnn.so.*.* 2> /dev/null | grep -E 'not found' | sort -u | tr -s ' \t\n' ' ' || true; }
  missing=$(missing)
  if [[ -n $missing ]]; then
    lib_dirs=("$b/lib")
    if command -v nvcc > /dev/null; then
      d=$(dirname "$(command -v nvcc)")/..
      for sub in lib64 lib targets/x86_64-linux/lib; do [[ -d $d/$sub ]] && lib_dirs+=("$(cd "$d/$sub" && pwd)"); done
    fi
    while read -r d; do [[ -d $d ]] && lib_dirs+=("$d"); done < <("${PYTHON:-python3}" - 2> /dev/null <<'PY'
import glob, os
try:
    import nvidia
    for p in nvidia.__path__:
        print("\n".join(sorted(glob.glob(os.path.join(p, "*", "lib")))))
except ImportError:
    pass
PY
)
    export LD_LIBRARY_PATH
    LD_LIBRARY_PATH=$(IFS=:; echo "${lib_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    missing=$(missing)
    [[ -z $missing ]] || refuse "libraries not found: $missing"
    echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'" > "$b/prebuilt.env"
  fi
  d=$(ldd -r "$b"/lib/libnn.so.*.* 2>&1 | grep -m 3 'undefined symbol' | tr -s ' \t\n' ' ' || true)
  [[ -z $d ]] || refuse "this machine's libraries lack symbols libnn.so needs: $d"
  "$b/bin/mnist_train" --help > /dev/null 2>&1 || refuse "$b/bin/mnist_train does not start here"
  echo "gpu_prebuilt: using $t in $b: $(tr '\n' ' ' <<< "$m")$([[ -f $b/prebuilt.env ]] && cat "$b/prebuilt.env")"
}

case ${1:-} in
  -h|--help) source "$root/scripts/args.sh"; help_text ;;
  pack) (($# == 3)) || die "usage: pack BUILD_DIR TARBALL"; pack "$2" "$3" ;;
  unpack) (($# == 3)) || die "usage: unpack TARBALL BUILD_DIR"; unpack "$2" "$3" ;;
  sources) sources_hash ;;
  *) die "usage: gpu_prebuilt.sh pack BUILD_DIR TARBALL | unpack TARBALL BUILD_DIR | sources" ;;
esac
