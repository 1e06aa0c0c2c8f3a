#!/usr/bin/env bash
# `nodegate check` against the host's process count, two builds side by side (issue 20): each runs
# RUNS times, the two alternating, first at the host's own process count and again with sleeping
# processes added up to PROCS; prints the median wall time and the median CPU (user + system of
# the check and its children, getrusage) of each. Alternating runs see the same machine, so the
# ratio holds on a shared one where the absolute figures do not.
#
# Usage (a benchmark: under the bench lock):
#   flock -o /work/.locks/bench tools/bench/check-procs.sh BASE_NODEGATE NEW_NODEGATE
# Settings (environment): RUNS=25 PROCS=2000.
set -euo pipefail
[ $# = 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: $0 BASE_NODEGATE NEW_NODEGATE" >&2; exit 2; }
BASE=$1 NEW=$2 RUNS=${RUNS:-25} PROCS=${PROCS:-2000}
procs() { ls /proc | grep -c '^[0-9]'; }
one() {  # BIN -> "wall_ms cpu_ms"
  python3 - "$1" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
subprocess.run([sys.argv[1], "check", "--output", "json"], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)  # exit 1 and 3 are verdicts, not errors
w = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{w * 1000:.2f} {(r.ru_utime + r.ru_stime) * 1000:.2f}")
PY
}
run() {
  local n; n=$(procs)
  for ((k = 0; k < RUNS; k++)); do
    echo "base $(one "$BASE")"
    echo "new $(one "$NEW")"
  done | python3 -c "
import statistics, sys
d = {}
for line in sys.stdin:
    name, w, c = line.split()
    d.setdefault(name, []).append((float(w), float(c)))
for name, v in d.items():
    print(f'{sys.argv[1]} processes, {name}: wall median {statistics.median(x[0] for x in v):.1f} ms, '
          f'CPU median {statistics.median(x[1] for x in v):.1f} ms ({len(v)} runs)')" "$n"
}
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
run
for ((i = $(procs); i < PROCS; i++)); do sleep 100000 & PIDS+=($!); done
run
