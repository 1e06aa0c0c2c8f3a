#!/usr/bin/env bash
# End-to-end: the agent finds the DNS server's side of the guest DNS path by itself, from the
# kube-dns Service's EndpointSlices (read from the fake API server, written there by the real
# kubectl) and the server's process, with no --dns-netns for the server's netns.
#
# The replica is test/agent/dns/topology.sh (dnsmasq in netns D at 10.244.0.3 plays CoreDNS; the
# agent is told its process name with dns-path.server_processes). Steps:
#   1. the EndpointSlice lists 10.244.0.3 on this node: the agent traces host-out and server,
#      and a guest query is answered with all six hops;
#   2. with the kube-dns Service and launcher pods in the API, a VMI whose first nameserver
#      (dnsPolicy None) a guest's query found failing is named as predicted to fail (#19 item 4);
#   3. a second agent whose API lists only another address (10.244.0.99) does not take the
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

# For #19 item 4 (checked below), in the API before the agent starts (it reads the Service every
# kube.cluster_dns_refresh_seconds): the kube-dns Service (a ClusterFirst VMI's first nameserver)
# and two launcher pods on the node as
# KubeVirt makes them (dnsPolicy/dnsConfig copied from the VMI): vm1 (the replica's VM) with the
# default ClusterFirst, vm2 with dnsPolicy None and a first nameserver nothing serves.
kubectl --kubeconfig "$KUBECONFIG_good" apply --validate=false -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports: [{name: dns, port: 53, protocol: UDP}]
YAML
launcher_pod() {  # vmi dnsPolicy [nameserver]
  kubectl --kubeconfig "$KUBECONFIG_good" apply --validate=false -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: virt-launcher-$1-abcde
  namespace: ngdns
  labels: {kubevirt.io: virt-launcher, kubevirt.io/domain: $1, vm.kubevirt.io/name: $1}
  ownerReferences:
  - {apiVersion: kubevirt.io/v1, kind: VirtualMachineInstance, name: $1, uid: uid-$1, controller: true}
spec:
  nodeName: $NODE
  dnsPolicy: $2
$( [ -n "${3:-}" ] && printf '  dnsConfig: {nameservers: [%s]}\n' "$3" )
  containers: [{name: compute, image: virt-launcher}]
YAML
}
launcher_pod vm1 ClusterFirst
launcher_pod vm2 None 10.96.0.99
# The startup jitter (up to 5 s here) delays the read of the cluster's DNS facts (the Service's
# address) past dns-path's first runs; their arrival must re-run it, well before the 30 s resync.
cat > $TMP/config.json <<JSON
{"checks": {"dns-path": {"query_timeout_seconds": 1.5, "rescan_seconds": 0.5,
                         "server_processes": ["dnsmasq"]},
            "kube": {"startup_jitter_seconds": 5}}}
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

# --- #19 item 4: VMIs whose first nameserver the tracer has seen failing ----------------------------
check "kubectl reads back vm2's launcher pod with its DNS configuration" bash -c \
  "kubectl --kubeconfig $KUBECONFIG_good -n ngdns get pod virt-launcher-vm2-abcde -o jsonpath='{.spec.dnsConfig.nameservers[0]}' | grep -qx 10.96.0.99"
check "dns-path names no VMI as predicted to fail while no server failed" \
  wait_for 20 'any(e["source"]=="vmi first nameservers" and e["observed"]=="2 VMIs on this node, 0 predicted to fail" for e in j["evidence"])' \
  /api/v1/checks/dns-path
python3 -c 'import json,sys; [print("evidence:", e["source"], "|", e["observed"]) for e in json.load(open(sys.argv[1]))["evidence"] if e["source"].startswith(("predicted", "vmi first", "guest"))]' $TMP/last.json || true
# vm1's guest asks 10.96.0.99 once: nothing translates or serves it, so it is lost.
ip netns exec $G dig +time=1 +tries=1 @10.96.0.99 nowhere.example.test A > /dev/null || true
check "vm2, whose first nameserver that is, is predicted to fail, with the server and how" \
  wait_for 15 'any(e["source"]=="predicted to fail ngdns/vm2" and e["observed"].startswith("first nameserver 10.96.0.99 (dnsPolicy None") and "seen failing" in e["observed"] and "ngdns/vm1: nowhere.example.test A" in e["observed"] for e in j["evidence"]) and not any(e["source"]=="predicted to fail ngdns/vm1" for e in j["evidence"])' \
  /api/v1/checks/dns-path
python3 -c 'import json,sys; [print("evidence:", e["source"], "|", e["observed"]) for e in json.load(open(sys.argv[1]))["evidence"] if e["source"].startswith(("predicted", "vmi first", "guest"))]' $TMP/last.json || true
check "metrics: first nameserver failing 1 for vm2, 0 for vm1 (ClusterFirst: 10.96.0.10 answers)" bash -c \
  "curl -sf http://127.0.0.1:$PORT_METRICS/metrics > $TMP/metrics.txt && grep -q 'nodegate_dns_first_nameserver_failing{namespace=\"ngdns\",vmi=\"vm2\"} 1' $TMP/metrics.txt && grep -q 'nodegate_dns_first_nameserver_failing{namespace=\"ngdns\",vmi=\"vm1\"} 0' $TMP/metrics.txt"

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
