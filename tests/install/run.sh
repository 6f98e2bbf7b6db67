#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then configures, builds and runs
# tests/install and examples/custom_model against it with find_package(libnn).
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
"$work/build/install_check"
# the research-project example of examples/ builds and trains against the same install
example=$src_dir/../../examples/custom_model
cmake -S "$example" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/example.log"
cmake --build "$work/example" >> "$work/example.log"
(cd "$work" && "$work/example/custom_model")
