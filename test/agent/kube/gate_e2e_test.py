#!/usr/bin/env python3
"""A closed gate never kills a running VM (issue #18 items 1 and 3), end to end: the real
`nodegate agent` on a fixture host root against the fake API server, with running virt-launcher
pods (test/fixtures/kubevirt, given the gate label in their nodeSelector the way KubeVirt's
developerConfiguration.nodeSelectors does) bound to the node.

The test watches the Node itself and keeps every version the server stores, so every write
anyone made is seen. After the run, for every version, every pod that was running on the node at
that resourceVersion must still be admitted by kubelet's admission rules (placement_model.py,
written from the Kubernetes source), and while the gate was closed a new VM pod must not pass
the scheduler's filters (node affinity, NoSchedule/NoExecute taints).

Cases: the gate driven open -> closed -> open (cpu-virt fails and recovers: vmx removed from the
fixture's cpuinfo), an agent restart and a kill -9 while closed, and the last VM pod deleted
(the label goes, the taint follows the gate); pods RBAC answering 403 (no label removed); a
node-readiness-controller rule turning nodegate's condition into a taint it owns (nodegate never
edits, removes or fights over it); a probe timeout under running VM pods (lvm UNKNOWN: the label
the pods select stays); a D-Bus restart under running VM pods (time-sync against a real
dbus-daemon with the D-Bus test service, the kernel clock marked synchronised for the case the
way an NTP daemon does, then restored: the label stays).

Needs $NODEGATE, $NODEGATE_DBUS_TEST_SERVICE and $NODEGATE_DBUS_TEST_CONFIG (CTest sets them),
root for adjtimex(2) in the D-Bus case. TCP ports 19470-19499 (fake server 19470-19479, agent
listeners 19480-19499)."""

import copy
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
sys.path.insert(0, HERE)
from harness import FakeApi, agent_get, eventually, fixture_host, free_port, nodegate_binary, stop  # noqa: E402
import placement_model as model  # noqa: E402

NODE = "gate-node"
GATE = "nodegate.io/vm-ready"
OWN_TAINT = "nodegate.io/not-ready"
DELAY = 2  # kube.label_release_delay_seconds in these runs
FIXTURES = os.path.join(SRC, "test", "fixtures")
FAKE_LVM = os.path.join(SRC, "test", "probes", "storage", "fake-lvm.sh")


def launcher_pod(name, node=NODE):
    """The captured virt-launcher pod as KubeVirt would create it with nodegate's gate label in
    developerConfiguration.nodeSelectors; bound to `node` (None: not scheduled yet)."""
    with open(os.path.join(FIXTURES, "kubevirt", "virt-launcher-pod.json")) as f:
        pod = json.load(f)
    md = pod["metadata"]
    for k in ("uid", "resourceVersion", "creationTimestamp", "generateName"):
        md.pop(k, None)
    md["name"] = name
    md["namespace"] = "default"
    pod["spec"]["nodeSelector"] = dict(pod["spec"].get("nodeSelector") or {}, **{GATE: "true"})
    if node:
        pod["spec"]["nodeName"] = node
    else:
        pod["spec"].pop("nodeName", None)
    pod.pop("status", None)
    return pod


class NodeHistory(threading.Thread):
    """Every stored version of the Node, from a watch of our own (resumed where it ended)."""

    def __init__(self, api, name):
        super().__init__(daemon=True)
        self.api, self.name = api, name
        self.versions = []  # (rv, node)
        self.lock = threading.Lock()
        self.stopping = False
        node = api.node(name)
        self.rv = node["metadata"]["resourceVersion"]
        self.versions.append((int(self.rv), node))
        self.ctx = ssl.create_default_context(cafile=api.ca)

    def run(self):
        while not self.stopping:
            url = "%s/api/v1/nodes?fieldSelector=metadata.name%%3D%s&watch=true&resourceVersion=%s&timeoutSeconds=30" % (
                self.api.server, self.name, self.rv)
            req = urllib.request.Request(url, headers={"Authorization": "Bearer token-a"})
            try:
                with urllib.request.urlopen(req, context=self.ctx, timeout=60) as r:
                    for line in r:
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if ev.get("type") in ("ADDED", "MODIFIED") and rv:
                            with self.lock:
                                self.versions.append((int(rv), obj))
                            self.rv = rv
                        if self.stopping:
                            return
            except (OSError, ValueError):
                time.sleep(0.2)

    def snapshot(self):
        with self.lock:
            return list(self.versions)


