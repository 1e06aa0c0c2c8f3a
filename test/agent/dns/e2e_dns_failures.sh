#!/usr/bin/env bash
# End-to-end: the failure taxonomy (issue 19 item 2) on the namespace replica of the KubeVirt
# masquerade path (topology.sh), with real resolvers in the guest netns (glibc through getent with
# its own resolv.conf, dig), real dnsmasq answers (NXDOMAIN for a cluster zone it cannot see,
# NODATA, REFUSED for names it has no upstream for, truncation of big answers) and nftables
# producing the network failures (ICMP port and host unreachable, TCP reset, a silent first
# nameserver, DNS over TCP blocked). Each case asserts the tracer's verdict in the API (result and
# its evidence fields), the metric's result label and the CLI's wording.
set -euo pipefail

NODEGATE=${NODEGATE:?path of the nodegate binary}
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
PORT_METRICS=${PORT_METRICS:-19712} PORT_DEBUG=${PORT_DEBUG:-19713}
source "$SRC/test/agent/dns/topology.sh"
topo_require ip nft dig dnsmasq getent unshare curl python3
# cluster.local is a zone this dnsmasq does not serve (a forward target that cannot see the
# cluster's zones answers NXDOMAIN); v4only has an A record and no AAAA (NODATA); names outside
# .test have no upstream here: dnsmasq REFUSES them.
topo_healthy --local=/cluster.local/ --host-record=v4only.example.test,10.1.2.4
start_tracing_agent
check "agent traces the replica" \
  wait_for 20 'any(v["vmi"]=="ngdns/vm1" and len(v["hops"])==4 for v in j["vmis"])' /api/v1/dns/traces
if [ $fails -gt 0 ]; then cat $TMP/agent.log; exit 1; fi

# The guest's glibc resolver with a resolv.conf of the test's choosing, in a mount namespace of
# its own (nothing on the host changes): guest_getent RESOLV_CONF_TEXT getent-ARGS...
guest_getent() {
  local conf=$1; shift
  printf '%s\n' "$conf" > $TMP/resolv.conf
  ip netns exec $G unshare -m sh -c 'mount --bind "$0" /etc/resolv.conf && exec getent "$@"' \
    $TMP/resolv.conf "$@"
}
ONE="nameserver 10.96.0.10
options timeout:1 attempts:1"
seq_now() { api "/api/v1/dns/traces?limit=1" | python3 -c 'import json,sys; t=json.load(sys.stdin)["traces"]; print(t[-1]["seq"] if t else 0)'; }
# expect WHAT TIMEOUT PYTHON-CONDITION-ON-t: some trace of vm1 after $AFTER satisfies it.
expect() {
  local before=$fails
  check "$1" wait_for "$2" "any(($3) for t in j['traces'])" "/api/v1/dns/traces?vmi=ngdns/vm1&after=$AFTER"
  [ $fails = $before ] || "$NODEGATE" dns trace --api $API --vmi ngdns/vm1 | tail -6
}
nft_guard() {  # nft_guard NETNS RULES: a table of our own, replaced each time
  ip netns exec $1 nft delete table inet ngfail 2>/dev/null || true
  [ -z "$2" ] || ip netns exec $1 nft -f - <<NFT
table inet ngfail {
  $2
}
NFT
}

# --- not_found: NXDOMAIN for a cluster name, NODATA ------------------------------------------------
AFTER=$(seq_now)
if guest_getent "$ONE" ahostsv4 db.prod.svc.cluster.local > /dev/null; then r=resolved; else r=failed; fi
check "getent: a cluster name does not resolve through a server that cannot see the zone" test $r = failed
guest_getent "$ONE" ahosts v4only.example.test > $TMP/v4only.txt || true
expect "NXDOMAIN: not_found with rcode NXDOMAIN and the cluster-zone hint" 10 \
  't["qname"]=="db.prod.svc.cluster.local" and t["result"]=="not_found" and t["rcode"]=="NXDOMAIN" and "cluster" in t["hint"]'
expect "AAAA of an IPv4-only name: not_found, NODATA" 10 \
  't["qname"]=="v4only.example.test" and t["qtype"]=="AAAA" and t["result"]=="not_found" and t["nodata"] and t["rcode"]=="NOERROR"'
check "getent still finds the IPv4 address (A answered)" grep -q 10.1.2.4 $TMP/v4only.txt
check "metric result=not_found" metric_has not_found
check "CLI: NOT FOUND with the hint" cli_has "NOT FOUND: NXDOMAIN"

# --- refused ---------------------------------------------------------------------------------------
AFTER=$(seq_now)
ip netns exec $G dig +time=2 +tries=1 @10.96.0.10 www.example.org A > $TMP/refused.txt || true
check "dig sees REFUSED" grep -q 'status: REFUSED' $TMP/refused.txt
expect "REFUSED: its own verdict" 10 't["qname"]=="www.example.org" and t["result"]=="refused" and t["rcode"]=="REFUSED"'
check "metric result=refused" metric_has refused

# --- unreachable: port unreachable from the server, host unreachable from the node ---------------
nft_guard $D 'chain input { type filter hook input priority 0; udp dport 53 ip saddr 10.244.1.7 reject with icmp type port-unreachable; }'
AFTER=$(seq_now)
guest_getent "$ONE" ahostsv4 portreject.example.test > /dev/null || true
expect "ICMP port unreachable: unreachable, from the server, first seen at its hop" 10 \
  't["qname"]=="portreject.example.test" and t["result"]=="unreachable" and t["icmp"]["type"]=="port-unreachable" and t["icmp"]["from"]=="10.244.0.3" and t["icmp"]["hop"]=="server"'
