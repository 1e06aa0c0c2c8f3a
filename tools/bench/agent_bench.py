#!/usr/bin/env python3
"""Footprint and latency of `nodegate agent` against Debian's prometheus-node-exporter on the
same host, in one run (ratios matter, absolute figures depend on the machine):
  - resident memory of each at idle and after N scrapes of /metrics
  - CPU seconds each spent over the same period (idle + scrapes)
  - /metrics latency (new connection per scrape, as Prometheus does after an idle gap)
  - event-to-state latency: `ip tuntap add` -> changed check state (root only)
Usage: sudo tools/bench/agent_bench.py BUILD/nodegate [--scrapes 100] [--events 30]
Prints a Markdown report on stdout."""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

NE_PORT, NG_PORT, NG_DEBUG = 19480, 19481, 19482
EV_PORT, EV_DEBUG = 19483, 19484
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "test", "fixtures", "agent", "vmx-host")


def proc_stats(pid):
    """(RSS, CPU seconds, USS = private pages, RSS of mmapped BPF maps, threads) in
    bytes/seconds/count."""
    rss = threads = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rfind(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    uss = bpf = 0
    name = ""
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 else ""
        elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
            uss += int(parts[1]) * 1024
        elif parts[0] == "Rss:" and name == "anon_inode:bpf-map":
            bpf += int(parts[1]) * 1024
    return rss, (int(fields[11]) + int(fields[12])) / tick, uss, bpf, threads


def smaps_by_mapping(pid):
    """RSS and private (USS) bytes per mapping name (file path, [heap], anon_inode:bpf-map...),
    largest RSS first: what dominates the resident set."""
    rows = {}
    name = ""
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 else "[anon]"
            rows.setdefault(name, [0, 0])
        elif parts[0] == "Rss:":
            rows[name][0] += int(parts[1]) * 1024
        elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
            rows[name][1] += int(parts[1]) * 1024
    return sorted(rows.items(), key=lambda kv: -kv[1][0])


def fetch(port, path="/metrics"):
    """One scrape on a fresh connection with a minimal raw-socket client (urllib's own overhead
    would otherwise dominate a sub-millisecond answer). Returns (seconds, body bytes)."""
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
              "Accept-Encoding: identity\r\n\r\n".encode())
    data = bytearray()
    while True:
        chunk = s.recv(262144)
        if not chunk:
            break
        data += chunk
    s.close()
    dt = time.perf_counter() - t0
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"scrape of port {port} failed: {head[:80]!r}")
    return dt, len(body)


