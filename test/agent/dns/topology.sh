# The namespace replica of the KubeVirt masquerade DNS path, shared by the end-to-end tests and
# the benchmarks (tools/bench/dns_agent_cpu.sh, tools/bench/density.sh). Source it; it defines
# names and functions and changes nothing until topo_up runs. Every device lives in namespaces made
# here: this machine's own netns is untouched.
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
#
# The guest + launcher pair is a replica with an index (replica_up I): replica 0 is the one above
# ($G, $L, host side hl, pod IP 10.244.1.7, VMI ngdns/vm1), which topo_up makes; replicas 1, 2, …
# (ngdns-{g,l}<pid>-I, host side hlI, pod IP 10.244.1.7 + I, VMI ngdns/vm-I) share the host,
# CoreDNS and uplink netns with it, as the launcher pods of one node do. Pod and host side are
# addressed point to point (the node's 10.244.1.1 on every host-side veth, a /32 route to each
# pod), the way Calico and Cilium route pods, so any number of them coexist.

ID=$$
G=ngdns-g$ID L=ngdns-l$ID H=ngdns-h$ID D=ngdns-d$ID U=ngdns-u$ID
TOPO_GUEST=${TOPO_GUEST:-veth}
PORT_METRICS=${PORT_METRICS:-19710} PORT_DEBUG=${PORT_DEBUG:-19711}
API=http://127.0.0.1:$PORT_DEBUG
TMP=$(mktemp -d /tmp/ngdns.XXXXXX)
PIDS=()
declare -gA LAUNCHERS=()  # replica index -> its virt-launcher's pid
fails=0

# replica_names I: sets RG RL (guest and launcher netns), RHL (host-side veth), RPOD4 RPOD6 (pod
# addresses) and RVM (the VMI's name) for replica I.
replica_names() {
  local i=$1
  if [ "$i" = 0 ]; then
    RG=$G RL=$L RHL=hl RVM=vm1
  else
    RG=ngdns-g$ID-$i RL=ngdns-l$ID-$i RHL=hl$i RVM=vm-$i
  fi
  local n=$((7 + i))
  RPOD4=10.244.$((1 + n / 256)).$((n % 256))
  RPOD6=fd00:244:1::$(printf %x $n)
}

topo_cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for ns in $G $L $H $D $U $(ip netns list | awk -v p="^ngdns-[gl]$ID-" '$1 ~ p {print $1}'); do
    ip netns del $ns 2>/dev/null
  done
  [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}

