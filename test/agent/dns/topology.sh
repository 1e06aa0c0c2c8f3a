# The namespace replica of the KubeVirt masquerade DNS path, shared by the end-to-end test and
# tools/bench/dns_agent_cpu.sh. Source it; it defines names and functions and changes nothing until
# topo_up runs. Every device lives in namespaces made here: this machine's own netns is untouched.
#
#   guest netns  eth0 10.0.2.2 ──veth── tap0 ┐
#   launcher     k6t-eth0 10.0.2.1 (bridge) ─┘  nft ip/ip6 nat postrouting masquerade (KubeVirt's rule)
#                eth0 10.244.1.7 ──veth── hl 10.244.1.1   "host" netns
#   host         kube-dns ClusterIP 10.96.0.10 / fd00:96::a: DNAT -> 10.244.0.3 / fd00:244::3
#                hd 10.244.0.1 ──veth── eth0 10.244.0.3   "CoreDNS" netns running dnsmasq
#                up0 192.0.2.1 ──veth── up1 192.0.2.2     "uplink" netns: the default route
# (A veth stands in for QEMU's tap: a tap only carries frames while a process holds it open.)
# TOPO_GUEST=tap before topo_up makes tap0 a real tap device for a QEMU guest instead (test/guest:
# the guest netns stays empty); ports can be set beforehand too.

ID=$$
G=ngdns-g$ID L=ngdns-l$ID H=ngdns-h$ID D=ngdns-d$ID U=ngdns-u$ID
TOPO_GUEST=${TOPO_GUEST:-veth}
PORT_METRICS=${PORT_METRICS:-19710} PORT_DEBUG=${PORT_DEBUG:-19711}
API=http://127.0.0.1:$PORT_DEBUG
TMP=$(mktemp -d /tmp/ngdns.XXXXXX)
PIDS=()
fails=0

topo_cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for ns in $G $L $H $D $U; do ip netns del $ns 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}

