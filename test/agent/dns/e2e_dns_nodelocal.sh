#!/usr/bin/env bash
# End-to-end: a node-local DNS cache (issue 19 item 3) on the namespace replica of the KubeVirt
# masquerade path (topology.sh). As NodeLocal DNSCache does on a node: a link `nodelocaldns`
# holding 169.254.20.10 in the node's netns, a cache bound to it on the node (a real dnsmasq here,
# forwarding to the CoreDNS stand-in), the guest's resolver pointed at 169.254.20.10. The agent
# learns the address from NodeLocal DNSCache's ConfigMap (kube-system/node-local-dns, its real
# Corefile: test/fixtures/dns), served by the fake API server and written there by kubectl.
# NodeLocal DNSCache's link is a dummy; this machine's kernel has no dummy driver, so an empty
# bridge holds the address here (local delivery is the same; the discovery of the address from a
# dummy link is tested on link tables in dns_discovery_test). Asserts:
#   (a) healthy: answered, the guest's hops end at the host veth (no host-out/server hops: those
#       belong to the cache's own query upstream, which the trace names);
#   (b) the cache killed: node_local_cache_down, the dns-path check FAIL NodeLocalCacheDown, the
#       metric's result label and the CLI's wording;
#   (c) the cache alive, its upstream silent: not node_local_cache_down (the upstream is named);
#   (d) a new node where the cache has not set its address up yet: node_local_cache_down.
set -euo pipefail

NODEGATE=${NODEGATE:?path of the nodegate binary}
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
PORT_METRICS=${PORT_METRICS:-19714} PORT_DEBUG=${PORT_DEBUG:-19715} API_PORTS=19716-19719
source "$SRC/test/agent/dns/topology.sh"
topo_require ip nft dig dnsmasq curl python3 kubectl
CACHE_IP=169.254.20.10
topo_healthy

start_api nl
kubectl --kubeconfig "$KUBECONFIG_nl" apply --validate=false \
  -f "$SRC/test/fixtures/dns/node-local-dns-configmap.json" > /dev/null
check "kubectl reads back the cache's Corefile" bash -c \
  "kubectl --kubeconfig $KUBECONFIG_nl -n kube-system get cm node-local-dns -o jsonpath='{.data.Corefile}' | grep -q 'bind $CACHE_IP'"
ip -n $H link add nodelocaldns type bridge
ip -n $H addr add $CACHE_IP/32 dev nodelocaldns
ip -n $H link set nodelocaldns up
# start_cache: the cache on the node, every query forwarded (no caching: each one goes upstream).
start_cache() {
  ip netns exec $H dnsmasq --keep-in-foreground --no-daemon --no-resolv --no-hosts \
    --bind-interfaces --listen-address=$CACHE_IP --except-interface=lo --cache-size=0 \
    --server=10.244.0.3 --pid-file=$TMP/cache.pid --log-facility=$TMP/cache.log &
  CACHE=$!
  PIDS+=($CACHE)
  for _ in $(seq 50); do ip netns exec $H ss -lun | grep -q "$CACHE_IP:53" && return 0; sleep 0.1; done
  echo "FAIL: the cache did not start"; cat $TMP/cache.log; exit 1
}
start_cache
AGENT_KUBE="--kube kubeconfig --kubeconfig $KUBECONFIG_nl --node-name $NODE" start_tracing_agent
check "agent traces the replica" \
  wait_for 20 'any(v["vmi"]=="ngdns/vm1" and len(v["hops"])==4 for v in j["vmis"])' /api/v1/dns/traces
log_has() {  # log_has SECONDS TEXT: the agent logged TEXT
  local deadline=$((SECONDS + $1))
  until grep -qF -- "$2" $TMP/agent.log; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.2; done
}
check "the agent takes the cache's address from its ConfigMap" \
  log_has 20 "msg=\"dns node-local cache addresses\" addresses=$CACHE_IP"
if [ $fails -gt 0 ]; then cat $TMP/agent.log; exit 1; fi

