#!/usr/bin/env python3
"""Fleet benchmark for the Kubernetes publisher (figures go to docs/benchmarks/kube.md).

Runs N simulated agents (real KubePublisher instances, see kube_fleet.cpp) in P processes
against the fake API server and reads the server's request log:
  1. first start: every node gets its labels/conditions (the one-time install burst);
  2. whole-fleet restart with the same state: request rate per second (peak vs mean), and
     writes (must be 0: no label removed and re-added);
  3. steady state with resyncs every --resync seconds: writes per node per hour, split into
     metadata patches, status patches (heartbeats) and events;
  4. fault-to-API latency: agents flip one check at a time while the fleet runs; the time
     from publish() to the PATCH arriving at the server.

usage: tools/bench/kube-fleet.py --build BUILD_DIR [--agents 2000] [--procs 4] [--steady 180]
"""

import argparse
import collections
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
from harness import FakeApi  # noqa: E402


class Shards:
    """One fake API server per kube_fleet process: a single Python server tops out near 200
    requests/s on this machine, which capped the fleet at 1000 agents. Each server holds the
    nodes of its process; their request logs are merged by wall-clock time."""

    def __init__(self, procs, agents):
        self.per = agents // procs
        self.apis = []
        for p in range(procs):
            api = FakeApi("bench%d" % p, plain=True, bookmark_interval=60, port_range="19900-19999")
            self.apis.append(api)
            for i in range(p * self.per, (p + 1) * self.per):
                api.call("POST", "/fake/nodes", {"name": "fleet-%d" % i})

    def marks(self):
        return [api.last_seq() for api in self.apis]

    def requests(self, marks):
        reqs = [r for api, m in zip(self.apis, marks) for r in api.requests(m)]
        return sorted(reqs, key=lambda r: r["time"])

    def start(self, binary, p, duration, extra):
        cmd = [binary, "--kubeconfig", self.apis[p].kubeconfig, "--agents", str(self.per),
               "--first", str(p * self.per), "--duration", str(duration)] + [str(x) for x in extra]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)

    def close(self):
        for api in self.apis:
            api.close()


def node_of(r):
    """The node a request is about: from the path, or from an event's regarding/name."""
    p = r["path"]
    if p.startswith("/api/v1/nodes/"):
        return p.split("/")[4]
    body = r.get("body")
    if isinstance(body, dict) and isinstance(body.get("regarding"), dict):
        return body["regarding"].get("name")
    if "/events/" in p:
        return p.rsplit("/", 1)[1].rsplit(".", 1)[0]
    return None


def heartbeat_only(r):
    """A status patch that changes no condition: every condition keeps an older transition time."""
    conds = (r.get("body") or {}).get("status", {}).get("conditions") if isinstance(r.get("body"), dict) else None
    return bool(conds) and all(c.get("lastTransitionTime", "") < c.get("lastHeartbeatTime", "") for c in conds)


def label_removals(reqs):
    """Node patches that delete a label (merge-patch null): what a flapping restart would send."""
    n = 0
    for r in reqs:
        body = r.get("body")
        if r["method"] == "PATCH" and isinstance(body, dict):
            n += sum(1 for v in (body.get("metadata", {}).get("labels") or {}).values() if v is None)
    return n


