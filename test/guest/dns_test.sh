#!/usr/bin/env bash
# End-to-end with a real guest: a stock Debian kernel under QEMU (KVM where nodegate's kvm-device
# says a guest can run, else TCG), virtio-net on a real tap0 in the launcher netns, its address and
# resolver settings from KubeVirt-style DHCP, resolving through the masquerade NAT and a ClusterIP
# to the CoreDNS stand-in with busybox's nslookup and glibc's resolver (getent). The real agent
# traces it; every scenario's traces are checked against tcpdump on every hop (dns_lib.sh).
# The fast veth replica (test/agent/dns/e2e_dns_path.sh) covers the rest of the cases.
set -euo pipefail
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$SRC/test/guest/dns_lib.sh"

# Records the guest asks for: cluster names (anything else under cluster.local is NXDOMAIN) and a
# name with 40 addresses, whose UDP answer does not fit in 512 bytes.
for i in $(seq 1 40); do echo "10.1.0.$i many.example.test"; done > $TMP/many.hosts
dns_guest_up --local=/cluster.local/ --host-record=kube-dns.kube-system.svc.cluster.local,10.96.0.10 \
  --host-record=web.ngdns.svc.cluster.local,10.96.5.5 --addn-hosts=$TMP/many.hosts

scenario fqdn "a FQDN over UDP with busybox nslookup (A and AAAA)"
in_guest 'nslookup www.example.test'
expect_trace "A answered on all six hops, both NATs where they happen" \
  www.example.test A udp answered 'hops(t) == FULL and masqueraded(t)'
expect_trace "AAAA answered on all six hops" www.example.test AAAA udp answered 'hops(t) == FULL'
expect_check "dns-path check PASS Ok" PASS Ok
end_scenario

scenario svc "a *.svc.cluster.local name"
in_guest 'nslookup kube-dns.kube-system.svc.cluster.local'
expect_trace "answered NOERROR" kube-dns.kube-system.svc.cluster.local A udp answered \
  't["rcode"] == "NOERROR" and hops(t) == FULL'
end_scenario

scenario search "short names through the search list DHCP gave the guest (glibc, ndots 1)"
in_guest 'getent ahostsv4 web'
expect_trace "'web' asked as web.ngdns.svc.cluster.local and answered" \
  web.ngdns.svc.cluster.local A udp answered 't["rcode"] == "NOERROR"'
in_guest 'getent ahostsv4 kube-dns.kube-system'
expect_trace "one dot: asked as is first, then through the search list (NXDOMAIN in the namespace)" \
  kube-dns.kube-system.ngdns.svc.cluster.local A udp not_found 't["rcode"] == "NXDOMAIN"'
expect_trace "... and answered under svc.cluster.local" \
  kube-dns.kube-system.svc.cluster.local A udp answered 't["rcode"] == "NOERROR"'
end_scenario

scenario tcp "DNS over TCP from glibc (options use-vc)"
in_guest 'RES_OPTIONS=use-vc getent ahostsv4 www.example.test'
expect_trace "answered over TCP on all six hops, NATs right" \
  www.example.test A tcp answered 'hops(t) == FULL and masqueraded(t)'
end_scenario

scenario truncated "an answer too big for UDP: glibc retries over TCP"
in_guest 'getent ahostsv4 many.example.test | head -1'
expect_trace "the UDP answer is truncated" many.example.test A udp answered 't["truncated"]'
expect_trace "the TCP retry is answered and linked to the truncated UDP query" \
  many.example.test A tcp answered \
  'any(u["seq"] == t["tcp_retry_of"] and u["truncated"] for u in ts)'
end_scenario

scenario parallel "glibc's parallel A and AAAA from one socket"
in_guest 'getent ahosts www.example.test'
expect_trace "A answered" www.example.test A udp answered 'hops(t) == FULL'
expect_trace "AAAA answered" www.example.test AAAA udp answered 'hops(t) == FULL'
end_scenario

scenario incident "Cilium socket-LB: the ClusterIP is translated for host sockets only"
host_do service_nat incident
in_guest 'nslookup -timeout=1 -retry=1 lost.example.test'
expect_trace "lost after the host veth with the ClusterIP untranslated" \
  lost.example.test A udp service_translation_missing \
  't["last_hop"] == "host-veth" and query(t, "host-veth")["dst"] == "10.96.0.10:53" and not response(t, "tap")'
check "incident: tcpdump on the node's uplink has the query leaving for the ClusterIP untranslated" \
  captured uplink '> 10.96.0.10.53:' 'A? lost.example.test'
expect_check "dns-path check FAIL ServiceTranslationMissing" FAIL ServiceTranslationMissing
end_scenario
host_do service_nat healthy

scenario fixed "translation back: the guest's next answer clears the check"
expect_check "dns-path check still FAIL until the guest gets an answer" FAIL ServiceTranslationMissing
in_guest 'nslookup www.example.test'
expect_trace "answered on all six hops" www.example.test A udp answered 'hops(t) == FULL'
expect_check "dns-path check PASS Ok" PASS Ok
end_scenario

