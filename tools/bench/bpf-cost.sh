#!/usr/bin/env bash
# Cost of the DNS tracer's BPF programs under load, and events lost at the highest rate the
# machine sustains. Figures go into docs/benchmarks/dns-bpf.md.
#
#   sudo tools/bench/bpf-cost.sh [BUILD_DIR] [SECONDS_PER_PHASE] [REPEATS] [REF_BENCH]
#   sudo MODE=loss tools/bench/bpf-cost.sh [BUILD_DIR] [SECONDS_PER_PHASE] [REPEATS]
#   sudo PHASES="dnsperf_10000 blast_25000" tools/bench/bpf-cost.sh [BUILD_DIR] [SECS] [REPEATS] [REF]
#
# Topology (all traffic stays inside two namespaces of our own): client netns 10.78.0.1 --veth--
# server netns 10.78.0.2 running dnsmasq (authoritative for bench.test, no upstream). The tracer
# (test/bpf/dns_tracer_bench.cpp, same loader and poll loop as the agent) is attached to both veth
# ends, so every query makes 4 DNS packets through tc (client egress, server ingress, server
# egress, client ingress) and 4 events. Per-packet cost = run_time_ns / run_cnt with
# kernel.bpf_stats_enabled=1. DNS load: dnsperf (Debian), which waits for answers, and
# tools/bench/dns_blast.c, which offers a fixed query rate whatever the server answers; non-DNS load
# is a UDP flood to a socket in the server namespace. Each set of phases runs REPEATS times; with
# REF_BENCH (another build's bpf_dns_bench, e.g. of the previous commit) the sets alternate between
# the reference and this build, so both see the same machine. Every line carries the load average.
# First come the programs' sizes (xlated and JITed bytes, instructions the verifier processed) of
# each build's BPF object, loaded once with bpftool.
set -euo pipefail

BUILD=${1:-build}
SECS=${2:-10}
REPEATS=${3:-3}
REF_BENCH=${4:-}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BENCH=$BUILD/test/bpf/bpf_dns_bench
[ -x "$BENCH" ] || { echo "build $BENCH first: cmake --build $BUILD --target bpf_dns_bench" >&2; exit 2; }
for t in dnsperf dnsmasq jq python3 ip; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/install-deps.sh)" >&2; exit 2; }
done

BLAST=$BUILD/dns_blast
cc -O2 -Wall -o "$BLAST" "$SRC/tools/bench/dns_blast.c"

ID=$$
C=ngbcost${ID}c
S=ngbcost${ID}s
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
  rm -rf "/sys/fs/bpf/ngbcost$ID" "$TMP"
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

