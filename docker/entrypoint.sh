#!/usr/bin/env bash
# The images' ENTRYPOINT: `docker run IMAGE PROGRAM [ARGS...]` runs one of libnn's programs;
# with no arguments (or help) it lists them, so a new user sees what the image can do.
# Any other command on PATH (bash, nvidia-smi) runs as given, for looking around.
set -euo pipefail
bin_dir=${LIBNN_HOME:-/opt/libnn}/bin

list_programs() {
  echo "libnn image. Programs (run one as: docker run [--gpus all] IMAGE PROGRAM [ARGS...]):"
  local p
  for p in "$bin_dir"/*; do
    [[ -f $p && -x $p ]] && echo "  ${p##*/}"
  done
  echo "Each takes --help. Example: docker run IMAGE mnist_train --dataset fashion-mnist --epochs 3"
}

if (($# == 0)); then
  list_programs
  exit 0
fi
case $1 in
  help | -h | --help)
    list_programs
    exit 0
    ;;
  -*)
    echo "entrypoint: '$1' is a flag; name a program first" >&2
    list_programs >&2
    exit 2
    ;;
esac
if ! command -v "$1" > /dev/null; then
  echo "entrypoint: no program '$1' in this image" >&2
  list_programs >&2
  exit 127
fi
exec "$@"