scenario servfail "the server answers SERVFAIL"
host_do dns_server_other python3 "$SRC/test/agent/dns/servfail_server.py" 10.244.0.3 53
in_guest 'nslookup -retry=1 broken.example.test'
expect_trace "server_error with SERVFAIL, answered back to the guest" \
  broken.example.test A udp server_error 't["rcode"] == "SERVFAIL" and hops(t) == FULL'
expect_check "dns-path check WARN ServerError" WARN ServerError
end_scenario
host_do dns_server_dnsmasq

# The failure taxonomy (#19 item 2) with the guest's own resolvers; the veth replica's
# dns_failures_e2e covers every verdict, these the ones a guest's kernel and resolvers shape.
scenario notfound "a cluster name the server does not know (busybox nslookup): NXDOMAIN"
in_guest 'nslookup nope.ngdns.svc.cluster.local'
expect_trace "not_found with NXDOMAIN and the cluster-zone hint" \
  nope.ngdns.svc.cluster.local A udp not_found 't["rcode"] == "NXDOMAIN" and "cluster" in t["hint"] and hops(t) == FULL'
expect_check "dns-path check FAIL ClusterNameNotFound, the guest's evidence naming the query" \
  FAIL ClusterNameNotFound \
  'any(e["source"] == "guest ngdns/vm1" and e["observed"].startswith("ClusterNameNotFound: nope.ngdns.svc.cluster.local") for e in j["evidence"])'
in_guest 'nslookup www.example.test'
expect_check "an answer after it: PASS Ok" PASS Ok
in_guest 'nslookup nope.example.test'
expect_trace "NXDOMAIN for a name outside the cluster's zones" nope.example.test A udp not_found
expect_check "dns-path check PASS Ok (NXDOMAIN outside the cluster's zones is an answer)" PASS Ok
end_scenario

scenario unreachable "the server's host rejects DNS with ICMP port unreachable"
host_do nft_in $D 'table inet ngfail { chain input { type filter hook input priority 0; udp dport 53 reject with icmp type port-unreachable; }; }'
in_guest 'nslookup -timeout=1 -retry=1 reject.example.test'
expect_trace "unreachable: the ICMP from the server, back to the guest through both NATs" \
  reject.example.test A udp unreachable 't["icmp"]["type"] == "port-unreachable" and t["icmp"]["from"] == "10.244.0.3" and t["icmp"]["hop"] == "server"'
expect_check "dns-path check FAIL Unreachable, naming the server" FAIL Unreachable \
  '"10.96.0.10" in j["hint"]'
end_scenario
host_do ip netns exec $D nft delete table inet ngfail

scenario failover "glibc with a silent first nameserver (timeout:1 attempts:1): slow failover"
host_do nft_in $H 'table inet ngfail { chain pre { type filter hook prerouting priority -200; ip daddr 10.96.0.99 drop; }; }'
in_guest 'nslookup www.example.test'  # a clean answer first: what failed before is over
expect_check "answered again: PASS Ok" PASS Ok
in_guest 'cp /etc/resolv.conf /tmp/resolv.dhcp && printf "nameserver 10.96.0.99\nnameserver 10.96.0.10\noptions timeout:1 attempts:1\n" > /etc/resolv.conf && getent ahostsv4 www.example.test; rc=$?; cp /tmp/resolv.dhcp /etc/resolv.conf; exit $rc'
check "$SCEN: getent resolved through the second nameserver" test "$GUEST_RC" = 0
expect_trace "slow_failover: answered by 10.96.0.10 after 10.96.0.99 stayed silent for the timeout" \
  www.example.test A udp slow_failover 't["failover"]["unanswered_server"] == "10.96.0.99" and 0.9 <= t["failover"]["lost_seconds"] <= 1.6 and hops(t) == FULL'
# The silent attempt at 10.96.0.99 finishes at the agent's timeout, after the answer: still slow
# failover, not a lost query.
expect_trace "the silent attempt at 10.96.0.99" www.example.test A udp service_translation_missing \
  't["server"] == "10.96.0.99"'
expect_check "dns-path check WARN SlowFailover, naming the silent nameserver and the time lost" \
  WARN SlowFailover \
  '"10.96.0.99" in j["hint"] and any(e["source"] == "guest ngdns/vm1" and "nameserver 10.96.0.99 did not answer 1 lookup" in e["observed"] for e in j["evidence"])'
end_scenario
host_do ip netns exec $H nft delete table inet ngfail

scenario recovered "translation and server back: answered again"
in_guest 'nslookup www.example.test'
expect_trace "answered on all six hops" www.example.test A udp answered 'hops(t) == FULL and masqueraded(t)'
expect_check "dns-path check PASS Ok" PASS Ok
end_scenario

dns_guest_report
