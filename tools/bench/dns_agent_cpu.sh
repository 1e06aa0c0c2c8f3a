#!/usr/bin/env bash
# Agent CPU while tracing guest DNS under load: dnsperf in the guest netns of the namespace replica
# (test/agent/dns/topology.sh) drives queries through tap -> bridge -> masquerade -> host DNAT -> dnsmasq,
# and the agent's own CPU time (utime+stime from its procfs stat) is read over each run, with the
# tracer on and with it off (same agent, --dns-trace=off) as the baseline.
# With the tracer on, kernel.bpf_stats_enabled is set for the run and the last column is the tc
# program's cost per packet on this topology (run_time_ns / run_cnt over the run, every traced hop
# of the path; docs/benchmarks/dns-bpf.md measures it on a plain veth pair).
# Usage (root): tools/bench/dns_agent_cpu.sh [BUILD_DIR] [SECONDS_PER_RUN] [RATES...]
# Prints a Markdown table (docs/benchmarks/dns.md keeps the figures).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
SECS=${2:-10}
shift 2 2>/dev/null || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(2000 10000 0)  # 0 = as fast as dnsperf goes
NODEGATE=$BUILD/nodegate
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 1; }
command -v dnsperf >/dev/null || { echo "needs dnsperf"; exit 1; }

source "$SRC/test/agent/dns/topology.sh"
topo_healthy
for i in $(seq 200); do echo "www.example.test A"; echo "www.example.test AAAA"; done > $TMP/queries

clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
OLD_BPF_STATS=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$OLD_BPF_STATS; topo_cleanup' EXIT  # keeps topology.sh's cleanup
sysctl -qw kernel.bpf_stats_enabled=1
# "run_time_ns run_cnt" summed over the loaded ng_tc programs (one per agent).
tc_stats() { bpftool -j prog show 2>/dev/null | jq -r '[.[] | select(.name == "ng_tc")] | "\(map(.run_time_ns // 0) | add // 0) \(map(.run_cnt // 0) | add // 0)"'; }
stat_of() { curl -sf "$API/api/v1/dns/traces?limit=0" | python3 -c "import json,sys; print(json.load(sys.stdin).get('stats',{}).get('$1',0))" 2>/dev/null || echo 0; }

echo "| tracer | offered qps | achieved qps | agent CPU % of one core | events/s | events lost | tc ns/packet |"
echo "|---|---|---|---|---|---|---|"
for mode in off on; do
  "$NODEGATE" agent --kube none --listen 127.0.0.1:$PORT_METRICS --debug-listen 127.0.0.1:$PORT_DEBUG \
    --dns-trace $mode --dns-netns /run/netns/$H --dns-netns /run/netns/$D --resync 3600 \
    --log-level warn > $TMP/agent-$mode.log 2>&1 &
  AGENT=$!
  PIDS+=($AGENT)
  for _ in $(seq 100); do curl -sf "$API/readyz" >/dev/null && break; sleep 0.2; done
  sleep 3  # first discovery and attach
  for rate in "${RATES[@]}"; do
    q=(); [ "$rate" != 0 ] && q=(-Q "$rate")
    ev0=$(stat_of events); lost0=$(stat_of events_lost)
    read -r rt0 rc0 < <(tc_stats)
    t0=$(cpu_ticks $AGENT); s0=$(date +%s.%N)
    out=$(ip netns exec $G dnsperf -s 10.96.0.10 -d $TMP/queries -l "$SECS" -c 4 "${q[@]}" 2>&1)
    t1=$(cpu_ticks $AGENT); s1=$(date +%s.%N)
    ev1=$(stat_of events); lost1=$(stat_of events_lost)
    read -r rt1 rc1 < <(tc_stats)
    tcns=-; [ "$rc1" -gt "$rc0" ] && tcns=$(( (rt1 - rt0) / (rc1 - rc0) ))
    qps=$(echo "$out" | awk '/Queries per second/ {print int($4)}')
    cpu=$(python3 -c "print(f'{100*($t1-$t0)/$clk/($s1-$s0):.1f}')")
    evs=$(python3 -c "print(int(($ev1-$ev0)/($s1-$s0)))")
    echo "| $mode | ${rate/#0/max} | $qps | $cpu | $evs | $((lost1 - lost0)) | $tcns |"
  done
  kill -TERM $AGENT; wait $AGENT || true
done
echo
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; kernel $(uname -r)"
