#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then configures, builds and runs
# tests/install (a C++17 user with -Werror among them) and examples/custom_model against it
# with find_package(libnn), and main.cpp and a C++20 program again built with pkg-config's
# flags alone. The installed libnn.so must load without the build tree's library paths.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
"$work/build/install_check"
"$work/build/install_check_cxx17"
# pkg-config, from a copy of the prefix (its paths are relative to the .pc file)
cp -r "$work/prefix" "$work/moved"
pc_dir=$(dirname "$(find "$work/moved" -name libnn.pc)")
g++ "$src_dir/main.cpp" -o "$work/pc_check" $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs libnn)
"$work/pc_check"
# pkg-config's flags leave the user's language standard alone (a -std=c++17 there, coming
# last, turned a C++20 program back into C++17)
printf '#include <nn/nn.h>\n#include <span>\nint main() { int a[2] = {1, 2}; return std::span<int>(a).size() == 2 ? 0 : 1; }\n' > "$work/user20.cpp"
g++ -std=c++20 "$work/user20.cpp" -o "$work/pc_check20" $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs libnn)
"$work/pc_check20"
# every library the installed libnn.so needs is found from its own RUNPATH and the system's
# (not from the build tree's), as a program linking it elsewhere would load it
lib=$(find "$work/prefix" -name libnn.so)
[[ -n $lib ]] || { echo "no libnn.so installed under $work/prefix"; exit 1; }
deps=$(ldd "$lib") || { echo "ldd $lib failed"; exit 1; }
if grep -q "not found" <<<"$deps"; then
  echo "the installed libnn.so misses libraries:"; echo "$deps"; exit 1
fi
# the research-project example of examples/ builds and trains against the same install
example=$src_dir/../../examples/custom_model
cmake -S "$example" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/example.log"
cmake --build "$work/example" >> "$work/example.log"
(cd "$work" && "$work/example/custom_model")
