#!/usr/bin/env bash
# Density (issue 20): what `nodegate agent` costs on a node with many VMs. Launcher replicas of
# test/agent/dns/topology.sh (each its own guest and launcher netns: tap0 -> k6t-eth0 -> masquerade
# -> eth0, a veth to the shared host netns, a process named virt-launcher the agent finds), plus
# BG_PROCS unrelated processes, with the agent in its production defaults (tracer on, --kube none,
# the host and DNS server netns as --dns-netns). For each size, one agent started on that many VMs:
#   memory at idle (RSS/USS, smaps_rollup), threads, fds; CPU and wakeups at idle, before and
#   after DNS load; CPU of one probe cycle; `nodegate check` wall time; DNS load spread evenly
#   over every guest (tools/bench/dns_blast.c, one socket per guest netns): agent CPU, events,
#   events lost; BPF memory (bpftool) and tc filters of the agent.
# At each size, a new launcher's exec -> its 4 hops traced and its exit -> all of them gone (the
# host veth gone with its netns), LATENCY_REPEATS times, with the agent's CPU per rescan. At the
# largest size, with that agent still running: CYCLES create/destroy
# cycles with fds, tc filters, BPF map entries and RSS before and after, and the probe cycle and
# `nodegate check` again with MANY_PROCS processes on the host. node_exporter runs throughout as
# the reference footprint. Prints Markdown (tools/bench/density_report.py; docs/benchmarks/density.md
# keeps the figures).
#
# Usage (root; a benchmark: under the bench lock, so two benchmarks never share the machine):
#   flock -o /work/.locks/bench tools/bench/density.sh [BUILD_DIR]
#   tools/bench/density.sh --check [BUILD_DIR]   the functional test CI runs (dns_density_e2e):
#       100 replicas traced, DNS from every guest seen, CYCLES=10 create/destroy cycles, all torn
#       down, and nothing left behind (fds, tc filters, map entries); exits 1 on any failure.
# Settings (environment): SIZES="1 10 50 100" BG_PROCS=300 MANY_PROCS=2000 IDLE_SECS=60
#   LOAD_SECS=10 RATES="12500 25000" (queries/s in total over all guests) CYCLES=1000
#   LATENCY_REPEATS=10 CYCLE_SIGHUPS=10; the ring phase (at the largest size, one agent per ring
#   size and repeat, interleaved): RING_KIBS="512 2048 8192" RING_RATES="25000 50000" RING_REPEATS=2
#   (RING_KIBS="" skips it); ANSWERER=answer (tools/bench/dns_answer.c, recvmmsg/sendmmsg) or
#   dnsmasq (what the runs before 2026-12-02's second session answered with). Ports 19740-19742
#   (--check: 19743-19745, so CI's short run under the suite lock and a benchmark under the bench
#   lock never take each other's ports). The agent finds every virt-launcher on the host, so
#   another test's launchers running meanwhile are traced too: each size waits until exactly its
#   own are, and records how many others ran at its end ("foreign").
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
MODE=bench
if [ "${1:-}" = --check ]; then MODE=check; shift; fi
BUILD=${1:-$SRC/build}
NODEGATE=$BUILD/nodegate
PORT_METRICS=19740 PORT_DEBUG=19741 NE_PORT=19742
if [ $MODE = check ]; then
  PORT_METRICS=19743 PORT_DEBUG=19744 NE_PORT=19745
  SIZES=${SIZES:-100} BG_PROCS=${BG_PROCS:-300} MANY_PROCS=${MANY_PROCS:-0} IDLE_SECS=${IDLE_SECS:-0}
  LOAD_SECS=${LOAD_SECS:-3} RATES=${RATES:-3000} CYCLES=${CYCLES:-10} LATENCY_REPEATS=${LATENCY_REPEATS:-3}
  CYCLE_SIGHUPS=${CYCLE_SIGHUPS:-0} RING_KIBS=${RING_KIBS-}