def summarize(reqs, t0, t1, agents):
    per_sec = collections.Counter(int(r["time"] - t0) for r in reqs if t0 <= r["time"] < t1)
    kinds = collections.Counter()
    for r in reqs:
        if not t0 <= r["time"] < t1:
            continue
        p = r["path"]
        if r["method"] == "GET":
            kinds["watch" if "watch=" in r["query"] else "get"] += 1
        elif p.endswith("/status"):
            kinds["heartbeat" if heartbeat_only(r) else "status patch"] += 1
        elif "/events" in p:
            kinds["event " + r["method"].lower()] += 1
        else:
            kinds["node patch"] += 1
    # The busiest second of the busiest single agent: what its own token bucket had to allow.
    node_sec = collections.Counter((node_of(r), int(r["time"] - t0)) for r in reqs
                                   if t0 <= r["time"] < t1 and node_of(r))
    secs = max(1.0, t1 - t0)
    return {"requests": sum(kinds.values()), "by_kind": dict(kinds),
            "peak_rps": max(per_sec.values()) if per_sec else 0,
            "mean_rps": sum(per_sec.values()) / secs, "per_node": sum(kinds.values()) / agents,
            "node_peak_rps": max(node_sec.values()) if node_sec else 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--steady", type=float, default=180)
    ap.add_argument("--resync", type=float, default=10)
    ap.add_argument("--heartbeat", type=float, default=60)
    ap.add_argument("--startup-jitter", type=float, default=10)
    ap.add_argument("--flips", type=int, default=40)
    args = ap.parse_args()
    binary = os.path.join(args.build, "test", "kube", "kube_fleet")
    shards = Shards(args.procs, args.agents)
    try:
        common = ["--resync", args.resync, "--heartbeat", args.heartbeat, "--startup-jitter", args.startup_jitter]

        # 1. first start
        seq = shards.marks()
        t0 = time.time()
        ps = [shards.start(binary, p, args.startup_jitter + 15, common) for p in range(args.procs)]
        for p in ps:
            p.communicate()
        t1 = time.time()
        first = summarize(shards.requests(seq), t0, t1, args.agents)

        # 2 + 3 + 4. restart with the same state, stay for the steady window, flip now and then.
        seq = shards.marks()
        t0 = time.time()
        flip_every = max(0.5, args.steady / max(1, args.flips))
        ps = []
        for p in range(args.procs):
            extra = common + (["--flip-every", flip_every, "--flip-after", args.startup_jitter + 5] if p == 0 else [])
            ps.append(shards.start(binary, p, args.startup_jitter + 5 + args.steady, extra))
        outs = [p.communicate()[0] for p in ps]
        t_end = time.time()
        reqs = shards.requests(seq)
        burst_end = t0 + args.startup_jitter + 5
        restart = summarize(reqs, t0, burst_end, args.agents)
        flip_nodes = set()
        flips = []
        for line in outs[0].splitlines():
            if line.startswith("flip "):
                _, node, t = line.split()
                flips.append((node, float(t)))
                flip_nodes.add(node)
        # Steady state: everything after the restart burst, minus the flipping agents' own writes.
        steady_reqs = [r for r in reqs if node_of(r) not in flip_nodes]
        steady = summarize(steady_reqs, burst_end, t_end, args.agents - len(flip_nodes))
        hours = (t_end - burst_end) / 3600
        writes = {k: v / (args.agents - len(flip_nodes)) / hours for k, v in steady["by_kind"].items()
                  if k not in ("get", "watch")}
        lat = []
        for node, t in flips:
            # The first write about that node (label patch or condition patch, whichever comes first).
            hit = next((r["time"] for r in reqs if r["method"] == "PATCH" and r["time"] >= t
                        and r["path"].startswith("/api/v1/nodes/") and node_of(r) == node), None)
            if hit is not None:
                lat.append(hit - t)
        restart_writes = {k: v for k, v in restart["by_kind"].items() if k not in ("get", "watch", "heartbeat")}
        removed = label_removals([r for r in reqs if t0 <= r["time"] < burst_end])
        print("agents=%d procs=%d resync=%ss heartbeat=%ss startup_jitter=%ss steady=%ss"
              % (args.agents, args.procs, args.resync, args.heartbeat, args.startup_jitter, args.steady))
        print("first start: %d requests (%.2f/node), peak %d req/s, mean %.1f req/s, busiest agent %d req/s, %s"
              % (first["requests"], first["per_node"], first["peak_rps"], first["mean_rps"],
                 first["node_peak_rps"], first["by_kind"]))
        print("restart burst: %d requests (%.2f/node), peak %d req/s, mean %.1f req/s, busiest agent %d req/s, "
              "%s, writes besides heartbeats %s, labels removed %d"
              % (restart["requests"], restart["per_node"], restart["peak_rps"], restart["mean_rps"],
                 restart["node_peak_rps"], restart["by_kind"], restart_writes or "none", removed))
        print("steady state: %.0f s, writes per node per hour: %s"
              % (t_end - burst_end, {k: round(v, 2) for k, v in writes.items()} or "none"))
        if lat:
            lat.sort()
            print("fault-to-PATCH latency over %d flips: p50 %.1f ms, p90 %.1f ms, max %.1f ms"
                  % (len(lat), 1000 * statistics.median(lat), 1000 * lat[int(0.9 * (len(lat) - 1))], 1000 * lat[-1]))
        else:
            print("fault-to-PATCH latency: no flips matched")
    finally:
        shards.close()


if __name__ == "__main__":
    main()
