#!/usr/bin/env python3
"""Questions about a scenario's DNS traces (/api/v1/dns/traces JSON), for test/guest/dns_lib.sh.

usage: traces.py match TRACES.json QNAME QTYPE TRANSPORT RESULT [CONDITION]
       traces.py invariants TRACES.json
       traces.py show TRACES.json

match: exit 0 if some trace has that question name (case and trailing dot ignored), qtype,
transport (udp|tcp) and result, and CONDITION (a Python expression on the trace `t`) holds.
CONDITION may use FULL (the whole masquerade path's hops in order), hops(t), query(t, hop),
response(t, hop), latency(t, hop), masqueraded(t) (both NATs seen where they happen and undone on
the way back), and ts (all traces of the scenario).
invariants: what holds for every finished trace whatever the scenario: hops in path order; when
the answer got back to the guest's tap, it was seen at every hop the query passed, the round trip
shrinks from the tap towards the server, and the guest-visible latency is the tap's.
show: one line per trace: question, result, last hop, the round trip at each hop.
"""
import json
import sys

FULL = ["tap", "bridge", "launcher-eth0", "host-veth", "host-out", "server"]


def hops(t):
    return [h["hop"] for h in t["hops"]]


def _hop(t, hop):
    return next((h for h in t["hops"] if h["hop"] == hop), None)


def query(t, hop):
    h = _hop(t, hop)
    return h and h["query"]


def response(t, hop):
    h = _hop(t, hop)
    return h and h["response"]


def latency(t, hop):
    h = _hop(t, hop)
    return h and h["latency_seconds"]


def masqueraded(t, guest="10.0.2.2", pod="10.244.1.7", svc="10.96.0.10:53", server="10.244.0.3:53"):
    """The KubeVirt masquerade and the service DNAT, each at its hop (topology.sh's addresses)."""
    q = {h["hop"]: h["query"] for h in t["hops"]}
    if any(q.get(h) is None for h in FULL):
        return False
    back = response(t, "tap")
    return (q["tap"]["src"].startswith(guest + ":") and q["tap"]["dst"] == svc
            and q["bridge"]["src"] == q["tap"]["src"]
            and q["launcher-eth0"]["src"].startswith(pod + ":") and q["launcher-eth0"]["dst"] == svc
            and q["host-veth"]["dst"] == svc and q["host-out"]["dst"] == server
            and q["server"]["dst"] == server
            and bool(back) and back["src"] == svc and back["dst"] == q["tap"]["src"])


def norm(name):
    return name.rstrip(".").lower()


def match(ts, qname, qtype, transport, result, cond="True"):
    for t in ts:
        if (norm(t["qname"]), t["qtype"], t["transport"], t["result"]) != (norm(qname), qtype, transport, result):
            continue
        if eval(cond, {"FULL": FULL, "hops": hops, "query": query, "response": response,
                       "latency": latency, "masqueraded": masqueraded, "ts": ts, "t": t}):
            return True
    return False


def invariants(ts):
    bad = []
    for t in ts:
        name = f'{t["qname"]} {t["qtype"]} {t["transport"]} id={t["id"]} ({t["result"]})'
        hs = hops(t)
        if hs != [h for h in FULL if h in hs]:
            bad.append(f"{name}: hops out of path order: {hs}")
        if not response(t, "tap"):
            continue  # the answer never got back to the guest: nothing more holds for all
        if t["latency_seconds"] != latency(t, "tap"):
            bad.append(f"{name}: latency {t['latency_seconds']} is not the tap's")
        lat = [h["latency_seconds"] for h in t["hops"] if h["query"] and h["hop"] != "server"]
        if any(l is None or l <= 0 for l in lat) or lat != sorted(lat, reverse=True):
            bad.append(f"{name}: round trips along the path {lat}")
    for b in bad:
        print("  INVARIANT", b)
    return not bad


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cmd, ts = sys.argv[1], json.load(open(sys.argv[2]))["traces"]
    if cmd == "match" and len(sys.argv) in (7, 8):
        return 0 if match(ts, *sys.argv[3:]) else 1
    if cmd == "invariants":
        return 0 if invariants(ts) else 1
    if cmd == "show":
        for t in ts:
            ms = lambda v: "-" if v is None else f"{v * 1e3:.2f}"
            per_hop = " ".join(f'{h["hop"]}={ms(h["latency_seconds"])}' for h in t["hops"])
            extra = "".join(f" {k}={t[k]}" for k in ("truncated", "tcp_retry_of", "retry_of", "drop_reason")
                            if t.get(k))
            print(f'#{t["seq"]} {t["qtype"]} {t["qname"]} {t["transport"]} id={t["id"]}: {t["result"]} '
                  f'rcode={t["rcode"]} last_hop={t["last_hop"]}{extra} | ms: {per_hop}')
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
