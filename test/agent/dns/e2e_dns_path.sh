#!/usr/bin/env bash
# End-to-end: a namespace replica of the KubeVirt masquerade DNS path (docs/dns-path.md), the
# real agent tracing it with BPF, and real peers (dig, dnsmasq, nftables, tcpdump) as ground truth.
# The replica is test/agent/dns/topology.sh.
#
# Scenarios: healthy (DNAT in prerouting, like kube-proxy), the incident (DNAT only in the nat
# output chain: translation for local sockets only), the incident with no route (a kernel drop
# reason), a stopped server (ICMP port unreachable), a server whose host drops DNS, a server that
# answers SERVFAIL; after each, the guest's next answer clears the check.
set -euo pipefail

NODEGATE=${NODEGATE:?path of the nodegate binary}
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
source "$SRC/test/agent/dns/topology.sh"
topo_require ip nft dig dnsmasq tcpdump curl python3
topo_healthy

# Sanity of the replica before the agent runs: the guest resolves through both NATs.
check "replica: guest resolves via the ClusterIP" \
  bash -c "ip netns exec $G dig +short +time=2 +tries=1 @10.96.0.10 www.example.test A | grep -qx 10.1.2.3"

# --- the agent ---------------------------------------------------------------------------------
start_tracing_agent


check "agent traces the launcher found by its virt-launcher process (4 hops) and the server side" \
  wait_for 20 'any(v["vmi"]=="ngdns/vm1" and len(v["hops"])==4 for v in j["vmis"]) and any(v["vmi"]=="(shared)" and len(v["hops"])==2 for v in j["vmis"])' \
  /api/v1/dns/traces
if [ $fails -gt 0 ]; then cat $TMP/agent.log; exit 1; fi

# The BPF programs of *this* agent, from its fds. Any other nodegate agent running on the host at
# the same time (other tests, benchmarks: the tracer is on by default as root) discovers this
# replica's virt-launcher process too and attaches its own filters to the same devices, so checks
# for "nothing left behind" must look for our programs, not for any bpf filter.
grep -h '^prog_id:' /proc/$AGENT/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u > $TMP/our_prog_ids
check "agent holds its BPF programs" test -s $TMP/our_prog_ids
filters_of() {  # netns device: ids of the programs of every tc filter on the device
  { ip netns exec $1 tc filter show dev $2 ingress; ip netns exec $1 tc filter show dev $2 egress; } |
    grep -o ' id [0-9]*' | awk '{print $2}'
}
our_filters() { filters_of $1 $2 | grep -Fxc -f $TMP/our_prog_ids || true; }
# Left behind by us: our filters, or a clsact qdisc with no filter of anybody's on it.
leftovers() {  # netns device
  local n; n=$(our_filters $1 $2)
  if [ -z "$(filters_of $1 $2)" ] && ip netns exec $1 tc qdisc show dev $2 | grep -q clsact; then
    n=$((n + 1))
  fi
  echo $n
}

dig_guest() { ip netns exec $G dig +time=2 +tries=1 "$@"; }
seq_now() { api "/api/v1/dns/traces?limit=1" | python3 -c 'import json,sys; t=json.load(sys.stdin)["traces"]; print(t[-1]["seq"] if t else 0)'; }

# --- healthy --------------------------------------------------------------------------------------
ip netns exec $L tcpdump -i tap0 -nn -U -w $TMP/tap0.pcap udp port 53 2>/dev/null &
TCPD1=$!; PIDS+=($TCPD1)
ip netns exec $H tcpdump -i hl -nn -U -w $TMP/hl.pcap udp port 53 2>/dev/null &
TCPD2=$!; PIDS+=($TCPD2)
sleep 1
AFTER=$(seq_now)
dig_guest @10.96.0.10 www.example.test A +short > $TMP/d1
dig_guest @10.96.0.10 www.example.test AAAA +short > $TMP/d2
dig_guest @10.96.0.10 nothing.example.test A > $TMP/d3
dig_guest @10.96.0.10 www.example.test A +tcp +short > $TMP/d4
dig_guest -6 @fd00:96::a www.example.test AAAA +short > $TMP/d5
dig_guest +noedns @10.96.0.10 big.example.test TXT > $TMP/d6  # truncated over UDP, then TCP
check "dig: answers A, AAAA, NXDOMAIN, TCP, IPv6, TC->TCP" bash -c \
  "grep -qx 10.1.2.3 $TMP/d1 && grep -qx fd00::1234 $TMP/d2 && grep -q NXDOMAIN $TMP/d3 && grep -qx 10.1.2.3 $TMP/d4 && grep -qx fd00::1234 $TMP/d5 && grep -q 'Truncated, retrying in TCP mode' $TMP/d6"
