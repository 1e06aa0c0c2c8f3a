#!/usr/bin/env bash
# README's second command and what CI runs: install everything, build, run the whole suite.
# Root/kernel tests need root (CI is root); run as root to get all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DNODEGATE_BUILD_TESTS=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
# clang-tidy (.clang-tidy: bug-finding checks and the 120-line function limit) over agent/,
# probes/ and the BPF loader, with the compile database of the build above (~4.5 min of CPU).
bash tools/hygiene/tidy.sh build
# The product must also build warning-free as Release (-O3: GCC's flow-based warnings differ
# from the default MinSizeRel's); LTO off, as it adds link time and no warning of ours.
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DNODEGATE_BUILD_TESTS=OFF \
  -DNODEGATE_LTO=OFF >/dev/null
cmake --build build-release -j"$jobs"
# Fuzz targets: a separate clang build with libFuzzer + ASan/UBSan, each run briefly.
if [ -f test/fuzz/CMakeLists.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DNODEGATE_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs"
  ctest --test-dir build-fuzz --output-on-failure -j"$jobs"
fi