fi
SIZES=${SIZES:-1 10 50 100} BG_PROCS=${BG_PROCS:-300} MANY_PROCS=${MANY_PROCS:-2000}
IDLE_SECS=${IDLE_SECS:-60} LOAD_SECS=${LOAD_SECS:-10} RATES=${RATES:-12500 25000}
CYCLES=${CYCLES:-1000} LATENCY_REPEATS=${LATENCY_REPEATS:-10} CYCLE_SIGHUPS=${CYCLE_SIGHUPS:-10}
RING_KIBS=${RING_KIBS-512 2048 8192} RING_RATES=${RING_RATES:-25000 50000} RING_REPEATS=${RING_REPEATS:-2}
ANSWERER=${ANSWERER:-answer}

source "$SRC/test/agent/dns/topology.sh"
topo_require ip tc nft dnsmasq bpftool cc python3 curl
[ -x "$NODEGATE" ] || { echo "FAIL: no $NODEGATE (build first)"; exit 1; }
NODE_EXPORTER=$(command -v prometheus-node-exporter || true)
[ $MODE = check ] || [ -n "$NODE_EXPORTER" ] || { echo "FAIL: missing prometheus-node-exporter (tools/install-deps.sh)"; exit 1; }
BLAST=$TMP/dns_blast ANSWER=$TMP/dns_answer
cc -O2 -Wall -o "$BLAST" "$SRC/tools/bench/dns_blast.c"
cc -O2 -Wall -pthread -o "$ANSWER" "$SRC/tools/bench/dns_answer.c"

# The meter (tools/bench/density_meter.py) answers one JSON line per command.
coproc METER { exec python3 "$SRC/tools/bench/density_meter.py" $PORT_DEBUG $PORT_METRICS; }
PIDS+=($METER_PID)
meter() { echo "$*" >&"${METER[1]}"; local line; read -r line <&"${METER[0]}"; echo "$line"; }
# jget JSON KEY...: a value out of a meter answer (KEY.SUB for nested ones).
jget() { python3 -c 'import json,sys
v = json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v = v[k] if not isinstance(v, list) else v[int(k)]
print(v)' "$1" "$2"; }

if [ $MODE = check ]; then
  pass() { echo "ok   - $1"; }
  expect() { check "$@"; }
else
  expect() { shift; "$@" || echo "  (note: $*: not as expected)" >&2; }
fi
log() { echo "# $(date -u +%T) $*" >&2; }

# --- the node: host, CoreDNS and uplink netns, dnsmasq, N launchers, unrelated processes ----------
# The benchmark's replicas are 1..N (topology.sh's replica 0 is the single-VM tests' one).
topo_node() {
  trap topo_cleanup EXIT
  node_up
  service_nat healthy
  if [ "$ANSWERER" = dnsmasq ]; then start_dnsmasq; else start_answerer; fi
}
# start_answerer: tools/bench/dns_answer.c where dnsmasq would listen (the CoreDNS stand-in's
# address, behind the ClusterIP translation), two threads: dnsmasq fell behind the offered rate.
start_answerer() {
  ip netns exec $D "$ANSWER" 10.244.0.3 53 2 > $TMP/answer.json 2> $TMP/answer.log &
  PIDS+=($!)
  for _ in $(seq 50); do ip netns exec $D ss -lun | grep -q '10.244.0.3:53' && return 0; sleep 0.1; done
  echo "FAIL: dns_answer did not start"; cat $TMP/answer.log; exit 1
}
REPLICAS=0
grow_to() {  # N: replicas 1..N up, each with its virt-launcher
  local t0=$EPOCHREALTIME i
  for ((i = REPLICAS + 1; i <= $1; i++)); do replica_up $i; start_launcher $i; done
  log "replicas $((REPLICAS + 1))..$1 up in $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.1f}')") s"
  REPLICAS=$1
}
BG=()
spawn_procs() {  # N: unrelated processes (sleepers) until the host has N processes
  local have; have=$(meter procs)
  local n=$(($1 - have)) i
  for ((i = 0; i < n; i++)); do sleep 100000 & BG+=($!); done
  PIDS+=("${BG[@]}")
}