sleep 2.5
stop_pid $TCPD1; stop_pid $TCPD2
api "/api/v1/dns/traces?after=$AFTER&vmi=ngdns/vm1" > $TMP/healthy.json
"$NODEGATE" dns trace --api $API --vmi ngdns/vm1 > $TMP/healthy.txt
echo "--- nodegate dns trace (healthy):"; cat $TMP/healthy.txt

check "healthy: every query answered, hops in order, NATs right, latencies positive" \
  python3 - $TMP/healthy.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ts = j["traces"]
want = {("www.example.test","A","udp","ipv4"), ("www.example.test","AAAA","udp","ipv4"),
        ("nothing.example.test","A","udp","ipv4"), ("www.example.test","AAAA","udp","ipv6"),
        ("big.example.test","TXT","udp","ipv4")}
got = {(t["qname"], t["qtype"], t["transport"], t["family"]) for t in ts}
assert want <= got, f"missing {want - got}"
order = ["tap", "bridge", "launcher-eth0", "host-veth", "host-out", "server"]
for t in ts:
    # NXDOMAIN is an answer of its own kind (not_found), distinct from success
    assert t["result"] == ("not_found" if t["qname"] == "nothing.example.test" else "answered"), t
    assert [h["hop"] for h in t["hops"]] == order, (t["qname"], [h["hop"] for h in t["hops"]])
    assert all(h["query"] and h["response"] for h in t["hops"]), t
    assert t["latency_seconds"] > 0, t
    lat = [h["latency_seconds"] for h in t["hops"][:5]]
    assert all(l > 0 for l in lat) and lat == sorted(lat, reverse=True), (t["qname"], lat)
    q = {h["hop"]: h["query"] for h in t["hops"]}
    v6 = t["family"] == "ipv6"
    guest, pod, svc, dns = (("[fd10:0:2::2]", "[fd00:244:1::7]", "[fd00:96::a]:53", "[fd00:244::3]:53") if v6
                            else ("10.0.2.2", "10.244.1.7", "10.96.0.10:53", "10.244.0.3:53"))
    assert q["tap"]["src"].startswith(guest + ":") and q["tap"]["dst"] == svc, q["tap"]
    assert q["bridge"]["src"] == q["tap"]["src"], q
    assert q["launcher-eth0"]["src"].startswith(pod + ":") and q["launcher-eth0"]["dst"] == svc, q   # masqueraded
    assert q["host-veth"]["dst"] == svc, q                                                          # before PREROUTING
    assert q["host-out"]["dst"] == dns and q["server"]["dst"] == dns, q                             # DNAT done
    r = {h["hop"]: h["response"] for h in t["hops"]}
    assert r["tap"]["src"] == svc and r["tap"]["dst"] == q["tap"]["src"], r["tap"]                 # both NATs undone
nx = [t for t in ts if t["qname"] == "nothing.example.test"][0]
assert nx["rcode"] == "NXDOMAIN", nx
tc = [t for t in ts if t["qname"] == "big.example.test" and t["transport"] == "udp"][0]
assert tc["truncated"], tc
PY

# DNS over TCP: real segments carry their payload outside the skb's linear data, which the kernel
# side must read through bpf_skb_load_bytes() (bpf/dns_tracer.bpf.c).
tcp_check() {
  python3 - $TMP/healthy.json <<'PY'
import json, sys
ts = json.load(open(sys.argv[1]))["traces"]
tcp = [t for t in ts if t["transport"] == "tcp"]
assert any(t["qname"] == "www.example.test" and t["result"] == "answered" for t in tcp), "no TCP trace"
tc = [t for t in ts if t["qname"] == "big.example.test" and t["transport"] == "udp"][0]
retry = [t for t in tcp if t["qname"] == "big.example.test"][0]
assert retry["tcp_retry_of"] == tc["seq"], (tc, retry)
PY
}
if tcp_check > $TMP/tcp_check.txt 2>&1; then
  echo "ok   - TCP queries traced; the truncated UDP answer is linked to its TCP retry"
