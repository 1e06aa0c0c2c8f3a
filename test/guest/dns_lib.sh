# The KubeVirt masquerade DNS path around a real QEMU guest, and DNS scenarios on it (sourced).
# The namespaces, NAT and CoreDNS stand-in are test/agent/dns/topology.sh's, with tap0 a real tap
# that QEMU's virtio-net uses; the guest is test/guest/lib.sh's. On top of them:
#
#   launcher netns   tap0 (QEMU, virtio-net) ── k6t-eth0 10.0.2.1 ── masquerade ── eth0 10.244.1.7
#                    dnsmasq as virt-launcher's DHCP server on k6t-eth0: the guest gets 10.0.2.2/24,
#                    gateway 10.0.2.1, and the DNS servers and search list of the pod's resolv.conf
#   every hop        tcpdump, the ground truth the tracer's counts and latencies are held to
#   the agent        topology.sh's start_tracing_agent: nodegate agent --kube none with its
#                    tracer, discovering the launcher netns by its virt-launcher process
#
# A scenario (test/guest/README.md):
#   scenario NAME "what it shows"
#   host_do COMMAND...        change the path (service_nat incident, dns_server_other ..., ...)
#   in_guest 'COMMAND'        run a resolver in the guest (its output is printed)
#   expect_trace "DESCRIPTION" QNAME QTYPE udp|tcp RESULT ['PYTHON CONDITION on t']
#   expect_check "DESCRIPTION" STATUS REASON   the dns-path check's verdict
#   check "DESCRIPTION" captured DEVICE TEXT...  tcpdump's ground truth (devices: HOP_DEVICES, uplink)
#   end_scenario              invariants of every trace + agreement with tcpdump at every hop
# dns_guest_up starts it all, dns_guest_report ends the test with the count of failed checks.