AGENT=
start_agent() {  # [RING_KIB]
  echo '{}' > $TMP/empty.json
  if [ -n "$(ss -Htln "( sport = :$PORT_METRICS or sport = :$PORT_DEBUG )")" ]; then
    echo "FAIL: port $PORT_METRICS or $PORT_DEBUG is taken (another density run?)"; exit 1
  fi
  "$NODEGATE" agent --kube none ${1:+--dns-ring-kib $1} --listen 127.0.0.1:$PORT_METRICS --debug-listen 127.0.0.1:$PORT_DEBUG \
    --dns-trace on --dns-netns /run/netns/$H --dns-netns /run/netns/$D --config $TMP/empty.json \
    --log-level ${AGENT_LOG_LEVEL:-warn} > $TMP/agent.log 2>&1 &
  AGENT=$!
  PIDS+=($AGENT)
}
stop_agent() { stop_pid $AGENT; AGENT=; }

# cpu_window SECS [ACTION]: the agent's CPU seconds and context switches over SECS (ACTION runs
# in the background meanwhile); prints "cpu_s switches wall_s".
cpu_window() {
  local a b t0=$EPOCHREALTIME
  a=$(meter cpu $AGENT)
  sleep "$1"
  b=$(meter cpu $AGENT)
  python3 -c "import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
print(f\"{b['cpu_s']-a['cpu_s']:.3f} {b['switches']-a['switches']} {$EPOCHREALTIME-$t0:.2f}\")" "$a" "$b"
}

# cycle_window: cpu_window over CYCLE_SIGHUPS full probe cycles, one a second (SIGHUP reloads the
# config and the runner re-runs every probe), then the agent's own account of the cycles in the
# window (nodegate_agent_cycle{,_cpu}_seconds_total over nodegate_agent_cycles_total): prints
# "cpu_s switches wall_s cycles cycle_wall_s cycle_cpu_s". The signals come from a background
# subshell that never talks to the meter: a subshell has no coproc fds.
cycle_window() {
  local a b w
  a=$(meter cycle)
  (for ((k = 0; k < CYCLE_SIGHUPS; k++)); do sleep 1; kill -HUP $AGENT; done) &
  local hups=$!
  w=$(cpu_window $((CYCLE_SIGHUPS + 1)))
  wait $hups
  sleep 0.5  # the last cycle finishes
  b=$(meter cycle)
  python3 -c "import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
print(sys.argv[3], int(b['cycles']-a['cycles']), round(b['wall_s']-a['wall_s'], 6), round(b['cpu_s']-a['cpu_s'], 6))" "$a" "$b" "$w"
}

# check_wall: the median wall time of three `nodegate check` runs (null in --check mode).
check_wall() {
  [ $MODE = bench ] || { echo null; return; }
  local k s
  for k in 1 2 3; do
    s=$EPOCHREALTIME
    "$NODEGATE" check --output json > /dev/null 2>&1 || true  # exit 1 and 3: verdicts, not errors
    python3 -c "print(round($EPOCHREALTIME - $s, 4))"
  done | sort -n | sed -n 2p
}

RESULTS=$TMP/results.jsonl
record() { echo "$1" >> $RESULTS; }  # one JSON object per measurement, formatted at the end

# load_record JSON-HEAD RATE N: DNS at RATE queries/s in all, spread over the guests of replicas
# 1..N for LOAD_SECS, and one record: JSON-HEAD ('"kind":...,' fields) plus what dns_blast
# counted and the agent's CPU and tracer counters before and after.
load_record() {
  local netns=() i
  for ((i = 1; i <= $3; i++)); do replica_names $i; netns+=(/run/netns/$RG); done
  local s0; s0=$(meter tracer)
  local c0; c0=$(meter cpu $AGENT)
  local out; out=$("$BLAST" 10.96.0.10 "$2" "$LOAD_SECS" 1 "${netns[@]}")
  local c1; c1=$(meter cpu $AGENT)
  sleep 2  # the last answers' traces complete
  local s1; s1=$(meter tracer)
  record "{$1\"rate\":$2,\"blast\":$out,\"cpu0\":$c0,\"cpu1\":$c1,\"s0\":$s0,\"s1\":$s1,\"mem\":$(meter mem $AGENT)}"
  jget "$s1" events_lost
}

# --- one size ----------------------------------------------------------------------------------
measure_size() {
  local n=$1 t0=$EPOCHREALTIME
  start_agent
  local up; up=$(meter wait_hops $n 120)
  expect "$n VMs: every launcher traced (4 hops each, shared side 2)" test "$up" != -1
  log "n=$n: traced after $up s"
  sleep 5
  local m_idle; m_idle=$(meter mem $AGENT)
  local idle="0 0 0" disc0=null disc1=null
  if [ "$IDLE_SECS" != 0 ]; then
    disc0=$(meter discovery)
    idle=$(cpu_window $IDLE_SECS)
    disc1=$(meter discovery)
  fi
  local cycle="0 0 0"
  if [ "$CYCLE_SIGHUPS" != 0 ]; then
    cycle=$(cycle_window)
  fi
  local dnspath; dnspath=$(meter metric nodegate_check_duration_seconds check=dns-path)
  local check_s; check_s=$(check_wall)
  local bpf_j; bpf_j=$(meter bpf $AGENT)
  local filt; filt=$(meter filters $AGENT ngdns-)
  local procs; procs=$(meter procs)
  local foreign=$(($(pgrep -xc virt-launcher || true) - n))
  [ $foreign = 0 ] || log "n=$n: $foreign virt-launcher processes of another test ran meanwhile"
  record "{\"kind\":\"size\",\"n\":$n,\"foreign\":$foreign,\"traced_s\":$up,\"mem\":$m_idle,\"idle\":\"$idle\",\"disc0\":$disc0,\"disc1\":$disc1,\"cycle\":\"$cycle\",\"sighups\":$CYCLE_SIGHUPS,\"dnspath_s\":$dnspath,\"check_s\":$check_s,\"bpf\":$bpf_j,\"filters\":$filt,\"procs\":$procs}"
  expect "$n VMs: the agent's filters are 2 per traced device ($((8 * n + 4)))" \
    test "$(jget "$filt" filters)" = $((8 * n + 4))
  # DNS load over every guest at once.
  local rate
  for rate in $RATES; do
    load_record "\"kind\":\"load\",\"n\":$n," $rate $n > /dev/null
  done
  if [ "$IDLE_SECS" != 0 ]; then
    local m_after; m_after=$(meter mem $AGENT)
    local idle2; idle2=$(cpu_window $((IDLE_SECS / 2)))
    record "{\"kind\":\"after_load\",\"n\":$n,\"mem\":$m_after,\"idle\":\"$idle2\",\"settled\":$(meter mem $AGENT)}"
  fi
  [ $MODE = check ] && [ "$n" != "${SIZES##* }" ] || measure_latency $n
  if [ $MODE = check ]; then
    local vmis; vmis=$(meter series nodegate_dns_queries_total)
    check "DNS from every one of the $n guests traced end to end (a query count per VMI)" \
      test "$vmis" -ge "$n"
    check "the dns-path probe counts the $n launchers from the tracer's discovery" bash -c \
      "for _ in \$(seq 50); do curl -sf http://127.0.0.1:$PORT_DEBUG/api/v1/checks/dns-path | python3 -c 'import json,sys; sys.exit(0 if any(e[\"source\"]==\"virt-launcher processes\" and e[\"observed\"]==\"$n\" for e in json.load(sys.stdin)[\"evidence\"]) else 1)' && exit 0; sleep 0.2; done; exit 1"
    local lost; lost=$(jget "$(meter tracer)" events_lost)
    check "no tracer event lost at ${RATES% *} queries/s over $n guests" test "$lost" = 0
  fi
  log "n=$n measured in $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.0f}')") s"
}