else
  echo "FAIL - TCP queries traced:"; tail -1 $TMP/tcp_check.txt; fails=$((fails + 1))
fi

count_pcap() { tcpdump -nn -r "$1" 2>/dev/null | wc -l; }
count_hop() {  # UDP packets the tracer saw at a hop, both directions
  python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = 0
for t in j["traces"]:
    if t["transport"] != "udp": continue
    for h in t["hops"]:
        if h["hop"] == sys.argv[2]: n += (h["query"] is not None) + (h["response"] is not None)
print(n)
PY
}
TAP_PCAP=$(count_pcap $TMP/tap0.pcap) TAP_BPF=$(count_hop $TMP/healthy.json tap)
HL_PCAP=$(count_pcap $TMP/hl.pcap) HL_BPF=$(count_hop $TMP/healthy.json host-veth)
echo "per-hop UDP packets: tap0 tcpdump=$TAP_PCAP tracer=$TAP_BPF; hl tcpdump=$HL_PCAP tracer=$HL_BPF"
check "tracer packet counts equal tcpdump's on tap0 and on the host veth" \
  test "$TAP_PCAP" = "$TAP_BPF" -a "$HL_PCAP" = "$HL_BPF" -a "$TAP_PCAP" -gt 0

check "dns-path check PASS Ok after healthy queries" \
  wait_for 10 'j["status"]=="PASS" and j["reason"]=="Ok"' /api/v1/checks/dns-path
check "metrics: answered queries counted per VMI, hop latency histogram present" bash -c \
  "curl -sf http://127.0.0.1:$PORT_METRICS/metrics > $TMP/metrics.txt && grep -q 'nodegate_dns_queries_total{namespace=\"ngdns\",result=\"answered\",vmi=\"vm1\"}' $TMP/metrics.txt && grep -q 'nodegate_dns_hop_latency_seconds_count{hop=\"tap\"}' $TMP/metrics.txt && grep -q '^nodegate_bpf_events_lost_total 0' $TMP/metrics.txt"
check "status page draws the path as SVG hops" bash -c \
  "curl -sf $API/ | grep -q 'data-hop=\"host-out\"'"

# --- the incident: ClusterIP translated for local sockets only -------------------------------------
service_nat incident
check "incident replica: a host socket still reaches the ClusterIP" bash -c \
  "ip netns exec $H dig +short +time=2 +tries=1 @10.96.0.10 www.example.test A | grep -qx 10.1.2.3"
AFTER=$(seq_now)
ip netns exec $G dig +time=1 +tries=1 @10.96.0.10 lost.example.test A > /dev/null || true
check "incident: unanswered, last seen at the host veth, service translation missing" \
  wait_for 10 'any(t["qname"]=="lost.example.test" and t["result"]=="service_translation_missing" and t["last_hop"]=="host-veth" for t in j["traces"])' \
  "/api/v1/dns/traces?after=$AFTER"
check "dns-path check FAIL ServiceTranslationMissing" \
  wait_for 10 'j["status"]=="FAIL" and j["reason"]=="ServiceTranslationMissing"' /api/v1/checks/dns-path
"$NODEGATE" dns trace --api $API | grep lost.example.test | tee $TMP/incident.txt
check "dns trace prints the lost query with its last hop" grep -q 'LOST: service IP not translated, last seen at host-veth' $TMP/incident.txt

# Same incident on a host without a route for the ClusterIP: the kernel records why it dropped.
ip -n $H route del default via 192.0.2.2
AFTER=$(seq_now)
ip netns exec $G dig +time=1 +tries=1 @10.96.0.10 noroute.example.test A > /dev/null || true
check "incident without a route: the kernel drop reason is recorded at the host veth" \
  wait_for 10 'any(t["qname"]=="noroute.example.test" and t["result"]=="service_translation_missing" and t["drop_reason"] is not None and t["drop_hop"]=="host-veth" for t in j["traces"])' \
  "/api/v1/dns/traces?after=$AFTER"
python3 -c 'import json,sys; [print("drop reason:", t["drop_reason"]) for t in json.load(open(sys.argv[1]))["traces"] if t["qname"]=="noroute.example.test"]' $TMP/last.json || true
ip -n $H route add default via 192.0.2.2

