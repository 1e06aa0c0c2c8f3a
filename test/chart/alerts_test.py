#!/usr/bin/env python3
"""promtool test rules of the chart's alerts, fed with real scrapes.

The input series of the check, gate, thin-pool and clock alerts are not written by hand: two real
agents run on fixture hosts (test/chart/scrapes.py), node n1 on a bare-metal Intel tree whose CPU
then loses vmx (its gate opens, then closes), node n2 on a cloud guest without vmx (its gate never
opens); their /metrics become promtool input series (minutes 0-19 the first scrape, 20-59 the
second). What must fire is taken from the same agents' /api/v1/checks (statuses, reasons, the
policy) and from fixed facts of the scenario (n1's gate was open, n2's never was; n1's thin pool is
85 % full). So a rule matching "fail" where the agent says "FAIL" finds nothing and fails here.

Alerts whose inputs need what these runs cannot have (Prometheus's own `up`, a Kubernetes API, the
DNS tracer, a local PV) keep hand-written cases in alerts_test.yaml; their metric names must be
families of docs/metrics.md and their DNS `result` values the agent's verdict names.

Usage: alerts_test.py RULES_FILE HAND_TESTS OUT_DIR  (promtool_test.sh runs it).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(__file__))
import scrapes  # noqa: E402

RB = "https://github.com/nodegate/nodegate/blob/main/docs/runbooks/"
STEPS_A, STEPS_B = 20, 40  # minutes of the first and the second scrape
REQUIRED = ["cpu-virt", "kernel-modules"]


def series_of(scrape, node):
    out = {}
    for fam in scrapes.parse(scrape).values():
        for name, labels, value in fam["samples"]:
            if value != value or value in (float("inf"), float("-inf")):
                continue
            labels = dict(labels, job="nodegate", instance=f"{node}:9810", node=node)
            key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            out[key] = value
    return out


def values(a, b):
    """promtool notation: a for STEPS_A samples, then b for STEPS_B ('_' = no sample)."""
    part = lambda v, n: f"{'_' if v is None else repr(v)}x{n - 1}"
    return part(a, STEPS_A) + " " + part(b, STEPS_B)


def pct(v):
    s = "%.4g" % (v * 100)
    return s + "%"


def check_alerts(checks, node, status):
    """The alerts the agent's own verdicts call for: one per check in `status`."""
    required = set(checks["gate"]["required"])
    out = []
    for c in checks["checks"]:
        if c["status"] != status:
            continue
        if c["reason"] == "NoApiConnection":
            continue  # kubevirt-node in a run without the API (the scrapes are --kube none): no alert
        name, reason = c["check"], c["reason"]
        labels = {"job": "nodegate", "instance": f"{node}:9810", "node": node, "check": name, "status": status}
        if status == "FAIL" and name in required:
            labels.update(severity="warning", gating="true")
            ann = {"summary": f"nodegate check {name} fails on {node} and keeps its gate closed",
                   "description": f"The {name} check, which the gate policy requires, has been FAIL on {node} for 5 minutes: "
                                  f"{reason}. The hint is on the node's nodegate page and in `nodegate check`.",
                   "runbook_url": RB + "NodegateCheckFailing.md"}
        elif status == "FAIL":
            labels.update(severity="info", gating="false")
            ann = {"summary": f"nodegate check {name} fails on {node}",
                   "description": f"The {name} check has been FAIL on {node} for 5 minutes: {reason}. "
                                  "The gate policy does not require it, so VMs are still scheduled there.",
                   "runbook_url": RB + "NodegateCheckFailing.md"}
        else:
            labels.update(severity="warning")
            gate = ("this required check keeps the gate closed." if name in required
                    else "the gate policy does not require this check.")
            ann = {"summary": f"nodegate cannot decide check {name} on {node}",
                   "description": f"The {name} check has been UNKNOWN on {node} for 15 minutes: {reason} "
                                  "(nodegate could not read what it needs: permission, missing mount, D-Bus down). "
                                  f"UNKNOWN never counts as PASS: {gate}",
                   "runbook_url": RB + "NodegateCheckUnknown.md"}
        out.append({"exp_labels": labels, "exp_annotations": ann})
    return out


def gate_closed(checks, node):
    blockers = sorted(c for c in checks["checks"] if c["check"] in checks["gate"]["blockers"])
    blocked = ", ".join(f"{c['check']} ({c['status']} {c['reason']})"
                        for c in sorted((c for c in checks["checks"] if c["check"] in checks["gate"]["blockers"]),
                                        key=lambda c: c["check"]))
    assert blockers, f"{node}: the gate is closed but the agent names no blocker"
    return {"exp_labels": {"severity": "warning", "job": "nodegate", "instance": f"{node}:9810", "node": node},
            "exp_annotations": {
                "summary": f"VM scheduling is gated off on {node}",
                "description": f"The gate of {node}, open within the last 7d, has been closed for 10m: new VMs are not "
                               f"scheduled there. Blocked by: {blocked}.",
                "runbook_url": RB + "NodegateGateClosed.md"}}


