#!/usr/bin/env bash
# need_data.sh DIR VARIABLE COMMAND [ARG...]: runs COMMAND where DIR holds the MNIST-format
# IDX files (train-images-idx3-ubyte, gzipped or not); otherwise says which folder lacked them
# and how to point the tests elsewhere, and exits 77, which CTest reports as a skipped test.
set -euo pipefail
dir=$1; var=$2; shift 2
if [[ ! -f $dir/train-images-idx3-ubyte && ! -f $dir/train-images-idx3-ubyte.gz ]]; then
  echo "skipped: no train-images-idx3-ubyte[.gz] in '$dir' (install the dataset, or configure" \
       "with -D$var=DIR)"
  exit 77
fi
exec "$@"
