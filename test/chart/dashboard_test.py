#!/usr/bin/env python3
"""Every query of the chart's Grafana dashboard against a real Prometheus server fed by real
scrapes of the real agent on fixture hosts (test/chart/scrapes.py).

Node n1 (bare-metal Intel tree, a thin pool 85 % full, the DNS tracer loaded when root) has its
gate open; n2 (a cloud guest without vmx) has it closed. Prometheus (Debian package) scrapes both
every second and labels them with `node` as the chart's ServiceMonitor does. Each panel's query,
with $node = .* and $__rate_interval = 10s, must return data, and the gate and check panels the
values the agents themselves report. Panels whose families need what no test host has (local PVs,
guest DNS traffic, a Kubernetes API) are listed in NEEDS with the reason; their metric names are
checked against docs/metrics.md by metrics_docs_test.py. Ports 19890-19895.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import scrapes  # noqa: E402

PROM_PORT = 19895
NEEDS = {
    "Local PV used": "a local PV bound to the node",
    "Read-only local PVs": "a read-only local PV",
    "Guest DNS queries by result": "guest DNS queries through a traced launcher",
    "Guest DNS drops by hop and reason": "a guest DNS packet dropped by the kernel",
    "Guest DNS lost on the path, by VM": "a guest DNS query lost on the path",
    "API requests by verb and code": "a Kubernetes API (--kube other than none)",
}


def query(expr):
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.load(r)
    if doc["status"] != "success":
        raise AssertionError(f"{expr}: {doc}")
    return doc["data"]["result"]


def main():
    with open(os.path.join(scrapes.SRC, "charts", "nodegate", "files", "dashboard.json")) as f:
        dash = json.load(f)
    root = os.geteuid() == 0
    if not root:
        NEEDS["Tracer events lost"] = "the DNS tracer (root)"
        print("note: not root, so the DNS tracer is not loaded (CI runs as root)")
    n1 = scrapes.Agent("intel-baremetal-vmx", 19890, ["cpu-virt", "kernel-modules"], "thinpool-85.json",
                       dns_trace="on" if root else "off")
    n2 = scrapes.Agent("cloud-guest-no-vmx", 19892, ["cpu-virt", "kernel-modules"])
    work = tempfile.mkdtemp(prefix="nodegate-dashboard.")
    prom = None
    try:
        c1, c2 = n1.checks(), n2.checks()
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: nodegate
    static_configs:
      - targets: ["127.0.0.1:19890"]
        labels: {{node: n1}}
      - targets: ["127.0.0.1:19892"]
        labels: {{node: n2}}
""")
        log = open(os.path.join(work, "prometheus.log"), "w")
        prom = subprocess.Popen(["prometheus", f"--config.file={work}/prometheus.yml",
                                 f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address=127.0.0.1:{PROM_PORT}",
                                 "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:  # both targets scraped, and long enough for a 10 s rate()
            try:
                up = query('up{job="nodegate"} == 1')
                if len(up) == 2 and query("count_over_time(nodegate_gate_open[10s]) >= 5"):
                    break
            except OSError:
                pass
            if time.time() > deadline or prom.poll() is not None:
                sys.exit(f"FAIL: prometheus did not scrape both agents (log {log.name})")
            time.sleep(0.5)

        failures, checked = [], 0
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                expr = t["expr"].replace("$node", ".*").replace("$__rate_interval", "10s")
                result = query(expr)
                title = panel["title"]
                if title in NEEDS:
                    print(f"skip {title}: needs {NEEDS[title]}")
                    continue
                checked += 1
                if not result:
                    failures.append(f"panel '{title}' returned no data: {expr}")
                else:
                    print(f"ok   {title}: {len(result)} series")

        def value(expr):
            (r,) = query(expr)
            return float(r["value"][1])
        by_title = {p["title"]: p["targets"][0]["expr"] for p in dash["panels"] if p.get("targets")}
        expect = [("Nodes with the gate open", ".*", 1), ("Nodes with the gate closed", ".*", 1),
                  ("Nodes with the gate closed", "n1", 0)]  # 0, not "No data", where all are open
        for title, node, want in expect:
            got = value(by_title[title].replace("$node", node))
            if got != want:
                failures.append(f"'{title}' with node=~{node}: {got}, want {want}")
        rows = {(r["metric"]["node"], r["metric"]["check"]) for r in query(by_title["Checks not passing"].replace("$node", ".*"))}
        want = {(n, c["check"]) for n, cs in (("n1", c1), ("n2", c2)) for c in cs["checks"] if c["status"] != "PASS"}
        if rows != want:
            failures.append(f"'Checks not passing' shows {sorted(rows)}, the agents report {sorted(want)}")
        versions = query(by_title["Agent versions"].replace("$node", ".*"))
        if [float(v["value"][1]) for v in versions] != [2.0]:
            failures.append(f"'Agent versions': {versions}")
        var = dash["templating"]["list"]
        node_var = next(v for v in var if v.get("name") == "node")["query"]["query"]
        # label_values(metric, label) is Grafana's; the same question to Prometheus:
        metric = node_var[node_var.index("(") + 1:node_var.index(",")]
        nodes = sorted(r["metric"]["node"] for r in query(f"count by (node) ({metric})"))
        if nodes != ["n1", "n2"]:
            failures.append(f"the $node variable ({node_var}) would list {nodes}")
        for f_ in failures:
            print("FAIL " + f_)
        if failures:
            sys.exit(1)
        print(f"dashboard: {checked} panel queries returned data, {len(NEEDS)} need what no test host has")
    finally:
        if prom:
            prom.terminate()
            prom.wait(10)
        n1.stop()
        n2.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