def thin_pool_alerts(series, lvm):
    levels = [("data_warn_percent", "warning", "data", "nodegate_lvm_thin_pool_data_ratio"),
              ("data_fail_percent", "critical", "data", "nodegate_lvm_thin_pool_data_ratio"),
              ("metadata_warn_percent", "warning", "metadata", "nodegate_lvm_thin_pool_metadata_ratio"),
              ("metadata_fail_percent", "critical", "metadata", "nodegate_lvm_thin_pool_metadata_ratio")]
    out = []
    for key, sev, what, metric in levels:
        limit = lvm[key]
        for s, v in series.items():
            if not s.startswith(metric + "{") or v <= limit / 100:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', s))
            tail = (" Extend it or free space now: at 100% the VMs on it pause or see I/O errors." if sev == "critical"
                    else " When it reaches 100% every VM disk in it stops taking writes.")
            out.append({"exp_labels": dict(labels, severity=sev, space=what),
                        "exp_annotations": {
                            "summary": f"thin pool {labels['vg']}/{labels['lv']} on {labels['node']} is {pct(v)} full ({what})",
                            "description": f"LVM thin pool {labels['vg']}/{labels['lv']} on {labels['node']} is above "
                                           f"{limit:g}% {what} usage (config.checks.lvm.{key}, which the lvm check uses too).{tail}",
                            "runbook_url": RB + "NodegateThinPoolFillingUp.md"}})
    return out


def clock_alerts(series):
    out = []
    for s, v in series.items():
        if s.startswith("nodegate_time_synchronized{") and v == 0:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', s))
            n = labels["node"]
            out.append({"exp_labels": dict(labels, severity="warning"),
                        "exp_annotations": {
                            "summary": f"the clock of {n} is not synchronised",
                            "description": f"Neither timedated nor the kernel (adjtimex) reports {n}'s clock as synchronised "
                                           "for 10 minutes. Drift breaks TLS, token validation and guest time.",
                            "runbook_url": RB + "NodegateClockNotSynchronised.md"}})
    return out


def lost_verdicts():
    """The agent's DNS verdict names (agent/dns/correlator.cpp, verdictName)."""
    with open(os.path.join(scrapes.SRC, "agent", "dns", "correlator.cpp")) as f:
        text = f.read()
    body = text[text.index("verdictName("):]
    body = body[:body.index("\n}\n")]
    return set(re.findall(r'return "([a-z_]+)";', body))


def check_hand_tests(hand, rules_text):
    """Hand-written cases may only use documented families and real DNS verdict names."""
    with open(os.path.join(scrapes.SRC, "docs", "metrics.md")) as f:
        documented = set(re.findall(r"^\| `([a-z_:]+)` \|", f.read(), re.M))
    verdicts = lost_verdicts()
    problems = []
    for t in hand["tests"]:
        for s in t.get("input_series", []):
            name = s["series"].split("{")[0]
            if name != "up" and name not in documented:
                problems.append(f"{t['name']}: {name} is not a family of docs/metrics.md")
            for v in re.findall(r'result="([^"]*)"', s["series"]):
                if v not in verdicts:
                    problems.append(f"{t['name']}: result=\"{v}\" is not a verdict name of the agent {sorted(verdicts)}")
    for v in re.findall(r'result=~"([^"]*)"', rules_text):
        for alt in v.split("|"):
            if alt not in verdicts:
                problems.append(f"rules: result {alt!r} is not a verdict name of the agent {sorted(verdicts)}")
    return problems