class GateE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = nodegate_binary()
        cls.api = FakeApi("gate", nodes=[], bookmark_interval=1, port_range="19470-19479")
        cls.tmp, cls.root = fixture_host("kube-gate")
        with open(os.path.join(cls.root, "proc", "cpuinfo")) as f:
            cls.cpuinfo_vmx = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.api.call("POST", "/fake/reset")
        self.set_vmx(True)
        self.agent = None
        self.history = None
        self.pods = {}  # name -> {"pod", "created", "deleted"} (resourceVersions)
        self.closed_windows = []  # [start_rv, end_rv or None]: the fixture was broken meanwhile
        self.log_path = os.path.join(self.tmp, "%s.log" % self._testMethodName)
        open(self.log_path, "w").close()
        self.config = {"gate": {"required": ["cpu-virt"]},
                       "checks": {"kube": {"startup_jitter_seconds": 0, "heartbeat_seconds": 300,
                                           "watch_timeout_seconds": 30, "label_release_delay_seconds": DELAY}}}
        self.extra_args = []
        self.lvm_command = "false"
        self.gate_condition = "VirtualizationReady"  # the condition of the check this case breaks

    def tearDown(self):
        self.stop_agent()
        if self.history:
            self.history.stopping = True

    # ----- the fixture host and the agent -----
    def set_vmx(self, present):
        text = self.cpuinfo_vmx if present else re.sub(r"\bvmx\b ?", "", self.cpuinfo_vmx).replace(
            "vmx flags", "virt flags")
        tmp = os.path.join(self.root, "proc", "cpuinfo.new")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.root, "proc", "cpuinfo"))

    def start_agent(self):
        path = os.path.join(self.tmp, "config-%s.json" % self._testMethodName)
        with open(path, "w") as f:
            json.dump(self.config, f)
        self.metrics_port = free_port(19480, 19489, reuse=True)
        self.debug_port = free_port(19490, 19499, reuse=True)
        args = [self.binary, "agent", "--host-root", self.root, "--kube", "kubeconfig",
                "--kubeconfig", self.api.kubeconfig, "--node-name", NODE, "--config", path,
                "--resync", "1", "--listen", "127.0.0.1:%d" % self.metrics_port,
                "--debug-listen", "127.0.0.1:%d" % self.debug_port, "--dns-trace", "off",
                "--lvm-command", self.lvm_command] + self.extra_args
        with open(self.log_path, "a") as out:
            self.agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.assertTrue(eventually(lambda: self.http("/readyz")[0] == 200, 20), self.log()[-3000:])

    def stop_agent(self, sig=signal.SIGTERM):
        if self.agent and self.agent.poll() is None and sig == signal.SIGKILL:
            self.agent.kill()
            self.agent.wait(10)
        stop(self.agent, 10)
        self.agent = None

    def http(self, path, port=None):
        return agent_get(port or self.debug_port, path)

    def gate_api(self):
        status, body = self.http("/api/v1/checks")
        return json.loads(body)["gate"] if status == 200 else {}

    def held(self):
        return {h["label"]: h for h in self.gate_api().get("holds", [])}

    def metric(self, reason):
        _, body = self.http("/metrics", self.metrics_port)
        m = re.search(r'^nodegate_gate_held_labels\{reason="%s"\} (\S+)$' % reason, body, re.M)
        return float(m.group(1)) if m else None

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    # ----- the cluster side -----
    def rv_now(self):
        return int(self.api.call("GET", "/fake/healthz")[1]["rv"])

    def create_node(self, labels=None):
        # virt-handler's label: the launcher pods select it too.
        status, node = self.api.call("POST", "/fake/nodes", {"name": NODE, "labels": dict(
            {"kubevirt.io/schedulable": "true"}, **(labels or {}))})
        self.assertEqual(status, 201, node)
        self.history = NodeHistory(self.api, NODE)
        self.history.start()

    def run_pod(self, name):
        pod = launcher_pod(name)
        status, made = self.api.call("POST", "/api/v1/namespaces/default/pods", pod)
        self.assertEqual(status, 201, made)
        status, made = self.api.call("PATCH", "/api/v1/namespaces/default/pods/%s/status" % name,
                                     {"status": {"phase": "Running"}},
                                     content_type="application/merge-patch+json")
        self.assertEqual(status, 200, made)
        self.pods[name] = {"pod": made, "created": int(made["metadata"]["resourceVersion"]), "deleted": None}

    def delete_pod(self, name):
        status, gone = self.api.call("DELETE", "/api/v1/namespaces/default/pods/" + name)
        self.assertEqual(status, 200, gone)
        self.pods[name]["deleted"] = int(gone["metadata"]["resourceVersion"])

    def break_host(self):
        self.closed_windows.append([self.rv_now(), None])
        self.set_vmx(False)

    def heal_host(self):
        self.set_vmx(True)
        self.closed_windows[-1][1] = self.rv_now()

    def node(self):
        return self.api.node(NODE)

    def labels(self):
        return self.node()["metadata"].get("labels", {})

    def taints(self, node=None):
        return [(t["key"], t.get("effect")) for t in ((node or self.node()).get("spec") or {}).get("taints") or []]

    def condition(self, node=None):
        for c in (node or self.node()).get("status", {}).get("conditions", []):
            if c["type"] == self.gate_condition:
                return c["status"]
        return None

    def is_open(self):
        return (self.labels().get(GATE) == "true" and self.condition() == "True"
                and (OWN_TAINT, "NoSchedule") not in self.taints())

    def closed_for_new_vms(self):
        return self.condition() not in ("True", None) and (OWN_TAINT, "NoSchedule") in self.taints()

    def agent_writes(self, since=0):
        return [r for r in self.api.requests(since) if r["method"] == "PATCH"
                and r.get("user_agent", "").startswith("nodegate/") and r["path"].startswith("/api/v1/nodes/")]

    # ----- the invariant -----
    def assert_every_version_admits_running_pods(self):
        time.sleep(0.5)  # the watch delivers the last write
        versions = self.history.snapshot()
        # The fake's watch sends every stored version (no coalescing), so every write the agent
        # made that changed the Node is one of these; a write that changed nothing is no version.
        self.assertGreater(len(self.agent_writes()), 0)
        checked = 0
        for rv, node in versions:
            for name, p in self.pods.items():
                if p["created"] < rv and (p["deleted"] is None or p["deleted"] > rv) and model.running(p["pod"]):
                    ok, why = model.kubelet_admits(p["pod"], node)
                    self.assertTrue(ok, "rv %d: kubelet would reject running pod %s (%s); labels %s taints %s"
                                    % (rv, name, why, node["metadata"].get("labels"), self.taints(node)))
                    checked += 1
        new_vm = launcher_pod("vm-new", node=None)
        refused = 0
        for rv, node in versions:
            in_window = any(a < rv and (b is None or rv < b) for a, b in self.closed_windows)
            if in_window and self.condition(node) not in ("True", None):
                ok, why = model.scheduler_places(new_vm, node)
                self.assertFalse(ok, "rv %d: a new VM pod could land on the closed node; labels %s taints %s"
                                 % (rv, node["metadata"].get("labels"), self.taints(node)))
                refused += 1
        print("%d node versions, %d running-pod admissions checked, %d closed versions refused a new VM"
              % (len(versions), checked, refused))
        return checked, refused

    # ----- cases -----
    def test_running_vms_survive_gate_flips_restarts_and_kill(self):
        self.create_node()
        self.start_agent()
        self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
        self.run_pod("vm-a")
        self.run_pod("vm-b")
        self.assertTrue(eventually(lambda: self.gate_api().get("pod_view", {}).get("pods") == 2, 10),
                        self.gate_api())

        # Closed: the label the pods select stays, the taint keeps new VMs away.
        self.break_host()
        self.assertTrue(eventually(self.closed_for_new_vms, 20), self.log()[-3000:])
        time.sleep(2 * DELAY + 1)  # past the release delay: held because of the pods, not the delay
        self.assertEqual(self.labels().get(GATE), "true")
        self.assertEqual(self.labels().get("nodegate.io/cpu-virt"), "none")  # no pod reads it: written
        hold = self.held()[GATE]
        self.assertEqual(hold["reason"], "SelectedByRunningPods")
        self.assertEqual(hold["kept"], "true")
        self.assertIsNone(hold["wanted"])
        self.assertEqual(sorted(hold["pods"]), ["default/vm-a", "default/vm-b"])
        self.assertEqual(self.metric("SelectedByRunningPods"), 1)
        placed, why = model.scheduler_places(launcher_pod("vm-new", node=None), self.node())
        self.assertFalse(placed)
        self.assertIn("TaintToleration " + OWN_TAINT, why)
        status, page = self.http("/")
        self.assertIn('id="gate-holds"', page)
        self.assertIn("default/vm-a", page)

        # A restart and a kill -9 while closed: the new process holds too (its pod view starts
        # incomplete, so it removes nothing before it knows).
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self.stop_agent(sig)
            self.start_agent()
            self.assertTrue(eventually(lambda: self.held().get(GATE, {}).get("reason") == "SelectedByRunningPods", 15),
                            self.gate_api())
            time.sleep(DELAY + 1)
            self.assertEqual(self.labels().get(GATE), "true")
            self.assertIn((OWN_TAINT, "NoSchedule"), self.taints())

        # Open again: the taint goes, nothing is held.
        self.heal_host()
        self.assertTrue(eventually(self.is_open, 20), self.log()[-3000:])
        self.assertTrue(eventually(lambda: self.metric("SelectedByRunningPods") == 0, 5))

        # Closed again, then the VMs go: after the last one the label goes and the taint follows
        # the gate (off with --taint off).
        self.break_host()
        self.assertTrue(eventually(self.closed_for_new_vms, 20), self.log()[-3000:])
        self.delete_pod("vm-a")
        time.sleep(DELAY + 2)
        self.assertEqual(self.labels().get(GATE), "true")
        self.assertEqual(self.held()[GATE]["pods"], ["default/vm-b"])
        self.delete_pod("vm-b")
        self.assertTrue(eventually(lambda: GATE not in self.labels(), DELAY + 10), self.gate_api())
        self.assertTrue(eventually(lambda: (OWN_TAINT, "NoSchedule") not in self.taints(), 5))
        self.assertEqual(self.condition(), "False")
        self.assertEqual(self.held(), {})
        self.heal_host()
        self.assertTrue(eventually(self.is_open, 20), self.log()[-3000:])

        checked, refused = self.assert_every_version_admits_running_pods()
        self.assertGreater(checked, 5)
        self.assertGreater(refused, 1)
        # Logged on change, not at every reconcile (three processes, a few changes each).
        self.assertLess(self.log().count("gate holds a label"), 15, self.log()[-3000:])

    def test_pods_forbidden_removes_no_label(self):
        """No RBAC for pods: the view is incomplete with the 403, never "no pods". When the Role
        is granted, the pod view comes back at kube.pod_forbidden_retry_seconds (the default,
        60 s, would fail the wait below) and the gate then judges the labels by the pods."""
        self.config["checks"]["kube"]["pod_forbidden_retry_seconds"] = 3
        self.api.fault(status=403, method="GET", path_re="^/api/v1/pods", count=-1,
                       message='pods is forbidden: User "system:serviceaccount:nodegate:nodegate" cannot list '
                               'resource "pods" in API group "" at the cluster scope')
        self.create_node()
        self.start_agent()
        self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
        self.break_host()
        self.assertTrue(eventually(self.closed_for_new_vms, 20), self.log()[-3000:])
        time.sleep(2 * DELAY + 1)
        self.assertEqual(self.labels().get(GATE), "true")
        gate = self.gate_api()
        self.assertFalse(gate["pod_view"]["complete"])
        self.assertIn("403", gate["pod_view"]["reason"])
        self.assertIn("rbac.readPods", gate["pod_view"]["reason"])
        # Every label on the Node is held, not only the gate label: without the pods nothing can
        # tell which of them a running pod selects.
        held = self.held()
        self.assertEqual(held[GATE]["reason"], "PodViewIncomplete")
        self.assertEqual(held["nodegate.io/cpu-virt"]["kept"], "vmx")
        self.assertEqual(self.labels().get("nodegate.io/cpu-virt"), "vmx")
        self.assertEqual(self.metric("PodViewIncomplete"), len(held))
        self.assertIn("pod view incomplete", self.log())
        placed, _ = model.scheduler_places(launcher_pod("vm-new", node=None), self.node())
        self.assertFalse(placed)

        # The Role is granted: within the retry pace the view is complete and, no pod running,
        # the closed gate's label goes after the release delay.
        self.api.clear_faults()
        self.assertTrue(eventually(lambda: self.gate_api()["pod_view"]["complete"], 3 + 4),
                        self.gate_api())
        self.assertTrue(eventually(lambda: GATE not in self.labels(), DELAY + 10), self.gate_api())
        self.heal_host()
        self.assertTrue(eventually(self.is_open, 20), self.log()[-3000:])

    def test_readiness_controller_taint_is_never_touched(self):
        """A NodeReadinessRule (kubernetes-sigs/node-readiness-controller) maps nodegate's
        VirtualizationReady condition to a taint the controller owns; the test plays the
        controller. nodegate (with its own --taint on) never edits, removes or fights over it."""
        rule = {"apiVersion": "readiness.node.x-k8s.io/v1alpha1", "kind": "NodeReadinessRule",
                "metadata": {"name": "vm-readiness"},
                "spec": {"conditions": [{"type": "VirtualizationReady", "requiredStatus": "True"}],
                         "taint": {"key": "readiness.k8s.io/vm-ready", "effect": "NoSchedule", "value": "pending"},
                         "enforcementMode": "continuous"}}
        status, made = self.api.call("POST", "/apis/readiness.node.x-k8s.io/v1alpha1/nodereadinessrules", rule)
        self.assertEqual(status, 201, made)
        self.extra_args = ["--taint"]
        self.create_node()
        stop_ctl = threading.Event()
        ctl_writes = []

        def controller():
            r = self.api.call("GET", "/apis/readiness.node.x-k8s.io/v1alpha1/nodereadinessrules/vm-readiness")[1]
            want = r["spec"]["conditions"][0]
            taint = r["spec"]["taint"]
            while not stop_ctl.is_set():
                node = self.node()
                conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
                ready = want["type"] in conds and conds[want["type"]] == want["requiredStatus"]
                taints = (node.get("spec") or {}).get("taints") or []
                mine = [t for t in taints if t["key"] == taint["key"]]
                if ready == bool(mine) and want["type"] in conds:
                    new = [t for t in taints if t["key"] != taint["key"]] + ([] if ready else [dict(taint)])
                    s, out = self.api.call("PATCH", "/api/v1/nodes/" + NODE,
                                           {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                                            "spec": {"taints": new}},
                                           content_type="application/merge-patch+json")
                    if s == 200:
                        ctl_writes.append(int(out["metadata"]["resourceVersion"]))
                time.sleep(0.1)

        ctl = threading.Thread(target=controller, daemon=True)
        ctl.start()
        try:
            self.start_agent()
            self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
            self.run_pod("vm-a")
            self.assertTrue(eventually(lambda: self.gate_api().get("pod_view", {}).get("pods") == 1, 10))
            self.break_host()
            both = [(OWN_TAINT, "NoSchedule"), ("readiness.k8s.io/vm-ready", "NoSchedule")]
            self.assertTrue(eventually(lambda: all(t in self.taints() for t in both), 20), self.taints())
            # Settled: nobody writes any more (no fight over the taint list).
            time.sleep(1)
            seq = self.api.last_seq()
            time.sleep(2 * DELAY + 1)
            self.assertEqual(self.agent_writes(seq), [])
            self.assertEqual(self.labels().get(GATE), "true")
            self.heal_host()
            self.assertTrue(eventually(lambda: self.is_open() and "readiness.k8s.io/vm-ready" not in
                                       [k for k, _ in self.taints()], 20), self.taints())
        finally:
            stop_ctl.set()
            ctl.join(5)
        self.assertGreaterEqual(len(ctl_writes), 2)
        # Every taint list nodegate sent kept the controller's taint exactly as the version it
        # was based on (its resourceVersion precondition) had it.
        versions = dict(self.history.snapshot())
        sent = 0
        for w in self.agent_writes():
            body = w["body"] if isinstance(w["body"], dict) else {}
            if "taints" not in (body.get("spec") or {}):
                continue
            base = versions.get(int(body["metadata"]["resourceVersion"]))
            self.assertIsNotNone(base, body)
            theirs = [t for t in (base.get("spec") or {}).get("taints") or [] if t["key"] != OWN_TAINT]
            self.assertEqual([t for t in body["spec"]["taints"] if t["key"] != OWN_TAINT], theirs, body)
            sent += 1
        self.assertGreaterEqual(sent, 2)
        self.assert_every_version_admits_running_pods()

    def open_with_running_vm(self):
        """The node made, the agent started and the gate open, with one VM pod running that the
        agent's pod view has seen."""
        self.create_node()
        self.start_agent()
        self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
        self.run_pod("vm-a")
        self.assertTrue(eventually(lambda: self.gate_api().get("pod_view", {}).get("pods") == 1, 10))

    def assert_label_never_went(self):
        seen = False
        for rv, node in self.history.snapshot():
            has = (node["metadata"].get("labels") or {}).get(GATE) == "true"
            self.assertFalse(seen and not has, "rv %d: the gate label went under a running VM" % rv)
            seen = seen or has
        self.assertTrue(seen, "the gate label never appeared")

    def test_probe_timeout_under_running_vms_keeps_the_label(self):
        """A transient UNKNOWN (lvm's command hangs past its deadline once) closes the gate for
        new VMs but removes nothing the running VM pods select."""
        mode = os.path.join(self.tmp, "lvm-mode")
        with open(mode, "w") as f:
            f.write(os.path.join(FIXTURES, "lvm", "healthy.json"))
        wrapper = os.path.join(self.tmp, "lvm-wrapper.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec %s "$(cat %s)" "$@"\n' % (FAKE_LVM, mode))
        os.chmod(wrapper, 0o755)
        self.config["gate"]["required"] = ["cpu-virt", "lvm"]
        self.config["checks"]["lvm"] = {"timeout_seconds": 1}
        self.gate_condition = "LocalStorageHealthy"
        self.lvm_command = wrapper
        self.open_with_running_vm()
        self.closed_windows.append([self.rv_now(), None])
        with open(mode, "w") as f:
            f.write("hang:1")
        self.assertTrue(eventually(self.closed_for_new_vms, 20), self.log()[-3000:])
        status, body = self.http("/api/v1/checks/lvm")
        self.assertEqual(json.loads(body)["status"], "UNKNOWN", body)
        self.assertEqual(self.labels().get(GATE), "true")
        with open(mode, "w") as f:
            f.write(os.path.join(FIXTURES, "lvm", "healthy.json"))
        self.closed_windows[-1][1] = self.rv_now()
        self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
        # The label was never gone, in any version since it first appeared.
        self.assert_label_never_went()
        self.assert_every_version_admits_running_pods()

    @unittest.skipUnless(os.geteuid() == 0, "needs root: marks the kernel clock synchronised "
                         "with adjtimex(2); CI runs as root")
    def test_dbus_restart_under_running_vms_keeps_the_label(self):
        """systemd restarts dbus-daemon (an upgrade, a crash): time-sync cannot ask timedated for
        a moment and says WARN/TimedateUnavailable. That closes the gate for new VMs and removes
        nothing the running VM pods select; with the bus back the node opens again."""
        bus_dir = os.path.join(self.tmp, "bus-" + self._testMethodName)
        os.makedirs(bus_dir, exist_ok=True)
        bus = os.path.join(bus_dir, "bus")
        clock = KernelClockSynced()
        self.addCleanup(clock.restore)
        bus_procs = []

        def start_bus():
            daemon = subprocess.Popen(
                ["dbus-daemon", "--config-file=" + os.environ["NODEGATE_DBUS_TEST_CONFIG"],
                 "--address=unix:path=" + bus, "--nofork", "--nopidfile", "--print-address"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertTrue(daemon.stdout.readline().startswith("unix:"), "dbus-daemon did not start")
            service = subprocess.Popen(
                [os.environ["NODEGATE_DBUS_TEST_SERVICE"], "--address", "unix:path=" + bus,
                 "--synced", "1", "--ntp", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(service.stdout.readline().strip(), "ready", "D-Bus test service did not start")
            bus_procs[:] = [service, daemon]

        def stop_bus():
            for p in bus_procs:
                stop(p, 5)
                p.stdout.close()
            bus_procs.clear()
            if os.path.exists(bus):
                os.unlink(bus)

        self.addCleanup(stop_bus)
        start_bus()
        self.config["gate"]["required"] = ["cpu-virt", "time-sync"]
        self.config["checks"]["time-sync"] = {"bus": bus, "grace_seconds": 0, "max_error_seconds": 100}
        self.gate_condition = "TimeSynchronized"
        self.open_with_running_vm()

        self.closed_windows.append([self.rv_now(), None])
        stop_bus()
        self.assertTrue(eventually(self.closed_for_new_vms, 20), self.log()[-3000:])
        _, body = self.http("/api/v1/checks/time-sync")
        check = json.loads(body)
        self.assertEqual((check["status"], check["reason"]), ("WARN", "TimedateUnavailable"), body)
        self.assertEqual(self.labels().get(GATE), "true")
        self.assertIn(GATE, self.held())
        time.sleep(DELAY + 1)  # past the release delay: a hold is not a timer
        self.assertEqual(self.labels().get(GATE), "true")

        start_bus()  # the restarted bus at the same address; the agent reconnects on its next run
        self.closed_windows[-1][1] = self.rv_now()
        self.assertTrue(eventually(self.is_open, 30), self.log()[-3000:])
        self.assert_label_never_went()
        self.assert_every_version_admits_running_pods()


class KernelClockSynced:
    """Marks the kernel clock synchronised (STA_UNSYNC clear, maxerror 0.1 s) the way an NTP
    daemon does through adjtimex(2), so time-sync can PASS on a machine without one; restore()
    puts back what it found. CTest gives this test and dbus_time_sync_e2e one resource lock."""

    def __init__(self):
        out = subprocess.run(["adjtimex", "--print"], check=True, capture_output=True, text=True).stdout
        fields = dict(re.findall(r"^\s*(\w+):\s*(-?\d+)", out, re.M))
        self.status, self.maxerror = fields["status"], fields["maxerror"]
        subprocess.run(["adjtimex", "--status", "0", "--maxerror", "100000"], check=True)

    def restore(self):
        subprocess.run(["adjtimex", "--status", self.status, "--maxerror", self.maxerror], check=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
