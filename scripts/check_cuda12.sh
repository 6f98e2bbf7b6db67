#!/usr/bin/env bash
# Builds the whole tree with CUDA 12.4 for sm_70 (V100), which CUDA 13 no longer targets: the
# build that V100 users make. CUDA 12.4 comes from Debian trixie's non-free packages
# (nvidia-cuda-toolkit and friends), fetched with a private apt state and unpacked into
# $CUDA12_CACHE (nothing is installed system-wide); cuDNN's headers and library from the
# system's cuDNN when present, else from PyPI's nvidia-cudnn-cu12 wheel. Compiles and links
# only: nothing here needs a GPU. A compile or link error fails it; when the packages cannot
# be fetched it says so and exits 0 (set CUDA12_REQUIRED=1 to fail instead).
#
#   scripts/check_cuda12.sh                  # build into build-cuda12/
#   CUDA_ARCHS="70;80" scripts/check_cuda12.sh
#   CUDA12_FETCH_ONLY=1 scripts/check_cuda12.sh   # fetch the toolkit, build nothing (what
#                                            # scripts/test.sh does during the main build)
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
root=$PWD
cache=${CUDA12_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/libnn-cuda12}
build_dir=${CUDA12_BUILD_DIR:-build-cuda12}
archs=${CUDA_ARCHS:-70}
tk=$cache/cuda  # the assembled toolkit: bin/, nvvm/, include/, lib64/
t0=$SECONDS

unavailable() {
  echo "check_cuda12: $1" >&2
  if [[ "${CUDA12_REQUIRED:-0}" == 1 ]]; then exit 1; fi
  echo "check_cuda12: skipped (CUDA 12.4 could not be fetched; CUDA12_REQUIRED=1 makes this fatal)"
  exit 0
}

# Each part counts as there only once its marker is written, after its last file: a fetch
# stopped half-way (test.sh stops its background fetch when the main build fails) is
# started again, not taken for a toolkit.
if [[ ! -f "$tk/.complete" ]]; then
  rm -rf "$cache/apt" "$cache/debs" "$cache/root" "$tk"
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/apt/parts" \
           "$cache/debs" "$cache/root"
  cat > "$cache/apt/parts/trixie.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt_opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$cache/apt/parts"
            -o Dir::State::Lists="$cache/apt/lists" -o Dir::Cache="$cache/apt/cache"
            -o Dir::State::status=/dev/null -o APT::Sandbox::User=root)
  echo "check_cuda12: fetching CUDA 12.4 from Debian trixie (about 1.3 GB)"
  apt-get "${apt_opts[@]}" -qq update || unavailable "apt-get update of Debian trixie failed"
  (cd "$cache/debs" && apt-get "${apt_opts[@]}" -qq download nvidia-cuda-toolkit nvidia-cuda-dev \
      libcudart12 libcublas12 libcublaslt12 libnvvm4) || unavailable "downloading the packages failed"
  for d in "$cache"/debs/*.deb; do  # static libraries (2.5 GB unpacked) are not needed...
    dpkg-deb --fsys-tarfile "$d" | tar -x -C "$cache/root" --exclude='*_static*.a'
  done
  # ...but for cudart's, which CMake's compiler check links
  dpkg-deb --fsys-tarfile "$cache"/debs/nvidia-cuda-dev_*.deb \
    | tar -x -C "$cache/root" --wildcards '*/libcudart_static.a'

  rm -rf "$cache/debs" "$cache/apt"
  # Debian spreads the toolkit over /usr; nvcc wants NVIDIA's layout, described by nvcc.profile.
  r=$cache/root
  mkdir -p "$tk/bin" "$tk/nvvm/bin" "$tk/lib64"
  cp "$r/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$tk/bin/"
  cp -a "$r/usr/lib/nvidia-cuda-toolkit/bin/crt" "$tk/bin/"
  cp "$r/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$tk/nvvm/bin/"
  for b in ptxas fatbinary nvlink cudafe++ bin2c; do cp "$r/usr/bin/$b" "$tk/bin/"; done
  cp -a "$r/usr/lib/nvidia-cuda-toolkit/libdevice" "$tk/nvvm/"
  cp -a "$r/usr/include" "$tk/include"
  cp -a "$r/usr/lib/x86_64-linux-gnu/." "$tk/lib64/"
  rm -rf "$r"
  cat > "$tk/bin/nvcc.profile" <<'EOF'
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS +=
PTXAS_FLAGS +=
EOF
  touch "$tk/.complete"
fi

if [[ ! -f "$tk/.cudnn-complete" ]]; then
  sys_cudnn=""
  for d in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
    [[ -e "$d/cudnn.h" ]] && { sys_cudnn=$d; break; }
  done
  if [[ -n "$sys_cudnn" ]]; then
    cp "$sys_cudnn"/cudnn*.h "$tk/include/"
    lib=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libcudnn\.so\.9 /{print $NF; exit}')" 2>/dev/null || true)")
    [[ -e "$lib/libcudnn.so.9" ]] || lib=/usr/local/cuda/lib64
    cp -a "$lib"/libcudnn.so* "$tk/lib64/"
  else
    echo "check_cuda12: no system cuDNN; fetching nvidia-cudnn-cu12 from PyPI"
    rm -rf "$cache/whl"
    python3 -m pip download -q --no-deps -d "$cache/whl" "nvidia-cudnn-cu12==9.1.*" \
      || unavailable "downloading cuDNN from PyPI failed"
    python3 -m zipfile -e "$cache"/whl/nvidia_cudnn_cu12-*.whl "$cache/whl/x"
    cp -a "$cache"/whl/x/nvidia/cudnn/include/. "$tk/include/"
    cp -a "$cache"/whl/x/nvidia/cudnn/lib/. "$tk/lib64/"
    (cd "$tk/lib64" && for f in libcudnn*.so.9; do ln -sf "$f" "${f%.9}"; done)
    rm -rf "$cache/whl"
  fi
  touch "$tk/.cudnn-complete"
fi
"$tk/bin/nvcc" --version | tail -2
t_fetch=$SECONDS
if [[ "${CUDA12_FETCH_ONLY:-0}" == 1 ]]; then
  echo "check_cuda12: CUDA 12.4 is in $tk (fetch $((t_fetch - t0)) s; CUDA12_FETCH_ONLY=1: no build)"
  exit 0
fi

# The toolkit is in no linker path of the system: -L for libnn, LD_LIBRARY_PATH so the
# programs' links find libnn's CUDA dependencies, and LIBRARY_PATH/CUDA_HOME pointing here,
# not at another CUDA the machine has.
export PATH="$tk/bin:$PATH" LD_LIBRARY_PATH="$tk/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$tk/lib64/stubs:$tk/lib64" CUDA_HOME="$tk" CUDA_PATH="$tk"
# a build dir configured with another toolkit (another cache) starts afresh
if [[ -f "$build_dir/CMakeCache.txt" ]] && ! grep -q "^CMAKE_CUDA_COMPILER:.*=$tk/bin/nvcc$" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir"
fi
# ccache (as scripts/setup.sh uses it): the sources that include no CUDA header preprocess
# as in the main build, so their objects come from its cache
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
LDFLAGS="-L$tk/lib64" cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLIBNN_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$tk/bin/nvcc" -DCUDAToolkit_ROOT="$tk" \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" "${launcher[@]}" > /dev/null
cmake --build "$build_dir" -j "$(nproc)"
echo "check_cuda12: the whole tree builds with CUDA 12.4 for sm_$archs" \
     "(fetch $((t_fetch - t0)) s, build $((SECONDS - t_fetch)) s)"