# --- a VM arriving and leaving (at every size), many times (at the largest) ------------------------
# veth_gone T0: once the host side of replica $RHL is gone (its launcher netns freed by the kernel,
# which nothing of the agent's may hold), milliseconds since T0; -1 after 10 s.
veth_gone() {
  local k
  for ((k = 0; k < 1000; k++)); do
    if ! ip -n $H link show $RHL > /dev/null 2>&1; then
      python3 -c "print(round(($EPOCHREALTIME - $1) * 1000, 1))"
      return
    fi
    sleep 0.01
  done
  echo -1
}
# measure_latency N: with N VMs traced, a launcher (replica N+1) arrives and leaves
# LATENCY_REPEATS times: exec -> its 4 hops traced, exit -> untraced, netns deleted -> host veth
# gone; and the agent's CPU and rescans over all of it (CPU per rescan: what one pass costs at N).
measure_latency() {
  local n=$1 i=$(($1 + 1)) k
  replica_names $i
  local c0; c0=$(meter cpu $AGENT)
  local d0; d0=$(meter discovery)
  for ((k = 0; k < LATENCY_REPEATS; k++)); do
    replica_up $i
    local t0=$EPOCHREALTIME
    start_launcher $i
    local attach; attach=$(meter wait_vmi ngdns/$RVM 4 5 $t0)
    t0=$EPOCHREALTIME
    stop_launcher $i
    local detach; detach=$(meter wait_vmi ngdns/$RVM 0 5 $t0)
    local rest; rest=$(meter filters $AGENT $RL)
    t0=$EPOCHREALTIME
    ip netns del $RG; ip netns del $RL
    local gone; gone=$(veth_gone $t0)
    record "{\"kind\":\"latency\",\"n\":$n,\"attach_ms\":$attach,\"detach_ms\":$detach,\"veth_gone_ms\":$gone,\"left\":$rest}"
    expect "$n VMs: a new launcher traced and untraced, nothing of it left" \
      test "$attach" != -1 -a "$detach" != -1 -a "$gone" != -1 -a "$(jget "$rest" filters)" = 0
  done
  local c1; c1=$(meter cpu $AGENT)
  local d1; d1=$(meter discovery)
  # The meter's polling alone, as it polls while it waits for an arrival or a departure: the
  # same request (a traced VMI's path) every 5 ms for POLL_SECS with no VM coming or going.
  local poll_s=2 p0 p1
  replica_names 1
  p0=$(meter cpu $AGENT)
  meter wait_vmi ngdns/$RVM 99 $poll_s $EPOCHREALTIME > /dev/null
  p1=$(meter cpu $AGENT)
  record "{\"kind\":\"latency_cost\",\"n\":$n,\"cpu_s\":$(python3 -c "print(round($(jget "$c1" cpu_s) - $(jget "$c0" cpu_s), 3))"),\"disc0\":$d0,\"disc1\":$d1,\"poll_s\":$poll_s,\"poll_cpu_s\":$(python3 -c "print(round($(jget "$p1" cpu_s) - $(jget "$p0" cpu_s), 3))")}"
}