# --- fixed: the guest's next answer clears what failed before it -----------------------------------
# The check judges each guest by the worst query since its newest clean answer, so the incident's
# FAIL stays until the guest gets one.
service_nat healthy
check "dns-path check still FAIL ServiceTranslationMissing until the guest gets an answer" \
  wait_for 5 'j["status"]=="FAIL" and j["reason"]=="ServiceTranslationMissing"' /api/v1/checks/dns-path
dig_guest @10.96.0.10 www.example.test A > /dev/null || true
check "translation back, the guest answered: dns-path check PASS Ok" \
  wait_for 10 'j["status"]=="PASS" and j["reason"]=="Ok"' /api/v1/checks/dns-path

# --- a server that does not answer ------------------------------------------------------------------
stop_pid $DNSMASQ
AFTER=$(seq_now)
ip netns exec $G dig +time=1 +tries=1 @10.96.0.10 silent.example.test A > /dev/null || true
# Nothing listens on port 53 any more: the server's kernel answers with ICMP port unreachable.
check "stopped server: unreachable, port unreachable from the server, not a translation problem" \
  wait_for 10 'any(t["qname"]=="silent.example.test" and t["result"]=="unreachable" and t["last_hop"]=="server" and t["icmp"]["type"]=="port-unreachable" for t in j["traces"])' \
  "/api/v1/dns/traces?after=$AFTER"
python3 -c 'import json,sys; [print("drop reason:", t["drop_reason"], "at", t["drop_hop"]) for t in json.load(open(sys.argv[1]))["traces"] if t["qname"]=="silent.example.test"]' $TMP/last.json || true
check "dns-path check FAIL Unreachable, naming the server the guest asked" \
  wait_for 10 'j["status"]=="FAIL" and j["reason"]=="Unreachable" and "10.96.0.10" in j["hint"] and any(e["source"]=="guest ngdns/vm1" and e["observed"].startswith("Unreachable: silent.example.test A: ICMP port-unreachable") for e in j["evidence"])' /api/v1/checks/dns-path

# A lost query (no ICMP: the server's packets dropped) is NoResponse, worse than Unreachable.
ip netns exec $D nft -f - <<'NFT'
table inet ngdrop { chain input { type filter hook input priority 0; udp dport 53 drop; }; }
NFT
dig_guest @10.96.0.10 dropped.example.test A > /dev/null || true
check "dns-path check FAIL NoResponse" \
  wait_for 10 'j["status"]=="FAIL" and j["reason"]=="NoResponse" and "dropped.example.test" in j["message"]' /api/v1/checks/dns-path
ip netns exec $D nft delete table inet ngdrop
# The stand-in back for the clean answer that ends this failure.
start_dnsmasq
dig_guest @10.96.0.10 www.example.test A > /dev/null || true
check "server back, the guest answered: dns-path check PASS Ok" \
  wait_for 10 'j["status"]=="PASS" and j["reason"]=="Ok"' /api/v1/checks/dns-path
stop_pid $DNSMASQ

# --- a server that answers SERVFAIL ----------------------------------------------------------------
ip netns exec $D python3 "$SRC/test/agent/dns/servfail_server.py" 10.244.0.3 53 &
SF=$!; PIDS+=($SF)
for _ in $(seq 50); do ip netns exec $D ss -lun | grep -q '10.244.0.3:53' && break; sleep 0.1; done
AFTER=$(seq_now)
ip netns exec $G dig +time=2 +tries=1 @10.96.0.10 broken.example.test A > $TMP/sf.txt || true
check "dig sees SERVFAIL" grep -q 'status: SERVFAIL' $TMP/sf.txt
check "servfail: server_error with rcode SERVFAIL" \
  wait_for 10 'any(t["qname"]=="broken.example.test" and t["result"]=="server_error" and t["rcode"]=="SERVFAIL" for t in j["traces"])' \
  "/api/v1/dns/traces?after=$AFTER"
check "dns-path check WARN ServerError" \
  wait_for 10 'j["status"]=="WARN" and j["reason"]=="ServerError"' /api/v1/checks/dns-path

