#!/usr/bin/env bash
# Downloads the binary versions of CIFAR-10 (and, with --cifar100, CIFAR-100) into data/cifar
# (for users who are online), checks the archives' MD5 sums and unpacks them:
#   data/cifar/cifar-10-batches-bin/   -> cifar_train --data-dir data/cifar
#   data/cifar/cifar-100-binary/       -> cifar_train --data-dir data/cifar/cifar-100-binary
# Offline, cifar_train --data synthetic trains on a generated stand-in instead.
#   data/fetch_cifar.sh [--cifar100] [DEST]   (DEST defaults to data/cifar; CIFAR_MIRROR=URL:
#   another mirror)
set -euo pipefail
source "$(dirname "$0")/../scripts/args.sh"
usage() { help_text; }
sets=(cifar-10-binary.tar.gz)
dest=""
for a in "$@"; do
  case $a in
    --cifar100) sets+=(cifar-100-binary.tar.gz) ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fetch_cifar.sh: unknown option '$a'" >&2; usage >&2; exit 2 ;;
    *) [[ -z $dest ]] || { echo "fetch_cifar.sh: one folder at most, got '$dest' and '$a'" >&2; exit 2; }
       dest=$a ;;
  esac
done
dest=${dest:-"$(dirname "$0")/cifar"}
mirror=${CIFAR_MIRROR:-https://www.cs.toronto.edu/~kriz}
declare -A md5=(
  [cifar-10-binary.tar.gz]=c32a1d4ab5d03f1284b67883e8d87530
  [cifar-100-binary.tar.gz]=03b5dce01913d631647c71ecec9e9cb8
)
mkdir -p "$dest"
for f in "${sets[@]}"; do
  if [[ ! -f "$dest/$f" ]]; then
    echo "fetching $f"
    command -v curl > /dev/null || command -v wget > /dev/null ||
      { echo "fetch_cifar.sh: needs curl or wget to download (apt-get install curl)" >&2; exit 1; }
    if command -v curl > /dev/null; then curl -fSL -o "$dest/$f.part" "$mirror/$f"
    else wget -q -O "$dest/$f.part" "$mirror/$f"; fi
    mv "$dest/$f.part" "$dest/$f"
  fi
  echo "${md5[$f]}  $dest/$f" | md5sum -c --quiet - > /dev/null 2>&1 ||
    { echo "fetch_cifar.sh: bad checksum: $dest/$f (delete it and retry)" >&2; exit 1; }
  tar -xzf "$dest/$f" -C "$dest"
done
echo "CIFAR is in $dest"