def main():
    rules_file, hand_file, out_dir = sys.argv[1:4]
    rules_text = open(rules_file).read()
    with open(rules_file) as f:
        groups = yaml.safe_load(f)["groups"]
    hand = yaml.safe_load(open(hand_file))
    problems = check_hand_tests(hand, rules_text)
    if problems:
        sys.exit("FAIL:\n  " + "\n  ".join(problems))
    # The lvm thresholds the rules were rendered with (the chart's config.checks.lvm defaults).
    lvm = {}
    for g in groups:
        for r in g["rules"]:
            m = re.match(r"nodegate_lvm_thin_pool_(data|metadata)_ratio > ([0-9.]+)$", r.get("expr", ""))
            if m:
                key = f"{m.group(1)}_{'fail' if r['labels']['severity'] == 'critical' else 'warn'}_percent"
                lvm[key] = round(float(m.group(2)) * 100, 6)

    n1 = scrapes.Agent("intel-baremetal-vmx", 19880, REQUIRED, "thinpool-85.json")
    n2 = scrapes.Agent("cloud-guest-no-vmx", 19882, REQUIRED)
    try:
        a1, c1a = n1.scrape(), n1.checks()
        if not c1a["gate"]["open"]:
            sys.exit(f"FAIL: n1's gate should be open before the fault: {c1a['gate']}")
        # The fault: the CPU no longer shows vmx (the cloud guest's real cpuinfo).
        def lose_vmx(root):
            os.remove(os.path.join(root, "proc", "cpuinfo"))
            shutil.copy(os.path.join(scrapes.HOSTS, "cloud-guest-no-vmx", "proc", "cpuinfo"),
                        os.path.join(root, "proc", "cpuinfo"))
        n1.change(lose_vmx, lambda c: not c["gate"]["open"])
        b1, c1b = n1.scrape(), n1.checks()
        b2, c2 = n2.scrape(), n2.checks()
    finally:
        n1.stop()
        n2.stop()
    if c2["gate"]["open"]:
        sys.exit("FAIL: n2 (no vmx) has its gate open")

    s1a, s1b, s2 = series_of(a1, "n1"), series_of(b1, "n1"), series_of(b2, "n2")
    inputs = []
    for key in sorted(set(s1a) | set(s1b)):
        inputs.append({"series": key, "values": values(s1a.get(key), s1b.get(key))})
    for key in sorted(s2):
        inputs.append({"series": key, "values": values(s2[key], s2[key])})

    pools = thin_pool_alerts(s1a, lvm)
    if not any(a["exp_labels"]["node"] == "n1" and a["exp_labels"]["severity"] == "warning" for a in pools):
        sys.exit(f"FAIL: n1's thin pool (85 % full, thinpool-85.json) calls for no warning: {pools}")
    t = lambda at, name, exp: {"eval_time": at, "alertname": name, "exp_alerts": exp}
    tests = [{
        "name": "real scrapes: n1 gate open then closed (vmx lost at 20m), n2 never open",
        "interval": "1m",
        "input_series": inputs,
        "alert_rule_test": [
            t("3m", "NodegateCheckFailing", []),
            t("17m", "NodegateCheckFailing", check_alerts(c1a, "n1", "FAIL") + check_alerts(c2, "n2", "FAIL")),
            t("45m", "NodegateCheckFailing", check_alerts(c1b, "n1", "FAIL") + check_alerts(c2, "n2", "FAIL")),
            t("5m", "NodegateCheckUnknown", []),
            t("17m", "NodegateCheckUnknown", check_alerts(c1a, "n1", "UNKNOWN") + check_alerts(c2, "n2", "UNKNOWN")),
            t("15m", "NodegateGateClosed", []),
            t("45m", "NodegateGateClosed", [gate_closed(c1b, "n1")]),  # n2 was never open: silent
            t("5m", "NodegateThinPoolFillingUp", []),
            t("17m", "NodegateThinPoolFillingUp", pools + thin_pool_alerts(s2, lvm)),
            t("5m", "NodegateClockNotSynchronised", []),
            t("17m", "NodegateClockNotSynchronised", clock_alerts(s1a) + clock_alerts(s2)),
        ]}]
    gating = [a for a in check_alerts(c2, "n2", "FAIL") if a["exp_labels"].get("gating") == "true"]
    if not gating:
        sys.exit("FAIL: n2's cpu-virt FAIL should call for a gating NodegateCheckFailing")
    doc = {"rule_files": [os.path.basename(rules_file)], "evaluation_interval": "1m",
           "tests": tests + hand["tests"]}
    out = os.path.join(out_dir, "alerts_test.generated.yaml")
    with open(out, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=1000)
    print(f"{len(inputs)} input series from 3 real scrapes; n1 blockers after the fault: {c1b['gate']['blockers']}")

    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    cases = [a for t_ in doc["tests"] for a in t_["alert_rule_test"]]
    fired = {a["alertname"] for a in cases if a["exp_alerts"]}
    silent = {a["alertname"] for a in cases if not a["exp_alerts"]}
    if alerts - fired or alerts - silent or (fired | silent) - alerts:
        sys.exit(f"FAIL: alerts without a firing test: {sorted(alerts - fired)}; without a silent case: "
                 f"{sorted(alerts - silent)}; tests of unknown alerts: {sorted((fired | silent) - alerts)}")
    print(f"{len(alerts)} alerts, each with a firing and a silent test case")
    r = subprocess.run(["promtool", "test", "rules", os.path.basename(out)], cwd=out_dir)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
