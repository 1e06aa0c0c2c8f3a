#!/usr/bin/env python3
"""The chart's RBAC and uninstall hook against what the real agent does.

The real `nodegate agent` publishes to the project's fake API server (test/fakeapi, issue 4's
faithful fake) with the prefix and gate label the chart renders; then:
- every API request it made must be allowed by the rendered ClusterRole and Roles (verb, resource,
  subresource, namespace), so the chart's RBAC is enough — and the Events it posted are in the
  namespace the chart's events Role is in;
- the post-delete hook's script (tools/image/nodegate-cleanup, with the environment the rendered
  Job gives it) removes everything nodegate wrote, and nothing else: another writer's label, taint
  and the node's other conditions survive. The end state is read back with the real kubectl.
Ports 19850-19869 (fake API) and 19870 (agent metrics).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

import yaml

SRC = os.environ["NODEGATE_SRC"]
BUILD = os.environ["NODEGATE_BUILD"]
BINARY = os.environ["NODEGATE"]
sys.path.insert(0, os.path.join(SRC, "test", "fakeapi"))
from harness import FakeApi, eventually  # noqa: E402

NODE = "chart-node"
CONDITIONS = {"VirtualizationReady", "LocalStorageHealthy", "GuestDNSHealthy", "TimeSynchronized",
              "KubeVirtNodeHealthy"}


def fail(msg):
    sys.exit("FAIL: " + msg)


def ok(msg):
    print("ok   " + msg)


def rendered():
    with open(os.path.join(BUILD, "test-chart", "render", "defaults-1.31.yaml")) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def allowed_rules(docs):
    """(namespace or None for cluster-wide, group, resource, verb) the agent's account may do."""
    out = set()
    for d in docs:
        if d["kind"] not in ("ClusterRole", "Role") or d["metadata"].get("annotations", {}).get("helm.sh/hook"):
            continue
        ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
        for r in d["rules"]:
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    for v in r["verbs"]:
                        out.add((ns, g, res, v))
    return out


