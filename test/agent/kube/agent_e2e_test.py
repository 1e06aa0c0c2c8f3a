#!/usr/bin/env python3
"""End to end: the real `nodegate agent` binary on a fixture host root, publishing through
--kubeconfig to the fake API server, read back with the real kubectl.

Needs $NODEGATE (the binary; CTest sets it). Covers: labels, conditions, gate, taint and events
appear; removing vmx from the fixture closes the gate (label gone, condition False with the
probe's reason, taint, exactly one event); another writer's labels survive; faults heal; a
restart with the same state writes nothing; the request counter is exported."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import FakeApi, eventually, free_port, stop  # noqa: E402

NODE = "e2e-node"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"




class AgentE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = os.environ.get("NODEGATE")
        if not cls.binary or not os.access(cls.binary, os.X_OK):
            raise unittest.SkipTest("$NODEGATE is not set to the nodegate binary (run through ctest)")
        cls.api = FakeApi("e2e", nodes=[NODE], bookmark_interval=2)
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kube-e2e-")
        cls.root = os.path.join(cls.tmp, "host")
        shutil.copytree(os.path.join(HERE, "..", "..", "fixtures", "agent", "vmx-host-e5"), cls.root)
        with open(os.path.join(cls.root, "proc", "cpuinfo")) as f:
            cls.cpuinfo_vmx = f.read()
        cls.config = os.path.join(cls.tmp, "config.json")
        with open(cls.config, "w") as f:
            json.dump({"gate": {"required": ["cpu-virt"]},
                       "checks": {"kube": {"startup_jitter_seconds": 0, "heartbeat_seconds": 300}}}, f)
        cls.agent = None
        cls.agent_log = os.path.join(cls.tmp, "agent.log")

    @classmethod
    def tearDownClass(cls):
        cls.stop_agent()
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def agent_args(cls, node, kube):
        cls.metrics_port = free_port(19300, 19399)
        return [cls.binary, "agent", "--host-root", cls.root] + kube + [
            "--node-name", node, "--config", cls.config, "--taint", "--resync", "1",
            "--listen", "127.0.0.1:%d" % cls.metrics_port, "--debug-listen", "", "--dns-trace", "off",
            "--lvm-command", "false"]

    @classmethod
    def start_agent(cls):
        cls.agent = subprocess.Popen(
            cls.agent_args(NODE, ["--kube", "kubeconfig", "--kubeconfig", cls.api.kubeconfig]),
            stdout=open(cls.agent_log, "a"), stderr=subprocess.STDOUT)

    @classmethod
    def stop_agent(cls):
        stop(cls.agent, 10)
        cls.agent = None

    def set_vmx(self, present):
        text = self.cpuinfo_vmx if present else re.sub(r"\bvmx\b ?", "", self.cpuinfo_vmx)
        if not present:
            text = text.replace("vmx flags", "virt flags")
        tmp = os.path.join(self.root, "proc", "cpuinfo.new")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.root, "proc", "cpuinfo"))

    def kubectl_node(self):
        env = dict(os.environ, KUBECONFIG=self.api.kubeconfig, HOME=self.tmp)
        r = subprocess.run([KUBECTL, "get", "node", NODE, "-o", "json"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def state(self, node=None):
        n = node or self.api.node(NODE)
        conds = {c["type"]: c for c in n["status"].get("conditions", [])}
        taint = any(t.get("key") == "nodegate.io/not-ready" and t.get("effect") == "NoSchedule"
                    for t in n.get("spec", {}).get("taints", []) or [])
        return n["metadata"].get("labels", {}), conds, taint

    def open_state(self):
        labels, conds, taint = self.state()
        return (labels.get("nodegate.io/vm-ready") == "true" and labels.get("nodegate.io/cpu-virt") == "vmx"
                and conds.get("VirtualizationReady", {}).get("status") == "True" and not taint)

    def closed_state(self):
        labels, conds, taint = self.state()
        return ("nodegate.io/vm-ready" not in labels and labels.get("nodegate.io/cpu-virt") == "none"
                and conds.get("VirtualizationReady", {}).get("status") == "False" and taint)

    def node_events(self):
        # Only the gate's condition: the other probes on this bare fixture (lvm, time, ...) may
        # report their own first non-True status, which is a legitimate event of its own.
        return [e for e in self.api.events() if e["regarding"]["name"] == NODE
                and e["note"].startswith("VirtualizationReady ")]

    def writes_since(self, seq):
        return [r for r in self.api.requests(seq) if r["method"] != "GET" and r["user"] == "token:token-a"
                and (NODE in r["path"] or "/events" in r["path"])]

    def test_agent_end_to_end(self):
        api = self.api
        # Another writer's labels, including one under our prefix that we never wrote.
        env = dict(os.environ, KUBECONFIG=api.kubeconfig, HOME=self.tmp)
        subprocess.run([KUBECTL, "label", "node", NODE, "team.io/owner=alice", "nodegate.io/custom=keep"],
                       env=env, check=True, capture_output=True, timeout=60)

        self.set_vmx(True)
        self.start_agent()
        self.assertTrue(eventually(self.open_state, 30), open(self.agent_log).read()[-3000:])
        labels, conds, _ = self.state(self.kubectl_node())  # read back with the real client
        self.assertEqual(labels["team.io/owner"], "alice")
        self.assertEqual(labels["nodegate.io/custom"], "keep")
        self.assertEqual(labels["nodegate.io/vm-ready"], "true")
        self.assertEqual(conds["VirtualizationReady"]["reason"], "ChecksPassed")
        self.assertEqual(conds["Ready"]["reason"], "KubeletReady")
        self.assertEqual(self.node_events(), [])

        # Fault: remove vmx. The gate closes, the condition turns False with the probe's reason.
        seq = api.last_seq()
        t0 = time.time()
        self.set_vmx(False)
        self.assertTrue(eventually(self.closed_state, 20), open(self.agent_log).read()[-3000:])
        first_patch = next(r for r in api.requests(seq) if r["method"] == "PATCH")
        print("fault-to-PATCH latency: %.3f s (resync 1 s)" % (first_patch["time"] - t0))
        self.assertLess(first_patch["time"] - t0, 5.0)
        labels, conds, _ = self.state(self.kubectl_node())
        self.assertEqual(conds["VirtualizationReady"]["reason"], "NoHardwareVirtualization")
        self.assertEqual(labels["team.io/owner"], "alice")
        self.assertEqual(labels["nodegate.io/custom"], "keep")
        self.assertTrue(eventually(lambda: len(self.node_events()) == 1, 10))
        time.sleep(2.5)  # more cycles with the same state: still exactly one event
        evs = self.node_events()
        self.assertEqual(len(evs), 1, evs)
        self.assertEqual((evs[0]["type"], evs[0]["reason"]), ("Warning", "NoHardwareVirtualization"))
        out = subprocess.run([KUBECTL, "describe", "node", NODE], env=env, capture_output=True, text=True,
                             timeout=60).stdout
        self.assertIn("nodegate.io/not-ready:NoSchedule", out)
        self.assertRegex(out, r"Warning\s+NoHardwareVirtualization")

        # Metrics: every request counted.
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10).read().decode()
        self.assertRegex(body, r'nodegate_kube_requests_total\{[^}]*code="200"[^}]*verb="patch"[^}]*\} [1-9]')

        # Restart with the same state: nothing written, no event, the gate does not flap.
        self.stop_agent()
        self.assertTrue(self.closed_state())
        seq = api.last_seq()
        self.start_agent()
        self.assertTrue(eventually(lambda: any(r["method"] == "GET" and r["path"] == "/api/v1/nodes/" + NODE
                                               for r in api.requests(seq)), 20))
        time.sleep(4)
        self.assertEqual(self.writes_since(seq), [])
        self.assertEqual(len(self.node_events()), 1)

        # Faults while recovering: 503 with Retry-After, then a dropped connection; the node heals.
        api.fault(status=503, retry_after=1, method="PATCH", path_re="/nodes/" + NODE, count=2)
        api.fault(drop=True, method="PATCH", path_re="/nodes/" + NODE, count=1)
        self.set_vmx(True)
        self.assertTrue(eventually(self.open_state, 30), open(self.agent_log).read()[-3000:])
        self.assertTrue(eventually(lambda: len(self.node_events()) == 2, 10))
        faults = api.call("GET", "/fake/faults")[1]["faults"]
        self.assertTrue(all(f.get("hits", 0) >= 1 for f in faults), faults)

        # Someone deletes our gate label: the watch notices and it comes back.
        api.clear_faults()
        subprocess.run([KUBECTL, "label", "node", NODE, "nodegate.io/vm-ready-"], env=env, check=True,
                       capture_output=True, timeout=60)
        self.assertTrue(eventually(self.open_state, 10))

    def test_kube_none_logs_what_the_agent_sends(self):
        """--kube none prints the patches the real publisher sends to a fresh Node: the same
        labels, ownership annotation, taint and conditions, from the same functions."""
        node = "dry-run-node"
        status, _ = self.api.call("POST", "/fake/nodes", {"name": node})
        self.assertEqual(status, 201)
        self.set_vmx(False)  # a closed gate: labels, the taint and False conditions all show
        seq = self.api.last_seq()
        with open(os.path.join(self.tmp, "real.log"), "w") as out:
            real = subprocess.Popen(self.agent_args(node, ["--kube", "kubeconfig", "--kubeconfig",
                                                           self.api.kubeconfig]),
                                    stdout=out, stderr=subprocess.STDOUT)
            try:
                def sent():
                    return [r for r in self.api.requests(seq) if r["method"] == "PATCH"
                            and r["path"].startswith("/api/v1/nodes/" + node)]
                self.assertTrue(eventually(lambda: len(sent()) >= 2, 30))
                # kubevirt-node reads the Node and its pods from the API: the real agent's view
                # of this Node without KubeVirt settles once both are seen.
                kubevirt_now = lambda: self.state(self.api.node(node))[1].get("KubeVirtNodeHealthy", {})
                self.assertTrue(eventually(lambda: kubevirt_now().get("status") == "True", 30), kubevirt_now())
                self.assertIn("kubevirt-node pass", kubevirt_now()["message"])
            finally:
                real.send_signal(signal.SIGTERM)
                real.wait(10)
        meta = next(r["body"] for r in sent() if r["path"] == "/api/v1/nodes/" + node)
        status_patch = next(r["body"] for r in sent() if r["path"].endswith("/status"))

        dry = subprocess.run(["timeout", "-s", "TERM", "4"] + self.agent_args(node, ["--kube", "none"]),
                             capture_output=True, text=True, timeout=30)
        logged = {}
        for line in dry.stderr.splitlines() + dry.stdout.splitlines():
            m = re.search(r'msg="kube none: would (set node labels|patch node status)".* patch="((?:[^"\\]|\\.)*)"', line)
            if m:
                # The log quotes '"' and '\\' with a backslash and writes a newline as \\n.
                text = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
                logged.setdefault(m.group(1), json.loads(text))
        self.assertIn("set node labels", logged, dry.stderr[-3000:])
        self.assertIn("patch node status", logged, dry.stderr[-3000:])
        want = logged["set node labels"]
        self.assertEqual(want["metadata"]["labels"], meta["metadata"]["labels"])
        self.assertEqual(want["metadata"]["annotations"], meta["metadata"]["annotations"])
        self.assertEqual(want["spec"]["taints"], meta["spec"]["taints"])
        strip = lambda conds: [{k: v for k, v in c.items() if not k.startswith("last")} for c in conds]
        # The one condition that differs, and must: without an API connection kubevirt-node
        # cannot see KubeVirt's view, and says so rather than PASS (the real agent's first
        # patch may precede its first look at the Node and pods: Unknown, never NoApiConnection).
        def kubevirt(conds):
            return next(c for c in conds if c["type"] == "KubeVirtNodeHealthy")
        dry_conds = logged["patch node status"]["status"]["conditions"]
        real_conds = status_patch["status"]["conditions"]
        self.assertEqual((kubevirt(dry_conds)["status"], kubevirt(dry_conds)["reason"]), ("Unknown", "NoApiConnection"))
        self.assertNotEqual(kubevirt(real_conds)["reason"], "NoApiConnection")
        others = lambda conds: strip([c for c in conds if c["type"] != "KubeVirtNodeHealthy"])
        self.assertEqual(others(dry_conds), others(real_conds))


if __name__ == "__main__":
    unittest.main(verbosity=2)
