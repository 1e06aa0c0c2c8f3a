#!/usr/bin/env bash
# Cost of the DNS tracer's BPF programs under load, and events lost at the highest rate the
# machine sustains. Figures go into docs/benchmarks/dns-bpf.md.
#
#   sudo tools/bench/bpf-cost.sh [BUILD_DIR] [SECONDS_PER_PHASE]
#
# Topology (all traffic stays inside two namespaces of our own): client netns 10.78.0.1 --veth--
# server netns 10.78.0.2 running dnsmasq (authoritative for bench.test, no upstream). The tracer
# (test/bpf/dns_tracer_bench.cpp, same loader and poll loop as the agent) is attached to both veth
# ends, so every query makes 4 DNS packets through tc (client egress, server ingress, server
# egress, client ingress) and 4 events. Per-packet cost = run_time_ns / run_cnt with
# kernel.bpf_stats_enabled=1. dnsperf (Debian) drives DNS; a Python UDP flood drives non-DNS.
set -euo pipefail

BUILD=${1:-build}
SECS=${2:-10}
BENCH=$BUILD/test/bpf/bpf_dns_bench
[ -x "$BENCH" ] || { echo "build $BENCH first: cmake --build $BUILD --target bpf_dns_bench" >&2; exit 2; }
for t in dnsperf dnsmasq jq python3 ip; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/install-deps.sh)" >&2; exit 2; }
done

ID=$$
C=ngbench${ID}c
S=ngbench${ID}s
VC=ngbc${ID}
VS=ngbs${ID}
TMP=$(mktemp -d /tmp/ngbench.XXXXXX)
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
DRIVER_PID=""
cleanup() {
  [ -n "$DRIVER_PID" ] && kill "$DRIVER_PID" 2>/dev/null && wait "$DRIVER_PID" 2>/dev/null || true
  [ -f "$TMP/dnsmasq.pid" ] && kill "$(cat "$TMP/dnsmasq.pid")" 2>/dev/null || true
  [ -f "$TMP/sink.pid" ] && kill "$(cat "$TMP/sink.pid")" 2>/dev/null || true
  ip netns del "$C" 2>/dev/null || true
  ip netns del "$S" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS" || true
  rm -rf "$TMP"
}
trap cleanup EXIT

sysctl -qw kernel.bpf_stats_enabled=1
ip netns add "$C"
ip netns add "$S"
ip link add "$VC" netns "$C" type veth peer name "$VS" netns "$S"
ip -n "$C" addr add 10.78.0.1/30 dev "$VC"
ip -n "$S" addr add 10.78.0.2/30 dev "$VS"
for ns in "$C" "$S"; do ip -n "$ns" link set lo up; done
ip -n "$C" link set "$VC" up
ip -n "$S" link set "$VS" up
IFC=$(ip netns exec "$C" cat /sys/class/net/"$VC"/ifindex)
IFS_=$(ip netns exec "$S" cat /sys/class/net/"$VS"/ifindex)

ip netns exec "$S" dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces \
  --listen-address=10.78.0.2 --address=/bench.test/192.0.2.1 --cache-size=0 \
  --dns-forward-max=1000 --pid-file="$TMP/dnsmasq.pid" --user=root --log-facility=/dev/null &
sleep 0.5
for i in $(seq 1 50); do echo "q$i.bench.test A"; done >"$TMP/queries"

# A non-DNS sink so the flood is received, not dropped (drops would add kfree_skb work).
PIDF="$TMP/sink.pid" ip netns exec "$S" python3 -c '
import socket,os
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("10.78.0.2",9999))
s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1<<22)
open(os.environ["PIDF"],"w").write(str(os.getpid()))
while True: s.recv(2048)' &
sleep 0.3

