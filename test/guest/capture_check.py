#!/usr/bin/env python3
"""Holds the DNS tracer's traces against tcpdump captures of the same run, hop by hop.

usage: capture_check.py TRACES.json --window START END HOP=FILE.pcap ... [--tolerance-ms MS]

TRACES.json is /api/v1/dns/traces output (the traces of one scenario), START and END the
scenario's wall-clock bounds (seconds since the epoch). Each HOP=FILE is a capture (tcpdump -w,
nanosecond or microsecond pcap, Ethernet) of the device the tracer calls HOP. For every DNS
message key (id, question name, qtype, transport) of the traces or of the captures' packets within
the window, and every captured hop, the tracer's number of query and response sightings must
equal the number of DNS packets the capture holds: a message the tracer missed counts as much as
one it invented. Where a hop saw one query and one response, the tracer's latency there must
agree with the capture's within the tolerance (default 2 ms: the two stamp the same packets a few
calls apart in the kernel). Prints one line per hop; exit 1 on any disagreement.
"""
import json
import struct
import sys

QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
          33: "SRV", 255: "ANY"}


def read_pcap(path):
    """Yields (timestamp seconds, frame bytes); tolerates a last record still being written."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = data[:4]
    table = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
             b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
    if magic not in table:
        raise SystemExit(f"{path}: not a pcap file")
    endian, unit = table[magic]
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}, want Ethernet")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        if off + incl > len(data):
            return
        yield sec + frac * unit, data[off:off + incl]
        off += incl


def dns_question(msg):
    """(id, qr, qname, qtype) of a DNS message, or None."""
    if len(msg) < 12:
        return None
    mid, flags, qd = struct.unpack("!HHH", msg[:6])
    if qd < 1:
        return None
    labels, i = [], 12
    while i < len(msg):
        n = msg[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0 or i + 1 + n > len(msg):
            return None
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace").lower())
        i += 1 + n
    if i + 2 > len(msg):
        return None
    qtype = struct.unpack("!H", msg[i:i + 2])[0]
    return mid, bool(flags & 0x8000), ".".join(labels), QTYPES.get(qtype, f"TYPE{qtype}")


def dns_packets(path):
    """Yields (ts, key, is_response) for every DNS message over UDP or TCP port 53 in a capture.
    TCP: a segment whose payload starts a length-prefixed message (how the tracer reads them)."""
    for ts, f in read_pcap(path):
        off, etype = 14, struct.unpack("!H", f[12:14])[0] if len(f) >= 14 else 0
        while etype in (0x8100, 0x88A8) and len(f) >= off + 4:
            etype = struct.unpack("!H", f[off + 2:off + 4])[0]
            off += 4
        if etype == 0x0800 and len(f) >= off + 20:
            ihl = (f[off] & 0x0F) * 4
            proto = f[off + 9]
            if struct.unpack("!H", f[off + 6:off + 8])[0] & 0x1FFF:
                continue  # a later fragment: no transport header
            l4 = off + ihl
        elif etype == 0x86DD and len(f) >= off + 40:
            proto, l4 = f[off + 6], off + 40
        else:
            continue
        if proto == 17 and len(f) >= l4 + 8:
            sport, dport = struct.unpack("!HH", f[l4:l4 + 4])
            msg = f[l4 + 8:]
            transport = "udp"
        elif proto == 6 and len(f) >= l4 + 20:
            sport, dport = struct.unpack("!HH", f[l4:l4 + 4])
            payload = f[l4 + (f[l4 + 12] >> 4) * 4:]
            if len(payload) < 14:
                continue
            msg = payload[2:2 + struct.unpack("!H", payload[:2])[0]]
            transport = "tcp"
        else:
            continue
        if 53 not in (sport, dport):
            continue
        q = dns_question(msg)
        if q:
            mid, qr, qname, qtype = q
            yield ts, (mid, qname, qtype, transport), qr


def main():
    args = sys.argv[1:]
    tol = 0.002
    if "--tolerance-ms" in args:
        i = args.index("--tolerance-ms")
        tol = float(args[i + 1]) / 1000
        del args[i:i + 2]
    if "--window" not in args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    i = args.index("--window")
    lo, hi = float(args[i + 1]), float(args[i + 2])
    del args[i:i + 3]
    if len(args) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    traces = json.load(open(args[0]))["traces"]
    key = lambda t: (t["id"], t["qname"].rstrip(".").lower(), t["qtype"], t["transport"])
    packets = {}  # hop -> {(key, response): [ts...]} within the window
    for spec in args[1:]:
        hop, path = spec.split("=", 1)
        seen = packets.setdefault(hop, {})
        for ts, k, resp in dns_packets(path):
            if lo <= ts <= hi:
                seen.setdefault((k, resp), []).append(ts)
    keys = {key(t) for t in traces} | {k for seen in packets.values() for k, _ in seen}
    if not keys:
        print("capture: no DNS message in the window, none traced")
        return 0
    bad = 0
    for hop, seen in packets.items():
        counts = {"query": [0, 0], "response": [0, 0]}  # tracer, capture
        diffs, mismatch = [], []
        for k in sorted(keys, key=str):
            ts_k = [t for t in traces if key(t) == k]
            for d, resp in (("query", False), ("response", True)):
                tr = sum(1 for t in ts_k for h in t["hops"] if h["hop"] == hop and h[d])
                cap = len(seen.get((k, resp), []))
                counts[d][0] += tr
                counts[d][1] += cap
                if tr != cap:
                    mismatch.append(f"{k[1]} {k[2]} {k[3]} id={k[0]} {d}: tracer {tr}, capture {cap}")
            q, r = seen.get((k, False), []), seen.get((k, True), [])
            if len(q) == 1 and len(r) == 1:
                for t in ts_k:
                    for h in t["hops"]:
                        if h["hop"] == hop and h["latency_seconds"] is not None:
                            diffs.append((h["latency_seconds"], r[0] - q[0], k))
        worst = max((abs(a - b) for a, b, _ in diffs), default=0.0)
        line = (f"capture {hop}: queries tracer={counts['query'][0]} tcpdump={counts['query'][1]}, "
                f"responses tracer={counts['response'][0]} tcpdump={counts['response'][1]}")
        if diffs:
            line += (f"; {len(diffs)} latencies, tracer vs tcpdump worst |diff| "
                     f"{worst * 1e3:.3f} ms (e.g. {diffs[0][0] * 1e3:.3f} vs {diffs[0][1] * 1e3:.3f} ms)")
        print(line)
        for m in mismatch:
            print(f"  MISMATCH {hop}: {m}")
        for a, b, k in diffs:
            if abs(a - b) > tol:
                print(f"  LATENCY {hop}: {k[1]} {k[2]} {k[3]}: tracer {a * 1e3:.3f} ms, tcpdump {b * 1e3:.3f} ms")
                bad += 1
        bad += len(mismatch)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
