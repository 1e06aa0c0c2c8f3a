#!/usr/bin/env bash
# CPU time of one full probe cycle: the agent runs on this host (--kube none, DNS tracer off, so
# only the probes run) with a 0.5 s resync; its utime+stime over a window is divided by the
# cycles it completed in that window (nodegate_agent_cycles_total). Runs alternate between the
# given binaries, so a comparison sees the same machine.
# Usage: tools/bench/agent_cycle_cpu.sh [SECONDS] NODEGATE [NODEGATE...]
# Prints one line per run; docs/benchmarks/agent.md keeps the figures.
set -euo pipefail
SECS=${1:-20}
shift
[ $# -gt 0 ] || { echo "usage: $0 [SECONDS] NODEGATE [NODEGATE...]" >&2; exit 2; }
PORT=19184
HZ=$(getconf CLK_TCK)

cycles() { curl -sf "http://127.0.0.1:$PORT/metrics" | awk '$1 ~ /^nodegate_agent_cycles_total($|\{)/ { n += $2 } END { print n }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

for round in 1 2; do
  for bin in "$@"; do
    "$bin" agent --kube none --dns-trace off --resync 0.5 --listen "127.0.0.1:$PORT" \
      --debug-listen "" >/dev/null 2>&1 &
    pid=$!
    trap 'kill $pid 2>/dev/null' EXIT
    for _ in $(seq 50); do [ -n "$(cycles 2>/dev/null)" ] && break; sleep 0.1; done
    sleep 3  # past start-up (first cycle, extension start)
    c0=$(cycles); t0=$(ticks $pid)
    sleep "$SECS"
    c1=$(cycles); t1=$(ticks $pid)
    kill $pid; wait $pid 2>/dev/null || true
    awk -v b="$bin" -v r=$round -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v hz="$HZ" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
      'BEGIN { printf "round %d %s: %d cycles, %.2f ms CPU per cycle (load %s)\n", r, b, c, t * 1000 / hz / c, l }'
  done
done