start_driver() {  # $1 = ring bytes
  "$BENCH" trace --ring "$1" "/run/netns/$C:$IFC" "/run/netns/$S:$IFS_" >"$TMP/driver.out" 2>"$TMP/driver.err" &
  DRIVER_PID=$!
  for i in $(seq 1 100); do grep -q ready "$TMP/driver.out" 2>/dev/null && return; sleep 0.05; done
  cat "$TMP/driver.err" >&2; exit 1
}
stop_driver() { kill "$DRIVER_PID"; wait "$DRIVER_PID" || true; DRIVER_PID=""; }
snap() {
  local n; n=$(wc -l <"$TMP/driver.out")
  kill -USR1 "$DRIVER_PID"
  for i in $(seq 1 100); do [ "$(wc -l <"$TMP/driver.out")" -gt "$n" ] && break; sleep 0.02; done
  tail -n1 "$TMP/driver.out"
}
cpu_ticks() { awk '{print $14+$15}' /proc/"$DRIVER_PID"/stat; }

# phase NAME CMD...: runs the load, prints one JSON line of deltas.
phase() {
  local name=$1; shift
  local a b t0 t1 c0 c1 out
  a=$(snap); c0=$(cpu_ticks); t0=$(date +%s.%N)
  out=$("$@" 2>&1 || true)
  t1=$(date +%s.%N); c1=$(cpu_ticks); b=$(snap)
  local qps; qps=$(echo "$out" | awk '/Queries per second:/ {print $4}')
  jq -cn --arg name "$name" --argjson a "$a" --argjson b "$b" --arg t0 "$t0" --arg t1 "$t1" \
    --arg qps "${qps:-0}" --arg c0 "$c0" --arg c1 "$c1" --arg hz "$(getconf CLK_TCK)" '
    def d(k): ($b[k] - $a[k]);
    (($t1|tonumber) - ($t0|tonumber)) as $secs |
    { phase: $name, seconds: ($secs*10|round/10), dnsperf_qps: ($qps|tonumber),
      tc_pkts_per_s: (((d("tc_ingress_cnt") + d("tc_egress_cnt")) / $secs)|round),
      tc_ns_per_pkt: (if (d("tc_ingress_cnt") + d("tc_egress_cnt")) > 0
                      then ((d("tc_ingress_ns") + d("tc_egress_ns")) / (d("tc_ingress_cnt") + d("tc_egress_cnt")) | round) else null end),
      kfree_calls: d("kfree_cnt"),
      kfree_ns_per_call: (if d("kfree_cnt") > 0 then (d("kfree_ns") / d("kfree_cnt") | round) else null end),
      events: d("events"), events_per_s: ((d("events") / $secs)|round), lost: d("lost"),
      tracer_cpu_pct: (((($c1|tonumber) - ($c0|tonumber)) / ($hz|tonumber) / $secs * 1000 | round) / 10) }'
}

dnsload() {  # $1 = target qps (0 = as fast as it goes)
  local q=()
  [ "$1" != 0 ] && q=(-Q "$1")
  ip netns exec "$C" dnsperf -s 10.78.0.2 -d "$TMP/queries" -l "$SECS" -c 4 -q 500 "${q[@]}"
}
udpflood() {
  ip netns exec "$C" python3 -c '
import socket,time,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); m=b"x"*64; end=time.time()+float(sys.argv[1]); n=0
while time.time()<end:
  for _ in range(1000): s.sendto(m,("10.78.0.2",9999))
  n+=1000
print("sent",n)' "$SECS"
}

echo "# kernel $(uname -r), $(nproc) CPUs, $(date -u +%FT%TZ)"
echo "# test-run (BPF_PROG_TEST_RUN, ns per run):"
"$BENCH" test-run 2>/dev/null

start_driver $((4 << 20))
phase idle sleep "$SECS"
for rate in 10000 25000 50000 0; do
  phase "dns_qps_${rate/#0/max}" dnsload "$rate"
done
phase non_dns_udp_flood udpflood
stop_driver

# The same peak with a 64 KiB ring: what an undersized ring loses.
start_driver 65536
phase "dns_qps_max_ring64k" dnsload 0
stop_driver
