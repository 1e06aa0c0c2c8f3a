#!/usr/bin/env bash
# End-to-end: the agent finds the DNS server's side of the guest DNS path by itself, from the
# kube-dns Service's EndpointSlices (read from the fake API server, written there by the real
# kubectl) and the server's process, with no --dns-netns for the server's netns.
#
# The replica is test/agent/dns/topology.sh (dnsmasq in netns D at 10.244.0.3 plays CoreDNS; the
# agent is told its process name with dns-path.server_processes). Steps:
#   1. the EndpointSlice lists 10.244.0.3 on this node: the agent traces host-out and server,
#      and a guest query is answered with all six hops;
#   2. a second agent whose API lists only another address (10.244.0.99) does not take the
#      dnsmasq netns (a process of that name serving something else) and says why in its log.
set -euo pipefail

NODEGATE=${NODEGATE:?path of the nodegate binary}
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
source "$SRC/test/agent/dns/topology.sh"
topo_require ip nft dig dnsmasq curl python3 kubectl
topo_healthy

# --- the fake API server (topology.sh's start_api), seeded with kubectl ---------------------
endpoint_slice() {  # kubeconfig address: the kube-dns Service's slice with one endpoint on NODE
  kubectl --kubeconfig "$1" apply --validate=false -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-abcde
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
addressType: IPv4
endpoints:
- addresses: ["$2"]
  conditions: {ready: true}
  nodeName: $NODE
ports:
- {name: dns, port: 53, protocol: UDP}
YAML
}

start_api good
endpoint_slice "$KUBECONFIG_good" 10.244.0.3
check "kubectl reads back the slice it wrote" bash -c \
  "kubectl --kubeconfig $KUBECONFIG_good -n kube-system get endpointslices -o jsonpath='{.items[0].endpoints[0].addresses[0]}' | grep -qx 10.244.0.3"

cat > $TMP/config.json <<JSON
{"checks": {"dns-path": {"query_timeout_seconds": 1.5, "rescan_seconds": 0.5,
                         "server_processes": ["dnsmasq"]}}}
JSON
# Only the host side of the launcher is given: the server's netns must come from the API.
start_agent() {  # kubeconfig log metrics-port debug-port
  "$NODEGATE" agent --kube kubeconfig --kubeconfig "$1" --node-name $NODE \
    --listen 127.0.0.1:$3 --debug-listen 127.0.0.1:$4 \
    --dns-trace on --dns-netns /run/netns/$H --config $TMP/config.json \
    --resync 30 --log-level info > "$2" 2>&1 &
  PIDS+=($!)
}
start_agent "$KUBECONFIG_good" $TMP/agent.log $PORT_METRICS $PORT_DEBUG


check "endpoint on this node: the agent traces host-out and server without --dns-netns for them" \
  wait_for 20 'any(v["vmi"]=="(shared)" and sorted(h["hop"] for h in v["hops"])==["host-out","server"] for v in j["vmis"])' \
  /api/v1/dns/traces
check "the server hop is eth0 in dnsmasq's netns" bash -c \
  "python3 -c 'import json,sys; j=json.load(open(\"$TMP/last.json\")); s=[h for v in j[\"vmis\"] if v[\"vmi\"]==\"(shared)\" for h in v[\"hops\"] if h[\"hop\"]==\"server\"][0]; sys.exit(0 if s[\"device\"]==\"eth0\" and s[\"netns_ino\"]==int(sys.argv[1]) else 1)' \
   $(stat -L -c %i /proc/$DNSMASQ/ns/net)"

AFTER=0
ip netns exec $G dig +time=2 +tries=1 @10.96.0.10 www.example.test A +short > $TMP/d1 || true
check "guest query answered" grep -qx 10.1.2.3 $TMP/d1
check "its trace has all six hops" wait_for 10 \
  'any(t["qname"]=="www.example.test" and t["result"]=="answered" and [h["hop"] for h in t["hops"]]==["tap","bridge","launcher-eth0","host-veth","host-out","server"] for t in j["traces"])' \
  "/api/v1/dns/traces?vmi=ngdns/vm1"

# --- an API whose endpoint is elsewhere ----------------------------------------------------------
start_api other
endpoint_slice "$KUBECONFIG_other" 10.244.0.99
start_agent "$KUBECONFIG_other" $TMP/agent2.log $((PORT_METRICS + 2)) $((PORT_DEBUG + 2))
API2=http://127.0.0.1:$((PORT_DEBUG + 2))
deadline=$((SECONDS + 20))
until grep -q 'kube-dns endpoint 10.244.0.99 is on this node but no DNS server' $TMP/agent2.log ||
      [ $SECONDS -ge $deadline ]; do sleep 0.3; done
check "no endpoint in dnsmasq's netns: the second agent says which endpoint has no netns" \
  grep -q 'kube-dns endpoint 10.244.0.99 is on this node but no DNS server' $TMP/agent2.log
check "and does not take dnsmasq's netns as the server" bash -c \
  "curl -sf $API2/api/v1/dns/traces | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if not any(v[\"vmi\"]==\"(shared)\" for v in j[\"vmis\"]) else 1)'"

if [ $fails -gt 0 ]; then
  echo "--- agent.log"; tail -40 $TMP/agent.log; echo "--- agent2.log"; tail -40 $TMP/agent2.log
  exit 1
fi
echo PASS
