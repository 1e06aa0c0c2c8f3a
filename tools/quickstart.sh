#!/usr/bin/env bash
# README's first command: install the build dependencies, build, run `nodegate check` on this host,
# then start the agent with its endpoint and no cluster (--kube none). Ctrl-C stops the agent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh --build-only
cmake -S . -B build -DNODEGATE_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target nodegate
set +e
./build/nodegate check
echo "(nodegate check exited $?: 0 all pass, 1 a FAIL, 3 only WARN/UNKNOWN)"
set -e
echo "starting the agent: metrics on http://127.0.0.1:9810/metrics, page on http://127.0.0.1:9811/"
exec ./build/nodegate agent --kube none "$@"
