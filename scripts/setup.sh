#!/usr/bin/env bash
# Sets libnn up on a Debian machine: installs the packages it needs (only those missing;
# with sudo when not root) and builds everything into build/ (Release).
#
#   scripts/setup.sh            # packages + build
#   BUILD_DIR=out scripts/setup.sh
#   LIBNN_CMAKE_ARGS="-DLIBNN_WITH_CUDA=OFF" scripts/setup.sh
#   CMAKE_CUDA_ARCHITECTURES="80;90" scripts/setup.sh   # CUDA code for these GPUs (default:
#                               # the GPUs of this machine, or Hopper's 90 where it has none)
#   LIBNN_SETUP_PACKAGES_ONLY=1 scripts/setup.sh       # the packages, no build
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config python3
  python3-matplotlib      # plots of bench/report.py (and its test)
  libeigen3-dev catch2 libcxxopts-dev zlib1g-dev
  libjpeg62-turbo-dev     # JPEG decoding for ImageNet-style folders (resnet50_train --data DIR)
  dataset-fashion-mnist   # Fashion-MNIST in /usr/share/datasets/fashion-mnist: offline data
  clang libclang-rt-14-dev libomp-dev  # scripts/check.sh: sanitizers, libFuzzer, clang's OpenMP
  debootstrap             # scripts/check_toolchain.sh: a Debian 13 chroot with GCC 14
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo > /dev/null; then
      echo "setup: installing packages needs root, and this machine has no sudo: run" >&2
      echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
      echo "as root (su -), then this script again" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  # (through env: sudo's env_reset would drop an exported DEBIAN_FRONTEND)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ "${LIBNN_SETUP_PACKAGES_ONLY:-0}" == 1 ]]; then
  echo "setup: packages installed (LIBNN_SETUP_PACKAGES_ONLY=1: no build)"
  exit 0
fi

# The CUDA toolkit is optional: used when nvcc is on PATH or in /usr/local/cuda.
if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cuda_args=()
if [[ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]]; then
  cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES")  # the user's choice
elif command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  cuda_args+=(-DCMAKE_CUDA_ARCHITECTURES=native)  # build for the GPUs in this machine
else
  cuda_args+=(-DCMAKE_CUDA_ARCHITECTURES=90)      # no GPU here: compile for Hopper only
fi

build_dir=${BUILD_DIR:-build}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${cuda_args[@]}" \
      ${LIBNN_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$(nproc)"
echo "setup: built into $build_dir/ (programs in $build_dir/bin)"
