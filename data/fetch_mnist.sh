#!/usr/bin/env bash
# Downloads MNIST into data/mnist (for users who are online) and checks the files' MD5 sums.
# Offline, use Fashion-MNIST from the Debian package dataset-fashion-mnist instead:
#   build/bin/mnist_train --dataset fashion-mnist
#   data/fetch_mnist.sh [DEST]   (DEST defaults to data/mnist; MNIST_MIRROR=URL: another mirror)
set -euo pipefail
source "$(dirname "$0")/../scripts/args.sh"
case ${1:-} in
  -h|--help) help_text; exit 0 ;;
  -*) echo "fetch_mnist.sh: unknown option '$1' (the one argument is a folder; --help)" >&2; exit 2 ;;
esac
if [[ $# -gt 1 ]]; then
  echo "fetch_mnist.sh: one folder at most, got $# arguments (--help)" >&2; exit 2
fi
dest=${1:-"$(dirname "$0")/mnist"}
mirror=${MNIST_MIRROR:-https://ossci-datasets.s3.amazonaws.com/mnist}
mkdir -p "$dest"
declare -A md5=(
  [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
  [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
  [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
  [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
)
for f in "${!md5[@]}"; do
  if [[ ! -f "$dest/$f" ]]; then
    echo "fetching $f"
    command -v curl > /dev/null || command -v wget > /dev/null ||
      { echo "fetch_mnist.sh: needs curl or wget to download (apt-get install curl)" >&2; exit 1; }
    if command -v curl > /dev/null; then curl -fsSL -o "$dest/$f.part" "$mirror/$f"
    else wget -q -O "$dest/$f.part" "$mirror/$f"; fi
    mv "$dest/$f.part" "$dest/$f"
  fi
  echo "${md5[$f]}  $dest/$f" | md5sum -c --quiet - > /dev/null 2>&1 ||
    { echo "fetch_mnist.sh: bad checksum: $dest/$f (delete it and retry)" >&2; exit 1; }
done
echo "MNIST is in $dest"
