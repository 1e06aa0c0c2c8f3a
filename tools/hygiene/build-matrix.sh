#!/usr/bin/env bash
# Builds the product (no tests) in every CMake build type with GCC and with clang, each
# warning-free under -Wall -Wextra -Werror. Slow (8 builds); CI builds the default and Release,
# run this before changing compiler flags or after a toolchain upgrade.
# Usage: tools/hygiene/build-matrix.sh [OUT_DIR]   (default build-matrix/)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-matrix}
fail=0
for cc in gcc clang; do
  cxx=g++
  [ "$cc" = clang ] && cxx=clang++
  for type in Debug Release RelWithDebInfo MinSizeRel; do
    dir="$out/$cc-$type"
    if CC=$cc CXX=$cxx cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DNODEGATE_BUILD_TESTS=OFF \
         >"$dir.log" 2>&1 && cmake --build "$dir" -j"$(nproc)" >>"$dir.log" 2>&1; then
      echo "build-matrix: $cc $type ok"
    else
      echo "build-matrix: $cc $type FAILED (see $dir.log)"
      fail=1
    fi
  done
done
exit "$fail"