def wait_http(port, path, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"nothing answered on port {port}{path}")


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def footprint(nodegate, scrapes, idle, extra):
    ne = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{NE_PORT}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ng = subprocess.Popen([nodegate, "agent", "--kube", "none", "--listen", f"127.0.0.1:{NG_PORT}",
                           "--debug-listen", f"127.0.0.1:{NG_DEBUG}"] + extra,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(NE_PORT, "/metrics")
        wait_http(NG_PORT, "/readyz")
        if "--dns-trace" not in extra:
            # The tracer loads on its own thread after /readyz (seconds of BPF verification and
            # ~10 MiB of transient heap): idle from its end, or the figures catch the load.
            wait_http(NG_DEBUG, "/api/v1/dns/traces", timeout=120)
        time.sleep(idle)
        res = {}
        for name, pid in (("node_exporter", ne.pid), ("nodegate", ng.pid)):
            res[name] = {"idle": proc_stats(pid)}
        lat = {"node_exporter": [], "nodegate": []}
        size = {}
        # Interleaved so both see the same machine load.
        for _ in range(scrapes):
            for name, port in (("node_exporter", NE_PORT), ("nodegate", NG_PORT)):
                dt, n = fetch(port)
                lat[name].append(dt)
                size[name] = n
        for name, pid in (("node_exporter", ne.pid), ("nodegate", ng.pid)):
            res[name]["after"] = proc_stats(pid)
            res[name]["lat"] = lat[name]
            res[name]["size"] = size[name]
        res["nodegate"]["smaps"] = smaps_by_mapping(ng.pid)
        return res
    finally:
        for p in (ne, ng):
            p.terminate()
            p.wait(5)


def event_latency(nodegate, events):
    work = tempfile.mkdtemp(prefix="nodegate-bench-ev.")
    host = os.path.join(work, "host")
    shutil.copytree(FIXTURE, host)
    cfg = os.path.join(work, "config.json")
    json.dump({"checks": {"cpu-virt": {"triggers": ["netlink"]}}}, open(cfg, "w"))
    ng = subprocess.Popen([nodegate, "agent", "--kube", "none", "--listen", f"127.0.0.1:{EV_PORT}",
                           "--debug-listen", f"127.0.0.1:{EV_DEBUG}", "--host-root", host,
                           "--config", cfg, "--resync", "3600"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tap = f"ngbench{os.getpid() % 10000}"
    cpuinfo = os.path.join(host, "proc", "cpuinfo")
    original = open(cpuinfo).read()
    lat = []
    try:
        wait_http(EV_PORT, "/readyz")

        def state():
            with urllib.request.urlopen(f"http://127.0.0.1:{EV_DEBUG}/api/v1/checks/cpu-virt", timeout=5) as r:
                return json.load(r)

        for i in range(events):
            want = "FAIL" if i % 2 == 0 else "PASS"
            open(cpuinfo, "w").write(original.replace(" vmx ", " ") if want == "FAIL" else original)
            time.sleep(0.05)
            t0 = time.time()
            subprocess.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"], check=True)
            end = time.time() + 5
            while True:
                s = state()
                if s["status"] == want:
                    break
                if time.time() > end:
                    raise SystemExit(f"event {i}: state did not change")
                time.sleep(0.002)
            since = s["since"]
            ts = time.mktime(time.strptime(since[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone + float("0." + since[20:23])
            lat.append(ts - t0)
            subprocess.run(["ip", "tuntap", "del", "dev", tap, "mode", "tap"], check=True)
            time.sleep(0.1)
    finally:
        subprocess.run(["ip", "link", "del", tap], stderr=subprocess.DEVNULL)
        ng.terminate()
        ng.wait(5)
        shutil.rmtree(work)
    return lat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nodegate")
    ap.add_argument("--scrapes", type=int, default=100)
    ap.add_argument("--idle", type=float, default=5)
    ap.add_argument("--events", type=int, default=30)
    a = ap.parse_args()
    v = subprocess.run(["prometheus-node-exporter", "--version"], capture_output=True, text=True)
    ne_version = ((v.stdout or "") + (v.stderr or "")).strip().splitlines()[0]
    mib = lambda b: b / 1048576
    out = []
    for label, extra in (("default flags (DNS tracer on)", []),
                         ("--dns-trace off", ["--dns-trace", "off"])):
        r = footprint(a.nodegate, a.scrapes, a.idle, extra)
        out.append(f"\n### nodegate agent --kube none, {label}\n")
        out.append(f"Peer: `{ne_version.strip()}` (Debian package, default collectors). "
                   f"{a.scrapes} interleaved scrapes after {a.idle:.0f} s idle; "
                   f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.\n")
        out.append("| measure | node_exporter | nodegate | nodegate / node_exporter |")
        out.append("|---|---:|---:|---:|")
        ne, ng = r["node_exporter"], r["nodegate"]
        rows = [
            ("RSS at idle (MiB)", mib(ne["idle"][0]), mib(ng["idle"][0])),
            (f"RSS after {a.scrapes} scrapes (MiB)", mib(ne["after"][0]), mib(ng["after"][0])),
            (f"USS (private pages) after {a.scrapes} scrapes (MiB)", mib(ne["after"][2]), mib(ng["after"][2])),
            ("of the RSS: mmapped BPF maps (MiB)", mib(ne["after"][3]), mib(ng["after"][3])),
            (f"threads after {a.scrapes} scrapes", ne["after"][4], ng["after"][4]),
            ("CPU seconds, start to end", ne["after"][1], ng["after"][1]),
            (f"CPU seconds during the {a.scrapes} scrapes", ne["after"][1] - ne["idle"][1], ng["after"][1] - ng["idle"][1]),
            ("/metrics latency median (ms)", 1000 * statistics.median(ne["lat"]), 1000 * statistics.median(ng["lat"])),
            ("/metrics latency p90 (ms)", 1000 * pct(ne["lat"], 90), 1000 * pct(ng["lat"], 90)),
            ("/metrics body (KiB)", ne["size"] / 1024, ng["size"] / 1024),
        ]
        for name, x, y in rows:
            ratio = f"{y / x:.3f}" if x else "n/a"
            cell = lambda v: str(v) if isinstance(v, int) else f"{v:.3f}"
            out.append(f"| {name} | {cell(x)} | {cell(y)} | {ratio} |")
        speed = statistics.median(ne["lat"]) / statistics.median(ng["lat"])
        out.append(f"\n/metrics median speed-up: **{speed:.1f}x**; RSS after scrapes: nodegate is "
                   f"**{ng['after'][0] / ne['after'][0]:.2f}x** node_exporter's, USS "
                   f"**{ng['after'][2] / ne['after'][2]:.2f}x**.")
        out.append(f"\nWhat is resident in nodegate after the scrapes (smaps, largest first):\n")
        out.append("| mapping | RSS (KiB) | private (KiB) |")
        out.append("|---|---:|---:|")
        top = ng["smaps"][:10]
        for mapping, (rss, priv) in top:
            out.append(f"| `{mapping}` | {rss // 1024} | {priv // 1024} |")
        rest = ng["smaps"][10:]
        out.append(f"| {len(rest)} other mappings | {sum(r for _, (r, _) in rest) // 1024} | "
                   f"{sum(p for _, (_, p) in rest) // 1024} |")
    if os.geteuid() == 0 and a.events > 0:
        lat = [1000 * x for x in event_latency(a.nodegate, a.events)]
        out.append(f"\nEvent-to-state latency (`ip tuntap add` -> cpu-virt state change on a fixture host "
                   f"root, {len(lat)} events): median **{statistics.median(lat):.1f} ms**, "
                   f"p90 {pct(lat, 90):.1f} ms, max {max(lat):.1f} ms, min {min(lat):.1f} ms.")
    else:
        out.append("\nEvent-to-state latency: not measured (needs root).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