check() {  # check "description" command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

# node_up: the netns every replica shares (host, CoreDNS, uplink), without any replica.
node_up() {
  for ns in $H $D $U; do ip netns add $ns; ip -n $ns link set lo up; done
  ip -n $H link add hd type veth peer name eth0 netns $D
  # The node's uplink: where the default route leads (the rest of the network, not forwarding).
  ip -n $H link add up0 type veth peer name up1 netns $U
  for l in "$H hd" "$H up0" "$U up1" "$D eth0"; do
    ip -n ${l% *} link set ${l#* } up
  done
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
  ip netns exec $H sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
}
# topo_up: the node with replica 0.
topo_up() {
  node_up
  replica_up 0
}

# replica_up I: the guest and launcher netns of replica I (replica_names), wired to the host netns,
# with KubeVirt's masquerade rules; no virt-launcher process yet (start_launcher I).
replica_up() {
  replica_names "$1"
  ip netns add $RG
  ip netns add $RL
  local tap="link add tap0 type veth peer name eth0 netns $RG"
  [ "$TOPO_GUEST" = tap ] && tap="tuntap add dev tap0 mode tap"
  # One ip process per netns (a batch): the density benchmark builds a hundred of these.
  ip -n $RL -b - <<IP
link set lo up
$tap
link add k6t-eth0 type bridge
link set tap0 master k6t-eth0
link add eth0 type veth peer name $RHL netns $H
link set tap0 up
link set k6t-eth0 up
link set eth0 up
addr add 10.0.2.1/24 dev k6t-eth0
addr add fd10:0:2::1/120 dev k6t-eth0 nodad
addr add $RPOD4 peer 10.244.1.1 dev eth0
addr add $RPOD6 peer fd00:244:1::1 dev eth0 nodad
route add default via 10.244.1.1
route add default via fd00:244:1::1 dev eth0 onlink
IP
  ip -n $H -b - <<IP
link set $RHL up
addr add 10.244.1.1 peer $RPOD4 dev $RHL
addr add fd00:244:1::1 peer $RPOD6 dev $RHL nodad
IP
  if [ "$TOPO_GUEST" = veth ]; then
    ip -n $RG -b - <<IP
link set lo up
link set eth0 up
addr add 10.0.2.2/24 dev eth0
addr add fd10:0:2::2/120 dev eth0 nodad
route add default via 10.0.2.1
route add default via fd10:0:2::1
IP
  else
    ip -n $RG link set lo up
  fi
  # KubeVirt's masquerade rules in the launcher netns (nftables, as virt-launcher installs them).
  ip netns exec $RL sh -c 'sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 && nft -f -' <<NFT
table ip nat {
  chain prerouting { type nat hook prerouting priority -100; }
  chain postrouting { type nat hook postrouting priority 100; ip saddr 10.0.2.2 counter masquerade; }
}
table ip6 nat {
  chain postrouting { type nat hook postrouting priority 100; ip6 saddr fd10:0:2::2 counter masquerade; }
}
NFT
}

# replica_down I: its virt-launcher stopped (the VM ends), then its netns deleted (the pod is gone;
# the host-side veth goes with the launcher netns once nothing holds that any more).
replica_down() {
  stop_launcher "$1"
  replica_names "$1"
  ip netns del $RG 2>/dev/null || true
  ip netns del $RL 2>/dev/null || true
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
# stop_pid PID: stops one of our processes and forgets it (a pid is reused once it is gone).
stop_pid() {
  kill "$1" 2>/dev/null || true  # (gone already: fine, under set -e too)
  wait "$1" 2>/dev/null || true
  local p keep=()
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}


# A process named virt-launcher in the launcher netns of replica I (default 0), with the arguments
# KubeVirt gives it (comm comes from the file name, so a script of that name is one).
start_launcher() {
  replica_names "${1:-0}"
  if [ ! -x $TMP/virt-launcher ]; then
    # It takes its sleeping child along when stopped, so no orphan outlives the test.
    printf '#!/bin/sh\nexec 0<&- 1>/dev/null 2>&1\ntrap '"'"'kill $!; exit 0'"'"' TERM INT\nwhile :; do sleep 3600 & wait $!; done\n' > $TMP/virt-launcher
    chmod +x $TMP/virt-launcher
  fi
  ip netns exec $RL $TMP/virt-launcher --qemu-timeout 240s --name $RVM --uid 42 --namespace ngdns &
  LAUNCHERS[${1:-0}]=$!
  PIDS+=($!)
}
# stop_launcher I: the VM of replica I ends (its virt-launcher exits).
stop_launcher() {
  local pid=${LAUNCHERS[${1:-0}]:-}
  [ -n "$pid" ] || return 0
  unset "LAUNCHERS[${1:-0}]"
  stop_pid "$pid"
}

# start_tracing_agent: the agent with its tracer on the replica (AGENT_KUBE, default --kube none;
# the host and server netns as --dns-netns, the launcher netns found by its virt-launcher
# process), queries unanswered after QUERY_TIMEOUT seconds; AGENT is its pid, its log
# $TMP/agent.log.
QUERY_TIMEOUT=${QUERY_TIMEOUT:-1.5}
start_tracing_agent() {
  cat > $TMP/config.json <<JSON
{"checks": {"dns-path": {"query_timeout_seconds": $QUERY_TIMEOUT, "rescan_seconds": 0.5, "window_seconds": 300}}}
JSON
  "$NODEGATE" agent ${AGENT_KUBE:---kube none} --listen 127.0.0.1:$PORT_METRICS --debug-listen 127.0.0.1:$PORT_DEBUG \
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

# start_api NAME: a fake API server of its own (test/fakeapi) with the node $NODE, on a port of
# API_PORTS; sets KUBECONFIG_<NAME> to a kubeconfig for it (kubectl and the agent take it).
NODE=ngdns-node$ID
API_PORTS=${API_PORTS:-19720-19729}
start_api() {
  local dir=$TMP/api-$1
  mkdir -p $dir
  python3 "$SRC/test/fakeapi/fake_apiserver.py" --tls-dir $dir/tls --port-file $dir/port \
    --port-range $API_PORTS --token t0k3n --node $NODE > $dir/server.log 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s $dir/port ] && break; sleep 0.05; done
  [ -s $dir/port ] || { echo "FAIL: fake API server did not start"; cat $dir/server.log; exit 1; }
  cat > $dir/kubeconfig <<YAML
apiVersion: v1
kind: Config
current-context: fake
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:$(cat $dir/port)
    certificate-authority: $dir/tls/ca.crt
contexts:
- name: fake
  context:
    cluster: fake
    user: agent
users:
- name: agent
  user:
    token: t0k3n
YAML
  printf -v "KUBECONFIG_$1" '%s' "$dir/kubeconfig"
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
# metric_has RESULT: nodegate_dns_queries_total counts vm1's queries with that result label (the
# accounting counts them on its next tick: a few tries). $PORT_METRICS: the agent's metrics port.
metric_has() {
  local i
  for i in $(seq 30); do
    curl -sf http://127.0.0.1:$PORT_METRICS/metrics |
      grep -q "^nodegate_dns_queries_total{namespace=\"ngdns\",result=\"$1\",vmi=\"vm1\"} [1-9]" && return 0
    sleep 0.1
  done
  return 1
}
# cli_has TEXT: `nodegate dns trace` for vm1 prints TEXT.
cli_has() { "$NODEGATE" dns trace --api $API --vmi ngdns/vm1 | grep -qF -- "$1"; }
# topo_finish: the last check (the agent logged no error), then the verdict of the whole script;
# on a failure the last traces read and the end of the agent's log ($TMP/agent.log) first.
topo_finish() {
  check "agent logged no error" bash -c "! grep -q 'level=error' $TMP/agent.log"
  if [ $fails -gt 0 ]; then
    [ ! -s $TMP/last.json ] || { echo "--- last traces"; python3 -m json.tool $TMP/last.json | tail -80; }
    echo "--- agent log"; tail -50 $TMP/agent.log
    echo "$fails check(s) failed"; exit 1
  fi
  echo "all checks passed"
}