# measure_cycles N: CYCLES create/destroy cycles beside N traced VMs.
measure_cycles() {
  local n=$1 i=$(($1 + 1))
  replica_names $i
  # State before and after, RSS every tenth of the way.
  local before; before=$(meter mem $AGENT)
  local fb; fb=$(meter filters $AGENT ngdns-)
  local bb; bb=$(meter bpf $AGENT)
  local hb; hb=$(meter hops)
  local t0=$EPOCHREALTIME bad=0 c
  for ((c = 1; c <= CYCLES; c++)); do
    replica_up $i
    start_launcher $i
    [ "$(meter wait_vmi ngdns/$RVM 4 10 $EPOCHREALTIME)" != -1 ] || bad=$((bad + 1))
    replica_down $i
    [ "$(meter wait_vmi ngdns/$RVM 0 10 $EPOCHREALTIME)" != -1 ] || bad=$((bad + 1))
    # The kernel frees a netns after `ip netns del` returns: the next replica reuses the names.
    [ "$(veth_gone $EPOCHREALTIME)" != -1 ] || bad=$((bad + 1))
    if [ $((c % (CYCLES / 10 > 0 ? CYCLES / 10 : 1))) = 0 ]; then
      record "{\"kind\":\"cycle_rss\",\"cycle\":$c,\"mem\":$(meter mem $AGENT)}"
    fi
  done
  local secs; secs=$(python3 -c "print(round($EPOCHREALTIME-$t0,1))")
  sleep 1
  local after; after=$(meter mem $AGENT)
  local fa; fa=$(meter filters $AGENT ngdns-)
  local ba; ba=$(meter bpf $AGENT)
  local ha; ha=$(meter hops)
  record "{\"kind\":\"cycles\",\"n\":$n,\"cycles\":$CYCLES,\"seconds\":$secs,\"failed_waits\":$bad,\"before\":$before,\"after\":$after,\"filters_before\":$fb,\"filters_after\":$fa,\"bpf_before\":$bb,\"bpf_after\":$ba,\"hops_before\":$hb,\"hops_after\":$ha}"
  expect "$CYCLES create/destroy cycles: every VM traced and untraced in time" test $bad = 0
  expect "after the cycles: the agent's fds as before ($(jget "$before" fds))" \
    test "$(jget "$after" fds)" = "$(jget "$before" fds)"
  expect "after the cycles: netns fds as before ($(jget "$before" netns_fds))" \
    test "$(jget "$after" netns_fds)" = "$(jget "$before" netns_fds)"
  expect "after the cycles: tc filters as before ($(jget "$fb" filters))" \
    test "$(jget "$fa" filters)" = "$(jget "$fb" filters)"
  expect "after the cycles: no clsact qdisc left bare" test "$(jget "$fa" bare_clsact)" = 0
  expect "after the cycles: BPF hash map entries as before" \
    test "$(jget "$ba" hash_entries)" = "$(jget "$bb" hash_entries)"
  expect "after the cycles: traced hops as before ($(jget "$hb" hops))" \
    test "$(jget "$ha" hops)" = "$(jget "$hb" hops)"
}

