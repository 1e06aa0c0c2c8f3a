#!/usr/bin/env python3
"""Every metric name the chart's dashboard and alerts use exists in the real agent.

Starts `$NODEGATE agent --kube none` on this host, scrapes /metrics, and compares with the names in
files/dashboard.json and the rendered PrometheusRule. Some families only appear when their probe
has something to report (a thin pool, a local PV, a traced VM); those are listed in CONDITIONAL with
the reason, and for them the test requires the exact name as a string literal in the agent's C++
sources instead, so a renamed metric still fails here.
"""
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

SRC = os.environ["NODEGATE_SRC"]
BUILD = os.environ["NODEGATE_BUILD"]
BINARY = os.environ["NODEGATE"]
PORT, DEBUG_PORT = 19820, 19821

# Not produced by nodegate at all.
PROMETHEUS_BUILTIN = {"up": "set by Prometheus for every scrape target"}
# Families a probe publishes only when the host has the thing it measures.
CONDITIONAL = {
    "nodegate_lvm_thin_pool_data_ratio": "lvm probe, only for thin pools (none without device-mapper)",
    "nodegate_lvm_vg_free_bytes": "lvm probe, only for volume groups",
    "nodegate_local_pv_used_bytes": "local-pv probe, only for local PVs bound to the node",
    "nodegate_local_pv_read_only": "local-pv probe, only for local PVs bound to the node",
    "nodegate_time_synchronized": "time-sync probe, once a source could be read",
    "nodegate_time_max_error_seconds": "time-sync probe, once adjtimex could be read",
    "nodegate_dns_queries_total": "DNS tracer, only once a guest query was seen",
    "nodegate_dns_drops_total": "DNS tracer, only once a DNS packet was dropped",
    "nodegate_bpf_events_lost_total": "DNS tracer, only while tracing is loaded",
    "nodegate_kube_requests_total": "Kubernetes client, only with --kube other than none",
}
NAME = re.compile(r"\b(nodegate_[a-z0-9_]+|up)\b(?!\s*\()")


def used_names():
    with open(os.path.join(SRC, "charts", "nodegate", "files", "dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        q = v.get("query")
        if isinstance(q, dict):
            exprs.append(q.get("query", ""))
    render = os.path.join(BUILD, "test-chart", "render", "monitoring-1.31.yaml")
    with open(render) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    exprs += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    names = set()
    for e in exprs:
        # Label values inside quotes are not metric names.
        names |= set(NAME.findall(re.sub(r'"[^"]*"', '""', e)))
    return names


def scraped_names(text):
    names = set()
    for line in text.splitlines():
        m = re.match(r"# (?:HELP|TYPE) (\S+)", line) or re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
        if m:
            names.add(m.group(1))
    for n in list(names):
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix):
                names.add(n[: -len(suffix)])
    return names


def in_sources(name):
    for path in glob.glob(os.path.join(SRC, "agent", "**", "*.cpp"), recursive=True) + \
            glob.glob(os.path.join(SRC, "probes", "**", "*.cpp"), recursive=True) + \
            glob.glob(os.path.join(SRC, "bpf", "**", "*.cpp"), recursive=True):
        with open(path, errors="replace") as f:
            if f'"{name}"' in f.read():
                return path
    return None


def get(path, timeout=2):
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


def main():
    used = used_names()
    if len(used) < 10:
        sys.exit(f"FAIL: found only {sorted(used)} in the dashboard and alerts")
    log = open(os.path.join(BUILD, "test-chart", "metrics-agent.log"), "w")
    agent = subprocess.Popen([BINARY, "agent", "--kube", "none", "--listen", f"127.0.0.1:{PORT}",
                              "--debug-listen", f"127.0.0.1:{DEBUG_PORT}", "--node-name", "chart-test",
                              # a tracer would attach to the namespaces of DNS tests running beside it
                              "--dns-trace", "off"],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            if agent.poll() is not None:
                sys.exit(f"FAIL: the agent exited with {agent.returncode} (log: {log.name})")
            try:
                if get("/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit(f"FAIL: the agent did not become ready on 127.0.0.1:{PORT} in 30 s (log: {log.name})")
            time.sleep(0.2)
        status, text = get("/metrics")
        if status != 200:
            sys.exit(f"FAIL: /metrics answered {status}")
    finally:
        agent.terminate()
        try:
            agent.wait(5)
        except subprocess.TimeoutExpired:
            agent.kill()
    scraped = scraped_names(text)
    failures = []
    for name in sorted(used):
        if name in scraped:
            print(f"ok   {name}: in the scrape")
        elif name in PROMETHEUS_BUILTIN:
            print(f"ok   {name}: {PROMETHEUS_BUILTIN[name]}")
        elif name in CONDITIONAL:
            where = in_sources(name)
            if where:
                print(f"ok   {name}: not in this host's scrape ({CONDITIONAL[name]}); defined in {os.path.relpath(where, SRC)}")
            else:
                failures.append(f"{name}: not in the scrape and not defined in the agent's sources")
        else:
            failures.append(f"{name}: not in the scrape of the agent")
    for f in failures:
        print("FAIL " + f)
    if failures:
        sys.exit(1)
    print(f"{len(used)} metric names checked against a scrape of {len(scraped)} names")


if __name__ == "__main__":
    main()
