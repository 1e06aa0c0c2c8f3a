#!/usr/bin/env python3
"""docs/metrics.md against real scrapes, and a golden scrape (node_exporter's end-to-end test).

1. The real agent runs on fixture hosts (test/chart/scrapes.py): intel-baremetal-vmx with a thin
   pool (fake lvm), cloud-guest-no-vmx, and, as root, intel-baremetal-vmx with the DNS tracer
   loaded. Every family of those scrapes must be a row of docs/metrics.md, and every row must
   appear in a scrape unless it is marked *conditional* there (then its name must at least be
   defined in the agent's sources, so a rename still fails).
   Every metric name the chart's dashboard and alerts use must be a row too (or Prometheus's `up`,
   or a series the rules record themselves).
2. The first scrape, reduced to what does not vary between runs (HELP, TYPE, every series' name
   and labels; the version label and check_info's status and reason masked; no values), must
   equal test/fixtures/metrics/scrape.golden. After an intended change:
   NODEGATE_UPDATE_GOLDEN=1 ctest --test-dir build -R chart_metrics_docs, then review git diff.
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
import scrapes  # noqa: E402

GOLDEN = os.path.join(scrapes.SRC, "test", "fixtures", "metrics", "scrape.golden")
MASKED = {("nodegate_build_info", "version"), ("nodegate_check_info", "status"), ("nodegate_check_info", "reason")}


def documented():
    out = {}
    with open(os.path.join(scrapes.SRC, "docs", "metrics.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            m = re.fullmatch(r"`([a-z_:]+)`", cells[0]) if len(cells) >= 5 else None
            if m:
                out[m.group(1)] = {"type": cells[1],
                                   "labels": sorted(l.strip() for l in cells[2].split(",") if l.strip()),
                                   "conditional": "*conditional*" in cells[4]}
    return out


def in_sources(name):
    for path in glob.glob(os.path.join(scrapes.SRC, "agent", "**", "*.cpp"), recursive=True) + \
            glob.glob(os.path.join(scrapes.SRC, "probes", "**", "*.cpp"), recursive=True):
        with open(path, errors="replace") as f:
            if f'"{name}"' in f.read():
                return True
    return False


NAME = re.compile(r"\b(nodegate_[a-z0-9_]+|nodegate:[a-z0-9_:]+|up)\b(?!\s*\()")


def used_names():
    """Metric names in files/dashboard.json and the rendered PrometheusRule; recorded names apart."""
    import json
    import yaml
    with open(os.path.join(scrapes.SRC, "charts", "nodegate", "files", "dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"].get("query", "") for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    render = os.path.join(os.environ["NODEGATE_BUILD"], "test-chart", "render", "monitoring-1.31.yaml")
    with open(render) as f:
        (rule,) = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "PrometheusRule"]
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    exprs += [r["expr"] for r in rules]
    recorded = {r["record"] for r in rules if "record" in r}
    names = set()
    for e in exprs:
        names |= set(NAME.findall(re.sub(r'"[^"]*"', '""', e)))  # label values are not names
    return names - recorded - {"up"}


def golden_text(fams):
    lines = []
    for name in sorted(fams):
        f = fams[name]
        lines.append(f"# HELP {name} {f['help']}")
        lines.append(f"# TYPE {name} {f['type']}")
        seen = set()
        for sample, labels, _ in f["samples"]:
            shown = {k: ("<masked>" if (name, k) in MASKED else v) for k, v in labels.items()}
            key = sample + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}"
            seen.add(key)
        lines.extend(sorted(seen))
    return "\n".join(lines) + "\n"


def main():
    docs = documented()
    if len(docs) < 30:
        sys.exit(f"FAIL: only {len(docs)} rows parsed from docs/metrics.md")
    runs = [("intel-baremetal-vmx", 19884, "thinpool-85.json", "off"),
            ("cloud-guest-no-vmx", 19886, "healthy.json", "off")]
    if os.geteuid() == 0:
        runs.append(("intel-baremetal-vmx", 19888, "healthy.json", "on"))
    else:
        print("note: not root, so no scrape with the DNS tracer (CI runs as root)")
    scraped, first = {}, None
    for scenario, port, lvm, dns in runs:
        a = scrapes.Agent(scenario, port, ["cpu-virt", "kernel-modules"], lvm, dns_trace=dns)
        try:
            text = a.scrape()
        finally:
            a.stop()
        fams = scrapes.parse(text)
        first = first or fams
        for name, f in fams.items():
            labels = set()
            for sample, l, _ in f["samples"]:
                labels |= set(l) - {"le", "quantile"}
            scraped.setdefault(name, {"type": f["type"], "labels": set()})["labels"] |= labels
        print(f"scraped {scenario} (dns-trace {dns}): {len(fams)} families")

    failures = []
    for name, f in sorted(scraped.items()):
        d = docs.get(name)
        if not d:
            failures.append(f"{name} ({f['type']}) is in a real scrape but not in docs/metrics.md")
            continue
        if d["type"] != f["type"]:
            failures.append(f"{name}: docs/metrics.md says {d['type']}, the scrape {f['type']}")
        if d["labels"] != sorted(f["labels"]):
            failures.append(f"{name}: docs/metrics.md lists labels {d['labels']}, the scrape has {sorted(f['labels'])}")
    for name, d in sorted(docs.items()):
        if name in scraped:
            continue
        if not d["conditional"]:
            failures.append(f"{name} is in docs/metrics.md but in no real scrape (mark it *conditional* only if "
                            "a test host cannot produce it)")
        elif not in_sources(name):
            failures.append(f"{name} (conditional) is not defined anywhere in the agent's sources")
    used = used_names()
    if len(used) < 10:
        failures.append(f"found only {sorted(used)} in the dashboard and alerts")
    for name in sorted(used - set(docs)):
        failures.append(f"{name} is used by the dashboard or the alerts but is not a family of docs/metrics.md")
    for f in failures:
        print("FAIL " + f)

    got = golden_text(first)
    if os.environ.get("NODEGATE_UPDATE_GOLDEN"):
        with open(GOLDEN, "w") as f:
            f.write(got)
        print(f"updated {GOLDEN}")
    else:
        want = open(GOLDEN).read() if os.path.exists(GOLDEN) else ""
        if got != want:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                       "scrape.golden", "this scrape"))
            failures.append("the scrape differs from test/fixtures/metrics/scrape.golden (a metric, label or HELP "
                            "changed); if intended: NODEGATE_UPDATE_GOLDEN=1 ctest --test-dir build -R chart_metrics_docs")
            print("FAIL " + failures[-1])
    if failures:
        sys.exit(1)
    print(f"{len(scraped)} scraped families documented; {len(docs)} rows; golden scrape equal")


if __name__ == "__main__":
    main()