SRC=${NODEGATE_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
NODEGATE=${NODEGATE:?path of the nodegate binary}
# Ports 19600-19601 (test/guest/CMakeLists.txt); the real tap instead of topology.sh's veth.
PORT_METRICS=19600 PORT_DEBUG=19601 TOPO_GUEST=tap
source "$SRC/test/agent/dns/topology.sh"
GUEST_RUN=$TMP/guest
source "$SRC/test/guest/lib.sh"

VMI=ngdns/vm1
GUEST_MAC=02:00:00:0a:00:02
# What the tracer calls each device (netns:device): tcpdump runs on all of them, and on the node's
# uplink (where an untranslated ClusterIP goes: not a traced hop).
HOP_DEVICES="tap=$L:tap0 bridge=$L:k6t-eth0 launcher-eth0=$L:eth0 host-veth=$H:hl host-out=$H:hd server=$D:eth0"
CAPTURE_DEVICES="$HOP_DEVICES uplink=$H:up0"
# The virt-launcher pod's /etc/resolv.conf as kubelet writes it for dnsPolicy ClusterFirst.
POD_RESOLV=${POD_RESOLV:-"search ngdns.svc.cluster.local svc.cluster.local cluster.local
nameserver 10.96.0.10
options ndots:5"}
# Resolution in the guest may be slow by design (timeouts): a command gets this long.
GUEST_CMD_SECONDS=${GUEST_CMD_SECONDS:-40}

# kubevirt_dhcp_start: dnsmasq as virt-launcher's single-client DHCP server, with the options
# KubeVirt derives from the pod's resolv.conf (kubevirt pkg/network/dns/resolveconf.go and
# pkg/network/dhcp/server/server.go): the IPv4 nameservers (8.8.8.8 if none), the search domains
# lower-cased (cluster.local if none) as option 119, the longest of them as the domain name
# (option 15), router 10.0.2.1, the pod NIC's MTU, an infinite lease. ndots is not passed.
kubevirt_dhcp_start() {
  echo "$POD_RESOLV" > $TMP/pod-resolv.conf
  local ns search domain mtu
  ns=$(awk '/^nameserver/ && $2 ~ /^[0-9.]+$/ {printf "%s%s", sep, $2; sep=","}' $TMP/pod-resolv.conf)
  search=$(awk '/^search/ {for (i = 2; i <= NF; i++) {printf "%s%s", sep, tolower($i); sep=","}}' $TMP/pod-resolv.conf)
  domain=$(echo "${search:-cluster.local}" | tr , '\n' | awk '{ if (length($0) > length(d)) d = $0 } END { print d }')
  mtu=$(ip -n $L -o link show eth0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
  ip netns exec $L dnsmasq --keep-in-foreground --no-daemon --port=0 --interface=k6t-eth0 \
    --bind-interfaces --except-interface=lo --dhcp-range=10.0.2.0,static,255.255.255.0 \
    --dhcp-host=$GUEST_MAC,10.0.2.2,vm1,infinite --dhcp-option=option:router,10.0.2.1 \
    --dhcp-option=option:dns-server,${ns:-8.8.8.8} \
    --dhcp-option=option:domain-search,${search:-cluster.local} \
    --dhcp-option=option:domain-name,$domain --dhcp-option=option:mtu,$mtu \
    --dhcp-leasefile=$TMP/dhcp.leases --pid-file=$TMP/dhcp.pid --log-dhcp \
    --log-facility=$TMP/dhcp.log &
  DHCP_PID=$!
  PIDS+=($DHCP_PID)
  # What the guest must end up with: KubeVirt's view of the same file.
  { [ -z "$search" ] || echo "search ${search//,/ }"
    for s in ${ns//,/ }; do echo "nameserver $s"; done
  } > $TMP/guest-resolv.expected
}

# pod_resolv_set CONTENT: the launcher pod's resolv.conf becomes CONTENT (another dnsPolicy or
# dnsConfig, a NodeLocal DNSCache address): the DHCP server restarts with what KubeVirt derives
# from it, and the guest takes a new lease (as a VM started with that pod would). Checks that the
# guest's resolv.conf is then what KubeVirt's DHCP gives.
pod_resolv_set() {
  POD_RESOLV=$1
  stop_pid $DHCP_PID
  kubevirt_dhcp_start
  guest_run vm 30 'udhcpc -i eth0 -s /etc/ng/udhcpc.script -q -n -t 10 -T 1 -O search -O mtu >/dev/null 2>&1 && cat /etc/resolv.conf' \
    > $TMP/guest-resolv.conf 2>&1 || true
  check "${SCEN:-setup}: the guest's new lease gives the pod's DNS settings" \
    diff -u $TMP/guest-resolv.expected $TMP/guest-resolv.conf
}

# dns_capture_start: tcpdump on every hop device (DNS over UDP and TCP), nanosecond stamps.
dns_capture_start() {
  local spec hop nsdev
  for spec in $CAPTURE_DEVICES; do
    hop=${spec%%=*} nsdev=${spec#*=}
    ip netns exec ${nsdev%%:*} tcpdump -i ${nsdev#*:} -nn -U -s 512 --time-stamp-precision=nano \
      -w $TMP/cap-$hop.pcap port 53 2> $TMP/cap-$hop.log &
    PIDS+=($!)
  done
  for spec in $CAPTURE_DEVICES; do
    wait_until_file_has $TMP/cap-${spec%%=*}.log 'listening on' 10 || { echo "FAIL: tcpdump on $spec"; exit 1; }
  done
}
wait_until_file_has() {  # FILE PATTERN SECONDS
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.1; done
}

# dns_guest_up [DNSMASQ-OPTION...]: the whole path, the agent tracing it, the guest booted with
# its DHCP lease, captures running. Extra options give the CoreDNS stand-in more records.
# ACCEL=kvm|tcg overrides the accelerator nodegate's kvm-device picks (guest_boot_auto).
dns_guest_up() {
  topo_require ip nft dnsmasq tcpdump curl python3 qemu-system-x86_64
  guest_assets || { echo "FAIL: guest assets"; exit 1; }
  DNS_RECORDS=("$@")
  topo_healthy "$@"
  DNS_SERVER_PID=$DNSMASQ
  trap 'guest_cleanup; topo_cleanup' EXIT
  trap 'exit 130' INT TERM HUP
  kubevirt_dhcp_start
  dns_capture_start
  start_tracing_agent
  guest_boot_auto vm --bound ${GUEST_BOUND:-900} --netns $L --tap tap0 --mac $GUEST_MAC --net dhcp
  echo "guest: $GUEST_KERNEL_PKG under -accel ${GUEST_ACCEL[vm]}, virtio-net on tap0 in $L"
  if ! guest_ready vm 180; then
    echo "FAIL: the guest did not come up (accel ${GUEST_ACCEL[vm]}) after $(guest_elapsed vm) s"
    tail -30 $GUEST_RUN/vm/console.log; cat $GUEST_RUN/vm/qemu.log; tail -20 $TMP/dhcp.log
    exit 1
  fi
  echo "guest: ready with its DHCP lease after $(guest_elapsed vm) s"
  guest_run vm 10 'cat /etc/resolv.conf' > $TMP/guest-resolv.conf || true
  check "guest: resolv.conf as KubeVirt's DHCP gives it (pod's servers and search list, no ndots)" \
    diff -u $TMP/guest-resolv.expected $TMP/guest-resolv.conf
  check "guest: eth0 10.0.2.2/24 via 10.0.2.1 from the DHCP server" \
    grep -q 'ng-guest: eth0 10.0.2.2/24 via 10.0.2.1' $GUEST_RUN/vm/console.log
  check "agent traces the launcher's 4 hops (tap0 a real tap) and the server side" \
    wait_for 30 "any(v['vmi']=='$VMI' and len(v['hops'])==4 for v in j['vmis']) and any(v['vmi']=='(shared)' and len(v['hops'])==2 for v in j['vmis'])" \
    /api/v1/dns/traces
  if [ $fails -gt 0 ]; then tail -30 $TMP/agent.log; exit 1; fi
}

# The CoreDNS stand-in of the scenarios: dnsmasq with dns_guest_up's records, or another server
# in the server netns on 10.244.0.3:53 (dns_server_other CMD...: a command run there).
dns_server_stop() {
  [ -z "${DNS_SERVER_PID:-}" ] || stop_pid $DNS_SERVER_PID
  DNS_SERVER_PID=
}
dns_server_dnsmasq() {
  dns_server_stop
  start_dnsmasq "${DNS_RECORDS[@]}"
  DNS_SERVER_PID=$DNSMASQ
}
dns_server_other() {
  dns_server_stop
  ip netns exec $D "$@" &
  DNS_SERVER_PID=$!
  PIDS+=($DNS_SERVER_PID)
  local _
  for _ in $(seq 50); do ip netns exec $D ss -lun | grep -q '10.244.0.3:53' && return 0; sleep 0.1; done
  echo "FAIL: $* does not listen on 10.244.0.3:53"; return 1
}

# The newest trace's seq (traces are listed as they finish: an unanswered query finishes after
# later answered ones, so the last listed is not always the newest).
seq_now() {
  api "/api/v1/dns/traces" | python3 -c 'import json,sys; print(max((t["seq"] for t in json.load(sys.stdin)["traces"]), default=0))'
}

scenario() {  # NAME DESCRIPTION
  SCEN=$1 SCEN_N=0
  SCEN_AFTER=$(seq_now)
  SCEN_T0=$(date +%s.%N)
  echo "--- scenario $1: $2"
}

host_do() { "$@" || { echo "FAIL - $SCEN: host command failed: $*"; fails=$((fails + 1)); }; }

in_guest() {  # 'COMMAND' [SECONDS]
  SCEN_N=$((SCEN_N + 1))
  local out=$TMP/$SCEN.$SCEN_N.out rc=0
  guest_run vm "${2:-$GUEST_CMD_SECONDS}" "$1" > $out 2>&1 || rc=$?
  echo "guest\$ $1   (exit $rc)"
  sed 's/^/    /' $out
  if [ $rc = 124 ] || [ $rc = 125 ]; then
    echo "FAIL - $SCEN: the guest did not answer the command"; fails=$((fails + 1))
  fi
  GUEST_RC=$rc
}

scenario_traces() { api "/api/v1/dns/traces?after=$SCEN_AFTER&vmi=$VMI" > $TMP/$SCEN.json; }

expect_trace() {  # DESCRIPTION QNAME QTYPE TRANSPORT RESULT [CONDITION]
  local desc=$1; shift
  local deadline=$((SECONDS + 15)) ok=1
  while [ $SECONDS -lt $deadline ]; do
    if scenario_traces 2>/dev/null && python3 $GUEST_SRC/traces.py match $TMP/$SCEN.json "$@"; then
      ok=0; break
    fi
    sleep 0.3
  done
  check "$SCEN: $desc" test $ok = 0
}

end_scenario() {
  # Unanswered queries finish after the agent's timeout; then the scenario's traces are complete.
  sleep $(python3 -c "print($QUERY_TIMEOUT + 1)")
  scenario_traces
  python3 $GUEST_SRC/traces.py show $TMP/$SCEN.json | sed 's/^/    /'
  check "$SCEN: every trace in path order, round trips consistent along the path" \
    python3 $GUEST_SRC/traces.py invariants $TMP/$SCEN.json
  local caps=() spec
  for spec in $HOP_DEVICES; do caps+=("${spec%%=*}=$TMP/cap-${spec%%=*}.pcap"); done
  check "$SCEN: tracer's packets per hop and latencies agree with tcpdump on every hop" \
    python3 $GUEST_SRC/capture_check.py --tolerance-ms 1 --window $SCEN_T0 $(date +%s.%N) \
    $TMP/$SCEN.json "${caps[@]}"
}

# nft_in NETNS RULESET: load an nftables ruleset (text, nft -f syntax) in a netns of the path.
nft_in() { printf '%s\n' "$2" | ip netns exec "$1" nft -f -; }

# captured DEVICE TEXT...: some packet tcpdump captured there reads (tcpdump -nn) with every TEXT.
captured() {
  local dev=$1; shift
  tcpdump -nn -r $TMP/cap-$dev.pcap 2>/dev/null | python3 -c '
import sys
sys.exit(0 if any(all(w in l for w in sys.argv[1:]) for l in sys.stdin) else 1)' "$@"
}

# DESCRIPTION STATUS REASON [CONDITION]: the dns-path check's verdict within 10 s (CONDITION:
# Python over its JSON j, e.g. about j["evidence"]). The check judges a guest by the worst query
# since its newest clean answer: a scenario expecting a verdict after an earlier failure asks
# something that is answered first.
expect_check() {
  check "$SCEN: $1" wait_for 10 "j['status']=='$2' and j['reason']=='$3' and (${4:-True})" \
    /api/v1/checks/dns-path
}

dns_guest_report() {
  check "agent logged no error" bash -c "! grep -q 'level=error' $TMP/agent.log"
  if [ $fails -gt 0 ]; then
    echo "--- agent log"; tail -40 $TMP/agent.log
    echo "--- guest console"; tail -15 $GUEST_RUN/vm/console.log
    echo "$fails check(s) failed"; exit 1
  fi
  echo "all checks passed"
}