# measure_restart N: the agent killed with SIGKILL beside N traced VMs (an OOM kill, a crash: it
# cannot detach, and its filters keep running its programs) and started again: until every
# launcher is traced again, which includes removing the dead agent's filters (the new agent does
# as it attaches, after reading which programs live processes hold: every fd of every process),
# and that none stacked up.
measure_restart() {
  local n=$1 old left
  old=$(meter prog_ids $AGENT)
  old=$(tr -d '[] ' <<< "$old")
  kill -9 $AGENT
  wait $AGENT 2> /dev/null || true
  local stale; stale=$(meter filters_of "$old" ngdns-)
  local fds; fds=$(meter host_fds)
  start_agent
  local up; up=$(meter wait_hops $n 120)
  # attach() removes a device's dead filters before it adds its own: once every launcher is
  # traced again, none may be left.
  left=$(meter filters_of "$old" ngdns-)
  local filt; filt=$(meter filters $AGENT ngdns-)
  record "{\"kind\":\"restart\",\"n\":$n,\"procs\":$(meter procs),\"host_fds\":$fds,\"stale_before\":$stale,\"traced_s\":$up,\"stale_left\":$left,\"filters\":$filt}"
  expect "restart beside $n VMs: the killed agent left its $((8 * n + 4)) filters" \
    test "$(jget "$stale" filters)" = $((8 * n + 4))
  expect "restart beside $n VMs: every launcher traced again" test "$up" != -1
  expect "restart beside $n VMs: the killed agent's filters removed" \
    test "$(jget "$left" filters)" = 0
  expect "restart beside $n VMs: 2 filters per traced device, none stacked ($((8 * n + 4)))" \
    test "$(jget "$filt" filters)" = $((8 * n + 4))
}

# --- the run --------------------------------------------------------------------------------------
log "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(meter procs) processes"
topo_node
spawn_procs $BG_PROCS
NE_RSS='null'
if [ -n "$NODE_EXPORTER" ]; then
  "$NODE_EXPORTER" --web.listen-address=127.0.0.1:$NE_PORT > $TMP/node_exporter.log 2>&1 &
  NE=$!; PIDS+=($NE)
  sleep 5
  ne_idle=$(meter mem $NE)
  for _ in $(seq 10); do curl -sf http://127.0.0.1:$NE_PORT/metrics > /dev/null; done
  NE_RSS="{\"idle\":$ne_idle,\"scraped\":$(meter mem $NE)}"
fi
record "{\"kind\":\"machine\",\"cpus\":$(nproc),\"load_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"node_exporter\":$NE_RSS,\"kernel\":\"$(uname -r)\"}"

last=
for n in $SIZES; do
  grow_to $n
  measure_size $n
  last=$n
  [ "$n" = "${SIZES##* }" ] || stop_agent