# --- the CLI: --follow prints new queries as they finish; bad input is a usage error -----------------
timeout 5 "$NODEGATE" dns trace --follow --vmi ngdns/vm1 --api $API > $TMP/follow.txt 2>&1 &
FOLLOW=$!
sleep 1.5
ip netns exec $G dig +time=2 +tries=1 @10.96.0.10 followed.example.test A > /dev/null || true
wait $FOLLOW || true
check "dns trace --follow prints a query made while it runs" grep -q 'followed.example.test' $TMP/follow.txt
check "dns trace rejects a VMI without a namespace (exit 2)" bash -c \
  "\"$NODEGATE\" dns trace --vmi vm1 --api $API; test \$? = 2"
check "dns trace reports an unreachable agent (exit 1)" bash -c \
  "\"$NODEGATE\" dns trace --api http://127.0.0.1:19799 2>&1 | grep -q 'failed to query'; test \${PIPESTATUS[0]} = 1"
check "dns trace --vmi of a VMI not on the node: 'no such VMI', exit 3" bash -c \
  "\"$NODEGATE\" dns trace --vmi ngdns/unknown --api $API > $TMP/unknown.txt 2>&1; test \$? = 3 && grep -q 'no such VMI on this node: ngdns/unknown' $TMP/unknown.txt && ! grep -q 'no finished DNS queries' $TMP/unknown.txt"
check "/api/v1/dns/traces?vmi= of a VMI not on the node answers 404" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "$API/api/v1/dns/traces?vmi=ngdns/unknown")" = 404

# --- following VMs: the launcher process goes away, then comes back --------------------------------
LAUNCHER_PID=$(pgrep -f "$TMP/virt-launcher" | head -1)
kill "$LAUNCHER_PID"; wait "$LAUNCHER_PID" 2>/dev/null || true
check "VM stopped: its hops are detached, the shared server side stays" \
  wait_for 10 'not any(v["vmi"]=="ngdns/vm1" for v in j["vmis"]) and any(v["vmi"]=="(shared)" for v in j["vmis"])' \
  /api/v1/dns/traces
check "VM stopped: no tracer program of ours left on its devices" \
  test "$(our_filters $L tap0)$(our_filters $L k6t-eth0)$(our_filters $L eth0)" = 000
# It was last seen failing (SERVFAIL above): gone, it is neither judged nor counted any more.
check "VM stopped: dns-path no longer warns about it" \
  wait_for 10 'j["status"]=="PASS" and j["reason"]=="NoGuests" and "ngdns/vm1" not in json.dumps(j)' \
  /api/v1/checks/dns-path
check "VM stopped: its query series are gone from /metrics" bash -c \
  "curl -sf http://127.0.0.1:$PORT_METRICS/metrics > $TMP/metrics-gone.txt && grep -q '^nodegate_dns_hops_attached' $TMP/metrics-gone.txt && ! grep -q 'nodegate_dns_queries_total{.*vmi=\"vm1\"' $TMP/metrics-gone.txt"
check "VM stopped: dns trace --vmi says no such VMI (exit 3)" bash -c \
  "\"$NODEGATE\" dns trace --vmi ngdns/vm1 --api $API 2>&1 | grep -q 'no such VMI'; test \${PIPESTATUS[0]} = 3"
start_launcher
check "VM started again: traced again" \
  wait_for 10 'any(v["vmi"]=="ngdns/vm1" and len(v["hops"])==4 for v in j["vmis"])' /api/v1/dns/traces
AFTER=$(seq_now)
ip netns exec $G dig +time=2 +tries=1 @10.96.0.10 back.example.test A > /dev/null || true
check "VM started again: its queries are counted again from a new series" bash -c \
  "for _ in \$(seq 30); do curl -sf http://127.0.0.1:$PORT_METRICS/metrics | grep -q 'nodegate_dns_queries_total{namespace=\"ngdns\",result=\"server_error\",vmi=\"vm1\"} 1' && exit 0; sleep 0.3; done; exit 1"

# --- clean exit: nothing left attached -------------------------------------------------------------
kill -TERM $AGENT; wait $AGENT || true
left=0
for dev in "$L tap0" "$L k6t-eth0" "$L eth0" "$H hl" "$H hd" "$D eth0"; do
  left=$((left + $(leftovers $dev)))
done
check "agent exit leaves no tc program or clsact qdisc behind" test "$left" = 0
topo_finish
