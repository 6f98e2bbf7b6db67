#!/usr/bin/env bash
# The newer-toolchain stage of scripts/test.sh (also runs alone): compiles every C++
# translation unit of the tree (the library, the CUDA backend and kernels/ as the emulator
# build compiles them, tests, apps, benchmarks) with Debian 13's GCC 14, its libstdc++ and
# Catch2 v3, syntax only, in a Debian trixie chroot kept in $TOOLCHAIN_CACHE. Newer libstdc++
# headers include less of each other (GCC 13 and 14 dropped <cstdint>, <algorithm> and others
# from headers that used to bring them), so a missing #include that GCC 12 forgives stops the
# build on Ubuntu 24.04 (GCC 13: the GPU machines' and the GPU Docker image's), on Debian 13
# and for users of the public headers there. Needs root (debootstrap, chroot); without it,
# or when the packages cannot be fetched, it says so and exits 0 (TOOLCHAIN_REQUIRED=1
# fails instead).
#
#   scripts/check_toolchain.sh
#   TOOLCHAIN_FETCH_ONLY=1 scripts/check_toolchain.sh   # build the chroot, check nothing (what
#                                                      # scripts/test.sh does during the main build)
set -euo pipefail
source "$(dirname "$0")/args.sh"; no_arguments "$@"
cd "$(dirname "$0")/.."
cache=${TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/libnn-trixie}
t0=$SECONDS
unavailable() {
  echo "check_toolchain: $1" >&2
  [[ "${TOOLCHAIN_REQUIRED:-0}" == 1 ]] && exit 1
  echo "check_toolchain: skipped (TOOLCHAIN_REQUIRED=1 makes this fatal)"
  exit 0
}
[[ $(id -u) -eq 0 ]] || unavailable "needs root for debootstrap and chroot"
packages=(g++ cmake ninja-build python3 libeigen3-dev catch2 libcxxopts-dev zlib1g-dev
          libjpeg62-turbo-dev)
if [[ ! -x "$cache/usr/bin/g++" || ! -f "$cache/.complete" ]]; then
  command -v debootstrap > /dev/null || unavailable "no debootstrap (scripts/setup.sh installs it)"
  rm -rf "$cache"
  echo "check_toolchain: building a Debian trixie chroot in $cache"
  debootstrap --variant=minbase trixie "$cache" http://deb.debian.org/debian > "$cache.log" 2>&1 \
    || { tail -5 "$cache.log"; unavailable "debootstrap of Debian trixie failed"; }
  chroot "$cache" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${packages[@]}" > "$cache.log" 2>&1 \
    || { tail -5 "$cache.log"; unavailable "installing the compilers in the chroot failed"; }
  touch "$cache/.complete"
fi
t_chroot=$SECONDS
if [[ "${TOOLCHAIN_FETCH_ONLY:-0}" == 1 ]]; then
  echo "check_toolchain: the chroot is in $cache (chroot $((t_chroot - t0)) s; TOOLCHAIN_FETCH_ONLY=1: no check)"
  exit 0
fi

# The tree as git sees it (new files too, ignored ones not), and the CUDA toolkit's headers
# for the emulator build (it needs no nvcc and no GPU).
rm -rf "$cache/src" "$cache/cuda"
mkdir -p "$cache/src" "$cache/cuda"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$cache/src"
emu=(-DLIBNN_WITH_CUDA=OFF)
tk=/usr/local/cuda
if [[ -f $tk/include/cuda_runtime.h && -x $tk/bin/nvcc ]]; then
  # what FindCUDAToolkit asks for: nvcc (it reads the include folder off nvcc -v), the
  # headers, and libcudart (never linked by the emulator build)
  t=targets/x86_64-linux
  mkdir -p "$cache/cuda/bin" "$cache/cuda/$t/lib"
  cp "$tk/bin/nvcc" "$tk/bin/nvcc.profile" "$cache/cuda/bin/"
  cp -rL "$tk/$t/include" "$cache/cuda/$t/include"
  cp -P "$tk/$t/lib"/libcudart.so* "$cache/cuda/$t/lib/"
  ln -s "$t/lib" "$cache/cuda/lib64"
  emu=(-DLIBNN_WITH_CUDA=EMULATOR -DCUDAToolkit_ROOT=/cuda)
else
  echo "check_toolchain: no CUDA toolkit headers here: the CUDA backend and kernels/ are not compiled"
fi
chroot "$cache" cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBNN_BUILD_APPS=ON \
  -DLIBNN_BUILD_BENCH=ON "${emu[@]}" > "$cache/configure.log" 2>&1 \
  || { tail -30 "$cache/configure.log"; echo "check_toolchain: configure with $(chroot "$cache" g++ --version | head -1) failed"; exit 1; }
grep -E "libnn: CUDA" "$cache/configure.log" || true
# the sources the build generates (the emulator's rewritten .cu files) before checking them,
# each by its own command alone: building it with ninja would first build what its target
# links (the emulator self-test's links libnn: minutes)
chroot "$cache" bash -c 'set -e; cd /src/build
  for g in $(ninja -t targets all | sed -n "s|^\([^:]*cuda_emu/[^:]*\.cpp\): .*|\1|p"); do
    mkdir -p "$(dirname "$g")"
    ninja -t commands "$g" | tail -1 | bash
  done'

# Every translation unit, syntax only (-fsyntax-only: no code, a third of a build's time).
chroot "$cache" python3 - <<'PY'
import json, os, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
units = json.load(open("/src/build/compile_commands.json"))
def check(u):
    args = shlex.split(u["command"]) if "command" in u else u["arguments"]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a not in ("-c", "-MD", "-MMD") and not a.startswith("-O"):
            keep.append(a)
    r = subprocess.run(keep + ["-fsyntax-only"], cwd=u["directory"], capture_output=True, text=True)
    return u["file"], r.returncode, r.stderr
with ThreadPoolExecutor(os.cpu_count()) as ex:
    bad = [x for x in ex.map(check, units) if x[1]]
for f, _, err in bad:
    print(f"--- {f}\n{err[-3000:]}")
print(f"check_toolchain: {len(units)} translation units, {len(bad)} failed")
sys.exit(1 if bad else 0)
PY
echo "check_toolchain: every translation unit compiles with $(chroot "$cache" g++ --version | head -1)" \
     "and Catch2 $(chroot "$cache" dpkg-query -W -f='${Version}' libcatch2-dev 2>/dev/null || echo '?')" \
     "(chroot $((t_chroot - t0)) s, check $((SECONDS - t_chroot)) s)"