nft_guard $D ""
nft_guard $H 'chain forward_filter { type filter hook forward priority 0; ip daddr 10.244.0.3 udp dport 53 reject with icmp type host-unreachable; }'
AFTER=$(seq_now)
guest_getent "$ONE" ahostsv4 hostreject.example.test > /dev/null || true
expect "ICMP host unreachable from the node: unreachable, network hint" 10 \
  't["qname"]=="hostreject.example.test" and t["result"]=="unreachable" and t["icmp"]["type"]=="host-unreachable" and t["last_hop"] in ("host-veth","tap") and t["hint"].startswith("network")'
check "metric result=unreachable" metric_has unreachable
check "CLI: UNREACHABLE with the ICMP" cli_has "UNREACHABLE: ICMP host-unreachable"
nft_guard $H ""

# --- connection_refused: glibc over TCP (use-vc) to a server that resets port 53/tcp --------------
nft_guard $D 'chain input { type filter hook input priority 0; tcp dport 53 reject with tcp reset; }'
AFTER=$(seq_now)
guest_getent "$ONE
options use-vc" ahostsv4 tcpreset.example.test > /dev/null || true
expect "TCP RST on port 53: connection_refused, the reset seen at the server" 10 \
  't["transport"]=="tcp" and t["result"]=="connection_refused" and t["connect_only"] and t["reset_hop"]=="server" and t["server"]=="10.96.0.10"'
check "metric result=connection_refused" metric_has connection_refused
check "CLI: CONNECTION REFUSED" cli_has "CONNECTION REFUSED: TCP connection to 10.96.0.10 port 53 reset"

# --- truncated_tcp_failed: a truncated answer, DNS over TCP blocked / not retried ------------------
nft_guard $D 'chain input { type filter hook input priority 0; tcp dport 53 drop; }'
AFTER=$(seq_now)
ip netns exec $G dig +noedns +time=1 +tries=1 @10.96.0.10 big.example.test TXT > $TMP/tc.txt 2>&1 || true
check "dig: truncated, retried in TCP mode" grep -q 'Truncated, retrying in TCP mode' $TMP/tc.txt
expect "TC answer whose TCP retry is dropped: truncated_tcp_failed, the SYN's fate as the reason" 15 \
  't["qname"]=="big.example.test" and t["transport"]=="udp" and t["truncated"] and t["result"]=="truncated_tcp_failed" and t["tcp_failure"] in ("TCP retry unanswered", "TCP retry service_translation_missing") and t["tcp_retried_by"] > 0'
expect "its TCP attempt: unanswered, named after the truncated query, lost at the server" 15 \
  't["qname"]=="big.example.test" and t["transport"]=="tcp" and t["connect_only"] and t["result"]=="unanswered" and t["last_hop"]=="server"'
nft_guard $D ""
AFTER=$(seq_now)
ip netns exec $G dig +noedns +ignore +time=1 +tries=1 @10.96.0.10 big.example.test TXT > $TMP/tc2.txt 2>&1 || true
check "dig +ignore keeps the truncated answer" grep -qE 'flags:[a-z ]* tc[ ;]' $TMP/tc2.txt
expect "TC answer never retried over TCP: truncated_tcp_failed, no TCP retry" 15 \
  't["qname"]=="big.example.test" and t["result"]=="truncated_tcp_failed" and t["tcp_failure"]=="no TCP retry"'
check "metric result=truncated_tcp_failed" metric_has truncated_tcp_failed

# --- slow_failover: the first nameserver is silent, the second answers ------------------------------
nft_guard $H 'chain pre_filter { type filter hook prerouting priority -200; ip daddr 10.96.0.99 drop; }'
AFTER=$(seq_now)
T0=$(date +%s.%N)
guest_getent "nameserver 10.96.0.99
nameserver 10.96.0.10
options timeout:1 attempts:1" ahostsv4 www.example.test > $TMP/failover.txt || true
T1=$(date +%s.%N)
check "getent resolves through the second nameserver" grep -q 10.1.2.3 $TMP/failover.txt
echo "getent took $(python3 -c "print(round($T1 - $T0, 2))") s"
expect "slow_failover: answered by the second server, the silent one and the time lost named" 10 \
  't["qname"]=="www.example.test" and t["result"]=="slow_failover" and t["server"]=="10.96.0.10" and t["failover"]["unanswered_server"]=="10.96.0.99" and 0.9 <= t["failover"]["lost_seconds"] <= 1.6'
# (10.96.0.99 is a ClusterIP nothing translates, dropped on the node before any DNAT: the evidence
# says "not translated".)
expect "the attempt at the silent server: lost on the node" 10 \
  't["qname"]=="www.example.test" and t["server"]=="10.96.0.99" and t["result"] in ("unanswered", "service_translation_missing") and t["last_hop"]=="host-veth"'
check "metric result=slow_failover" metric_has slow_failover
check "page: slow failover per VM" bash -c "curl -sf $API/ | grep -q 'Slow failover: nameserver 10.96.0.99 did not answer'"
check "CLI: SLOW FAILOVER" cli_has "SLOW FAILOVER: answered by 10.96.0.10 after 10.96.0.99 did not answer"
nft_guard $H ""

topo_finish