check() {  # check "description" command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

topo_up() {
  for ns in $G $L $H $D $U; do ip netns add $ns; ip -n $ns link set lo up; done
  if [ "$TOPO_GUEST" = tap ]; then
    ip -n $L tuntap add dev tap0 mode tap
  else
    ip -n $G link add eth0 type veth peer name tap0 netns $L
  fi
  ip -n $L link add k6t-eth0 type bridge
  ip -n $L link set tap0 master k6t-eth0
  ip -n $L link add eth0 type veth peer name hl netns $H
  ip -n $H link add hd type veth peer name eth0 netns $D
  # The node's uplink: where the default route leads (the rest of the network, not forwarding).
  ip -n $H link add up0 type veth peer name up1 netns $U
  for l in "$L tap0" "$L k6t-eth0" "$L eth0" "$H hl" "$H hd" "$H up0" "$U up1" "$D eth0"; do
    ip -n ${l% *} link set ${l#* } up
  done
  if [ "$TOPO_GUEST" = veth ]; then
    ip -n $G link set eth0 up
    ip -n $G addr add 10.0.2.2/24 dev eth0
    ip -n $G addr add fd10:0:2::2/120 dev eth0 nodad
    ip -n $G route add default via 10.0.2.1
    ip -n $G -6 route add default via fd10:0:2::1
  fi
  ip -n $L addr add 10.0.2.1/24 dev k6t-eth0
  ip -n $L addr add fd10:0:2::1/120 dev k6t-eth0 nodad
  ip -n $L addr add 10.244.1.7/24 dev eth0
  ip -n $L addr add fd00:244:1::7/64 dev eth0 nodad
  ip -n $L route add default via 10.244.1.1
  ip -n $L -6 route add default via fd00:244:1::1
  ip -n $H addr add 10.244.1.1/24 dev hl
  ip -n $H addr add fd00:244:1::1/64 dev hl nodad
  ip -n $H addr add 10.244.0.1/24 dev hd
  ip -n $H addr add fd00:244::1/64 dev hd nodad
  ip -n $H addr add 192.0.2.1/24 dev up0
  ip -n $H addr add 2001:db8::1/64 dev up0 nodad
  ip -n $U addr add 192.0.2.2/24 dev up1
  ip -n $U addr add 2001:db8::2/64 dev up1 nodad
  ip -n $H route add default via 192.0.2.2
  ip -n $H -6 route add default via 2001:db8::2
  ip -n $D addr add 10.244.0.3/24 dev eth0
  ip -n $D addr add fd00:244::3/64 dev eth0 nodad
  ip -n $D route add default via 10.244.0.1
  ip -n $D -6 route add default via fd00:244::1
  for ns in $L $H; do
    ip netns exec $ns sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  done

  # KubeVirt's masquerade rules in the launcher netns (nftables, as virt-launcher installs them).
  ip netns exec $L nft -f - <<NFT
table ip nat {
  chain prerouting { type nat hook prerouting priority -100; }
  chain postrouting { type nat hook postrouting priority 100; ip saddr 10.0.2.2 counter masquerade; }
}
table ip6 nat {
  chain postrouting { type nat hook postrouting priority 100; ip6 saddr fd10:0:2::2 counter masquerade; }
}
NFT
}

# The service translation on the "host": kube-proxy-like (prerouting and output) or the incident
# (output only: local sockets translated, forwarded guest traffic not).
service_nat() {  # $1 = healthy | incident
  ip netns exec $H nft delete table ip kubedns 2>/dev/null || true
  ip netns exec $H nft delete table ip6 kubedns 2>/dev/null || true
  local pre4="" pre6=""
  if [ "$1" = healthy ]; then
    pre4="chain prerouting { type nat hook prerouting priority -100; ip daddr 10.96.0.10 meta l4proto { udp, tcp } th dport 53 dnat to 10.244.0.3; }"
    pre6="chain prerouting { type nat hook prerouting priority -100; ip6 daddr fd00:96::a meta l4proto { udp, tcp } th dport 53 dnat to fd00:244::3; }"
  fi
  ip netns exec $H nft -f - <<NFT
table ip kubedns {
  $pre4
  chain output { type nat hook output priority -100; ip daddr 10.96.0.10 meta l4proto { udp, tcp } th dport 53 dnat to 10.244.0.3; }
}
table ip6 kubedns {
  $pre6
  chain output { type nat hook output priority -100; ip6 daddr fd00:96::a meta l4proto { udp, tcp } th dport 53 dnat to fd00:244::3; }
}
NFT
}

BIG=$(python3 -c 'print("x" * 200)')
# start_dnsmasq [OPTION...]: the CoreDNS stand-in; extra dnsmasq options add records.
start_dnsmasq() {
  ip netns exec $D dnsmasq --keep-in-foreground --no-daemon --no-resolv --no-hosts \
    --bind-interfaces --listen-address=10.244.0.3 --listen-address=fd00:244::3 --except-interface=lo \
    --pid-file=$TMP/dnsmasq.pid --local=/test/ \
    --address=/www.example.test/10.1.2.3 --address=/www.example.test/fd00::1234 \
    --txt-record=big.example.test,"$BIG","$BIG","$BIG" \
    --log-facility=$TMP/dnsmasq.log "$@" &
  DNSMASQ=$!
  PIDS+=($DNSMASQ)
  for _ in $(seq 50); do ip netns exec $D ss -lun | grep -q '10.244.0.3:53' && return 0; sleep 0.1; done
  echo "FAIL: dnsmasq did not start"; cat $TMP/dnsmasq.log; exit 1
}
stop_pid() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; }


# A process named virt-launcher in the launcher netns, with the arguments KubeVirt gives it
# (comm comes from the file name, so a script of that name is one).
start_launcher() {
  # It takes its sleeping child along when stopped, so no orphan outlives the test.
  printf '#!/bin/sh\nexec 0<&- 1>/dev/null 2>&1\ntrap '"'"'kill $!; exit 0'"'"' TERM INT\nwhile :; do sleep 3600 & wait $!; done\n' > $TMP/virt-launcher
  chmod +x $TMP/virt-launcher
  ip netns exec $L $TMP/virt-launcher --qemu-timeout 240s --name vm1 --uid 42 --namespace ngdns &
  PIDS+=($!)
}

# start_tracing_agent: the agent with its tracer on the replica (--kube none; the host and server
# netns as --dns-netns, the launcher netns found by its virt-launcher process), queries unanswered
# after QUERY_TIMEOUT seconds; AGENT is its pid, its log $TMP/agent.log.
QUERY_TIMEOUT=${QUERY_TIMEOUT:-1.5}
start_tracing_agent() {
  cat > $TMP/config.json <<JSON
{"checks": {"dns-path": {"query_timeout_seconds": $QUERY_TIMEOUT, "rescan_seconds": 0.5, "window_seconds": 300}}}
JSON
  "$NODEGATE" agent --kube none --listen 127.0.0.1:$PORT_METRICS --debug-listen 127.0.0.1:$PORT_DEBUG \
    --dns-trace on --dns-netns /run/netns/$H --dns-netns /run/netns/$D --config $TMP/config.json \
    --resync 30 --log-level info > $TMP/agent.log 2>&1 &
  AGENT=$!
  PIDS+=($AGENT)
}

# topo_require TOOL...: the end-to-end tests' preconditions (root for namespaces, nftables and
# BPF: skip, exit 77; a missing tool is a failure, tools/install-deps.sh installs them all).
topo_require() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces, nftables, BPF)"; exit 77; }
  local t
  for t in "$@"; do
    command -v $t >/dev/null || { echo "FAIL: missing $t (tools/install-deps.sh)"; exit 1; }
  done
}

# The replica as every user of it starts: namespaces up, the ClusterIP translated the healthy way,
# dnsmasq serving (with the extra options given), a virt-launcher process in the launcher netns;
# torn down on exit.
topo_healthy() {
  trap topo_cleanup EXIT
  topo_up
  service_nat healthy
  start_dnsmasq "$@"
  start_launcher
}

# api PATH: GET from the agent's debug listener ($API).
api() { curl -sf "$API$1"; }
# wait_for SECONDS PYTHON-CONDITION PATH: until the condition on the JSON at PATH (as j) holds.
wait_for() {
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    if api "$3" > $TMP/last.json 2>/dev/null && python3 - "$2" $TMP/last.json <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
sys.exit(0 if eval(sys.argv[1]) else 1)
PY
    then return 0; fi
    sleep 0.3
  done
  return 1
}