seq_now() { api "/api/v1/dns/traces?limit=1" | python3 -c 'import json,sys; t=json.load(sys.stdin)["traces"]; print(t[-1]["seq"] if t else 0)'; }
expect() {  # expect WHAT TIMEOUT PYTHON-CONDITION-ON-t: a trace of vm1 after $AFTER satisfies it
  local before=$fails
  check "$1" wait_for "$2" "any(($3) for t in j['traces'])" "/api/v1/dns/traces?vmi=ngdns/vm1&after=$AFTER"
  [ $fails = $before ] || { "$NODEGATE" dns trace --api $API --vmi ngdns/vm1 | tail -6
    python3 -c 'import json,sys
for t in json.load(open(sys.argv[1]))["traces"]:
    print({k: t[k] for k in ("qname", "result", "node_local", "cache_upstream", "last_hop", "detail")},
          [h["hop"] for h in t["hops"]])' $TMP/last.json; }
}
dig_cache() { ip netns exec $G dig +time=2 +tries=1 @$CACHE_IP "$1" A > $TMP/dig.txt 2>&1 || true; }

# --- (a) healthy: answered at the host -----------------------------------------------------------
AFTER=$(seq_now)
dig_cache www.example.test
check "dig through the cache gets the answer" grep -q '10.1.2.3' $TMP/dig.txt
expect "answered by the node-local cache, the hops ending at the host veth, its upstream named" 10 \
  't["qname"]=="www.example.test" and t["result"]=="answered" and t["server"]=="'$CACHE_IP'" and t["node_local"] and t["cache_upstream"]=="10.244.0.3" and [h["hop"] for h in t["hops"]]==["tap","bridge","launcher-eth0","host-veth"] and all(h["response"] is not None for h in t["hops"]) and t["latency_seconds"] is not None and t["hops"][3]["query"]["dst"]=="'$CACHE_IP:53'"'
check "dns-path check PASS, the cache's address in its evidence" wait_for 10 \
  'j["status"]=="PASS" and j["reason"]=="Ok" and "cache on '$CACHE_IP'" in json.dumps(j["evidence"])' /api/v1/checks/dns-path

# --- (b) the cache down: nothing listens on 169.254.20.10:53 -------------------------------------
stop_pid $CACHE
AFTER=$(seq_now)
dig_cache down.example.test
check "dig gets no answer" bash -c "! grep -q 'status: NOERROR' $TMP/dig.txt"
expect "node_local_cache_down, with the kernel's evidence and the DaemonSet hint" 10 \
  't["qname"]=="down.example.test" and t["result"]=="node_local_cache_down" and "node-local DNS cache '$CACHE_IP' is not serving" in t["detail"] and (t["drop_reason"]=="NO_SOCKET" or (t["icmp"] or {}).get("type")=="port-unreachable") and "node-local-dns" in t["hint"]'
before=$fails
check "dns-path check FAIL NodeLocalCacheDown" \
  wait_for 10 'j["status"]=="FAIL" and j["reason"]=="NodeLocalCacheDown" and "ngdns/vm1" in j["message"]' /api/v1/checks/dns-path
[ $fails = $before ] ||
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["status"], j["reason"], j["message"])' $TMP/last.json
check "metric result=node_local_cache_down" metric_has node_local_cache_down
check "CLI: NODE-LOCAL CACHE DOWN" cli_has "NODE-LOCAL CACHE DOWN: node-local DNS cache $CACHE_IP is not serving"

# --- (c) the cache alive, its upstream silent: the upstream's fault, not the cache's -------------
start_cache
ip netns exec $D nft -f - <<'NFT'
table inet ngsilent {
  chain input { type filter hook input priority 0; meta l4proto { udp, tcp } th dport 53 drop; }
}
NFT
AFTER=$(seq_now)
dig_cache silent.example.test
expect "a live cache whose upstream is silent: unanswered, the upstream named, not cache down" 10 \
  't["qname"]=="silent.example.test" and t["result"]=="unanswered" and t["node_local"] and t["cache_upstream"]=="10.244.0.3" and "upstream of the node-local cache" in t["hint"]'
check "no query of this case was judged node_local_cache_down" bash -c \
  "! curl -sf '$API/api/v1/dns/traces?vmi=ngdns/vm1&after=$AFTER' | grep -q node_local_cache_down"
ip netns exec $D nft delete table inet ngsilent

# --- (d) a new node: the cache's address named by its ConfigMap, on no link of the node yet -------
stop_pid $CACHE
ip -n $H link del nodelocaldns
check "the agent sees the cache's address on no link of the node" \
  log_has 20 "addresses=$CACHE_IP not_on_this_node=$CACHE_IP"
AFTER=$(seq_now)
dig_cache new.example.test
expect "the cache not set up on this node: node_local_cache_down" 10 \
  't["qname"]=="new.example.test" and t["result"]=="node_local_cache_down" and t["node_local"]'

topo_finish