start_driver() {  # $1 = ring bytes ("" = the tracer's default), $2 = driver binary
  local ring=()
  [ -n "$1" ] && ring=(--ring "$1")
  # A fresh file: the previous driver's "ready" must not be taken for this one's (a signal sent
  # before the new driver installs its handlers would kill it).
  rm -f "$TMP/driver.out"
  "${2:-$BENCH}" trace "${ring[@]}" "/run/netns/$C:$IFC" "/run/netns/$S:$IFS_" >"$TMP/driver.out" 2>"$TMP/driver.err" &
  DRIVER_PID=$!
  for i in $(seq 1 600); do grep -q ready "$TMP/driver.out" 2>/dev/null && return; sleep 0.05; done
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
  local blast; blast=$(echo "$out" | grep -o '"sent_per_s":[0-9]*' | cut -d: -f2 || true)
  [ -n "$blast" ] && qps=$blast
  jq -cn --arg name "$name" --arg build "$BUILD_LABEL" --arg load "$(cut -d' ' -f1 /proc/loadavg)" --argjson a "$a" --argjson b "$b" --arg t0 "$t0" --arg t1 "$t1" \
    --arg qps "${qps:-0}" --arg c0 "$c0" --arg c1 "$c1" --arg hz "$(getconf CLK_TCK)" '
    def d(k): ($b[k] - $a[k]);
    (($t1|tonumber) - ($t0|tonumber)) as $secs |
    { build: $build, phase: $name, load1: ($load|tonumber), seconds: ($secs*10|round/10), qps: ($qps|tonumber|round),
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

blast() {  # $1 = offered queries/s
  ip netns exec "$C" "$BLAST" 10.78.0.2 "$1" "$SECS" 4
}

# prog_sizes LABEL OBJ: one JSON line per program of a build's BPF object.
prog_sizes() {
  local dir=/sys/fs/bpf/ngbcost$ID log=$TMP/sizes.log
  [ -f "$2" ] || { echo "# $1: no $2"; return; }
  mkdir -p "$dir"
  if ! bpftool -d prog loadall "$2" "$dir" >"$log" 2>&1; then
    echo "# $1: bpftool could not load $2"; rm -rf "$dir"; return
  fi
  local -a processed
  mapfile -t processed < <(grep -o 'processed [0-9]* insns' "$log" | awk '{print $2}')
  local i=0 p
  for p in $(grep -o "prog '[a-z_0-9]*': pinned" "$log" | cut -d"'" -f2); do
    bpftool -j prog show pinned "$dir/$p" | jq -c --arg b "$1" --arg v "${processed[$i]:-0}" \
      '{build: $b, prog: .name, xlated: .bytes_xlated, jited: .bytes_jited, verifier_processed: ($v|tonumber)}'
    i=$((i + 1))
  done
  rm -rf "$dir"
}

echo "# kernel $(uname -r), $(nproc) CPUs, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${PHASES:-}" ]; then
  prog_sizes this "$BUILD/bpf/dns_tracer.bpf.o"
  [ -n "$REF_BENCH" ] && prog_sizes ref "$(dirname "$REF_BENCH")/../../bpf/dns_tracer.bpf.o"
  echo "# test-run (BPF_PROG_TEST_RUN, ns per run; this build, then REF_BENCH if given):"
  "$BENCH" test-run 2>/dev/null
  [ -n "$REF_BENCH" ] && "$REF_BENCH" test-run 2>/dev/null
fi

# PHASES="dnsperf_10000 blast_25000" runs only those phases of each set, without the sizes, the
# test-run loop and the 64 KiB ring peak: for comparing diagnostic builds on the phases in question.
want() { [ -z "${PHASES:-}" ] || [[ " $PHASES " == *" $1 "* ]]; }
run_set() {  # $1 = label, $2 = driver binary
  BUILD_LABEL=$1
  start_driver $((1 << 20)) "$2"
  if want idle; then phase idle sleep "$SECS"; fi
  if want dnsperf_10000; then phase dnsperf_10000 dnsload 10000; fi
  if want dnsperf_max; then phase dnsperf_max dnsload 0; fi
  for rate in 25000 50000 75000 100000; do
    if want "blast_$rate"; then phase "blast_$rate" blast "$rate"; fi
  done
  if want non_dns_udp_flood; then phase non_dns_udp_flood udpflood; fi
  stop_driver
}

# MODE=loss: only the offered-rate phases, for the events-lost figures (12.5k queries/s = 50k DNS
# packets/s through the four tc hooks), with the ring the agent uses (TracerOptions::ring_bytes)
# unless RING_BYTES says otherwise.
loss_set() {
  BUILD_LABEL=$1
  start_driver "${RING_BYTES:-}" "$2"
  for rate in 12500 25000 50000 75000; do
    phase "blast_$rate" blast "$rate"
  done
  stop_driver
}

for r in $(seq 1 "$REPEATS"); do
  if [ "${MODE:-full}" = loss ]; then
    loss_set this "$BENCH"
    continue
  fi
  [ -n "$REF_BENCH" ] && run_set ref "$REF_BENCH"
  run_set this "$BENCH"
done
[ "${MODE:-full}" = loss ] && exit 0
[ -n "${PHASES:-}" ] && exit 0

# The peak with a 64 KiB ring: what an undersized ring loses.
BUILD_LABEL=this
start_driver 65536
phase "blast_100000_ring64k" blast 100000
stop_driver