done
measure_cycles $last
measure_restart $last
if [ "$MANY_PROCS" != 0 ]; then
  spawn_procs $MANY_PROCS
  measure_restart $last
  cycle="0 0 0"
  [ "$CYCLE_SIGHUPS" = 0 ] || cycle=$(cycle_window)
  idle=$(cpu_window $((IDLE_SECS > 0 ? IDLE_SECS / 2 : 1)))
  check_s=$(check_wall)
  record "{\"kind\":\"many_procs\",\"n\":$last,\"procs\":$(meter procs),\"cycle\":\"$cycle\",\"sighups\":$CYCLE_SIGHUPS,\"idle\":\"$idle\",\"check_s\":$check_s,\"dnspath_s\":$(meter metric nodegate_check_duration_seconds check=dns-path)}"
fi

# Events lost against the ring's size under DNS load over every guest: one agent per ring size
# and repeat, the sizes interleaved so each sees the same machine; the poll thread's wakeups are
# the agent's context switches over the load (every thread's: the poller's dominate under load).
if [ -n "$RING_KIBS" ]; then
  stop_agent
  for ((rep = 1; rep <= RING_REPEATS; rep++)); do
    for kib in $RING_KIBS; do
      start_agent $kib
      [ "$(meter wait_hops $last 120)" != -1 ] || log "ring $kib KiB: not every launcher traced"
      sleep 2
      for rate in $RING_RATES; do
        lost=$(load_record "\"kind\":\"ring\",\"n\":$last,\"ring_kib\":$kib,\"rep\":$rep," $rate $last)
        log "ring $kib KiB, rep $rep, $rate/s: lost $lost (since the agent started)"
      done
      stop_agent
    done
  done
  start_agent
  [ "$(meter wait_hops $last 120)" != -1 ] || log "after the ring phase: not every launcher traced"
fi

# Every VM goes: nothing of the agent's may be left on any device, nor a netns held.
for ((i = 1; i <= last; i++)); do replica_down $i; done
expect "all VMs gone: no VMI traced any more" test "$(meter wait_hops 0 30)" != -1
left=$(meter hops)
expect "all VMs gone: only the shared side (2 hops) traced" test "$(jget "$left" hops)" = 2
gone=$(meter mem $AGENT)
expect "all VMs gone: the agent holds no launcher netns (at most the host and server netns)" \
  test "$(jget "$gone" netns_fds)" -le 2
for _ in $(seq 100); do [ -z "$(ip -n $H -o link show | grep ' hl[0-9]')" ] && break; sleep 0.1; done
expect "all VMs gone: every host-side veth gone (no launcher netns pinned)" \
  test -z "$(ip -n $H -o link show | grep ' hl[0-9]')"
# The VMs sent queries: their series went with them (issue 21: bounded over create/destroy).
expect "all VMs gone: no per-VMI query series left in /metrics" bash -c \
  "curl -sf http://127.0.0.1:$PORT_METRICS/metrics > $TMP/metrics-gone.txt && grep -q '^nodegate_dns_hops_attached' $TMP/metrics-gone.txt && ! grep -q 'nodegate_dns_queries_total{.*vmi=\"[^\"]' $TMP/metrics-gone.txt"
record "{\"kind\":\"teardown\",\"mem\":$gone,\"hops\":$left}"
prog_ids=$(meter prog_ids $AGENT)  # (not in a pipeline: a pipeline's subshell has no coproc fds)
prog_ids=$(tr -d '[] ' <<< "$prog_ids")
stop_agent
on_exit=$(meter filters_of "$prog_ids" ngdns-)
expect "agent exit: none of its tc filters left on the host or server side" \
  test "$(jget "$on_exit" filters)" = 0
expect "agent logged no error" bash -c "! grep -q 'level=error' $TMP/agent.log"
record "{\"kind\":\"end\",\"load_end\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"

if [ $MODE = check ]; then
  if [ $fails -gt 0 ]; then
    echo "--- agent log"; tail -30 $TMP/agent.log
    echo "$fails check(s) failed"; exit 1
  fi
  echo "all checks passed"
else
  python3 "$SRC/tools/bench/density_report.py" $RESULTS || cat $RESULTS
fi
