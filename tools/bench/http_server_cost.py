#!/usr/bin/env python3
"""What the agent's HTTP server costs, two builds side by side in one run (ratios matter, absolute
figures depend on the machine): resident memory (RSS, USS) and threads at idle, after N scrapes of
/metrics, and while 100 slowloris connections hold the metrics listener; meanwhile the kubelet's
probe (/healthz, 3 s timeout, twice a second) against the address the chart gives it, and the
scrapes that got through. Both agents run at once with --kube none --dns-trace off, so they see
the same machine load.
Usage: tools/bench/http_server_cost.py NAME=BINARY[:HEALTH] NAME=BINARY[:HEALTH] [--scrapes 200]
  HEALTH "health" means the build has --health-listen and the probes go there (as the chart
  does); otherwise they go to --listen. Run under the suite lock (it binds ports 19490-19497).
Prints a Markdown report on stdout."""
import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "test", "agent")]
from agent_bench import fetch, proc_stats, wait_http  # noqa: E402
from slowloris import Slowloris, kubelet_probes  # noqa: E402

BASE_PORT = 19490  # each agent: BASE + 4*i (+0 metrics, +1 debug, +2 health)
MIB = 1024 * 1024


def start(binary, health, i):
    port = BASE_PORT + 4 * i
    args = [binary, "agent", "--kube", "none", "--dns-trace", "off", "--resync", "3600",
            "--listen", f"127.0.0.1:{port}", "--debug-listen", f"127.0.0.1:{port + 1}"]
    if health:
        args += ["--health-listen", f"127.0.0.1:{port + 2}"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port, (port + 2 if health else port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs=2, help="NAME=BINARY[:health]")
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--idle", type=float, default=5)
    ap.add_argument("--attack", type=float, default=12)
    a = ap.parse_args()
    builds = []
    for i, spec in enumerate(a.builds):
        name, _, rest = spec.partition("=")
        binary, _, health = rest.partition(":")
        builds.append({"name": name, "binary": binary, "health": health == "health"})
    try:
        for i, b in enumerate(builds):
            b["proc"], b["port"], b["probe_port"] = start(b["binary"], b["health"], i)
        for b in builds:
            wait_http(b["port"], "/readyz")
        time.sleep(a.idle)
        for b in builds:
            b["idle"] = proc_stats(b["proc"].pid)
        lat = {b["name"]: [] for b in builds}
        for _ in range(a.scrapes):  # interleaved: both see the same load
            for b in builds:
                lat[b["name"]].append(fetch(b["port"])[0])
        for b in builds:
            b["after"] = proc_stats(b["proc"].pid)
            b["lat"] = sorted(lat[b["name"]])
        for b in builds:  # one attack at a time: 100 attackers each would share 2 CPUs
            sampled = []
            stop = threading.Event()

            def sample(pid=b["proc"].pid):
                while not stop.is_set():
                    sampled.append(proc_stats(pid))
                    time.sleep(0.5)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            with Slowloris(b["port"], 100) as attack:
                b["probes"] = kubelet_probes(b["probe_port"], a.attack)
            b["scrapes"] = attack.scrapes
            stop.set()
            sampler.join()
            b["attack_rss"] = max(s[0] for s in sampled)
            b["attack_threads"] = max(s[4] for s in sampled)
            if b["proc"].poll() is not None:
                raise SystemExit(f"{b['name']} exited during the attack")
    finally:
        for b in builds:
            if "proc" in b:
                b["proc"].terminate()
                try:
                    b["proc"].wait(5)
                except subprocess.TimeoutExpired:
                    b["proc"].kill()

    x, y = builds
    print(f"{a.scrapes} interleaved scrapes after {a.idle:.0f} s idle, then {a.attack:.0f} s of 100 "
          f"slowloris connections on each build's --listen in turn; 2 CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end.\n")
    print(f"| measure | {x['name']} | {y['name']} | {y['name']} / {x['name']} |")
    print("|---|---:|---:|---:|")

    mib, count = "{:.3f}", "{:.0f}"
    rows = [("RSS at idle (MiB)", lambda b: b["idle"][0] / MIB, mib),
            ("USS at idle (MiB)", lambda b: b["idle"][2] / MIB, mib),
            ("threads at idle", lambda b: b["idle"][4], count),
            (f"RSS after {a.scrapes} scrapes (MiB)", lambda b: b["after"][0] / MIB, mib),
            (f"USS after {a.scrapes} scrapes (MiB)", lambda b: b["after"][2] / MIB, mib),
            (f"threads after {a.scrapes} scrapes", lambda b: b["after"][4], count),
            ("/metrics latency median (ms)", lambda b: 1000 * b["lat"][len(b["lat"]) // 2], mib),
            ("/metrics latency p90 (ms)", lambda b: 1000 * b["lat"][int(0.9 * (len(b["lat"]) - 1))], mib),
            ("peak RSS under slowloris (MiB)", lambda b: b["attack_rss"] / MIB, mib),
            ("peak threads under slowloris", lambda b: b["attack_threads"], count),
            ("kubelet probes failed under slowloris", lambda b: sum(st != 200 for _, st, _ in b["probes"]), count),
            ("slowest kubelet probe under slowloris (ms)", lambda b: 1000 * max(t for t, _, _ in b["probes"]), mib),
            ("scrapes answered / tried under slowloris", lambda b: sum(ok for _, ok in b["scrapes"]), count)]
    for label, f, fmt in rows:
        vx, vy = f(x), f(y)
        ratio = f"{vy / vx:.3f}" if vx else "n/a"
        if label.startswith("scrapes answered"):
            vx, vy = (f"{f(b):.0f} / {len(b['scrapes'])}" for b in (x, y))
            print(f"| {label} | {vx} | {vy} | {ratio} |")
            continue
        print(f"| {label} | {fmt.format(vx)} | {fmt.format(vy)} | {ratio} |")
    print()
    for b in builds:
        target = "--health-listen" if b["health"] else "--listen"
        print(f"- {b['name']}: `{b['binary']}`, kubelet probes to {target}; "
              f"{len(b['probes'])} probes under attack.")


if __name__ == "__main__":
    main()