def classify(req):
    """The RBAC attributes of one request, or None for a non-resource URL (discovery, /version)."""
    parts = req["path"].strip("/").split("/")
    q = urllib.parse.parse_qs(req["query"])
    if parts[0] == "api" and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    ns = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource = rest[0] + ("/" + rest[2] if len(rest) >= 3 else "")
    named = len(rest) >= 2
    verb = {"GET": "get" if named else ("watch" if q.get("watch", ["0"])[0] in ("1", "true") else "list"),
            "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[req["method"]]
    return ns, group, resource, verb


def main():
    docs = rendered()
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    chart_flag = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args[1:] if "=" in a}
    (job,) = [d for d in docs if d["kind"] == "Job"]
    hook_env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}

    api = FakeApi("chart", nodes=[NODE], port_range="19850-19869")
    tmp = tempfile.mkdtemp(prefix="nodegate-chart-uninstall-")
    agent = None
    try:
        # Another writer's keys, which must survive everything.
        api.call("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"team.example.com/owner": "vms"}},
                                                  "spec": {"taints": [{"key": "dedicated", "value": "vms",
                                                                       "effect": "NoSchedule"}]}},
                 content_type="application/merge-patch+json")
        before = api.node(NODE)
        other_conditions = [c for c in before.get("status", {}).get("conditions", []) if c["type"] not in CONDITIONS]

        root = os.path.join(tmp, "host")
        shutil.copytree(os.path.join(SRC, "test", "fixtures", "agent", "vmx-host-e5"), root)
        config = os.path.join(tmp, "config.json")
        # kvm-device fails on this fixture (no /dev/kvm), so the gate closes and the taint is set.
        with open(config, "w") as f:
            json.dump({"gate": {"required": ["cpu-virt", "kvm-device"]},
                       "checks": {"kube": {"startup_jitter_seconds": 0}}}, f)
        seq0 = api.last_seq()
        log = open(os.path.join(tmp, "agent.log"), "w")
        agent = subprocess.Popen(
            [BINARY, "agent", "--host-root", root, "--kube", "kubeconfig", "--kubeconfig", api.kubeconfig,
             "--node-name", NODE, "--config", config, "--taint", "--resync", "1",
             "--prefix", chart_flag["--prefix"], "--gate-label", chart_flag["--gate-label"],
             "--listen", "127.0.0.1:19870", "--debug-listen", "", "--dns-trace", "off", "--lvm-command", "false"],
            stdout=log, stderr=subprocess.STDOUT)
        prefix = chart_flag["--prefix"] + "/"

        def published():
            n = api.node(NODE)
            labels = n["metadata"].get("labels", {})
            taints = n.get("spec", {}).get("taints", [])
            conds = {c["type"] for c in n.get("status", {}).get("conditions", [])}
            return (any(k.startswith(prefix) for k in labels)
                    and any(t["key"] == hook_env["NODEGATE_TAINT"] for t in taints)
                    and "VirtualizationReady" in conds and api.events())
        if not eventually(published, timeout=20):
            log.flush()
            fail(f"the agent did not publish labels, taint, condition and an event in 20 s: "
                 f"{json.dumps(api.node(NODE))[:800]}; log {open(log.name).read()[-1500:]}")
        ok("the agent published labels, its taint, a condition and an event")
        time.sleep(1.5)  # a few more cycles: the resync and any heartbeat
        # End the agent's watch from the server side so the fake logs it (a stream is logged when it
        # ends), and let the agent start its next one.
        api.call("POST", "/fake/drop-watches", {})
        time.sleep(1.0)
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)
        agent = None

        # RBAC: everything the agent asked for is granted by the chart.
        rules = allowed_rules(docs)
        agent_reqs = [r for r in api.requests(seq0) if r["user_agent"].lower().startswith("nodegate")]
        if os.environ.get("CHART_DEBUG"):
            for r in agent_reqs:
                print("debug", r["method"], r["path"], r["query"], r["status"])
        if not agent_reqs:
            fail("no request from the agent in the fake API's log")
        used = set()
        for r in agent_reqs:
            attrs = classify(r)
            if attrs is None:
                continue
            ns, group, resource, verb = attrs
            if (None, group, resource, verb) not in rules and (ns, group, resource, verb) not in rules:
                fail(f"the chart's RBAC does not allow {r['method']} {r['path']}?{r['query']} "
                     f"({verb} {group or 'core'}/{resource} in {ns or 'the cluster'})")
            used.add((ns, group, resource, verb))
        if (None, "", "nodes", "watch") not in used:
            fail("the agent's watch of its node was not seen; the RBAC check would be incomplete")
        for u in sorted(used, key=str):
            ok(f"allowed by the chart: {u[3]} {u[1] or 'core'}/{u[2]}" + (f" in {u[0]}" if u[0] else ""))
        event_ns = {e["metadata"].get("namespace") for e in api.events()}
        (events_role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-events")]
        if event_ns != {events_role["metadata"]["namespace"]}:
            fail(f"the agent posts events in {event_ns}, the chart grants them in {events_role['metadata']['namespace']}")
        ok(f"events are in namespace {events_role['metadata']['namespace']}, where the chart grants them")

        # The post-delete hook's script, with the rendered Job's environment.
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("token-a")
        env = dict(os.environ, **{k: v for k, v in hook_env.items() if not k.startswith("NODEGATE_WAIT")},
                   NODEGATE_API=api.server, NODEGATE_TOKEN_FILE=token, NODEGATE_CA_FILE=api.ca)
        run = subprocess.run(["sh", os.path.join(SRC, "tools", "image", "nodegate-cleanup")], env=env,
                             capture_output=True, text=True, timeout=60)
        print(run.stdout + run.stderr, end="")
        if run.returncode != 0:
            fail(f"nodegate-cleanup exited with {run.returncode}")

        kubectl = shutil.which("kubectl")
        if not kubectl:
            fail("kubectl is missing (preinstalled on this machine kind; ENVIRONMENT.md)")
        out = subprocess.run([kubectl, "--kubeconfig", api.kubeconfig, "get", "node", NODE, "-o", "json"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            fail("kubectl get node: " + out.stderr)
        n = json.loads(out.stdout)
        labels = n["metadata"].get("labels", {})
        left = [k for k in list(labels) + list(n["metadata"].get("annotations", {}))
                if k.startswith(prefix) or k == hook_env["NODEGATE_GATE_LABEL"]]
        if left:
            fail(f"nodegate keys left after the cleanup: {left}")
        ok("no label or annotation of nodegate's is left")
        if labels.get("team.example.com/owner") != "vms":
            fail(f"another writer's label was touched: {labels}")
        taints = n.get("spec", {}).get("taints", [])
        if taints != [{"key": "dedicated", "value": "vms", "effect": "NoSchedule"}]:
            fail(f"taints after the cleanup: {taints}")
        ok("nodegate's taint is gone, the other taint is kept")
        conds = n.get("status", {}).get("conditions", [])
        if any(c["type"] in CONDITIONS for c in conds):
            fail(f"nodegate conditions left: {[c['type'] for c in conds]}")
        if [c["type"] for c in conds] != [c["type"] for c in other_conditions]:
            fail(f"the node's other conditions changed: {conds} vs {other_conditions}")
        ok("nodegate's conditions are gone, the others are kept")
    finally:
        if agent is not None:
            agent.kill()
            agent.wait()
        api.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("uninstall: ok")


if __name__ == "__main__":
    main()
